"""Every trial the timing sentinel marked, beside the rest of its cell: did the stall change the answer?

    python scripts/timing_marked.py results/reproduction.csv

One line per marked trial: its cell, trial number, worst stall against its margin and where the
stall was (``stall_at``), its verdict and lost updates, then the verdicts and lost updates of the
unmarked trials of the same cell. A marked trial whose verdict none of its cell's unmarked trials
has is flagged ``DIFFERS``: its numbers may be the machine's, and it is the one to look at (or
rerun); a cell whose every trial is marked has nothing to compare with, and says so. At the end:
how many were marked, how many differ, and how many sit in cells marked throughout.
"""

from __future__ import annotations

import sys
from collections import Counter, defaultdict
from pathlib import Path

from lockcompare.analysis.results import latest_rows, read_results
from lockcompare.analysis.sentinel import is_marked


def _verdicts(rows: list[dict]) -> str:
    counted = Counter(str(r["verdict"]) for r in rows)
    return ", ".join(f"{n}× {v}" for v, n in counted.most_common()) or "none"


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    rows = latest_rows(read_results(Path(argv[0])))
    cells: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for row in rows:
        cells[(row["backend"], row["experiment"])].append(row)
    marked = differ = whole = 0
    for (backend, experiment), group in cells.items():
        unmarked = [r for r in group if not is_marked(r)]
        for row in sorted((r for r in group if is_marked(r)), key=lambda r: r["trial"]):
            marked += 1
            if not unmarked:
                flag = "  (every trial of the cell marked: nothing to compare with)"
                whole += 1
            else:
                flag = "" if str(row["verdict"]) in {str(r["verdict"]) for r in unmarked} else "  DIFFERS"
                differ += bool(flag)
            lost = ",".join(str(r["lost_updates"]) for r in unmarked)
            print(
                f"{backend} x {experiment} #{row['trial']}: stall {row['stall_ms']:.0f} of {row['margin_ms']:.0f} ms"
                f" ({row['margin_of']}) at {row['stall_at']}; {row['verdict']}, {row['lost_updates']} lost"
                f" | unmarked: {_verdicts(unmarked)}, lost {lost or '-'}{flag}"
            )
    print(
        f"{marked} of {len(rows)} trials marked; {differ} with a verdict no unmarked trial of its cell has;"
        f" {whole} in cells marked throughout"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
