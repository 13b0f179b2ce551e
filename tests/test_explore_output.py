"""What explore shows (pure: hand-built reports), the card's choice of property, and one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from lockcompare.cli import app
from lockcompare.cli.explore import parse_budget
from lockcompare.errors import InvalidValueError
from lockcompare.evaluation.backend_host import Claims
from lockcompare.evaluation.explore import Counterexample, ExploreReport, Search, TrialOutcome
from lockcompare.evaluation.explore_card import property_for
from lockcompare.evaluation.explore_run import render_report
from lockcompare.evaluation.schedules import Shape
from lockcompare.evaluation.shrink import Rate


def report(**kwargs: object) -> ExploreReport:
    search = Search(kinds=("pause", "restart"), shape=Shape(nodes=1), rounds=8, budget_s=120)
    return ExploreReport(search=search, description="backend single, --time-scale 0.5", schedules_searched=14,
                         trials=21, trial_seconds=96.4, wall_seconds=118.0, csv="/tmp/x/explored.csv",
                         **kwargs)  # type: ignore[arg-type]  # fmt: skip


def test_no_counterexample_is_said_with_the_budget() -> None:
    text = render_report(report(unknown=2), backend="single")
    assert text.splitlines()[0] == (
        "No counterexample to no-lost-updates (no increment a worker believed it made is missing) for single "
        "within this budget."
    )
    assert (
        "searched 14 schedules (21 trials, 96 trial-seconds, 118 s wall of a 120 s budget); fault kinds pause, "
        "restart; 1-4 steps; 8 rounds per worker per trial; backend single, --time-scale 0.5; property "
        "no-lost-updates; 2 trial(s) could not be judged"
    ) in text
    assert "tried:     /tmp/x/explored.csv (trials: /tmp/x/trials.csv)" in text


def test_a_counterexample_shows_schedule_rate_command_and_cuts() -> None:
    c = Counterexample(
        found="pause worker=0 after-acquire=0 every for=2100 how=sigstop; crash nodes=0 at=start",
        found_rounds=8,
        schedule="pause worker=0 after-acquire=0 once for=1060 how=sigstop point=after-acquire",
        rounds=2,
        rate=Rate(failures=7, runs=10),
        moves=("dropped «crash nodes=0 at=start»", "rounds 8 → 2"),
        candidates_tried=9,
        shrink_complete=False,
        command="lockcompare run --backend single --faults '...' --seed 5",
        failing=TrialOutcome(verdict="lost-updates", metrics={"lost_updates": 1}, trial_seconds=2.0, trial_id="t1"),
    )
    text = render_report(report(counterexample=c), backend="single", timeline=Path("/tmp/x/counterexample.png"))
    lines = dict(line.strip().split(":", 1) for line in text.splitlines()[1:])
    assert lines["schedule"].strip() == f"--faults '{c.schedule}' with --rounds 2"
    assert lines["rate"].strip() == "fails in 7 of 10 reruns"
    assert lines["broke"].strip() == "lost_updates 1 in one failing trial (verdict lost-updates; t1)"
    assert lines["reproduce"].strip() == c.command
    assert "2 cut(s) of 9 candidate(s) judged — stopped at the budget: a smaller one may exist" in lines["shrunk"]
    assert lines["timeline"].strip() == "/tmp/x/counterexample.png"
    assert "searched 14 schedules" in lines["searched"]


@pytest.mark.parametrize(
    "fencing, exclusive, expected",
    [(True, True, "no-lost-updates"), (False, True, "no-grant-over-valid-lease"), (False, False, None)],
)
def test_the_card_searches_the_property_the_backend_claims(
    fencing: bool, exclusive: bool, expected: str | None
) -> None:
    claims = Claims(summary="", exclusive=exclusive, issues_fencing_tokens=fencing)
    assert property_for(claims) == expected


def test_budget_durations() -> None:
    assert parse_budget("2m") == 120 and parse_budget("1h30m") == 5400 and parse_budget("45") == 45
    for bad in ("soon", "0", "-5m", "15 minutes"):
        with pytest.raises(InvalidValueError, match="--budget"):
            parse_budget(bad)


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--faults", "pause,explode"], "--faults takes kinds from crash, restart"),
        (["--property", "fast"], "--property takes no-lost-updates, exclusive, no-grant-over-valid-lease"),
        (["--budget", "soon"], "--budget takes a duration"),
        (["--fence", "some"], "--fence takes writes, all, token"),
    ],
)
def test_explore_bad_input_is_one_line(args: list[str], fragment: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["explore", "single", "--out", str(tmp_path / "x"), *args])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("lockcompare: error: ") and fragment in lines[0], result.stderr
    assert not (tmp_path / "x").exists()
