"""Split a contend run's conflicts into planned and extra-round entries, from its histories.

In the contend workload a worker that has run its planned rounds keeps contending (extra rounds)
until every worker is done; the CSV's ``conflicts`` counts every entry that found the rival inside,
extra rounds included. Issue 31 found docs/lesson.md reading "80 of 80 planned entries" into it.

    python scripts/contend_conflicts.py results/contend.csv > results/derived/contend-conflicts.csv

One row per trial: ``conflicts_planned`` (entries of rounds below the trial's ``rounds`` that found
the rival inside) and ``conflicts_extra`` (the same in extra rounds), and ``conflicts`` as the CSV
has it, so a reader can see the two add up.
"""

from __future__ import annotations

import csv
import gzip
import json
import sys
from pathlib import Path

FIELDS = ["backend", "trial_id", "conflicts", "conflicts_planned", "conflicts_extra"]


def split(events: list[dict], *, rounds: int) -> tuple[int, int]:
    """(planned, extra) entries that found another worker inside (``inside`` > 1 at enter).

    >>> split([{"kind": "enter", "round": 3, "inside": 2}, {"kind": "enter", "round": 40, "inside": 2},
    ...        {"kind": "enter", "round": 5, "inside": 1}], rounds=40)
    (1, 1)
    """
    found = [e["round"] < rounds for e in events if e["kind"] == "enter" and (e.get("inside") or 0) > 1]
    return sum(found), len(found) - sum(found)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: contend_conflicts.py RESULTS.csv", file=sys.stderr)
        return 2
    results = Path(argv[0])
    out = csv.DictWriter(sys.stdout, fieldnames=FIELDS, lineterminator="\n")
    out.writeheader()
    with results.open(newline="") as handle:
        for row in csv.DictReader(handle):
            with gzip.open(results.parent / row["history"], "rt") as history:
                events = [json.loads(line) for line in history if line.strip()]
            planned, extra = split(events, rounds=int(row["rounds"]))
            out.writerow({"backend": row["backend"], "trial_id": row["trial_id"], "conflicts": row["conflicts"],
                          "conflicts_planned": planned, "conflicts_extra": extra})  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
