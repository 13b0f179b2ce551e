"""Summary tables computed from a results CSV alone, so any result file can be re-rendered later.

One line per cell (backend x experiment, plus any setting that varies inside the file, e.g. the
pause length): conflicts per entries as a mean over trials with a 95% confidence interval, the
entries completed out of those planned, the most workers ever inside at once, rejected writes,
lost updates, acquires given up with the refusal reasons, and how the trials were judged.
"""

from __future__ import annotations

import csv
import io
import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

from tabulate import tabulate

from lockcompare.analysis.cells import group_cells
from lockcompare.analysis.checker import parse_refusals
from lockcompare.analysis.progress import lagging, parse_progress
from lockcompare.analysis.results import latest_rows
from lockcompare.analysis.stats import mean_ci
from lockcompare.errors import UnknownNameError

FORMATS = ("github", "simple", "latex", "csv")

#: Metrics shown only when some trial has a non-zero value (most tables need neither).
OPTIONAL_COLUMNS = {
    "reads_rejected": "rejected reads", "cs_retries": "retries", "tokens_backwards": "tokens backwards",
    "grants_while_held": "granted while held", "foreign_releases": "released another's lock",
    "backwards_writes_accepted": "backwards-token writes accepted", "writes_skipped": "writes skipped (lease over)",
    "rounds_denied": "rounds denied (lease valid)", "workers_starved": "workers starved",
}  # fmt: skip


def _measured(row: dict[str, Any], column: str) -> int:
    """An optional count, or -1 where the row has none (a row older than the metric)."""
    value = row.get(column)
    return value if isinstance(value, int) else -1


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


def _range(values: Sequence[float]) -> str:
    lo, hi = min(values), max(values)
    return _num(lo, 0) if lo == hi else f"{_num(lo, 0)}–{_num(hi, 0)}"


def _acquire_failures(group: Sequence[dict[str, Any]]) -> str:
    """Rounds given up per trial (mean), with the refusal reasons behind them (per-trial means)."""
    reasons: Counter[str] = Counter()
    for row in group:
        reasons.update(parse_refusals(row.get("refusals", "")))
    n = len(group)
    detail = ", ".join(f"{reason} {_num(count / n)}" for reason, count in reasons.most_common())
    given_up = _num(mean_ci([max(0, r["acquire_timeouts"]) for r in group]).mean)
    return f"{given_up} ({detail})" if detail else given_up


def _shows_failures(rows: Sequence[dict[str, Any]]) -> bool:
    return any(r["acquire_timeouts"] > 0 or set(parse_refusals(r.get("refusals", ""))) - {"held"} for r in rows)


def summarize(rows: Sequence[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """Headers and lines of the summary table, in the order cells first appear in the file.

    A trial run again after an ``unknown`` verdict counts once (its latest row). ``unknown`` trials
    are counted in the trials column and kept out of every mean: nothing was observed in them.
    """
    rows = latest_rows(list(rows))
    cells = group_cells(rows)
    varying = [column for column, _ in cells[0].conditions] if cells else []
    known_rows = [r for r in rows if r["verdict"] != "unknown"]
    optional = [c for c in OPTIONAL_COLUMNS if any(_measured(r, c) > 0 for r in known_rows)]
    failures = _shows_failures(known_rows)
    # Progress beside safety: shown when a worker somewhere held the lock but got little done.
    slow = any(lagging(parse_progress(r.get("progress_by_worker", ""))) for r in known_rows)
    headers = [
        "backend", "experiment", *varying, "trials", "conflicts / entries (mean ±95% CI)", "entries / planned",
        "max inside", "overlap ms", "rejected writes", *(OPTIONAL_COLUMNS[c] for c in optional),
        "lost updates (range)", *(["least progress (rounds, one worker)"] if slow else []),
        *(["acquires given up (refusals)"] if failures else []), "verdicts",
    ]  # fmt: skip
    lines = []
    for cell in cells:
        key, group = (cell.backend, cell.experiment, *(value for _, value in cell.conditions)), cell.rows
        known = [r for r in group if r["verdict"] != "unknown"]
        verdicts = Counter(r["verdict"] for r in group)
        trials = str(len(known)) + (f" (+{len(group) - len(known)} unknown)" if len(known) < len(group) else "")
        if not known:
            lines.append([*key, trials, *["n/a"] * (len(headers) - len(key) - 2), _verdicts(verdicts)])
            continue
        entries = mean_ci([r["entries"] for r in known]).mean
        planned = mean_ci([r["entries_planned"] for r in known]).mean
        lost = [r["lost_updates"] for r in known]
        lines.append(
            [
                *key,
                trials,
                f"{_mean_with_ci([r['conflicts'] for r in known])} / {_num(entries)}",
                f"{_num(entries)} / {_num(planned)}",
                str(max(r["max_concurrency"] for r in known)),
                _num(mean_ci([r["overlap_ms"] for r in known]).mean, 0),
                _mean_with_ci([r["writes_rejected"] for r in known]),
                *(_mean_with_ci([r[c] for r in known if _measured(r, c) >= 0]) for c in optional),
                f"{_num(mean_ci(lost).mean)} ({_range(lost)})",
                *([_least_progress(known)] if slow else []),
                *([_acquire_failures(known)] if failures else []),
                _verdicts(verdicts),
            ]
        )
    return headers, lines


def _least_progress(group: Sequence[dict[str, Any]]) -> str:
    """The least-progressing worker of each trial: rounds with an accepted write / rounds it held
    the lock, as the mean over trials ("1 / 20": a holder whose work was refused 19 times)."""
    least = [
        min(parse_progress(r.get("progress_by_worker", "")), key=lambda p: p.progressed, default=None) for r in group
    ]
    measured = [p for p in least if p is not None]
    if not measured:
        return "n/a"
    return f"{_num(mean_ci([p.progressed for p in measured]).mean)} / {_num(mean_ci([p.held for p in measured]).mean)}"


def _verdicts(verdicts: Counter[str]) -> str:
    return ", ".join(f"{n}× {v}" for v, n in verdicts.most_common())


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
    return str(tabulate(lines, headers=headers, tablefmt=fmt, disable_numparse=True))
