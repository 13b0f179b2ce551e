"""Renewals made while their worker was paused, per cell of a results CSV, from the trials' histories.

A stop-the-world pause must stop a lock's renewals too (a watchdog thread, or an external client's
process: docs/clients.md). This reads each trial's history and counts, per paused worker, the
successful ``renew`` events that started inside one of its ``pause`` steps; beside them the cell's
conflicts and lost updates from the CSV. A lock whose renewals go on inside the pauses is being
measured as if it were never paused.

Usage::

    python scripts/renewals_in_pauses.py results/node-clients.csv [--experiment client-pause]
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections import defaultdict
from pathlib import Path

from lockcompare.analysis import history as history_io


def count(events: list[dict]) -> tuple[int, int, int]:
    """(pauses, successful renewals inside a pause of their worker, successful renewals overall)."""
    pauses = [(e["worker"], e["t0"], e["t1"]) for e in events if e["kind"] == "pause"]
    renewals = [e for e in events if e["kind"] == "renew" and e.get("ok")]
    inside = sum(any(w == r["worker"] and t0 < r["t0"] < t1 for w, t0, t1 in pauses) for r in renewals)
    return len(pauses), inside, len(renewals)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path)
    parser.add_argument("--experiment", default="client-pause")
    args = parser.parse_args()
    try:
        rows = list(csv.DictReader(args.results.open()))
    except OSError as exc:
        print(f"renewals_in_pauses: cannot read {args.results}: {exc.strerror}", file=sys.stderr)
        return 2
    cells: dict[str, list[tuple[int, int, int, str, str]]] = defaultdict(list)
    for row in rows:
        if row["experiment"] != args.experiment or not row.get("history"):
            continue
        path = Path(row["history"])
        path = path if path.is_absolute() else args.results.parent / path
        pauses, inside, renewals = count(history_io.load(path))
        cells[row["backend"]].append((pauses, inside, renewals, row["conflicts"], row["lost_updates"]))
    print(f"{'backend':36} {'trials':>6} {'pauses':>7} {'renewals':>9} {'inside a pause':>15} conflicts  lost")
    for backend, trials in cells.items():
        pauses = sum(t[0] for t in trials)
        renewals = sum(t[2] for t in trials)
        inside = sum(t[1] for t in trials)
        conflicts = ",".join(t[3] for t in trials)
        lost = ",".join(t[4] for t in trials)
        print(f"{backend:36} {len(trials):>6} {pauses:>7} {renewals:>9} {inside:>15} {conflicts:>9}  {lost}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
