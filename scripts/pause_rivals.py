#!/usr/bin/env python3
"""Where the client-pause conflicts come from: each of worker 0's pauses, before or after its rival
finished its rounds. Reads the histories a results CSV points to; no server needed.

    python scripts/pause_rivals.py results/reproduction.csv single,fenced

For every client-pause trial of the given backends it prints, split by whether the pause began while
worker 1 still had rounds to run or after its last counted round ended: the pauses, worker 0's
entries that found someone inside (conflicts), and worker 0's writes accepted and rejected. In the
lesson workload a worker that has run its rounds stops; the paused worker, slowed by its pauses, is
then alone: its late pauses cannot conflict, and its zombie writes meet no newer token. The contend
workload (``--workload contend``) keeps the rival contending until every worker is done.
"""

from __future__ import annotations

import sys
from pathlib import Path

from lockcompare.analysis.results import latest_rows, read_results
from lockcompare.render.timeline import load_history


def rival_done_ns(events: list[dict]) -> int:
    """When worker 1's last counted round ended (its last release outside the contend extras)."""
    ends = [e["t1"] for e in events if e["worker"] == 1 and e["kind"] == "release" and not e.get("extra")]
    return max(ends) if ends else 0


def split(events: list[dict]) -> dict[str, list[int]]:
    done = rival_done_ns(events)
    pauses = {e["round"]: e["t0"] for e in events if e["worker"] == 0 and e["kind"] == "pause"}
    counts = {"pauses": [0, 0], "conflicts": [0, 0], "accepted": [0, 0], "rejected": [0, 0]}
    for rnd, t0 in pauses.items():
        side = 0 if t0 < done else 1
        counts["pauses"][side] += 1
        for e in events:
            if e["worker"] != 0 or e["round"] != rnd:
                continue
            if e["kind"] == "enter" and e.get("inside", 1) > 1:
                counts["conflicts"][side] += 1
            if e["kind"] == "write":
                counts["accepted" if e.get("accepted") else "rejected"][side] += 1
    return counts


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[3], file=sys.stderr)
        return 2
    path, backends = Path(argv[0]), set(argv[1].split(","))
    rows = [
        r for r in latest_rows(read_results(path)) if r["experiment"] == "client-pause" and r["backend"] in backends
    ]
    print("backend  workload  trial  pauses(rival running/done)  w0 conflicts  w0 writes accepted  w0 rejected")
    for row in rows:
        counts = split(load_history(path.parent / row["history"]))
        cell = "  ".join(f"{name} {a}/{b}" for name, (a, b) in counts.items())
        print(f"{row['backend']:<8} {row['workload']:<8} {row['trial']:>5}  {cell}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
