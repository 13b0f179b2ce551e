#!/usr/bin/env python3
"""Renewals inside pauses: does a freeze stop a renewing lock's client? Counted from the histories.

    python scripts/renewals_in_pauses.py RESULTS.csv [BACKEND,... [EXPERIMENT,...]]
    python scripts/renewals_in_pauses.py HISTORY.jsonl.gz ...

For each trial (each row of the results file, or each history named) it prints the pauses of the
trial, the ``renew`` events of the paused worker (its lease renewals, as the backend reported
them: ``drain_renewals``), how many of those began inside a pause, and in how many pauses that
happened; with a results file also the row's conflicts, lost updates and verdict, in the order of
backend, experiment and trial (a run's file is in the order its trials ended).

A pause is the runner's own record of it: from the ``pause`` fault's inject (its ``t1``, just
after the SIGSTOP; for a stop the worker made itself, ``seen_stopped_ns``, when the runner saw it
stopped: the worker's ``t1`` is taken just before its own SIGSTOP, and a helper may run on until
that lands) to its heal (its ``t0``, just before the SIGCONT). A renewal is inside when its
``t0`` — taken by the renewing client itself right before it sent the request — falls in that
window: a frozen client cannot take a timestamp, so any such renewal was made by a process the
freeze did not stop. A history without pause fault events (``--pause-how sleep``) is measured
against the worker's own ``pause`` events instead (a sleep pauses one thread: renewals inside it
are expected). Works on histories of any lockcompare version that records ``renew`` events, e.g.
one from before workers led their own process groups.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lockcompare.analysis.results import read_results
from lockcompare.errors import LockcompareError
from lockcompare.render.timeline import load_history

Event = dict[str, Any]


@dataclass(frozen=True)
class Window:
    worker: int
    start_ns: int
    end_ns: int


@dataclass(frozen=True)
class Count:
    pauses: int
    renewals: int  # renewal attempts of the paused workers, in the whole trial
    inside: int  # of those, begun inside a pause
    pauses_with_renewals: int
    measured_by: str  # "SIGSTOP" (the runner's fault events) or "worker" (the worker's own pause events)


def pause_windows(events: list[Event]) -> tuple[list[Window], str]:
    """Each pause's (worker, start, end): the runner's inject/heal pairs, else the workers' pause events."""
    faults = sorted((e for e in events if e["kind"] == "fault" and e.get("fault") == "pause"), key=lambda e: e["t0"])
    windows: list[Window] = []
    open_at: dict[int, int] = {}
    for event in faults:
        worker = int(event.get("target_worker", -1))
        if event.get("action") == "inject":
            open_at[worker] = int(event.get("seen_stopped_ns") or event["t1"])
        elif event.get("action") == "heal" and worker in open_at:
            windows.append(Window(worker, open_at.pop(worker), int(event["t0"])))
    if faults:
        return windows, "SIGSTOP"
    own = [Window(e["worker"], int(e["t0"]), int(e["t1"])) for e in events if e["kind"] == "pause" and e["worker"] >= 0]
    return own, "worker"


def count(events: list[Event]) -> Count:
    windows, measured_by = pause_windows(events)
    paused = {w.worker for w in windows}
    renewals = [e for e in events if e["kind"] == "renew" and e["worker"] in paused]
    inside_windows = [
        w for w in windows if any(w.start_ns < r["t0"] < w.end_ns for r in renewals if r["worker"] == w.worker)
    ]
    inside = [r for r in renewals if any(w.worker == r["worker"] and w.start_ns < r["t0"] < w.end_ns for w in windows)]
    return Count(len(windows), len(renewals), len(inside), len(inside_windows), measured_by)


HEADER = f"{'trial':<64} {'pauses':>6} {'renewals':>8} {'inside a pause':>14} {'pauses with one':>15}"


def line(name: str, c: Count, extra: str = "") -> str:
    sleep = "" if c.measured_by == "SIGSTOP" else " (sleep pauses)"
    pauses_with = f"{c.pauses_with_renewals} of {c.pauses}"
    return f"{name[:64]:<64} {c.pauses:>6} {c.renewals:>8} {c.inside:>14} {pauses_with:>15}{sleep}{extra}"


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    try:
        first = Path(argv[0])
        if first.suffix == ".csv":
            backends = set(argv[1].split(",")) if len(argv) > 1 else None
            experiments = set(argv[2].split(",")) if len(argv) > 2 else None
            rows = sorted(
                (
                    r
                    for r in read_results(first)
                    if (backends is None or r["backend"] in backends)
                    and (experiments is None or r["experiment"] in experiments)
                ),
                key=lambda r: (r["backend"], r["experiment"], int(r["trial"])),
            )
            print(HEADER + "  conflicts  lost  verdict")
            for row in rows:
                c = count(load_history(first.parent / row["history"]))
                extra = f"  {row['conflicts']:>5}/{row['entries']:<4} {row['lost_updates']:>4}  {row['verdict']}"
                print(line(f"{row['backend']} × {row['experiment']} #{row['trial']}", c, extra))
        else:
            print(HEADER)
            for arg in argv:
                print(line(Path(arg).name, count(load_history(Path(arg)))))
    except LockcompareError as exc:
        print(f"renewals_in_pauses: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
