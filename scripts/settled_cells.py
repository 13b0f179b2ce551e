"""Where the settled cells of a reproduction stand now: each ``--until-settled`` part's cells
(scripts/reproduction_plan.py), judged from the file as it is after every pass over it (a part's
closing lines say where its cells stood when that part ended; reruns of marked trials came after).

    python scripts/settled_cells.py results/reproduction.csv

The same rule as ``matrix --until-settled`` (analysis/settle.py): a cell is unsafe once a trial
that is not timing-marked violated safety, clean once its violation rate's upper bound is at or
below the target, open otherwise (a violation seen only in marked trials keeps it open).
"""

from __future__ import annotations

import importlib
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from lockcompare.analysis.results import read_results
from lockcompare.analysis.settle import DEFAULT_TARGET, UNSAFE, CellState, cell_state
from lockcompare.errors import LockcompareError


def _plan() -> Any:
    """scripts/reproduction_plan.py, the plan whose settled parts these are."""
    sys.path.insert(0, str(Path(__file__).parent))
    return importlib.import_module("reproduction_plan")


def states(rows: list[dict[str, Any]], cells: list[tuple[str, str]]) -> list[CellState]:
    """Each planned cell's state, from its rows in the file (a cell with none is left out)."""
    by_cell: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_cell[(row["backend"], row["experiment"])].append(row)
    return [cell_state(" × ".join(cell), by_cell[cell], target=DEFAULT_TARGET) for cell in cells if by_cell.get(cell)]


def summary(part: str, found: list[CellState]) -> list[str]:
    """The part's line, and one line per cell not settled (as the matrix prints them)."""
    unsafe = sum(s.status == UNSAFE for s in found)
    settled = sum(s.settled for s in found)
    lines = [
        f"{part}: settled {settled} of {len(found)} cells: {unsafe} unsafe (a violation seen), "
        f"{settled - unsafe} clean (upper bound at or below {DEFAULT_TARGET:.0%})"
    ]
    return lines + [f"  not settled: {s.text()}" for s in found if not s.settled]


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: settled_cells.py RESULTS.csv", file=sys.stderr)
        return 2
    try:
        rows = read_results(Path(argv[0]))
    except LockcompareError as exc:
        print(f"settled_cells.py: {exc}", file=sys.stderr)
        return 2
    plan = _plan()
    for part in plan.parts():
        if part.settled:
            cells = sorted({(s.backend, s.experiment) for s in plan.planned(part)[0]})
            print("\n".join(summary(part.name, states(rows, cells))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
