"""matrix --until-settled: when a cell's answer is settled (analysis/settle.py), which trials the next
round adds (runner/settle.py, on planned specs and a hand-written results file), and its options."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from lockcompare.analysis.intervals import clopper_pearson
from lockcompare.analysis.results import ResultsWriter
from lockcompare.analysis.settle import CLEAN, OPEN, UNSAFE, cell_state, progress_line, trials_to_settle
from lockcompare.cli import app
from lockcompare.cli.settle import parse_target, settle_plan
from lockcompare.errors import InvalidValueError
from lockcompare.runner.floor import RunFloor
from lockcompare.runner.plan import plan_matrix
from lockcompare.runner.run_report import MatrixReport
from lockcompare.runner.settle import _cell_of, _merged, _names, _next_trials, _states, _why_open
from lockcompare.scenario.parsing import Overrides
from test_results import row


@pytest.mark.parametrize("target", [0.5, 0.3, 0.2, 0.1, 0.05])
def test_trials_to_settle_is_the_first_n_whose_clean_upper_bound_reaches_the_target(target: float) -> None:
    n = trials_to_settle(target)
    assert clopper_pearson(0, n)[1] <= target < clopper_pearson(0, n - 1)[1]


def test_one_violation_settles_unsafe_a_clean_record_settles_below_the_target_else_open() -> None:
    unsafe = cell_state("a", [row(verdict="lease-violated")] + [row() for _ in range(2)], target=0.2)
    assert (unsafe.status, unsafe.needed) == (UNSAFE, 0)
    clean = cell_state("b", [row() for _ in range(17)], target=0.2)
    assert (clean.status, clean.needed) == (CLEAN, 0)
    open_cell = cell_state("c", [row() for _ in range(16)] + [row(verdict="unknown")], target=0.2)
    assert (open_cell.status, open_cell.needed, open_cell.trials) == (OPEN, 1, 17)  # unknown: not toward the answer
    blind = cell_state("d", [row(verdict="unavailable") for _ in range(3)], target=0.2)
    assert (blind.status, blind.needed) == (OPEN, 17)
    line = progress_line([unsafe, clean, open_cell], round_number=2)
    assert line.startswith("settle: after round 2: 2 of 3 cells settled (1 unsafe here, 1 clean); 1 open: c: 0/16 0%")
    assert "1 more clean to settle" in line


def _plan(trials: int) -> list:
    return plan_matrix(backends=["single", "fenced"], experiments=["client-pause"], trials=trials,
                       overrides=Overrides(time_scale=0.1), node_count=None)  # fmt: skip


def test_the_next_round_adds_to_open_cells_only_continuing_their_trial_index(tmp_path: Path) -> None:
    planned = _plan(20)
    cells: dict = {}
    for spec in planned:
        cells.setdefault(_cell_of(spec), []).append(spec)
    assert len(cells) == 2 and all(len(specs) == 20 for specs in cells.values())
    names = _names(cells)
    assert sorted(names.values()) == ["fenced × client-pause", "single × client-pause"]
    # The ids a plain matrix of 3 trials gives are the first three of each cell: resume continues them.
    assert {s.trial_id for s in _plan(3)} == {s.trial_id for specs in cells.values() for s in specs[:3]}
    out = tmp_path / "s.csv"
    writer = ResultsWriter(out)
    single, fenced = (cells[key] for key in sorted(cells, key=lambda k: k[0] != "single"))
    writer.append(row(trial_id=single[0].trial_id, verdict="lost-updates"))
    for spec in [*single[1:3], *fenced[:3]]:
        writer.append(row(trial_id=spec.trial_id))
    states = _states(cells, names=names, out=out, target=0.2)
    assert {names[k]: s.status for k, s in states.items()} == {
        "single × client-pause": UNSAFE, "fenced × client-pause": OPEN
    }  # fmt: skip
    todo = _next_trials(cells, states=states, out=out)
    assert [s.trial for s in todo] == list(range(3, 17))  # 14 more: 17 clean trials bound it at 20%
    assert {_cell_of(s) for s in todo} == {_cell_of(fenced[0])}
    (fenced_key,) = [k for k in cells if k[0] == "fenced"]
    why = _why_open(states[fenced_key], cells=cells[fenced_key], spent=True, budget_s=60)
    assert why.startswith("the time budget (60 s) was spent; fenced × client-pause: 0/3 0% [0–70.8%]")


def test_options_are_checked_before_anything_runs() -> None:
    assert parse_target("20") == parse_target("20%") == 0.2
    for bad in ("0", "100", "x", "-5"):
        with pytest.raises(InvalidValueError, match="--settle-below takes a percentage"):
            parse_target(bad)
    with pytest.raises(InvalidValueError, match="go\\(es\\) with --until-settled"):
        settle_plan(until_settled=False, trials=3, max_trials=10, settle_below=None, settle_budget=None)
    with pytest.raises(InvalidValueError, match="below --trials"):
        settle_plan(until_settled=True, trials=5, max_trials=4, settle_below=None, settle_budget=None)
    plan = settle_plan(until_settled=True, trials=3, max_trials=None, settle_below="10", settle_budget="5m")
    assert plan is not None and (plan.max_trials, plan.target, plan.budget_s) == (20, 0.1, 300.0)
    result = CliRunner().invoke(app, ["matrix", "--settle-below", "10", "--out", "/nonexistent/x.csv"])
    assert result.exit_code == 2 and "--settle-below go(es) with --until-settled" in result.stderr


def test_the_rounds_floors_add_up_to_the_runs_not_the_last_rounds_alone(tmp_path: Path) -> None:
    """The closing floor line of a settled run was its last round's: 1 trial of a 3-round run. Rounds run
    one after another, each above its own floor: the run's floor is their sum, its wall theirs."""
    rounds = [
        RunFloor(trials=10, wall_s=60.0, trial_wall_s=400.0, jobs=16, cpu_s=60.0, cores=2, longest_s=30.0),
        RunFloor(trials=4, wall_s=40.0, trial_wall_s=100.0, jobs=16, cpu_s=20.0, cores=2, longest_s=30.0),
        RunFloor(trials=1, wall_s=35.0, trial_wall_s=30.0, jobs=16, cpu_s=4.0, cores=2, longest_s=30.0),
    ]
    total = None
    for floor in rounds:
        report = MatrixReport(out=tmp_path / "s.csv", trials_run=floor.trials, trials_skipped=0, floor=floor)
        total = _merged(total, report)
    assert total is not None and total.floor is not None
    assert (total.trials_run, total.floor.trials, total.floor.wall_s) == (15, 15, 135.0)
    assert total.floor.part_floors_s == (30.0, 30.0, 30.0) and total.floor.floor_s == 90.0
    first = total.floor.lines()[0]
    assert (
        first.startswith("15 trials in 135.0 s wall; floor 90.0 s = max(") and "Σ of 3 rounds' floors 90.0 s" in first
    )
    assert first.endswith("wall/floor 1.50")
