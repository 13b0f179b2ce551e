"""The lock's own safety evidence in a history: what it promised and broke, whether or not the
resource saw an overlap. Pure functions over events (no Redis), used by the checker's verdict.

- stale writes: writes made after the writer's own lease deadline (accepted or rejected);
- grants while held: a lease granted while another worker's lease was valid and unreleased;
- foreign releases: a release that deleted another worker's lock;
- releases of nothing: an unlock that released nothing while its session lease was valid
  (sessions.py: a session lock's lease, without a deadline, is judged by when its session ended);
- tokens backwards: fencing tokens not above one granted before (a counter lost), and the writes
  the resource accepted under them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lockcompare.analysis.history import Event
from lockcompare.analysis.rules import implements
from lockcompare.analysis.sessions import first_releases, is_session_lease, lease_deadlines, releases_of_nothing

__all__ = [
    "LEASE_TOLERANCE_MS", "GrantInside", "backwards_writes_accepted", "deepest_grant_ms", "foreign_releases",
    "grant_depths_ms", "grants_inside_leases", "grants_while_held", "releases_of_nothing", "stale_write_events",
    "stale_writes", "tokens_backwards",
]  # fmt: skip

#: The one tolerance for "a lease valid past its TTL", used by the checker (a grant inside another's
#: lease by no more than this is not "two valid leases at once") and by the conformance battery (a
#: lease may claim validity this far past its call's start + TTL). What it covers: a server that
#: stores expiry in whole milliseconds (Redis truncates: a key may go up to 1 ms before start + TTL)
#: and an external client whose own clock start comes a pipe hop after the harness's. An 8 ms
#: overstatement (a deadline counted from after the reply) is past it in both, and both say by how much.
LEASE_TOLERANCE_MS = 5.0


@implements("stale-write-accepted")
def stale_writes(history: Sequence[Event]) -> tuple[int, int]:
    """(accepted, rejected) writes made after the writer's own lease had expired, by the deadline
    the writer last believed (its acquire's, a renewal's reported right before the write, or the
    last successful renewal its watchdog made: a library that reports nothing before a write, such
    as python-redis-lock, still renews). A session lease's deadline is its session's end, once the
    server was seen ending it (sessions.py): its holder's writes after that are stale."""
    found = stale_write_events(history)
    accepted = sum(1 for write, _ in found if write.get("accepted"))
    return accepted, len(found) - accepted


def stale_write_events(history: Sequence[Event]) -> list[tuple[Event, int]]:
    """Each write made after its writer's own lease deadline (see :func:`stale_writes`), with
    that deadline (ns), in time order: the evidence a trial page shows."""
    deadlines = lease_deadlines(history)
    valid_until: dict[tuple[int, int], int | None] = {}
    found: list[tuple[Event, int]] = []
    for event in sorted(history, key=lambda e: e["t0"]):
        key = (event["worker"], event["round"])
        if event["kind"] == "acquire" and event.get("ok"):
            valid_until[key] = deadlines.get(key)
        elif event["kind"] == "lease" and event.get("ok"):
            valid_until[key] = event.get("valid_until")  # a renewing holder's belief, right before it wrote
        elif event["kind"] == "renew" and event.get("ok") and event.get("valid_until") is not None:
            valid_until[key] = event["valid_until"]  # the watchdog extended the lease by then
        elif event["kind"] == "write":
            deadline = valid_until.get(key)
            if deadline is not None and event["t0"] >= deadline:
                found.append((event, deadline))
    return found


@implements("grant-over-valid-lease", "lease-tolerance")
def grants_while_held(history: Sequence[Event]) -> int:
    """Leases granted while another worker held a lease still valid by its own deadline and not
    yet released: two valid leases at once, which no correct lease lock allows, whether or not
    the resource saw it (a careless release that deletes a paused holder's key shows here while
    the holder sleeps). Conservative: the rival's whole attempt (``t_attempt``..``t1``) must fall
    inside the holder's lease (its acquire's ``t1`` to the earlier of its ``valid_until`` and its
    release's ``t0``); renewals are not counted. A session lease (no deadline, the lock has no TTL)
    lasts until its release or until the server was seen ending its session (sessions.py); any
    other lease without a deadline (the no-lock baseline's) claims nothing.
    """
    return sum(1 for _, tolerated in grant_depths_ms(history) if not tolerated)


def grant_depths_ms(history: Sequence[Event]) -> list[tuple[float, bool]]:
    """For each lease granted inside another worker's valid, unreleased lease (the rival's whole
    attempt after the holder's grant and before the holder's lease ended): how far before that end
    the rival's grant returned, in ms — the size of the overlap of two valid leases — and whether it
    is tolerated: inside by no more than :data:`LEASE_TOLERANCE_MS` of a lease's own claimed deadline
    (not counted by :func:`grants_while_held`). An end that is a release or a session's end has no
    tolerance: it was seen, not claimed."""
    by_rival: dict[int, list[GrantInside]] = {}
    for found in grants_inside_leases(history):
        by_rival.setdefault(id(found.rival), []).append(found)
    return [(max(g.depth_ms for g in found), all(g.tolerated for g in found)) for found in by_rival.values()]


@dataclass(frozen=True)
class GrantInside:
    """A lease granted (``rival``) inside another worker's valid, unreleased lease (``holder``)."""

    holder: Event  # the acquire whose lease was still valid
    rival: Event  # the acquire granted inside it
    end_ns: float  # when the holder's lease ended: its deadline, its release or its session's end (inf: never)
    depth_ms: float  # how far before that end the rival's grant returned
    tolerated: bool  # within LEASE_TOLERANCE_MS of a claimed deadline: not counted


def grants_inside_leases(history: Sequence[Event]) -> list[GrantInside]:
    """Every (holder, rival) pair behind :func:`grant_depths_ms`, rivals in history order: the
    evidence a trial page shows (which lease, which grant, until when)."""
    released_at = first_releases(history)
    deadlines = lease_deadlines(history)
    leases = []
    for event in history:
        if event["kind"] != "acquire" or not event.get("ok"):
            continue
        key = (event["worker"], event["round"])
        deadline = deadlines.get(key)
        if deadline is None and not is_session_lease(event):
            continue
        release = released_at.get(key)
        claimed = (
            deadline is not None and event.get("valid_until") == deadline and (release is None or deadline < release)
        )
        ends = [t for t in (deadline, release) if t is not None]
        leases.append((event, min(ends) if ends else float("inf"), claimed))
    found = []
    for e in history:
        if e["kind"] != "acquire" or not e.get("ok"):
            continue
        for holder, end, claimed in leases:
            if holder["worker"] != e["worker"] and holder["t1"] < e["t_attempt"] and e["t1"] < end:
                depth = (end - e["t1"]) / 1e6
                found.append(GrantInside(holder, e, end, depth, claimed and depth <= LEASE_TOLERANCE_MS))
    return found


def deepest_grant_ms(history: Sequence[Event]) -> float:
    """How far inside another's valid lease the deepest grant came (ms; 0.0: no grant inside one),
    tolerated or not: the size a card line states beside its judgement."""
    return round(max((d for d, _ in grant_depths_ms(history)), default=0.0), 3)


def foreign_releases(history: Sequence[Event]) -> int:
    """Releases that removed another worker's lock: the backend reported the release done while
    the lock belonged to someone else — the latest lease granted before the release (by ``t1``)
    is another worker's, still valid by its own deadline and not yet released (a lease without a
    deadline, e.g. the no-lock backend's, claims nothing).

    A compare-and-delete release reports "not mine" there (``released`` false) and is not
    counted; a plain ``DEL`` reports the deletion of the rival's key as success, which is what
    this counts. It needs no help from the backend beyond an honest return value of ``release``.
    A session lease is still valid until its session was seen to end (sessions.py).
    """
    releases = [e for e in history if e["kind"] == "release"]
    released_at = first_releases(history)
    deadlines = lease_deadlines(history)
    grants = sorted((e for e in history if e["kind"] == "acquire" and e.get("ok")), key=lambda e: e["t1"])
    count = 0
    for release in releases:
        if not release.get("released"):
            continue
        before = [g for g in grants if g["t1"] < release["t0"]]
        if not before:
            continue
        holder = before[-1]
        if holder["worker"] == release["worker"]:
            continue
        deadline = deadlines.get((holder["worker"], holder["round"]))
        if deadline is None:  # a session lease no session end has ended; any other (no lock) claims nothing
            still_valid = is_session_lease(holder)
        else:
            still_valid = deadline > release["t0"]
        unreleased = released_at.get((holder["worker"], holder["round"]), release["t0"] + 1) > release["t0"]
        count += still_valid and unreleased
    return count


def tokens_backwards(granted: Sequence[Event]) -> int:
    """Granted fencing tokens not higher than the highest granted before them, in grant order.

    A repeated token counts too: two leases with the same token are two holders the resource cannot
    tell apart (it refuses only a *lower* token), which is what a counter promoted one increment
    behind hands out (the failover experiment).

    >>> tokens_backwards([{"t1": 1, "fence": 5}, {"t1": 2, "fence": 2}, {"t1": 3, "fence": 6}])
    1
    >>> tokens_backwards([{"t1": 1, "fence": 1}, {"t1": 2, "fence": 1}, {"t1": 3, "fence": 2}])
    1
    """
    highest, backwards = None, 0
    for event in sorted(granted, key=lambda e: e["t1"]):
        token = event.get("fence")
        if token is None:
            continue
        if highest is not None and token <= highest:
            backwards += 1
        highest = token if highest is None else max(highest, token)
    return backwards


@implements("backwards-token-write")
def backwards_writes_accepted(history: Sequence[Event]) -> int:
    """Writes the resource accepted from a holder whose fencing token was not above one granted
    before it (see :func:`tokens_backwards`): two holders the resource could not tell apart, and it
    let the later-granted, lower-numbered one write. A fenced resource refuses a *lower* token, so
    this counts repeats accepted there, and every backwards token where nothing checks tokens.
    """
    highest = None
    backwards: set[tuple[int, int]] = set()
    for event in sorted((e for e in history if e["kind"] == "acquire" and e.get("ok")), key=lambda e: e["t1"]):
        token = event.get("fence")
        if token is None:
            continue
        if highest is not None and token <= highest:
            backwards.add((event["worker"], event["round"]))
        highest = token if highest is None else max(highest, token)
    return sum(
        1 for e in history if e["kind"] == "write" and e.get("accepted") and (e["worker"], e["round"]) in backwards
    )
