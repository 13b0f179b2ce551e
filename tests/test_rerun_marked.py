"""matrix --rerun-marked with real servers: a timing-marked trial runs again alone at the end of the
run, its row takes the marked row's place and the marked row moves to the .superseded file with its
history. Which trials the sentinel marks is decided here by its threshold (the share of the margin a
stall must eat), so the test does not hang on how loaded the machine happens to be."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lockcompare.analysis import history, sentinel
from lockcompare.analysis.results import history_file, read_results, superseded_path
from lockcompare.cli import app
from lockcompare.cli.measure import RERUN_JOBS
from lockcompare.runner import trial
from lockcompare.runner.local_executor import RERUN_NOTE
from lockcompare.runner.matrix import run_matrix
from lockcompare.scenario.parsing import Overrides

pytestmark = pytest.mark.full


def _mark_the_first(count: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first ``count`` trials judged: any stall marks them; every later one (a rerun): none does."""
    calls = itertools.count()

    def first_run_marked(events: list, plan: sentinel.TimingPlan) -> sentinel.TimingVerdict:
        share = 0.0 if next(calls) < count else 1e9
        return sentinel.judge_timing(events, plan, share=share)

    monkeypatch.setattr(trial, "judge_timing", first_run_marked)


def test_a_marked_trial_runs_again_alone_and_its_row_moves_to_the_superseded_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _mark_the_first(2, monkeypatch)  # the run's two trials
    out = tmp_path / "r.csv"
    report = run_matrix(
        backends=["single"], experiments=["baseline"], trials=2, out=out, rerun_marked=1,
        overrides=Overrides(time_scale=0.1, rounds=3),
    )  # fmt: skip
    assert report.trials_run == 2
    [(again, still_marked)] = report.reruns  # the bound: one of the two marked trials
    assert not still_marked
    rows = read_results(out)
    assert len(rows) == 2 and len({r["trial_id"] for r in rows}) == 2  # one row per trial
    [rerun] = [r for r in rows if r["trial_id"] == again]
    assert RERUN_NOTE in rerun["note"] and not sentinel.is_marked(rerun)
    [other] = [r for r in rows if r["trial_id"] != again]
    assert sentinel.is_marked(other) and RERUN_NOTE not in other["note"]  # beyond the bound: kept as it was
    [old] = read_results(superseded_path(out))
    assert old["trial_id"] == again and sentinel.is_marked(old)
    old_history, new_history = history_file(old, results=out), history_file(rerun, results=out)
    assert old_history is not None and new_history is not None and old_history != new_history
    assert old_history.is_file() and new_history.is_file()  # each row keeps the history it was judged from


def test_the_matrix_command_runs_its_marked_trials_again_without_being_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 54: matrix's defaults rerun the marked trials (up to RERUN_MARKED, RERUN_JOBS at once);
    --rerun-marked 0 keeps the marked rows."""
    _mark_the_first(3, monkeypatch)
    args = ["matrix", "--backends", "single", "--experiments", "baseline", "--trials", "3", "--jobs", "3",
            "--time-scale", "0.1", "--rounds", "3"]  # fmt: skip
    out = tmp_path / "r.csv"
    done = CliRunner().invoke(app, [*args, "--out", str(out)])
    assert done.exit_code == 0, done.output
    rows = read_results(out)
    assert len(rows) == 3 and all(RERUN_NOTE in r["note"] and not sentinel.is_marked(r) for r in rows)
    assert all(int(r["jobs_concurrent"]) <= RERUN_JOBS for r in rows)
    assert len(read_results(superseded_path(out))) == 3
    _mark_the_first(3, monkeypatch)
    kept = tmp_path / "kept.csv"
    done = CliRunner().invoke(app, [*args, "--rerun-marked", "0", "--out", str(kept)])
    assert done.exit_code == 0, done.output
    assert all(sentinel.is_marked(r) for r in read_results(kept)) and not superseded_path(kept).exists()


def test_with_rerun_jobs_the_marked_trials_run_again_together_after_every_first_run_has_ended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--rerun-jobs 2: the three marked trials run again at most two at once, none of them beside a
    trial of the run's first pass (each rerun starts after the last first-pass trial ended)."""
    _mark_the_first(3, monkeypatch)
    out = tmp_path / "r.csv"
    report = run_matrix(
        backends=["single"], experiments=["baseline"], trials=3, out=out, rerun_marked=3, rerun_jobs=2, jobs=3,
        overrides=Overrides(time_scale=0.1, rounds=3),
    )  # fmt: skip
    assert sorted(still for _, still in report.reruns) == [False, False, False]
    rows = read_results(out)
    firsts = read_results(superseded_path(out))
    assert len(rows) == 3 and len(firsts) == 3 and all(RERUN_NOTE in r["note"] for r in rows)
    assert all(1 <= int(r["jobs_concurrent"]) <= 2 for r in rows)  # at most --rerun-jobs at once
    # From the histories (one monotonic clock for every process here): each rerun's first event comes
    # after the last event of every first-pass trial.
    first_end = max(t for r in firsts for t in _span(r, out))
    assert all(min(_span(r, out)) > first_end for r in rows)  # no trial of the first pass beside a rerun


def _span(row: dict, out: Path) -> tuple[int, int]:
    path = history_file(row, results=out)
    assert path is not None
    events = history.load(path)
    return min(e["t0"] for e in events), max(e.get("t1", e["t0"]) for e in events)
