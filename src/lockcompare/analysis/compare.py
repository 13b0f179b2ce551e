"""Compare two results files cell by cell: do their answers differ beyond chance?

For every cell (backend × experiment × the settings that define a condition) in either file: each
file's violation rate with its exact 95% interval (analysis/rates.py), and a two-sided Fisher exact
test of the two (violations and clean trials, observed trials only: analysis/intervals.py). A cell
*differs* only where that test gives p < :data:`ALPHA`. With many cells tested some differ by chance
alone (about one in twenty of the cells whose rates are truly equal, fewer with Fisher's
conservative test): :func:`summary_lines` says how many were tested.

Beside the rates, the lesson's reading: the conflict rate (conflicts / entries per trial) and the
lost updates per trial as means with their 95% confidence intervals. Where each mean lies outside
the other's interval the line notes it ("conflicts: means apart"), as a lead for the histories,
never a "differs": trials of one cell are not independent draws of one count.

Cells are matched across time scales where the settings allow: a row stores its times multiplied
by its time scale (ttl_ms 100 at ×0.1), so each scaled setting (scenario/settings.py) is divided
back to the lesson's scale before cells are matched; a ×0.1 run and a ×1 run of the same settings
are then the same cell at two speeds, and the scales are said. A file that sweeps the time scale
keeps it as a setting that splits cells. A cell in one file only says why it has no
partner: the settings in which the other file's cells of that backend × experiment differ, or that
the other file did not run it. Pure: rows in, lines out (rows come from
:func:`lockcompare.analysis.results.read_results`).

>>> a = [{"backend": "single", "experiment": "baseline", "conflicts": 0, "entries": 80, "lost_updates": 0,
...       "verdict": "exclusive", "trial": k} for k in range(3)]
>>> [(line.flag, line.p_value) for line in compare_rows(a, a)]
[('', 1.0)]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from lockcompare.analysis.cells import CONDITION_COLUMNS, setting_text, varying_conditions
from lockcompare.analysis.intervals import fisher_exact
from lockcompare.analysis.order import cell_rank
from lockcompare.analysis.rates import ViolationRate, violation_rate
from lockcompare.analysis.stats import MeanCI, mean_ci
from lockcompare.scenario.settings import SETTINGS

Row = dict[str, Any]
CellKey = tuple[str, ...]

#: Two cells differ where Fisher's exact test gives a two-sided p-value below this.
ALPHA = 0.05
#: The setting that may differ between two matched cells: their times are compared at the lesson's scale.
SCALE = "time_scale"
#: Settings a row stores multiplied by its time scale (scenario/settings.py says which).
SCALED = frozenset(s.name for s in SETTINGS.values() if s.scaled)


@dataclass(frozen=True, kw_only=True)
class CellComparison:
    """One cell: the two files' rates and statistics, the test's p-value and what the line says."""

    key: CellKey
    condition: str  # the settings that tell this cell from others of its backend x experiment
    rates: tuple[ViolationRate | None, ViolationRate | None]
    #: Fisher's two-sided p-value; None where the cell is in one file only or a side observed nothing.
    p_value: float | None
    conflict_rate: tuple[MeanCI | None, MeanCI | None]
    lost_updates: tuple[MeanCI | None, MeanCI | None]
    flag: str

    @property
    def tested(self) -> bool:
        return self.p_value is not None


def lesson_text(row: Row, column: str) -> str:
    """A setting as text at the lesson's scale: a row stores its times multiplied by its time scale
    (ttl_ms 100 at ×0.1), so a scaled setting is divided back (ttl_ms 1000); others as they are."""
    value = row.get(column, "")
    scale = row.get(SCALE)
    if column in SCALED and isinstance(value, int | float) and isinstance(scale, int | float) and scale > 0:
        if not math.isnan(value):
            return setting_text(float(f"{value / scale:.6g}"))
    return setting_text(value)


def cell_key(row: Row, columns: Sequence[str]) -> CellKey:
    """The cell ``row`` belongs to: backend, experiment and ``columns`` at the lesson's scale (where
    the time scale is one of ``columns``, the times are compared as run: it splits cells anyway)."""
    as_run = SCALE in columns
    values = (setting_text(row.get(c, "")) if as_run else lesson_text(row, c) for c in columns)
    return (str(row["backend"]), str(row["experiment"]), *values)


def _rate(row: Row) -> float:
    entries = row.get("entries", 0)
    return row["conflicts"] / entries if entries and entries > 0 else math.nan


def _stats(values: Sequence[float]) -> MeanCI:
    return mean_ci([v for v in values if not math.isnan(v)])


def _inside(value: float, ci: MeanCI) -> bool:
    """``value`` within ``ci``'s interval (a zero-width interval holds its mean only)."""
    return ci.mean - ci.half_width - 1e-12 <= value <= ci.mean + ci.half_width + 1e-12


def _apart(name: str, a: MeanCI | None, b: MeanCI | None) -> str:
    """A note where each file's mean lies outside the other's interval ("" otherwise, or too few trials)."""
    if a is None or b is None or a.n < 2 or b.n < 2:
        return ""
    return f"{name}: means apart" if not _inside(a.mean, b) and not _inside(b.mean, a) else ""


def _scaled_apart(rows_a: Sequence[Row], rows_b: Sequence[Row]) -> bool:
    """Does the time scale tell cells apart within one file (a scale sweep)? Then it splits cells."""
    return any(SCALE in varying_conditions(rows, [SCALE]) for rows in (rows_a, rows_b) if rows)


def compare_rows(rows_a: Sequence[Row], rows_b: Sequence[Row], *, ignore: Sequence[str] = ()) -> list[CellComparison]:
    """Every cell of either file, backends in registration order then experiments in catalogue order
    (analysis/order.py); cells of one backend × experiment in the order they first appear (A first).

    ``ignore`` names settings that do not tell cells apart here (e.g. ``jitter``, when comparing
    a run against one made before that setting existed). The time scale does not either, unless
    one file sweeps it (module docstring).
    """
    skip = set(ignore) | (set() if _scaled_apart(rows_a, rows_b) else {SCALE})
    columns = [c for c in CONDITION_COLUMNS if c not in skip and any(c in r for r in (*rows_a, *rows_b))]
    cells: dict[CellKey, tuple[list[Row], list[Row]]] = {}
    for side, rows in enumerate((rows_a, rows_b)):
        for row in sorted(rows, key=cell_rank):  # the tables' order: backends, then experiments
            cells.setdefault(cell_key(row, columns), ([], []))[side].append(row)
    shown = _shown(list(cells), columns, rows=[*rows_a, *rows_b])
    out = []
    for key, (a, b) in cells.items():
        condition = " ".join(f"{c}={key[2 + columns.index(c)]}" for c in shown)
        rates = (violation_rate(a) if a else None, violation_rate(b) if b else None)
        judged_a, judged_b = _judged(a), _judged(b)
        conflicts = _side([_rate(r) for r in judged_a], a), _side([_rate(r) for r in judged_b], b)
        lost = _side([r["lost_updates"] for r in judged_a], a), _side([r["lost_updates"] for r in judged_b], b)
        p_value, flag = _judge(key, rates, cells=cells, columns=columns)
        notes = [n for n in (_apart("conflicts", *conflicts), _apart("lost updates", *lost)) if n]
        flag = "; ".join(filter(None, [flag, *notes]))
        out.append(
            CellComparison(
                key=key, condition=condition, rates=rates, p_value=p_value, conflict_rate=conflicts,
                lost_updates=lost, flag=flag,
            )
        )  # fmt: skip
    return out


def _shown(keys: Sequence[CellKey], columns: Sequence[str], *, rows: Sequence[Row]) -> list[str]:
    """The columns that tell cells of one backend × experiment apart (compared as the keys hold them,
    at the lesson's scale), and ``faults`` wherever a row ran a schedule of its own (analysis/cells.py)."""
    seen: dict[tuple[str, ...], list[set[str]]] = {}
    for key in keys:
        for values, value in zip(seen.setdefault(key[:2], [set() for _ in columns]), key[2:], strict=True):
            values.add(value)
    custom = varying_conditions(rows, ["faults"]) if "faults" in columns else []
    return [c for i, c in enumerate(columns) if c in custom or any(len(v[i]) > 1 for v in seen.values())]


def _judge(
    key: CellKey,
    rates: tuple[ViolationRate | None, ViolationRate | None],
    *,
    cells: dict[CellKey, tuple[list[Row], list[Row]]],
    columns: Sequence[str],
) -> tuple[float | None, str]:
    """(Fisher's p-value, the flag) of one cell; see the module docstring."""
    rate_a, rate_b = rates
    if rate_a is None or rate_b is None:
        side = "A" if rate_b is None else "B"
        return None, f"only in {side} ({_why_alone(key, other=1 if side == 'A' else 0, cells=cells, columns=columns)})"
    blind = [name for name, rate in (("A", rate_a), ("B", rate_b)) if not rate.observed]
    if blind:
        return None, f"not tested: no trial observed the lock in {' and '.join(blind)}"
    p = fisher_exact(
        rate_a.violations, rate_a.observed - rate_a.violations, rate_b.violations, rate_b.observed - rate_b.violations
    )
    return p, (f"differs (p = {p:.3g})" if p < ALPHA else "")


def _why_alone(
    key: CellKey, *, other: int, cells: dict[CellKey, tuple[list[Row], list[Row]]], columns: Sequence[str]
) -> str:
    """Why the other file has no partner for ``key``: the settings its cells of the same backend ×
    experiment hold otherwise, or that it has none."""
    name = "AB"[other]
    partners = [k for k, sides in cells.items() if k[:2] == key[:2] and sides[other]]
    if not partners:
        return f"{name} did not run {key[0]} × {key[1]}"
    differing: dict[str, set[str]] = {}
    for partner in partners:
        for column, mine, theirs in zip(columns, key[2:], partner[2:], strict=True):
            if mine != theirs:
                differing.setdefault(column, set()).add(theirs)
    said = "; ".join(
        f"{c} {key[2 + columns.index(c)]} here, {', '.join(sorted(v))} in {name}" for c, v in differing.items()
    )
    return f"{name}'s cells of {key[0]} × {key[1]} differ in {said}"


def _judged(rows: Sequence[Row]) -> list[Row]:
    """The rows the lesson's means are over: not ``unknown`` (nothing was measured), as in the table."""
    return [r for r in rows if r.get("verdict") != "unknown"]


def _side(values: Sequence[float], rows: Sequence[Row]) -> MeanCI | None:
    """One file's statistics for a cell; None when the cell is not in that file."""
    return _stats(values) if rows else None


def unpaired(line: CellComparison) -> bool:
    """A cell in one file only whose backend × experiment the other file did not run at all: a
    comparison of a subset with a whole run has hundreds; they are counted, not listed."""
    return line.flag.startswith("only in") and " did not run " in line.flag


def differs(line: CellComparison) -> bool:
    """True where the two rates differ by Fisher's test, or the cell is in one file only (as diff
    says a line is in one file only): what the command's exit code counts."""
    return (line.p_value is not None and line.p_value < ALPHA) or line.flag.startswith("only in")


def scales(rows_a: Sequence[Row], rows_b: Sequence[Row]) -> str:
    """``A ×0.1, B ×1`` where the files ran at different time scales ("" where they agree)."""
    seen = [sorted({setting_text(r.get(SCALE)) for r in rows}) for rows in (rows_a, rows_b)]
    if seen[0] == seen[1]:
        return ""
    return ", ".join(f"{name} ×{'/'.join(values) or '?'}" for name, values in zip("AB", seen, strict=True))


def summary_lines(lines: Sequence[CellComparison], *, rows_a: Sequence[Row], rows_b: Sequence[Row]) -> list[str]:
    """What a reader needs beside the table: how many cells were tested and what chance alone gives,
    how many differ, how many could not be matched, and the time scales matched across."""
    tested = [line for line in lines if line.tested]
    moved = [line for line in tested if line.p_value is not None and line.p_value < ALPHA]
    alone = [line for line in lines if line.flag.startswith("only in")]
    elsewhere = {side: sum(1 for line in alone if unpaired(line) and line.flag.startswith(f"only in {side}"))
                 for side in "AB"}  # fmt: skip
    out = [
        f"{len(moved)} of {len(tested)} cells tested differ (Fisher's exact test on the violation rates, "
        f"two-sided, p < {ALPHA:g}); with {len(tested)} cells tested, about {len(tested) * ALPHA:.1f} could "
        "differ by chance alone: read one flag as a lead for the histories, not a finding",
    ]
    listed = [line for line in alone if not unpaired(line)]
    if listed:
        out.append(f"{len(listed)} cell(s) in one file only, of a backend × experiment both ran: the line says which "
                   "settings differ")  # fmt: skip
    for side, other in (("A", "B"), ("B", "A")):
        if elsewhere[side]:
            out.append(f"{elsewhere[side]} cell(s) in {side} only, of a backend × experiment {other} did not run "
                       "(not listed)")  # fmt: skip
    untested = len(lines) - len(tested) - len(alone)
    if untested:
        out.append(f"{untested} cell(s) not tested: no trial observed the lock on one side")
    across = scales(rows_a, rows_b)
    if across and not _scaled_apart(rows_a, rows_b):
        out.append(
            f"matched across time scales ({across}): times compared at the lesson's scale (a row's divided by its "
            "time scale), so matched cells ran the same settings at another speed; a difference may be the scale's"
        )
    return out


def _fmt(ci: MeanCI | None, *, percent: bool) -> str:
    if ci is None or ci.n == 0:
        return "—"
    scale, unit = (100, "%") if percent else (1, "")
    if math.isnan(ci.half_width):
        return f"{ci.mean * scale:.1f}{unit} (n={ci.n})"
    return f"{ci.mean * scale:.1f}{unit} ±{ci.half_width * scale:.1f} (n={ci.n})"


def _p(value: float | None) -> str:
    return "—" if value is None else f"{value:.3g}"


def comparison_table(lines: Sequence[CellComparison]) -> tuple[list[str], list[list[str]]]:
    """Headers and text cells for :func:`lockcompare.render.table.format_table`: every cell but those
    of a backend × experiment one file did not run (:func:`unpaired`: counted by :func:`summary_lines`)."""
    headers = ["backend", "experiment", "condition", "violation rate A", "violation rate B", "p (Fisher)",
               "conflict rate A", "conflict rate B", "lost updates A", "lost updates B", "flag"]  # fmt: skip
    rows = []
    for line in lines:
        if unpaired(line):
            continue  # counted by summary_lines
        rows.append(
            [
                line.key[0],
                line.key[1],
                line.condition,
                *(rate.text() if rate is not None else "—" for rate in line.rates),
                _p(line.p_value),
                _fmt(line.conflict_rate[0], percent=True),
                _fmt(line.conflict_rate[1], percent=True),
                _fmt(line.lost_updates[0], percent=False),
                _fmt(line.lost_updates[1], percent=False),
                line.flag or "ok",
            ]
        )
    return headers, rows
