"""Compare two results files cell by cell: did the numbers move (e.g. parallel against serial)?

For every cell (backend × experiment × the settings that define a condition) in either file: the
conflict rate (conflicts / entries per trial) and the lost updates per trial, each as a mean with
its 95% confidence interval over the trials. A cell *differs* when each file's mean lies outside
the other's interval; when only one does, the line says which (with 3 trials an interval is wide,
or zero-wide when all three agree, so one mean outside is common noise). A cell with fewer than 2
trials on a side cannot be judged and says so. Pure: rows in, lines out (rows come from
:func:`lockcompare.analysis.results.read_results`).

>>> a = [{"backend": "single", "experiment": "baseline", "conflicts": 0, "entries": 80, "lost_updates": 0}] * 3
>>> [line.flag for line in compare_rows(a, a)]
['']
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from lockcompare.analysis.cells import CONDITION_COLUMNS, setting_text, varying_conditions
from lockcompare.analysis.stats import MeanCI, mean_ci

Row = dict[str, Any]
CellKey = tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class CellComparison:
    """One cell: the two files' statistics and why it is flagged ("" when consistent)."""

    key: CellKey
    condition: str  # the settings that tell this cell from others of its backend x experiment
    conflict_rate: tuple[MeanCI | None, MeanCI | None]
    lost_updates: tuple[MeanCI | None, MeanCI | None]
    flag: str


def cell_key(row: Row, columns: Sequence[str]) -> CellKey:
    return (str(row["backend"]), str(row["experiment"]), *(setting_text(row.get(c, "")) for c in columns))


def _rate(row: Row) -> float:
    entries = row.get("entries", 0)
    return row["conflicts"] / entries if entries and entries > 0 else math.nan


def _stats(values: Sequence[float]) -> MeanCI:
    return mean_ci([v for v in values if not math.isnan(v)])


def _inside(value: float, ci: MeanCI) -> bool:
    """``value`` within ``ci``'s interval (a zero-width interval holds its mean only)."""
    return ci.mean - ci.half_width - 1e-12 <= value <= ci.mean + ci.half_width + 1e-12


def _disagreement(name: str, a: MeanCI, b: MeanCI) -> str:
    if a.n < 2 or b.n < 2:
        return f"{name}: fewer than 2 trials, not judged"
    a_in_b, b_in_a = _inside(a.mean, b), _inside(b.mean, a)
    if a_in_b and b_in_a:
        return ""
    if not a_in_b and not b_in_a:
        return f"{name} differs"
    return f"{name}: {'A' if not a_in_b else 'B'}'s mean outside the other's interval"


def compare_rows(rows_a: Sequence[Row], rows_b: Sequence[Row], *, ignore: Sequence[str] = ()) -> list[CellComparison]:
    """Every cell of either file, in the order cells first appear (file A first).

    ``ignore`` names settings that do not tell cells apart here (e.g. ``jitter``, when comparing
    a run against one made before that setting existed).
    """
    columns = [c for c in CONDITION_COLUMNS if c not in ignore and any(c in r for r in (*rows_a, *rows_b))]
    shown = varying_conditions([*rows_a, *rows_b], columns)
    cells: dict[CellKey, tuple[list[Row], list[Row]]] = {}
    for side, rows in enumerate((rows_a, rows_b)):
        for row in rows:
            cells.setdefault(cell_key(row, columns), ([], []))[side].append(row)
    out = []
    for key, (a, b) in cells.items():
        first = (a or b)[0]
        condition = " ".join(f"{c}={setting_text(first.get(c, ''))}" for c in shown)
        rate = rate_a, rate_b = _side([_rate(r) for r in a]), _side([_rate(r) for r in b])
        lost = lost_a, lost_b = _side([r["lost_updates"] for r in a]), _side([r["lost_updates"] for r in b])
        if rate_a is None or rate_b is None or lost_a is None or lost_b is None:  # a side without rows
            flag = "only in A" if a else "only in B"
        else:
            judged = (_disagreement("conflict rate", rate_a, rate_b), _disagreement("lost updates", lost_a, lost_b))
            flag = "; ".join(f for f in judged if f)
        out.append(CellComparison(key=key, condition=condition, conflict_rate=rate, lost_updates=lost, flag=flag))
    return out


def _side(values: Sequence[float]) -> MeanCI | None:
    """One file's statistics for a cell; None when the cell is not in that file."""
    return _stats(values) if values else None


def differs(line: CellComparison) -> bool:
    """True for a flag that means the numbers moved (not a cell too small to judge)."""
    return "differs" in line.flag or line.flag.startswith("only in")


def _fmt(ci: MeanCI | None, *, percent: bool) -> str:
    if ci is None or ci.n == 0:
        return "—"
    scale, unit = (100, "%") if percent else (1, "")
    if math.isnan(ci.half_width):
        return f"{ci.mean * scale:.1f}{unit} (n={ci.n})"
    return f"{ci.mean * scale:.1f}{unit} ±{ci.half_width * scale:.1f} (n={ci.n})"


def comparison_table(lines: Sequence[CellComparison]) -> tuple[list[str], list[list[str]]]:
    """Headers and text cells for :func:`lockcompare.render.table.format_table`."""
    headers = ["backend", "experiment", "condition", "conflict rate A", "conflict rate B",
               "lost updates A", "lost updates B", "flag"]  # fmt: skip
    rows = []
    for line in lines:
        rows.append(
            [
                line.key[0],
                line.key[1],
                line.condition,
                _fmt(line.conflict_rate[0], percent=True),
                _fmt(line.conflict_rate[1], percent=True),
                _fmt(line.lost_updates[0], percent=False),
                _fmt(line.lost_updates[1], percent=False),
                line.flag or "ok",
            ]
        )
    return headers, rows
