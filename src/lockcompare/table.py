"""Summary tables computed from a results CSV alone, so any result file can be re-rendered later.

One line per cell (backend x experiment, plus any setting that varies inside the file, e.g. the
pause length): conflicts per entries as a mean over trials with a 95% confidence interval,
rejected writes, lost updates, and how the trials were judged.
"""

from __future__ import annotations

import csv
import io
import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

from tabulate import tabulate

from lockcompare.errors import UnknownNameError
from lockcompare.stats import mean_ci

FORMATS = ("github", "simple", "latex", "csv")

#: Settings that split cells when they vary within one experiment (backend and experiment always do).
CONDITION_COLUMNS = (
    "resource_check", "pause_point", "pause_how", "pause_ms", "ttl_ms", "work_ms", "workers", "rounds",
    "time_scale", "node_count",
)  # fmt: skip

#: Metrics shown only when some trial has a non-zero value (most tables need neither).
OPTIONAL_COLUMNS = {"reads_rejected": "rejected reads", "cs_retries": "retries"}


def _num(value: float, digits: int = 1) -> str:
    if math.isnan(value):
        return "n/a"
    return f"{value:.{digits}f}".rstrip("0").rstrip(".") if digits else f"{value:.0f}"


def _mean_with_ci(values: Sequence[float]) -> str:
    ci = mean_ci(values)
    if ci.n == 0:
        return "n/a"
    if ci.n < 2 or ci.half_width == 0:
        return _num(ci.mean)
    return f"{_num(ci.mean)} ±{_num(ci.half_width)}"


def _setting(value: Any) -> str:
    """A setting as a table cell: 850.0 ms reads 850."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _range(values: Sequence[float]) -> str:
    lo, hi = min(values), max(values)
    return _num(lo, 0) if lo == hi else f"{_num(lo, 0)}–{_num(hi, 0)}"


def _varies_within_a_cell(rows: Sequence[dict[str, Any]], column: str) -> bool:
    """True if rows of one backend x experiment differ in ``column`` (differences between
    experiments or backends are already said by their names)."""
    seen: dict[tuple[str, str], set[str]] = {}
    for row in rows:
        seen.setdefault((row["backend"], row["experiment"]), set()).add(str(row.get(column)))
    return any(len(values) > 1 for values in seen.values())


def summarize(rows: Sequence[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """Headers and lines of the summary table, in the order cells first appear in the file."""
    varying = [c for c in CONDITION_COLUMNS if _varies_within_a_cell(rows, c)]
    optional = [c for c in OPTIONAL_COLUMNS if any(r.get(c, 0) > 0 for r in rows)]
    cells: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for row in rows:
        key = (row["backend"], row["experiment"], *(_setting(row.get(c)) for c in varying))
        cells.setdefault(key, []).append(row)
    headers = [
        "backend", "experiment", *varying, "trials", "conflicts / entries (mean ±95% CI)",
        "overlap ms", "rejected writes", *(OPTIONAL_COLUMNS[c] for c in optional), "lost updates (range)", "verdicts",
    ]  # fmt: skip
    lines = []
    for key, group in cells.items():
        entries = mean_ci([r["entries"] for r in group]).mean
        verdicts = Counter(r["verdict"] for r in group)
        lines.append(
            [
                *key,
                str(len(group)),
                f"{_mean_with_ci([r['conflicts'] for r in group])} / {_num(entries)}",
                _num(mean_ci([r["overlap_ms"] for r in group]).mean, 0),
                _mean_with_ci([r["writes_rejected"] for r in group]),
                *(_mean_with_ci([r[c] for r in group]) for c in optional),
                f"{_num(mean_ci([r['lost_updates'] for r in group]).mean)} ({_range([r['lost_updates'] for r in group])})",
                ", ".join(f"{n}× {v}" for v, n in verdicts.most_common()),
            ]
        )
    return headers, lines


def render(rows: Sequence[dict[str, Any]], *, fmt: str = "github") -> str:
    """The summary as text in one of :data:`FORMATS`."""
    check_format(fmt)
    if not rows:
        return "(no trials)"
    headers, lines = summarize(rows)
    return format_table(headers, lines, fmt=fmt)


def check_format(fmt: str) -> None:
    if fmt not in FORMATS:
        raise UnknownNameError(f"unknown table format {fmt!r} (known: {', '.join(FORMATS)})")


def format_table(headers: Sequence[str], lines: Sequence[Sequence[str]], *, fmt: str) -> str:
    """Lines of text cells under ``headers``, with tabulate or, for ``csv``, the csv module."""
    check_format(fmt)
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(headers)
        writer.writerows(lines)
        return buf.getvalue().rstrip("\n")
    return tabulate(lines, headers=headers, tablefmt=fmt, disable_numparse=True)
