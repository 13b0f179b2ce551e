"""Summary tables computed from a results CSV alone, so any result file can be re-rendered later.

One line per cell (backend x experiment, plus any setting that varies inside the file, e.g. the
pause length), backends in registration order and experiments in catalogue order (analysis/order.py
via analysis/cells.py), whatever order the trials finished in. The default table is narrow (at most
~8 columns, one more where faults strike or a worker lagged): trials, the cell's answer as a rate
(the share of its observed trials with a safety violation, with its exact 95% interval, and where
its fault injections struck, lost updates per struck fault: analysis/rates.py), the lesson's
reading beside it — conflicts per entries as a mean over trials with a 95% confidence interval —
rejected writes, lost updates, the least progress of one worker when some worker got little done,
and how the trials were judged. ``wide`` adds the entries completed out of those planned, the most
workers ever inside at once, overlap time, the optional counts, acquires given up with the refusal
reasons, and the worst timing stall against the margin.

A cell holding a trial the timing sentinel marked (its machine stalled for at least half the
experiment's timing margin: analysis/sentinel.py) says so in its trials column, e.g.
``3 (1 timing-marked)``, in every format and width.
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

from tabulate import tabulate

from lockcompare.analysis.cells import group_cells
from lockcompare.analysis.checker import parse_refusals
from lockcompare.analysis.progress import lagging, parse_progress
from lockcompare.analysis.rates import DAMAGE_NOTE, RATE_NOTE, damage_rate, damage_text, violation_rate
from lockcompare.analysis.results import latest_rows
from lockcompare.analysis.sentinel import MARK_SHARE, is_marked
from lockcompare.analysis.stats import mean_ci
from lockcompare.analysis.verdicts import VIOLATIONS
from lockcompare.errors import UnknownNameError

FORMATS = ("github", "simple", "latex", "csv")

#: Metrics shown only when some trial has a non-zero value (most tables need neither).
OPTIONAL_COLUMNS = {
    "reads_rejected": "rejected reads", "cs_retries": "retries", "tokens_backwards": "tokens backwards",
    "grants_while_held": "granted while held", "foreign_releases": "released another's lock",
    "backwards_writes_accepted": "backwards-token writes accepted", "writes_skipped": "writes skipped (lease over)",
    "rounds_denied": "rounds denied (lease valid)", "workers_starved": "workers starved",
    "double_applications": "applied twice",
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


def timing_mark(group: Sequence[dict[str, Any]]) -> str:
    """`` (N timing-marked)`` for a cell holding N marked trials, "" for none."""
    marked = sum(1 for row in group if is_marked(row))
    return f" ({marked} timing-marked)" if marked else ""


def marked_cells(rows: Sequence[dict[str, Any]]) -> list[tuple[str, int, int]]:
    """(``backend × experiment``, marked trials, trials) of every cell holding a marked trial, in table order."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for cell in group_cells(latest_rows(list(rows))):
        groups.setdefault((cell.backend, cell.experiment), []).extend(cell.rows)
    return [
        (f"{backend} × {experiment}", sum(1 for r in group if is_marked(r)), len(group))
        for (backend, experiment), group in groups.items()
        if any(is_marked(r) for r in group)
    ]


#: How many violating trials a run's closing lines name one by one; the rest are counted.
VIOLATIONS_SHOWN = 10


def violation_lines(rows: Sequence[dict[str, Any]], *, limit: int = VIOLATIONS_SHOWN) -> list[str]:
    """The closing lines naming the trials with a safety violation (analysis/verdicts.py
    ``violation``), one a line with its verdict, worst first then in file order, at most ``limit``
    and then "and N more"; no line at all when no trial has one.

    >>> verdicts = ["exclusive", "lease-violated", "lost-updates"]
    >>> rows = [{"trial_id": f"t{i}", "verdict": v} for i, v in enumerate(verdicts)]
    >>> violation_lines(rows, limit=1)
    ['safety violations in 2 trial(s) (trial id, verdict):', '  t2  lost-updates', '  and 1 more']
    """
    order = {name: rank for rank, name in enumerate(VIOLATIONS)}
    found = [r for r in latest_rows(list(rows)) if r.get("verdict") in order]
    if not found:
        return []
    found.sort(key=lambda r: order[r["verdict"]])  # stable: file order within a verdict
    lines = [f"safety violations in {len(found)} trial(s) (trial id, verdict):"]
    lines += [f"  {r['trial_id']}  {r['verdict']}" for r in found[:limit]]
    if len(found) > limit:
        lines.append(f"  and {len(found) - limit} more")
    return lines


def revisions_of(group: Sequence[dict[str, Any]]) -> list[str]:
    """The distinct source revisions of a cell's trials, in first-seen order (rows that do not
    record one, from before provenance was kept, are left out)."""
    return list(dict.fromkeys(str(r.get("source_revision") or "") for r in group if r.get("source_revision")))


def revision_mark(group: Sequence[dict[str, Any]]) -> str:
    """`` (N revisions)`` for a cell whose trials come from more than one code revision, "" otherwise."""
    revisions = revisions_of(group)
    return f" ({len(revisions)} revisions)" if len(revisions) > 1 else ""


REVISION_NOTE = (
    "revisions: a cell so marked holds trials measured by more than one code revision (`--resume "
    "--allow-mixed-revisions`); its mean is over different instruments (column source_revision)."
)


#: The rate columns (analysis/rates.py), beside the lesson's mean conflicts per entries.
VIOLATION_HEADER = "violation rate (95% CI)"
DAMAGE_HEADER = "lost / struck fault (95% CI)"

TIMING_NOTE = (
    f"timing-marked: the machine stalled the trial for at least {MARK_SHARE:.0%} of the timing margin its "
    "experiment rests on (columns stall_ms, stall_at, margin_ms; see docs/sentinel.md): read its numbers as "
    "the machine's, not only the lock's."
)


def _worst_stall(group: Sequence[dict[str, Any]]) -> str:
    """The worst stall of the cell's trials against their margin, e.g. ``12.3 / 20``."""
    pairs = [(r.get("stall_ms"), r.get("margin_ms")) for r in group]
    known = [(s, m) for s, m in pairs if isinstance(s, float) and isinstance(m, float) and not math.isnan(s)]
    if not known:
        return "n/a"
    stall, margin = max(known, key=lambda p: p[0])
    return f"{_num(stall)} / {_num(margin, 0)}"


def summarize(rows: Sequence[dict[str, Any]], *, wide: bool = False) -> tuple[list[str], list[list[str]]]:
    """Headers and lines of the summary table, cells in backend then experiment order (analysis/order.py).

    A trial run again after an ``unknown`` verdict counts once (its latest row). ``unknown`` trials
    are counted in the trials column and kept out of every mean: nothing was observed in them.
    ``wide``: every column (see the module docstring); otherwise the narrow one.
    """
    rows = latest_rows(list(rows))
    cells = group_cells(rows)
    varying = [column for column, _ in cells[0].conditions] if cells else []
    known_rows = [r for r in rows if r["verdict"] != "unknown"]
    optional = [c for c in OPTIONAL_COLUMNS if any(_measured(r, c) > 0 for r in known_rows)] if wide else []
    failures = wide and _shows_failures(known_rows)
    timing = wide and any(isinstance(r.get("margin_ms"), float) and not math.isnan(r["margin_ms"]) for r in rows)
    # Progress beside safety: shown when a worker somewhere held the lock but got little done.
    slow = any(lagging(parse_progress(r.get("progress_by_worker", ""))) for r in known_rows)
    # Damage per struck fault: shown when some cell's faults are injections that struck (not pauses).
    strikes = any(damage_rate(cell.rows) is not None for cell in cells)
    headers = [
        "backend", "experiment", *varying, "trials", VIOLATION_HEADER,
        *([DAMAGE_HEADER] if strikes else []), "conflicts / entries (mean ±95% CI)",
        *(["entries / planned", "max inside", "overlap ms"] if wide else []),
        "rejected writes", *(OPTIONAL_COLUMNS[c] for c in optional),
        "lost updates (range)", *(["least progress (rounds, one worker)"] if slow else []),
        *(["acquires given up (refusals)"] if failures else []),
        *(["worst stall / margin ms"] if timing else []), "verdicts",
    ]  # fmt: skip
    lines = []
    for cell in cells:
        key, group = (cell.backend, cell.experiment, *(value for _, value in cell.conditions)), cell.rows
        known = [r for r in group if r["verdict"] != "unknown"]
        verdicts = Counter(r["verdict"] for r in group)
        trials = str(len(known)) + (f" (+{len(group) - len(known)} unknown)" if len(known) < len(group) else "")
        trials += timing_mark(group) + revision_mark(group)
        rates = [violation_rate(group).text(), *([damage_text(group)] if strikes else [])]
        if not known:
            lines.append([*key, trials, *rates, *["n/a"] * (len(headers) - len(key) - 4), _verdicts(verdicts)])
            continue
        entries = mean_ci([r["entries"] for r in known]).mean
        planned = mean_ci([r["entries_planned"] for r in known]).mean
        lost = [r["lost_updates"] for r in known]
        lines.append(
            [
                *key,
                trials,
                *rates,
                f"{_mean_with_ci([r['conflicts'] for r in known])} / {_num(entries)}",
                *(
                    [
                        f"{_num(entries)} / {_num(planned)}",
                        str(max(r["max_concurrency"] for r in known)),
                        _num(mean_ci([r["overlap_ms"] for r in known]).mean, 0),
                    ]
                    if wide
                    else []
                ),
                _mean_with_ci([r["writes_rejected"] for r in known]),
                *(_mean_with_ci([r[c] for r in known if _measured(r, c) >= 0]) for c in optional),
                f"{_num(mean_ci(lost).mean)} ({_range(lost)})",
                *([_least_progress(known)] if slow else []),
                *([_acquire_failures(known)] if failures else []),
                *([_worst_stall(group)] if timing else []),
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


def render(rows: Sequence[dict[str, Any]], *, fmt: str = "github", wide: bool = False) -> str:
    """The summary as text in one of :data:`FORMATS` (narrow unless ``wide``); when a cell holds a
    timing-marked trial, a line under the table says what the mark means (not in ``csv``: it
    would not be a CSV any more)."""
    check_format(fmt)
    if not rows:
        return "(no trials)"
    headers, lines = summarize(rows, wide=wide)
    text = format_table(headers, lines, fmt=fmt)
    if fmt != "csv":
        text += f"\n\n{RATE_NOTE}" + (f" {DAMAGE_NOTE}" if DAMAGE_HEADER in headers else "")
    if fmt != "csv" and marked_cells(rows):
        text += f"\n\n{TIMING_NOTE}"
    if fmt != "csv" and any(revision_mark(cell.rows) for cell in group_cells(latest_rows(list(rows)))):
        text += f"\n\n{REVISION_NOTE}"
    return text


def check_format(fmt: str) -> None:
    if fmt not in FORMATS:
        raise UnknownNameError(f"unknown table format {fmt!r} (known: {', '.join(FORMATS)})")


def format_table(headers: Sequence[str], lines: Sequence[Sequence[str]], *, fmt: str) -> str:
    """Lines of text cells under ``headers``, with tabulate or, for ``csv``, the csv module.

    Cells come from a CSV anyone may have edited: in Markdown they are escaped (:func:`markdown_text`),
    in CSV a formula is neutralised (:func:`spreadsheet_text`)."""
    check_format(fmt)
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow([spreadsheet_text(h) for h in headers])
        writer.writerows([spreadsheet_text(cell) for cell in line] for line in lines)
        return buf.getvalue().rstrip("\n")
    if fmt == "github":
        headers = [markdown_text(h) for h in headers]
        lines = [[markdown_text(cell) for cell in line] for line in lines]
    else:
        lines = [[" ".join(str(cell).splitlines()) for cell in line] for line in lines]
    return str(tabulate(lines, headers=headers, tablefmt=fmt, disable_numparse=True))


_TAG_START = re.compile(r"<(?=[A-Za-z/!?])")


def markdown_text(value: object) -> str:
    """A value as Markdown text: it can neither start HTML (``<script>``; ``<1`` stays as it is),
    end a table cell (``|``) or a line, nor open a code span."""
    text = " ".join(str(value).splitlines())
    text = _TAG_START.sub("&lt;", text)
    return text.replace("|", "\\|").replace("`", "\\`")


def spreadsheet_text(value: object) -> str:
    """A CSV cell a spreadsheet will not run as a formula: one starting with ``= + - @`` (or a tab or
    carriage return) gets a leading ``'`` (OWASP's CSV-injection advice); numbers stay numbers."""
    text = str(value)
    if text[:1] in ("=", "+", "-", "@", "\t", "\r"):
        try:
            float(text)
        except ValueError:
            return "'" + text
    return text
