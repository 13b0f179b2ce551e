"""The matrix's time-left estimate (cli/eta.py) on hand-made clocks, and its plain progress lines
(cli/progress_bar.py) when stderr is not a terminal."""

from __future__ import annotations

import doctest
import io
from collections.abc import Callable
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


def test_the_time_left_follows_how_many_trials_ran_at_once_lately() -> None:
    """Three at once for the first 10 s, then one at a time (the stall governor cut the parallelism):
    at t=30 the 70 s of work left goes at one trial at a time (70 s), not at the run's mean of
    50 s of work in 30 s (42 s), nor at the first batch's three (23 s)."""
    clock = Clock()
    eta = Eta(clock=clock)
    eta.plan([(f"t{i}", FAST) for i in range(12)])
    for i in range(3):
        eta.started(f"t{i}")
    clock.now = 10.0
    for i in range(3):
        eta.finished(f"t{i}", wall_s=10.0, failed=False)
    for i in range(3, 5):
        _run(eta, clock, f"t{i}", 10.0)
    assert clock.now == 30.0 and eta.seconds_left() == pytest.approx(70.0)


def test_a_trials_duration_is_its_slot_from_start_to_end_not_only_its_workers_time() -> None:
    """Its cluster, checker and history take the slot too: 5 s between start and end count 5 s
    where the trial's own wall time says 3."""
    clock = Clock()
    eta = Eta(clock=clock)
    eta.plan([("a", FAST), ("b", FAST)])
    eta.started("a")
    clock.now = 5.0
    eta.finished("a", wall_s=3.0, failed=False)
    assert eta.seconds_left() == pytest.approx(5.0)


def test_the_marked_trials_run_again_alone_at_the_end_are_trials_left() -> None:
    """Two of four 10 s trials marked so far, --rerun-marked 3: the two are trials left, and so is
    half of one more (the two still to run at the share marked — 2 of 2, with the prior's 1 of 10:
    3 of 12 — within the 3); after the last planned trial, the two
    chosen run again one after another — the count and the time say so, until the last ends."""
    clock = Clock()
    eta = Eta(clock=clock)
    eta.plan([(f"t{i}", FAST) for i in range(4)], reruns=3)
    for i in range(2):
        eta.started(f"t{i}")
        clock.now += 10.0
        eta.finished(f"t{i}", wall_s=10.0, failed=False, marked=True)
    assert (eta.done, eta.total, eta.left) == (2, 6, 4)
    assert eta.seconds_left() == pytest.approx(20.0 + 20.0 + 5.0)  # two planned, two chosen, half expected
    for i in range(2, 4):
        _run(eta, clock, f"t{i}", 10.0)  # not marked: the expected third never comes
    assert (eta.done, eta.total, eta.left) == (4, 6, 2) and eta.seconds_left() == pytest.approx(20.0)
    eta.started("t0")  # run again
    clock.now += 4.0
    assert eta.seconds_left() == pytest.approx(6.0 + 10.0)
    clock.now += 6.0
    eta.finished("t0", wall_s=10.0, failed=False, marked=True)  # marked again: no third run
    _run(eta, clock, "t1", 10.0)
    assert (eta.done, eta.total, eta.left) == (6, 6, 0) and eta.seconds_left() == pytest.approx(0.0)


def test_marked_trials_run_again_k_at_once_share_their_time() -> None:
    """The run above with --rerun-jobs 2: after the last planned trial, the two chosen reruns' 20 s
    go two at a time: 10 s."""
    clock = Clock()
    eta = Eta(clock=clock)
    eta.plan([(f"t{i}", FAST) for i in range(4)], reruns=2, rerun_jobs=2)
    for i in range(4):
        eta.started(f"t{i}")
        clock.now += 10.0
        eta.finished(f"t{i}", wall_s=10.0, failed=False, marked=i < 2)
    assert (eta.done, eta.total) == (4, 6) and eta.seconds_left() == pytest.approx(10.0)


def _like_a_real_run(
    marks: Callable[[int], bool] = lambda i: i % 3 == 2,
) -> tuple[list[tuple[float, str, str, tuple[str, str]]], set[str], list[tuple[str, tuple[str, str]]]]:
    """(time, start|end, trial id, cell) of a 30-trial run on a busy machine (recorded on one, issue 53:
    single, redlock, fenced × baseline, client-pause × 5 trials at ×0.1): the first three trials side
    by side, then one at a time once the stall governor cut the parallelism, client-pause trials 7 s
    and baseline ones 3 s, the client-pause trials ``marks`` picks by index (every third) timing-marked
    and run again alone at the end."""
    backends = ("single", "redlock", "fenced")
    pauses = [(f"{b}.cp.t{k}", (b, "client-pause")) for k in range(5) for b in backends]
    baselines = [(f"{b}.base.t{k}", (b, "baseline")) for k in range(5) for b in backends]
    marked = {trial_id for i, (trial_id, _) in enumerate(pauses) if marks(i)}
    events = []
    for trial_id, cell in pauses[:3]:  # slower side by side
        events += [(0.0, "start", trial_id, cell), (8.0, "end", trial_id, cell)]
    now = 8.0
    rest = [x for pair in zip(pauses[3:], baselines, strict=False) for x in pair] + baselines[len(pauses) - 3 :]
    again = [(trial_id, cell) for trial_id, cell in pauses if trial_id in marked]
    for trial_id, cell in [*rest, *again]:
        took = 7.0 if cell[1] == "client-pause" else 3.0
        events += [(now + 0.1, "start", trial_id, cell), (now + 0.1 + took, "end", trial_id, cell)]
        now += 0.1 + took
    return sorted(events, key=lambda e: (e[0], e[1] == "start")), marked, pauses + baselines


@pytest.mark.parametrize(
    "marks",
    [lambda i: i % 3 == 2, lambda i: i in (12, 14), lambda i: False],
    ids=["every third pause marked", "only two of the last pauses marked", "none marked"],
)
def test_on_a_schedule_like_a_real_runs_the_estimate_is_within_a_quarter_after_the_first_tenth(
    marks: Callable[[int], bool],
) -> None:
    """Marks that come late (no mark before the last fifth) were missing from the estimate until
    then: -45% at the first tenth, -25% after half the run; the prior share counts them from the start."""
    events, marked, planned = _like_a_real_run(marks)
    clock = Clock()
    eta = Eta(clock=clock)
    eta.plan(planned, reruns=10)
    end = events[-1][0]
    errors, ended = [], set()
    for at, what, trial_id, cell in events:
        clock.now = at
        if what == "start":
            eta.started(trial_id)
            continue
        eta.finished(trial_id, wall_s=1.0, failed=False, cell=cell, marked=trial_id in marked - ended)
        ended.add(trial_id)
        left = eta.seconds_left()
        assert left is not None
        if at >= end / 10 and end - at > 0:
            errors.append((at, left / (end - at) - 1))
    assert errors and max(abs(e) for _, e in errors) <= 0.25, errors
    assert (eta.done, eta.total) == (30 + len(marked), 30 + len(marked))


def test_before_any_mark_the_reruns_the_run_may_make_are_counted_from_the_prior() -> None:
    """Three 10 s trials done unmarked, seven to run one at a time: 70 s; with --rerun-marked, also the
    prior's share of the seven (1 marked in 10 pseudo-trials, + the 3 unmarked: 1/13), each 10 s."""
    estimates = []
    for reruns in (0, 10):
        clock = Clock()
        eta = Eta(clock=clock)
        eta.plan([(f"t{i}", FAST) for i in range(10)], reruns=reruns)
        for i in range(3):
            _run(eta, clock, f"t{i}", 10.0)
        estimates.append(eta.seconds_left())
    assert estimates[0] == pytest.approx(70.0)
    share = eta_module.PRIOR_MARKED / (3 + eta_module.PRIOR_TRIALS)
    assert estimates[1] == pytest.approx(70.0 + 7 * share * 10.0)
    assert (eta.done, eta.total) == (3, 10)  # a rerun expected is time, not a trial counted before its mark


def test_the_doctests() -> None:
    assert doctest.testmod(eta_module).failed == 0


def _spec(experiment: str, trial: int):
    overrides = Overrides(time_scale=0.1, rounds=3)
    return make_spec(backend="single", experiment=get_experiment(experiment), trial=trial, overrides=overrides)


def test_trials_of_one_cell_share_it_and_plain_lines_end_with_the_time_left(capsys: pytest.CaptureFixture) -> None:
    specs = [_spec("baseline", 0), _spec("baseline", 1), _spec("client-pause", 0)]
    assert cell_of(specs[0]) == cell_of(specs[1]) != cell_of(specs[2])
    # The estimate on a clock of its own, one second a reading: on the real clock the calls below come
    # microseconds apart, and the time left of so short a run is whatever the scheduler made it.
    ticks = iter(range(1000))
    _, update = progress_bar(
        console=Console(file=io.StringIO(), force_terminal=False), eta=Eta(clock=lambda: float(next(ticks)))
    )
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
