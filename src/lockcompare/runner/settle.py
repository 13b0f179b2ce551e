"""``matrix --until-settled``: run the first round, then add trials to the cells whose answer is open.

Every trial a cell could get is planned up front (``plan_matrix`` with ``--max-trials``): its id,
seed and trial index are the ones a plain matrix of that many trials would give, so rows stay one
per trial and ``--resume`` continues the same file. Round 1 runs the first ``--trials`` of every
cell; after each round the file's rows say where each cell stands (analysis/settle.py), and the
next round runs, for every open cell, the next trials it needs to settle if they all stay clean —
never past ``--max-trials``, and no round starts once the time budget is spent. Cells settle
independently: a settled cell gets no more trials.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lockcompare.analysis.cells import CONDITION_COLUMNS, varying_conditions
from lockcompare.analysis.results import inspect_results, latest_rows
from lockcompare.analysis.settle import OPEN, CellState, cell_state, progress_line, trials_to_settle
from lockcompare.runner.floor import RunFloor
from lockcompare.runner.matrix import MatrixReport, run_planned
from lockcompare.runner.plan import plan_matrix
from lockcompare.scenario.trialspec import TrialSpec, canonical

CellKey = tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class SettleReport:
    matrix: MatrixReport  # every round's trials together
    rounds: int
    states: tuple[CellState, ...]
    #: (cell, why it is not settled) for every open cell at the end.
    unsettled: tuple[tuple[str, str], ...] = field(default_factory=tuple)


def _cell_of(spec: TrialSpec) -> CellKey:
    settings = spec.recorded_settings()
    return tuple(canonical(settings[c]) for c in ("backend", "experiment", *CONDITION_COLUMNS))


def _names(cells: dict[CellKey, list[TrialSpec]]) -> dict[CellKey, str]:
    """``backend × experiment`` with the settings that tell its cells apart (analysis/cells.py's rule)."""
    settings = [cells[key][0].recorded_settings() for key in cells]
    varying = varying_conditions(settings)
    names = {}
    for key, spec_settings in zip(cells, settings, strict=True):
        label = ", ".join(f"{c} {canonical(spec_settings[c])}" for c in varying)
        names[key] = f"{key[0]} × {key[1]}" + (f" ({label})" if label else "")
    return names


def _merged(total: MatrixReport | None, report: MatrixReport) -> MatrixReport:
    if total is None:
        return report
    no_progress = dict(total.no_progress)
    for verdict, count in report.no_progress.items():
        no_progress[verdict] = no_progress.get(verdict, 0) + count
    return dataclasses.replace(
        report,
        trials_run=total.trials_run + report.trials_run,
        trials_skipped=total.trials_skipped,  # what the first round found in the file
        trial_ids=total.trial_ids + report.trial_ids,
        unknown=total.unknown + report.unknown,
        no_progress=no_progress,
        jobs_used=max(total.jobs_used, report.jobs_used),
        jobs_floor=min(total.jobs_floor, report.jobs_floor),
        backed_off=total.backed_off + report.backed_off,
        # every round's floor, summed: the last round's alone said nothing of the run (issue 55)
        floor=RunFloor.summed([f for f in (total.floor, report.floor) if f is not None])
        if total.floor or report.floor
        else None,
        reruns=total.reruns + report.reruns,
        unstartable=total.unstartable + report.unstartable,
    )


def run_until_settled(
    *,
    backends: Sequence[str],
    experiments: Sequence[str],
    trials: int,
    max_trials: int,
    target: float,
    budget_s: float | None,
    on_line: Callable[[str], None],
    **matrix: Any,
) -> SettleReport:
    """Run rounds until every cell is settled, at ``max_trials`` per cell or the time budget (module
    docstring). ``matrix`` holds :func:`~lockcompare.runner.matrix.run_planned`'s options and
    ``overrides``, ``redlock_nodes``, ``sweep``, ``redis_server`` for the plan; ``on_line`` gets the
    progress line after each round."""
    started = time.monotonic()
    plan_options = {k: matrix.pop(k) for k in ("overrides", "redlock_nodes", "sweep") if k in matrix}
    cluster_options = matrix.get("cluster_options")
    planned = plan_matrix(
        backends=backends, experiments=experiments, trials=max_trials, overrides=plan_options["overrides"],
        node_count=plan_options.get("redlock_nodes"), sweep=plan_options.get("sweep"),
        redis_server=cluster_options.redis_server if cluster_options is not None else None,
    )  # fmt: skip
    cells: dict[CellKey, list[TrialSpec]] = {}
    for spec in planned:
        cells.setdefault(_cell_of(spec), []).append(spec)
    for specs in cells.values():
        specs.sort(key=lambda s: s.trial)
    names = _names(cells)
    needed = trials_to_settle(target)
    if needed > max_trials:
        on_line(
            f"settle: a clean cell needs {needed} observed trials to bound its rate at or below the target; "
            f"--max-trials {max_trials} leaves clean cells open (only a violation can settle them)"
        )
    todo = [spec for specs in cells.values() for spec in specs[:trials]]
    total: MatrixReport | None = None
    round_number = 0
    resume = bool(matrix.pop("resume", False))
    out = matrix.pop("out")
    while True:
        round_number += 1
        todo.sort(key=lambda s: s.trial)  # interleaved: trial k of every cell before trial k + 1
        total = _merged(total, run_planned(todo, out=out, resume=resume or round_number > 1, **matrix))
        out = total.out
        states = _states(cells, names=names, out=out, target=target)
        on_line(progress_line(list(states.values()), round_number=round_number))
        spent = budget_s is not None and time.monotonic() - started >= budget_s
        todo = [] if spent else _next_trials(cells, states=states, out=out)
        if not todo:
            break
    unsettled = tuple(
        (names[key], _why_open(state, cells=cells[key], spent=spent, budget_s=budget_s))
        for key, state in states.items()
        if state.status == OPEN
    )
    return SettleReport(matrix=total, rounds=round_number, states=tuple(states.values()), unsettled=unsettled)


def _rows_by_trial(out: Path) -> dict[str, dict[str, Any]]:
    """The file's rows, one per trial id (a rerun's latest)."""
    if not out.exists():
        return {}
    return {row["trial_id"]: row for row in latest_rows(inspect_results(out).kept_rows())}


def _states(
    cells: dict[CellKey, list[TrialSpec]], *, names: dict[CellKey, str], out: Path, target: float
) -> dict[CellKey, CellState]:
    rows = _rows_by_trial(out)
    return {
        key: cell_state(names[key], [rows[s.trial_id] for s in specs if s.trial_id in rows], target=target)
        for key, specs in cells.items()
    }


def _next_trials(
    cells: dict[CellKey, list[TrialSpec]], *, states: dict[CellKey, CellState], out: Path
) -> list[TrialSpec]:
    """For every open cell, the next planned trials it needs if they all stay clean (within its budget)."""
    done = set(_rows_by_trial(out))
    todo: list[TrialSpec] = []
    for key, state in states.items():
        if state.status != OPEN:
            continue
        left = [s for s in cells[key] if s.trial_id not in done]
        todo += left[: max(state.needed, 1)]
    return todo


def _why_open(state: CellState, *, cells: Sequence[TrialSpec], spent: bool, budget_s: float | None) -> str:
    """Why a cell is still open when the run ends."""
    if spent and len(cells) > state.trials:
        return f"the time budget ({budget_s:g} s) was spent; {state.text()}"
    if not state.rate.observed:
        return f"no trial observed the lock in {state.trials} ({state.rate.unobserved} unknown or unavailable)"
    return f"--max-trials {len(cells)} reached; {state.text()}"
