"""The cells of a results file that made under half their planned entries, and why: the lines a
matrix prints at its end (analysis/thin_cells.py), for a file written in parts or resumed, whose
last part's closing lines name only the cells it saw.

    python scripts/thin_cells.py results/reproduction.csv
"""

from __future__ import annotations

import sys
from pathlib import Path

from lockcompare.analysis.results import read_results
from lockcompare.analysis.thin_cells import thin_cell_lines
from lockcompare.errors import LockcompareError


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: thin_cells.py RESULTS.csv", file=sys.stderr)
        return 2
    try:
        rows = read_results(Path(argv[0]))
    except LockcompareError as exc:
        print(f"thin_cells.py: {exc}", file=sys.stderr)
        return 2
    lines = thin_cell_lines(rows)
    print("\n".join(lines) if lines else "every cell made at least half its planned entries")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
