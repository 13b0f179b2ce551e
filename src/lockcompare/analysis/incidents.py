"""Where in a history something went wrong, and which stretch of it a picture should show.

Pure functions over a history (no matplotlib, no Redis): the timeline plot draws what these find,
and the tests check them on hand-built histories. Times are ms after the history's first event.

An 80-entry trial at the lesson's scale lasts ~30 s; a picture of all of it shows nothing. The
default window is therefore the stretch around the first lost update (else the first conflict):
every round that was under way at that moment, from its successful acquire attempt to its last
step, plus a margin. A trial with neither shows its first :data:`QUIET_WINDOW_MS`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lockcompare.analysis.history import Event
from lockcompare.scenario import faultkinds

#: What a picture of an uneventful trial shows: its first 3 s (a few rounds at the lesson's scale).
QUIET_WINDOW_MS = 3000.0
#: The window around an incident never spans more than this before / after it (a round waiting for
#: a 60 s acquire timeout would otherwise stretch it beyond reading).
MAX_BEFORE_MS = 4000.0
MAX_AFTER_MS = 2000.0
#: Share of the window's width added on each side so nothing sits on the frame.
MARGIN = 0.08


def origin_ns(history: Sequence[Event]) -> int:
    return min(int(e["t0"]) for e in history)


def ms(t_ns: float, origin: int) -> float:
    return (t_ns - origin) / 1e6


def midpoint_ms(event: Event, origin: int) -> float:
    return ms((event["t0"] + event["t1"]) / 2, origin)


def overwriting_writes(history: Sequence[Event]) -> list[Event]:
    """Accepted writes that set the balance to no more than an earlier accepted write had: each one
    overwrote at least one increment, which is then lost. In the order they took effect."""
    writes = sorted(
        (e for e in history if e["kind"] == "write" and e.get("accepted") and isinstance(e.get("value"), int)),
        key=lambda e: e["t0"] + e["t1"],
    )
    highest: int | None = None
    found = []
    for write in writes:
        if highest is not None and write["value"] <= highest:
            found.append(write)
        highest = write["value"] if highest is None else max(highest, write["value"])
    return found


def conflicting_entries(history: Sequence[Event]) -> list[Event]:
    """``enter`` steps that found another worker inside (counted by the resource), in time order."""
    return sorted((e for e in history if e["kind"] == "enter" and (e.get("inside") or 0) > 1), key=lambda e: e["t0"])


@dataclass(frozen=True)
class Incident:
    what: str  # "lost update" or "conflict"
    at_ms: float


def first_incident(history: Sequence[Event]) -> Incident | None:
    """The first lost update, else the first conflict, else None."""
    if not history:
        return None
    origin = origin_ns(history)
    lost = overwriting_writes(history)
    if lost:
        return Incident("lost update", midpoint_ms(lost[0], origin))
    conflicts = conflicting_entries(history)
    if conflicts:
        return Incident("conflict", midpoint_ms(conflicts[0], origin))
    return None


def round_spans(history: Sequence[Event]) -> dict[tuple[int, int], tuple[float, float]]:
    """Each worker round's (start, end) in ms: from its successful acquire attempt (not from the
    start of waiting) to the end of its last step. Runner events (worker -1) are not rounds."""
    if not history:
        return {}
    origin = origin_ns(history)
    spans: dict[tuple[int, int], tuple[float, float]] = {}
    for e in history:
        if e["worker"] < 0:
            continue
        start = e.get("t_attempt") if e["kind"] == "acquire" and e.get("ok") else e["t0"]
        start_ms, end_ms = ms(start if start is not None else e["t0"], origin), ms(e["t1"], origin)
        key = (e["worker"], e["round"])
        lo, hi = spans.get(key, (start_ms, end_ms))
        spans[key] = (min(lo, start_ms), max(hi, end_ms))
    return spans


@dataclass(frozen=True)
class Window:
    from_ms: float
    to_ms: float
    why: str  # said under the picture's title


def default_window(history: Sequence[Event]) -> Window:
    """See the module docstring."""
    if not history:
        return Window(0.0, QUIET_WINDOW_MS, "empty history")
    end = ms(max(e["t1"] for e in history), origin_ns(history))
    incident = first_incident(history)
    if incident is None:
        return Window(0.0, min(end, QUIET_WINDOW_MS), f"first {min(end, QUIET_WINDOW_MS):.0f} ms: no conflict")
    t = incident.at_ms
    live = [(lo, hi) for lo, hi in round_spans(history).values() if lo <= t <= hi]
    lo = max(min([lo for lo, _ in live], default=t), t - MAX_BEFORE_MS)
    hi = min(max([hi for _, hi in live], default=t), t + MAX_AFTER_MS)
    pad = max(hi - lo, 1.0) * MARGIN
    return Window(max(0.0, lo - pad), min(end, hi + pad), f"around the first {incident.what} at {t:.1f} ms")


@dataclass(frozen=True)
class Section:
    """One critical section: ``enter`` to its ``exit`` (midpoints, ms); ``open`` if it never exited."""

    worker: int
    round: int
    start_ms: float
    end_ms: float
    open: bool = False


def sections(history: Sequence[Event]) -> list[Section]:
    """Every worker's critical sections; an enter without an exit runs to the history's end."""
    if not history:
        return []
    origin = origin_ns(history)
    end = ms(max(e["t1"] for e in history), origin)
    inside: dict[int, Event] = {}
    found = []
    for e in sorted(history, key=lambda e: e["t0"]):
        if e["kind"] == "enter":
            inside[e["worker"]] = e
        elif e["kind"] == "exit" and e["worker"] in inside:
            enter = inside.pop(e["worker"])
            found.append(Section(e["worker"], enter["round"], midpoint_ms(enter, origin), midpoint_ms(e, origin)))
    found += [Section(w, e["round"], midpoint_ms(e, origin), end, open=True) for w, e in inside.items()]
    return sorted(found, key=lambda s: s.start_ms)


def crowded_spans(found: Sequence[Section]) -> list[tuple[float, float]]:
    """Stretches (ms) during which two or more workers were inside, by a sweep over the edges."""
    edges = sorted([(s.start_ms, 1) for s in found] + [(s.end_ms, -1) for s in found])
    spans = []
    inside = 0
    began = 0.0
    for t, step in edges:  # at equal times exits (-1) sort first: touching sections do not overlap
        if inside < 2 <= inside + step:
            began = t
        elif inside >= 2 > inside + step:
            spans.append((began, t))
        inside += step
    return spans


@dataclass(frozen=True)
class FaultSpan:
    """A runner's fault from its injection to its heal (ms); ``end_ms`` None if never healed.
    ``ended``: what ended it — its heal, or, for a step's preparation, the injection it prepared."""

    fault: str
    start_ms: float
    end_ms: float | None
    nodes: tuple[int, ...]
    detail: str
    ended: str = "healed"

    @property
    def label(self) -> str:
        nodes = f" n{','.join(map(str, self.nodes))}" if self.nodes else ""
        return f"{self.fault}{nodes}"


def fault_spans(history: Sequence[Event]) -> list[FaultSpan]:
    """The runner's fault events (worker -1, kind ``fault``), each inject paired with the next heal
    of the same fault and nodes. A heal with no inject before it starts and ends at the heal.

    A step's preparation (``prepare``: failover's replication link held back before the master
    crashes) lasts until the injection it prepared, not until the heal: paired with the heal, it left
    the injection itself "never healed" on the page. A step the schedule skipped did nothing: no span.
    """
    if not history:
        return []
    origin = origin_ns(history)
    pending: dict[tuple[str, tuple[int, ...]], list[Event]] = {}
    preparing: dict[tuple[str, tuple[int, ...]], list[Event]] = {}
    spans = []
    for e in sorted((e for e in history if e["worker"] == -1 and e["kind"] == "fault"), key=lambda e: e["t0"]):
        key = (faultkinds.event_fault(e.get("fault", "fault")), tuple(e.get("nodes") or ()))
        if e.get("action") == "skipped":
            continue
        if e.get("action") == "prepare":
            preparing.setdefault(key, []).append(e)
            continue
        for prepared in preparing.pop(key, []):
            detail = str(prepared.get("detail") or "")
            heal = e.get("action") == "heal"  # (its injection was not recorded)
            end, ended = (e["t1"], "healed") if heal else (e["t0"], "ended by the step it prepared")
            spans.append(FaultSpan(key[0], ms(prepared["t0"], origin), ms(end, origin), key[1], detail, ended))
        if e.get("action") == "heal":
            opened = pending.get(key)
            start = opened.pop(0) if opened else e
            detail = str(start.get("detail") or "")
            spans.append(FaultSpan(key[0], ms(start["t0"], origin), ms(e["t1"], origin), key[1], detail))
        else:
            pending.setdefault(key, []).append(e)
    for key, opened in [*pending.items(), *preparing.items()]:
        spans += [FaultSpan(key[0], ms(e["t0"], origin), None, key[1], str(e.get("detail") or "")) for e in opened]
    return sorted(spans, key=lambda s: s.start_ms)
