"""The matrix's time-left estimate (cli/eta.py) on hand-made clocks, and its plain progress lines
(cli/progress_bar.py) when stderr is not a terminal."""

from __future__ import annotations

import doctest
import io
from types import SimpleNamespace

import pytest
from rich.console import Console

from lockcompare.cli import eta as eta_module
from lockcompare.cli.eta import Eta, remaining_text
from lockcompare.cli.progress_bar import cell_of, progress_bar
from lockcompare.scenario.experiments import get_experiment
from lockcompare.scenario.trialspec import Overrides, make_spec


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _run(eta: Eta, clock: Clock, trial_id: str, seconds: float, *, failed: bool = False) -> None:
    eta.started(trial_id)
    clock.now += seconds
    eta.finished(trial_id, wall_s=seconds, failed=failed)


FAST, SLOW = ("redlock", "baseline"), ("node-redlock", "client-pause")


def test_the_trials_left_are_weighed_by_their_cell() -> None:
    """One fast (1 s) and three slow (10 s) trials left: 31 s, where one mean over all trials would say 22."""
    clock = Clock()
    eta = Eta(clock=clock)
    eta.plan([("f0", FAST), ("f1", FAST), ("s0", SLOW), ("s1", SLOW), ("s2", SLOW), ("s3", SLOW)])
    assert eta.seconds_left() is None and remaining_text(eta.seconds_left()) == "~? left"
    _run(eta, clock, "f0", 1.0)
    _run(eta, clock, "s0", 10.0)
    assert eta.seconds_left() == pytest.approx(31.0)
    assert (eta.done, eta.left, eta.failed) == (2, 4, 0)


def test_trials_side_by_side_shorten_the_wall_time_left() -> None:
    """Two trials at once, 10 s each: 20 s of work in 10 s of wall time, so 20 s of work left takes 10 s."""
    clock = Clock()
    eta = Eta(clock=clock)
    eta.plan([(f"t{i}", FAST) for i in range(4)])
    eta.started("t0")
    eta.started("t1")
    clock.now = 10.0
    eta.finished("t0", wall_s=10.0, failed=False)
    eta.finished("t1", wall_s=10.0, failed=True)
    assert eta.seconds_left() == pytest.approx(10.0)
    assert (eta.done, eta.left, eta.failed) == (2, 2, 1)


def test_a_running_trial_of_an_unseen_cell_counts_its_experiments_duration() -> None:
    """Single's client-pause took 7 s; redlock's, running for 3 s, has about 4 s left."""
    clock = Clock()
    eta = Eta(clock=clock)
    eta.plan([("s", ("single", "client-pause")), ("r", ("redlock", "client-pause"))])
    _run(eta, clock, "s", 7.0)
    eta.started("r")
    clock.now += 3.0
    assert eta.seconds_left() == pytest.approx(4.0)


def test_the_last_trial_left_is_not_shortened_by_the_runs_parallelism() -> None:
    """Three 10 s trials ran side by side (a third of a second of wall time per second of work); the
    one left has run 2 s of its 10: 8 s left, not 8 / 3."""
    clock = Clock()
    eta = Eta(clock=clock)
    eta.plan([(f"t{i}", FAST) for i in range(4)])
    for i in range(3):
        eta.started(f"t{i}")
    clock.now = 10.0
    for i in range(3):
        eta.finished(f"t{i}", wall_s=10.0, failed=False)
    eta.started("t3")
    clock.now = 12.0
    assert eta.seconds_left() == pytest.approx(8.0)


def test_an_unseen_cell_takes_its_experiment_then_its_backend() -> None:
    clock = Clock()
    eta = Eta(clock=clock)
    eta.plan([("a", ("single", "client-pause")), ("b", ("redlock", "baseline")), ("c", ("redlock", "client-pause")),
              ("d", ("zk", "short-ttl")), ("e", ("redlock", "short-ttl"))])  # fmt: skip
    _run(eta, clock, "a", 6.0)  # client-pause, on single
    _run(eta, clock, "b", 2.0)  # redlock, under baseline
    # c: client-pause's cells (6); d: neither seen (mean of the cells, 4); e: redlock's cells (2)
    assert eta.seconds_left() == pytest.approx(6.0 + 4.0 + 2.0)


def test_a_running_trial_past_its_estimate_raises_its_experiment() -> None:
    """A slow experiment's first trial, still running after 30 s, is a lower bound for its unseen cells."""
    clock = Clock()
    eta = Eta(clock=clock)
    eta.plan([("b0", ("single", "baseline")), ("p0", ("single", "client-pause")), ("p1", ("redlock", "client-pause"))])
    _run(eta, clock, "b0", 2.0)
    eta.started("p0")
    before = eta.seconds_left()
    clock.now += 30.0
    after = eta.seconds_left()
    assert before is not None and after is not None and after > before
    assert after == pytest.approx(30.0)  # p1 at p0's 30 s so far; p0 itself: nothing known left


def test_a_run_without_a_plan_counts_what_it_is_told() -> None:
    clock = Clock()
    eta = Eta(clock=clock)
    eta.expect(3)
    _run(eta, clock, "x", 4.0)
    eta.finished("x", wall_s=4.0, failed=False)  # reported twice: counted once
    assert (eta.done, eta.left) == (1, 2) and eta.seconds_left() == pytest.approx(8.0)


def test_the_doctests() -> None:
    assert doctest.testmod(eta_module).failed == 0


def _spec(experiment: str, trial: int):
    overrides = Overrides(time_scale=0.1, rounds=3)
    return make_spec(backend="single", experiment=get_experiment(experiment), trial=trial, overrides=overrides)


def test_trials_of_one_cell_share_it_and_plain_lines_end_with_the_time_left(capsys: pytest.CaptureFixture) -> None:
    specs = [_spec("baseline", 0), _spec("baseline", 1), _spec("client-pause", 0)]
    assert cell_of(specs[0]) == cell_of(specs[1]) != cell_of(specs[2])
    _, update = progress_bar(console=Console(file=io.StringIO(), force_terminal=False))
    update.plan(specs)

    def result(wall_s: float) -> SimpleNamespace:
        metrics = SimpleNamespace(verdict="exclusive", conflicts=0, entries=6, lost_updates=0, problem="")
        return SimpleNamespace(metrics=metrics, wall_s=wall_s)

    update(specs[0], None, 0, 3)
    update(specs[0], result(1.0), 1, 3)  # type: ignore[arg-type]
    update(specs[1], None, 1, 3)
    update(specs[1], result(1.0), 2, 3)  # type: ignore[arg-type]
    update(specs[2], None, 2, 3)
    update(specs[2], result(2.0), 3, 3)  # type: ignore[arg-type]
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 3
    assert lines[0].startswith("[1/3] single × baseline #0: exclusive, 0/6 conflicts, 0 lost, 1.0 s (~")
    assert lines[0].endswith(" s left)")
    assert lines[2] == "[3/3] single × client-pause #0: exclusive, 0/6 conflicts, 0 lost, 2.0 s"  # nothing left
    assert update.counts() == "3 done · 0 left · 0 failed"
