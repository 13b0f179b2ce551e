"""Why a trial got its verdict, in words and with the events that make it: what a trial page says.

The checker counts (analysis/checker.py); this module finds, for each rule that fired, its first
instance in the history and says it with the times of the history (ms after its first event):
which grant came inside whose valid lease and on which nodes, which fault took the lease's
nodes away, which write overwrote which increment, which fencing token did not go up. Each
:class:`Finding` names its rule by the id of analysis/rules.py (docs/verdicts.md lists them) and
carries the span of its events, so a picture can be drawn around every event that makes the
verdict, never only around where the first one started.

Pure functions over a history (no server); the tests build histories by hand.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lockcompare.analysis import incidents
from lockcompare.analysis.evidence import grants_inside_leases, stale_write_events
from lockcompare.analysis.history import Event
from lockcompare.analysis.holders import describe_holders, worker_of_owner
from lockcompare.analysis.rules import RULES

#: A finding names at most this many faults that struck between its cause and its effect.
FAULTS_NAMED = 3


#: The rules a finding can name: each applies to events of the history, one by one.
EXPLAINED = ("grant-over-valid-lease", "backwards-token-write", "stale-write-accepted", "lost-updates", "conflicts")


@dataclass(frozen=True)
class Finding:
    """One rule that fired, its first instance: ``text`` says it, ``from_ms``..``to_ms`` spans its events."""

    rule: str  # an id of analysis/rules.py
    text: str
    from_ms: float
    to_ms: float

    def __post_init__(self) -> None:
        if self.rule not in RULES:  # a rule no doc lists cannot be argued with (analysis/rules.py)
            raise KeyError(f"rule {self.rule!r} is not in analysis/rules.py's table")

    @property
    def verdict(self) -> str:
        """The verdict the rule gives."""
        return RULES[self.rule].verdict


def findings(history: Sequence[Event], *, nodes: int | None = None) -> list[Finding]:
    """The first instance of every safety rule the history breaks, in time order. ``nodes``: how
    many lock nodes the backend used (a bare majority is said only when it is known)."""
    if not history:
        return []
    origin = incidents.origin_ns(history)
    found = [
        f
        for f in (
            _grant_over_valid_lease(history, origin=origin, nodes=nodes),
            _backwards_token_write(history, origin=origin),
            _stale_write_accepted(history, origin=origin),
            _lost_update(history, origin=origin),
            _conflict(history, origin=origin),
        )
        if f is not None
    ]
    return sorted(found, key=lambda f: f.from_ms)


def _ms(t_ns: float, origin: int) -> float:
    return incidents.ms(t_ns, origin)


def _nodes(indices: Sequence[int]) -> str:
    return f"node{'s' if len(indices) != 1 else ''} {', '.join(map(str, indices))}"


def _faults_between(
    history: Sequence[Event], *, lo_ns: float, hi_ns: float, origin: int, on: Sequence[int] | None = None
) -> list[tuple[Event, str]]:
    """The runner's injections between two instants (on the nodes ``on``, when given), each with
    its words: ``restart of node 2 at 12640.4 ms (SIGKILL; restarted on the same port (empty))``."""
    heals = {
        (e.get("fault"), tuple(e.get("nodes") or ()), e.get("round")): e
        for e in history
        if e["worker"] == -1 and e["kind"] == "fault" and e.get("action") == "heal"
    }
    said = []
    for e in sorted(history, key=lambda e: e["t0"]):
        if e["worker"] != -1 or e["kind"] != "fault" or e.get("action") != "inject":
            continue
        hit = list(e.get("nodes") or ())
        if not lo_ns <= e["t0"] <= hi_ns or (on is not None and not set(hit) & set(on)):
            continue
        heal = heals.get((e.get("fault"), tuple(hit), e.get("round")))
        details = [str(d) for d in (e.get("detail"), heal.get("detail") if heal else None) if d]
        where = f" of {_nodes(hit)}" if hit else ""
        said.append((e, f"{e.get('fault')}{where} at {_ms(e['t0'], origin):.1f} ms" + (
            f" ({'; '.join(details)})" if details else "")))  # fmt: skip
    return said


def _grant_over_valid_lease(history: Sequence[Event], *, origin: int, nodes: int | None) -> Finding | None:
    found = next((g for g in grants_inside_leases(history) if not g.tolerated), None)
    if found is None:
        return None
    holder, rival = found.holder, found.rival
    w_h, w_r = holder["worker"], rival["worker"]
    by_h, by_r = holder.get("granted_by"), rival.get("granted_by")
    text = f"w{w_r} was granted" + (f" by {_nodes(by_r)}" if by_r else "") + f" at {_ms(rival['t1'], origin):.1f} ms"
    lease = f"w{w_h}'s lease, granted at {_ms(holder['t1'], origin):.1f} ms" + (f" by {_nodes(by_h)}" if by_h else "")
    struck = _faults_between(history, lo_ns=holder["t1"], hi_ns=rival["t1"], origin=origin, on=by_h or None)
    if struck:
        owners = worker_of_owner(history)
        words = []
        for inject, said in struck[:FAULTS_NAMED]:
            holders = inject.get("holders")
            words.append(said + (f", the nodes held {describe_holders(holders, owners)}" if holders else ""))
        lease += " — then " + "; ".join(words)
    if found.end_ns == float("inf"):
        until = "was never released (a lease without a deadline)"
    elif found.end_ns == holder.get("valid_until"):
        until = f"was valid until {_ms(found.end_ns, origin):.1f} ms (its deadline)"
    else:
        until = f"was valid and unreleased until {_ms(found.end_ns, origin):.1f} ms (its release or its session's end)"
    majority = nodes // 2 + 1 if nodes else None
    bare = by_h is not None and majority is not None and len(by_h) == majority and struck
    verdict = (
        f": a bare majority ({len(by_h or ())} of {nodes} nodes) lost one, and w{w_r} gathered a majority of its own"
        if bare
        else ": two valid leases at once"
    )
    return Finding(
        rule="grant-over-valid-lease",
        text=f"{text} while {lease} — {until}{verdict}.",
        from_ms=_ms(holder["t1"], origin),
        to_ms=_ms(rival["t1"], origin),
    )


def _backwards_token_write(history: Sequence[Event], *, origin: int) -> Finding | None:
    """The first write accepted under a fencing token not above one granted before it."""
    grants = sorted((e for e in history if e["kind"] == "acquire" and e.get("ok") and e.get("fence") is not None),
                    key=lambda e: e["t1"])  # fmt: skip
    best: Event | None = None
    backwards: dict[tuple[int, int], tuple[Event, Event]] = {}
    for grant in grants:
        if best is not None and grant["fence"] <= best["fence"]:
            backwards[(grant["worker"], grant["round"])] = (grant, best)
        if best is None or grant["fence"] > best["fence"]:
            best = grant
    writes = sorted((e for e in history if e["kind"] == "write" and e.get("accepted")), key=lambda e: e["t0"])
    write = next((w for w in writes if (w["worker"], w["round"]) in backwards), None)
    if write is None:
        return None
    grant, earlier = backwards[(write["worker"], write["round"])]
    struck = _faults_between(history, lo_ns=earlier["t1"], hi_ns=grant["t1"], origin=origin)
    between = (" — between the two grants: " + "; ".join(s for _, s in struck[:FAULTS_NAMED])) if struck else ""
    token, w = grant["fence"], grant["worker"]
    text = (
        f"w{w} was granted fencing token {token} at {_ms(grant['t1'], origin):.1f} ms, not above token "
        f"{earlier['fence']} granted to w{earlier['worker']} at {_ms(earlier['t1'], origin):.1f} ms (the token counter "
        f"went back){between}; the resource accepted w{write['worker']}'s write under token {token} at "
        f"{_ms(write['t0'], origin):.1f} ms: two holders it could not tell apart."
    )
    return Finding("backwards-token-write", text, _ms(earlier["t0"], origin), _ms(write["t1"], origin))


def _stale_write_accepted(history: Sequence[Event], *, origin: int) -> Finding | None:
    write, deadline = next(((w, d) for w, d in stale_write_events(history) if w.get("accepted")), (None, None))
    if write is None or deadline is None:
        return None
    late = (write["t0"] - deadline) / 1e6
    text = (
        f"w{write['worker']}'s write of {write.get('value')} at {_ms(write['t0'], origin):.1f} ms was accepted "
        f"{late:.1f} ms after its own lease ended ({_ms(deadline, origin):.1f} ms): a lease is permission to write "
        "only until its deadline."
    )
    return Finding("stale-write-accepted", text, _ms(deadline, origin), _ms(write["t1"], origin))


def _lost_update(history: Sequence[Event], *, origin: int) -> Finding | None:
    """The first write that overwrote an increment: with the read it came from and the write it erased."""
    lost = incidents.overwriting_writes(history)
    if not lost:
        return None
    write = lost[0]
    at = write["t0"] + write["t1"]
    erased = max(
        (e for e in history if e["kind"] == "write" and e.get("accepted") and e is not write
         and e["t0"] + e["t1"] < at and isinstance(e.get("value"), int) and e["value"] >= write["value"]),
        key=lambda e: e["t0"] + e["t1"], default=None,
    )  # fmt: skip
    read = max(
        (e for e in history if e["kind"] == "read" and e["worker"] == write["worker"]
         and e["round"] == write["round"] and e["t0"] < write["t0"]),
        key=lambda e: e["t0"], default=None,
    )  # fmt: skip
    source = f" from the balance {read.get('balance')} it read at {_ms(read['t0'], origin):.1f} ms" if read else ""
    over = (
        f"; w{erased['worker']} had written {erased.get('value')} at {_ms(erased['t0'], origin):.1f} ms, "
        f"so one increment is lost"
        if erased
        else ": an increment is lost"
    )
    text = f"w{write['worker']} wrote {write.get('value')} at {_ms(write['t0'], origin):.1f} ms{source}{over}."
    starts = [e["t0"] for e in (write, read, erased) if e is not None]
    return Finding("lost-updates", text, _ms(min(starts), origin), _ms(write["t1"], origin))


def _conflict(history: Sequence[Event], *, origin: int) -> Finding | None:
    entries = incidents.conflicting_entries(history)
    if not entries:
        return None
    enter = entries[0]
    at = incidents.midpoint_ms(enter, origin)
    inside = [s for s in incidents.sections(history) if s.worker != enter["worker"] and s.start_ms < at < s.end_ms]
    others = "; ".join(
        f"w{s.worker} inside since {s.start_ms:.1f} ms" + ("" if s.open else f" until {s.end_ms:.1f} ms")
        for s in inside
    )
    text = (
        f"w{enter['worker']} entered the critical section at {at:.1f} ms and found {enter.get('inside')} inside"
        + (f" ({others})" if others else "")
        + "."
    )
    start = min([at, *(s.start_ms for s in inside)])
    return Finding("conflicts", text, start, at)


def covering_window(history: Sequence[Event], found: Sequence[Finding]) -> incidents.Window | None:
    """A window over every finding's events (at most :data:`incidents.MAX_BEFORE_MS` +
    :data:`incidents.MAX_AFTER_MS` wide around the first violation's end, with a margin), or None
    when nothing was found."""
    if not history or not found:
        return None
    end = incidents.ms(max(e["t1"] for e in history), incidents.origin_ns(history))
    first = min(found, key=lambda f: f.to_ms)
    lo = max(min(f.from_ms for f in found), first.to_ms - incidents.MAX_BEFORE_MS * 2)
    hi = min(max(f.to_ms for f in found), first.to_ms + incidents.MAX_AFTER_MS * 2)
    pad = max(hi - lo, 1.0) * incidents.MARGIN
    return incidents.Window(max(0.0, lo - pad), min(end, hi + pad), f"the events behind the verdict ({first.rule})")
