"""Why two free-running workers conflict on about half their entries or on nearly all: from the
histories, per trial, how their entries pair up.

    python scripts/lockstep.py RESULTS.csv BACKEND,... EXPERIMENT,...

Rounds are paired by number (worker 0's round r with worker 1's round r). For each pair: how many
of its two entries found the other worker inside (``enter`` with ``inside`` > 1): 0, 1 or 2, and
the gap between the two entries. Two loops in step with a start offset smaller than the gap
between one section's exit and the next entry conflict once per pair — only the later entrant
finds the other inside, about 40 of 80, the lesson's row A; with the offset larger, or the loops
drifting through each other, both entries of a pair conflict, up to 79 of 80. A lease shorter
than the work hands the lock over inside the holder's section every round: every entry but the
first lands on the other (row C).
"""

from __future__ import annotations

import csv
import gzip
import json
import statistics
import sys
from pathlib import Path


def pairs(events: list[dict]) -> tuple[list[int], list[float]]:
    """(conflicting entries per round pair, |entry gap| ms per pair) for a two-worker history."""
    entries: dict[tuple[int, int], dict] = {}
    for e in events:
        if e["kind"] == "enter" and e["worker"] in (0, 1) and not e.get("extra"):
            entries.setdefault((e["worker"], e["round"]), e)
    counts, gaps = [], []
    for (worker, rnd), first in sorted(entries.items()):
        if worker != 0 or (1, rnd) not in entries:
            continue
        second = entries[(1, rnd)]
        counts.append(int(first["inside"] > 1) + int(second["inside"] > 1))
        gaps.append(abs(second["t0"] - first["t0"]) / 1e6)
    return counts, gaps


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: lockstep.py RESULTS.csv BACKEND,... EXPERIMENT,...", file=sys.stderr)
        return 2
    path, backends, experiments = Path(argv[0]), argv[1].split(","), argv[2].split(",")
    with path.open(newline="") as handle:
        rows = [r for r in csv.DictReader(handle) if r["backend"] in backends and r["experiment"] in experiments]
    print(f"{'backend':8} {'experiment':12} {'jitter':6} trial  conflicts  pairs with 0/1/2 conflicting  median gap ms")
    for row in sorted(rows, key=lambda r: (r["backend"], r["experiment"], r["jitter"], int(r["trial"]))):
        with gzip.open(path.parent / row["history"], "rt") as fh:
            events = [json.loads(line) for line in fh if line.strip()]
        counts, gaps = pairs(events)
        split = "/".join(str(counts.count(n)) for n in (0, 1, 2))
        gap = f"{statistics.median(gaps):.1f}" if gaps else "-"
        print(
            f"{row['backend']:8} {row['experiment']:12} {row['jitter']:6} {row['trial']:>5}  "
            f"{row['conflicts']:>9}  {split:>27}  {gap:>13}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
