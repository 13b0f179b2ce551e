"""The matrix's time-left estimate (cli/eta.py) on hand-made clocks, and its plain progress lines
(cli/progress_bar.py) when stderr is not a terminal."""

from __future__ import annotations

import doctest
import importlib.util
import io
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console

from lockcompare.cli import eta as eta_module
from lockcompare.cli.eta import Eta, Planned, finish_after, remaining_text
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
    # each with its round and its settings' prior, as the progress bar plans them (cost_order.prior_s
    # of these cells at --time-scale 0.1: 7.28 s with the pause, 2.48 s without)
    priors = {"client-pause": 7.28, "baseline": 2.48}
    eta.plan([Planned(tid, cell, int(tid[-1]), priors[cell[1]]) for tid, cell in planned], reruns=10)
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


def test_a_cell_not_yet_seen_takes_its_settings_prior_times_its_backends_ratio_not_its_backends_mean() -> None:
    """The scheduler starts each round's longest trials first, so a run's first trials to end are its
    client-pauses (7 s, their prior 7 s: a ratio of 1); a baseline (prior 2.5 s) not yet seen is
    expected at 2.5 s, not at the backend's mean of 7 (issue 53: +145% on the first lines)."""
    clock = Clock()
    eta = Eta(clock=clock)
    eta.plan([Planned("p0", ("single", "client-pause"), 0, 7.0), Planned("b0", ("single", "baseline"), 0, 2.5),
              Planned("b1", ("single", "baseline"), 1, 2.5)])  # fmt: skip
    _run(eta, clock, "p0", 7.0)
    assert eta.seconds_left() == pytest.approx(2 * 2.5)
    _run(eta, clock, "b0", 3.0)  # now seen: its own mean
    assert eta.seconds_left() == pytest.approx(3.0)


def _two_at_once(eta: Eta, clock: Clock, trial_ids: list[str], seconds: float) -> None:
    for pair in (trial_ids[i : i + 2] for i in range(0, len(trial_ids), 2)):
        for trial_id in pair:
            eta.started(trial_id)
        clock.now += seconds
        for trial_id in pair:
            eta.finished(trial_id, wall_s=seconds, failed=False)


@pytest.mark.parametrize(("slow_round", "expected"), [(1, 8.0), (2, 10.0)])
def test_the_trials_left_are_laid_into_the_slots_round_by_round_longest_first(slow_round: int, expected: float) -> None:
    """Two at once so far (2 s trials); left: two 2 s trials of round 1 and an 8 s one (its prior).
    In round 1 it starts first, beside the two short ones one after another: 8 s. In round 2 it starts
    after them: 2 + 8 = 10 s — where work over trials at once says 6 s either way."""
    clock = Clock()
    eta = Eta(clock=clock)
    done = [Planned(f"f{i}", FAST, 0, 2.0) for i in range(4)]
    left = [
        Planned("f4", FAST, 1, 2.0),
        Planned("f5", FAST, 1, 2.0),
        Planned("s0", ("redlock", "pause"), slow_round, 8.0),
    ]
    eta.plan([*done, *left])
    _two_at_once(eta, clock, [p.trial_id for p in done], 2.0)
    assert eta.seconds_left() == pytest.approx(expected)


def test_a_burst_of_trials_at_once_counts_no_more_than_the_runs_mean_since_its_start() -> None:
    """Three at once for 8 s, then six for 4 s (the stall governor grows and halves the trials at once
    all run long): the slots are the 4 of the run so far, not the 6 of the last trial's time (nor the
    5 of a window of a quarter of the run, where issue 53's -41% came from). Twelve 4 s trials on
    4 slots: 12 s."""
    clock = Clock()
    eta = Eta(clock=clock)
    eta.plan([(f"t{i}", FAST) for i in range(24)])
    for batch in (range(0, 3), range(3, 6), range(6, 12)):
        for i in batch:
            eta.started(f"t{i}")
        clock.now += 4.0
        for i in batch:
            eta.finished(f"t{i}", wall_s=4.0, failed=False)
    assert clock.now == 12.0 and eta.seconds_left() == pytest.approx(12.0)


def test_the_list_schedule_of_the_trials_left() -> None:
    """The last to end decides; a running trial longer than the queue ends the run; more running than
    slots: the queue waits for the running ones to drop below the slots."""
    assert finish_after(running=[], queue=[4.0] * 12, slots=4) == pytest.approx(12.0)
    assert finish_after(running=[9.0], queue=[1.0, 1.0], slots=2) == pytest.approx(9.0)
    assert finish_after(running=[1.0, 2.0, 3.0, 4.0], queue=[1.0], slots=2) == pytest.approx(4.0)  # starts at 3
    assert finish_after(running=[1.0, 2.0, 3.0, 4.0], queue=[2.0], slots=2) == pytest.approx(5.0)
    assert finish_after(running=[], queue=[], slots=3) == 0.0


def test_trials_at_once_since_the_start_count_every_finished_trial_not_only_the_last_thousand() -> None:
    """1200 trials of 1 s, two at a time: the 100 left take 50 s (the last 1000 spans alone over the
    whole run would say 1.67 at once: 60 s)."""
    clock = Clock()
    eta = Eta(clock=clock)
    eta.plan([(f"t{i}", FAST) for i in range(1300)])
    _two_at_once(eta, clock, [f"t{i}" for i in range(1200)], 1.0)
    assert (eta.done, clock.now) == (1200, 600.0) and eta.seconds_left() == pytest.approx(50.0)


def test_the_script_sets_each_estimate_against_the_time_really_left() -> None:
    """scripts/eta_lines.py on hand-stamped lines: the time left runs to the last trial's line; the
    first tenth is marked; a line without an estimate (the last) gives none."""
    spec = importlib.util.spec_from_file_location("eta_lines", Path(__file__).parents[1] / "scripts" / "eta_lines.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    stamped = [
        (5.0, "[1/3] single × baseline #0: exclusive, 0/8 conflicts, 0 lost, 2.0 s (~120 s left)"),
        (60.0, "[2/3] single × baseline #1: exclusive, 0/8 conflicts, 0 lost, 2.0 s (~1 min left)"),
        (100.0, "[3/3] single × baseline #2: exclusive, 0/8 conflicts, 0 lost, 2.0 s"),
        (101.0, "3 trials run, 0 already in x.csv"),
    ]
    assert script.report(stamped) == [
        "   5.0 s [1/3]     ~ 120 s left  real   95.0 s   +26%  (first tenth)",
        "  60.0 s [2/3]     ~  60 s left  real   40.0 s   +50%",
    ]
