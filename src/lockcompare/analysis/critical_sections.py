"""The workers' critical sections, from the history: each worker's ``enter`` paired with its
``exit``, as intervals on the shared monotonic clock, and what is measured from them — the entries
that found another worker inside (counted from the intervals, and from the resource's own ``inside``
count), and how many workers were inside at once for how long.

Each step's instant is the midpoint of its ``t0``/``t1`` (the request took effect somewhere between
send and reply). Planned work is what exclusion is judged on (checker.py): an entry and a section
that are both extra (the ``contend`` workload's extra rounds) do not count as a conflict.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lockcompare.analysis.history import Event
from lockcompare.analysis.rules import implements


@dataclass(frozen=True)
class Interval:
    worker: int
    start_ns: float
    end_ns: float
    extra: bool = False  # a section of an extra round (contend workload)


def midpoint(event: Event) -> float:
    return (int(event["t0"]) + int(event["t1"])) / 2


@implements("history-usable")
def sections(history: Sequence[Event]) -> list[tuple[Event, Event]]:
    """Each worker's critical sections as (``enter``, matching ``exit``) events, by start.

    Raises ValueError when an enter has no exit (or the other way round): such a history
    cannot support a verdict.
    """
    open_at: dict[int, Event] = {}
    pairs = []
    for event in sorted(history, key=lambda e: e["t0"]):
        worker, kind = event["worker"], event["kind"]
        if kind == "enter":
            if worker in open_at:
                raise ValueError(f"worker {worker} entered twice without exiting (round {event['round']})")
            open_at[worker] = event
        elif kind == "exit":
            if worker not in open_at:
                raise ValueError(f"worker {worker} exited without entering (round {event['round']})")
            pairs.append((open_at.pop(worker), event))
    if open_at:
        raise ValueError(f"workers {sorted(open_at)} entered and never exited")
    return sorted(pairs, key=lambda pair: midpoint(pair[0]))


def cs_intervals(history: Sequence[Event]) -> list[Interval]:
    """Each worker's critical sections, from the midpoint of ``enter`` to that of its ``exit``."""
    return [
        Interval(enter["worker"], midpoint(enter), midpoint(exit_), extra=bool(enter.get("extra")))
        for enter, exit_ in sections(history)
    ]


def overlap_conflicts(intervals: Sequence[Interval]) -> int:
    """Entries that happened while another worker was inside (start strictly within its interval),
    when planned work is involved: an entry and a section that are both extra do not count."""
    return sum(
        1
        for a in intervals
        if any(
            b.worker != a.worker and b.start_ns < a.start_ns < b.end_ns and not (a.extra and b.extra) for b in intervals
        )
    )


@implements("conflicts", "planned-rounds")
def entry_conflicts(history: Sequence[Event]) -> int:
    """Entries the resource saw with another worker inside (``inside`` > 1), when planned work is
    involved: a planned entry always counts; an extra entry only if another worker's planned
    section was open then (its widest span, enter's t0 to exit's t1, holds the entry's midpoint)."""
    pairs = sections(history)
    planned_spans = [(e["worker"], e["t0"], x["t1"]) for e, x in pairs if not e.get("extra")]
    counted = 0
    for enter, _ in pairs:
        if enter["inside"] <= 1:
            continue
        at = midpoint(enter)
        if not enter.get("extra") or any(w != enter["worker"] and t0 <= at <= t1 for w, t0, t1 in planned_spans):
            counted += 1
    return counted


def concurrency_profile(intervals: Sequence[Interval]) -> tuple[int, float]:
    """(max workers inside at once, total ms with two or more inside), by a sweep over the edges."""
    edges = sorted([(i.start_ns, 1) for i in intervals] + [(i.end_ns, -1) for i in intervals])
    inside = peak = 0
    overlap_ns = 0.0
    last = None
    for t, step in edges:  # at equal times exits (-1) sort first: touching intervals do not overlap
        if inside >= 2 and last is not None:
            overlap_ns += t - last
        inside += step
        peak = max(peak, inside)
        last = t
    return peak, overlap_ns / 1e6
