"""The explore engine on a fake trial runner whose failure condition is known (no Redis here).

The fake judges a schedule by a rule written in the test, costs fake seconds on a fake clock, and
its flaky variant fails with a probability drawn from the trial's seed (so each test is
deterministic, and a different seed would give another draw).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from lockcompare.errors import InvalidValueError, ResultsFileError
from lockcompare.evaluation.explore import Search, TrialOutcome, TrialRequest, explore, judge
from lockcompare.evaluation.explore_log import CSV_NAME, ExploreLog
from lockcompare.evaluation.explore_run import render_report
from lockcompare.evaluation.schedules import (
    KINDS,
    NODE_KINDS,
    Schedule,
    Shape,
    canonical,
    parse_text,
    random_schedule,
    schedule_text,
)
from lockcompare.evaluation.shrink import NO_FAULT, NO_FAULT_MOVE, Rate, candidates, shrink

REDLOCK = Shape(ttl_ms=1000, work_ms=300, nodes=5, workers=2)
SINGLE = Shape(ttl_ms=1000, work_ms=300, nodes=1, workers=2)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def unit(seed: int) -> float:
    """A number in [0, 1) fixed by the seed: the fake's coin for flaky failures."""
    return int.from_bytes(hashlib.sha256(str(seed).encode()).digest()[:4], "big") / 2**32


class FakeRunner:
    """Trials that fail when ``rule(schedule, rounds)`` holds, with probability ``p``; each costs
    ``seconds`` of fake time, ``parallel`` at once."""

    def __init__(
        self,
        rule: Callable[[Schedule, int], bool],
        *,
        clock: FakeClock,
        p: float = 1.0,
        seconds: float = 4.0,
        parallel: int = 2,
    ) -> None:
        self.rule, self.clock, self.p, self.seconds, self.parallel = rule, clock, p, seconds, parallel
        self.description = "fake backend"
        self.ran: list[TrialRequest] = []

    def run(self, requests: Sequence[TrialRequest]) -> list[TrialOutcome]:
        self.ran += requests
        self.clock.now += self.seconds * -(-len(requests) // self.parallel)
        out = []
        for r in requests:
            bad = self.rule(parse_text(r.schedule), r.rounds) and unit(r.seed) < self.p
            out.append(TrialOutcome(verdict="lost-updates" if bad else "exclusive",
                                    metrics={"lost_updates": 3 if bad else 0}, trial_seconds=self.seconds,
                                    history=f"h/{r.seed}.jsonl", trial_id=f"t{r.seed}"))  # fmt: skip
        return out

    def command(self, request: TrialRequest) -> str:
        return f"lockcompare run --faults '{request.schedule}' --rounds {request.rounds} --seed {request.seed}"


def has(schedule: Schedule, kind: str, test: Callable[[dict[str, str]], bool] = lambda _: True) -> bool:
    return any(s.kind == kind and test(dict(t.split("=", 1) for t in s.tokens if "=" in t)) for s in schedule)


def nodes_hit(whom: str) -> int:
    return int(whom.split(":")[1]) if ":" in whom else 5 if whom == "all" else len(whom.split(","))


# --- generation -----------------------------------------------------------------------------------


def test_generated_schedules_stay_in_the_vocabulary_and_the_shape() -> None:
    rng = random.Random(7)
    for shape in (REDLOCK, SINGLE):
        for _ in range(300):
            schedule = random_schedule(rng, kinds=KINDS, shape=shape)
            assert 1 <= len(schedule) <= 4
            pauses = [s.get("worker") for s in schedule if s.kind == "pause"]
            assert len(pauses) == len(set(pauses))  # one pause per worker
            assert parse_text(schedule_text(schedule)) == schedule  # the text is the schedule
            for step in schedule:
                whom = step.get("nodes")
                assert (whom is not None) == (step.kind in NODE_KINDS)
                if whom and whom[0].isdigit():
                    assert all(0 <= int(i) < shape.nodes for i in whom.split(","))
                if whom and ":" in whom:
                    assert 1 <= int(whom.split(":")[1]) <= shape.nodes
                if shape.nodes == 1:
                    assert not (whom or "").startswith("others")  # no node is "not the holder's"
                offset = step.get("after-acquire")
                assert offset is None or 0 <= int(offset) < shape.work_ms  # lands inside the hold


def test_generation_draws_only_the_asked_kinds_and_is_seeded() -> None:
    a = [random_schedule(random.Random(3), kinds=("pause", "restart"), shape=REDLOCK) for _ in range(50)]
    b = [random_schedule(random.Random(3), kinds=("pause", "restart"), shape=REDLOCK) for _ in range(50)]
    assert a == b
    assert {s.kind for sched in a for s in sched} <= {"pause", "restart"}


def test_parse_text_refuses_an_unknown_kind() -> None:
    with pytest.raises(InvalidValueError, match="unknown fault kind 'explode'"):
        parse_text("pause worker=0 for=10; explode nodes=all")
    assert canonical("pause  worker=0   for=10 ;crash nodes=1 at=start") in (
        "pause worker=0 for=10; crash nodes=1 at=start",  # without the faults package
        canonical("pause worker=0 for=10; crash nodes=1 at=start"),
    )


# --- shrinking --------------------------------------------------------------------------------------


def test_every_candidate_is_strictly_smaller() -> None:
    schedule = parse_text(
        "crash nodes=3,4 at=start; restart nodes=holders:2 after-acquire=120 every for=700 persistence=none; "
        "pause worker=holder after-acquire=40 every for=1500 how=sigstop"
    )
    found = list(candidates(schedule, rounds=8, shape=REDLOCK))
    moves = [c.move for c in found]
    assert moves[0] == NO_FAULT_MOVE and found[0].schedule == ()  # no fault at all: tried first
    assert moves[1:4] == [f"dropped «{s.text}»" for s in schedule]  # then the biggest cuts
    assert {c.rounds for c in found} == {1, 4, 6, 8}
    assert "step 2 (restart): nodes holders:2 → holders:1" in moves
    assert "step 1 (crash): nodes 3,4 → 4" in moves
    assert "step 3 (pause): for 1500 → 10" in moves  # a pause of 0 would be no fault at all
    assert "step 2 (restart): for 700 → 0" in moves  # a restart with no downtime is still a restart
    assert "step 2 (restart): fires once, not every round" in moves


def test_shrinking_reaches_the_known_minimum_of_a_two_step_failure() -> None:
    """A failure that needs two nodes down from the start AND one granting node restarted (the bare
    majority's shape) shrinks to exactly those two steps, each as small as it gets."""

    def rule(s: Schedule, rounds: int) -> bool:
        return has(s, "crash", lambda v: v.get("at") == "start" and nodes_hit(v["nodes"]) >= 2) and has(
            s, "restart", lambda v: v["nodes"].startswith("holders:")
        )

    start = parse_text(
        "pause worker=0 after-acquire=50 every for=1200 how=sigstop; crash nodes=0,3,4 at=start; "
        "restart nodes=holders:3 after-acquire=250 every for=900 persistence=none; clock-jump nodes=all "
        "after-acquire=100 once by=+2000"
    )
    calls = []

    def oracle(s: Schedule, rounds: int) -> Rate:
        calls.append(s)
        return Rate(failures=int(rule(s, rounds)), runs=1)

    result = shrink(start, rounds=8, shape=REDLOCK, oracle=oracle)
    assert result.complete
    assert result.rounds == 1
    assert len(result.schedule) == 2
    crash, restart = result.schedule
    assert crash.kind == "crash" and nodes_hit(crash.get("nodes") or "") == 2
    assert restart.text == "restart nodes=holders:1 after-acquire=0 once for=0 persistence=none"
    assert result.moves[0].startswith("dropped «pause")


def test_explore_finds_and_shrinks_a_one_step_failure_within_the_budget() -> None:
    clock = FakeClock()
    runner = FakeRunner(lambda s, r: has(s, "pause", lambda v: int(v["for"]) >= 1000), clock=clock)
    search = Search(kinds=("pause", "restart", "clock-jump"), shape=SINGLE, budget_s=120, seed=5)
    report = explore(runner=runner, search=search, clock=clock)
    c = report.counterexample
    assert c is not None, report.budget_text()
    (step,) = parse_text(c.schedule)
    assert step.kind == "pause" and 1000 <= int(step.get("for") or 0) < 1340  # no ladder step below stays >= 1000
    assert step.get("after-acquire") == "0" and not step.has("every")
    assert c.rounds == 1
    assert c.rate == Rate(failures=10, runs=10)
    assert c.command == runner.command(TrialRequest(schedule=c.schedule, rounds=1, seed=int(c.command.split()[-1])))
    assert c.failing is not None and c.failing.verdict == "lost-updates"
    assert clock.now <= 120 + 4 * 10 / 2 + 4  # the rating may overshoot by its own runs, no more


def test_a_lock_that_fails_with_no_fault_is_reported_as_failing_with_no_fault() -> None:
    """The shrinker tries the empty schedule first: a lock that fails whatever the schedule (here every
    trial fails) is blamed, not the drawn fault."""
    clock = FakeClock()
    runner = FakeRunner(lambda s, r: True, clock=clock)
    search = Search(kinds=("pause", "restart"), shape=SINGLE, budget_s=120, seed=5)
    report = explore(runner=runner, search=search, clock=clock)
    c = report.counterexample
    assert c is not None and c.schedule == "" and c.moves[0] == NO_FAULT_MOVE and c.found != ""
    assert NO_FAULT in report.verdict_text()
    text = render_report(report, backend="lockless")
    assert f"schedule:  none — {NO_FAULT} with --rounds 1" in text, text
    assert c.rate == Rate(failures=10, runs=10)


def test_a_failure_that_needs_its_fault_is_not_blamed_on_the_lock() -> None:
    clock = FakeClock()
    runner = FakeRunner(lambda s, r: has(s, "pause"), clock=clock)
    report = explore(runner=runner, search=Search(kinds=("pause",), shape=SINGLE, budget_s=120, seed=5), clock=clock)
    c = report.counterexample
    assert c is not None and c.schedule.startswith("pause ") and NO_FAULT_MOVE not in c.moves
    assert any(r.schedule == "" for r in runner.ran)  # the empty schedule was tried, and held


def test_a_flaky_failure_is_reported_with_its_rate() -> None:
    clock = FakeClock()
    runner = FakeRunner(lambda s, r: has(s, "restart"), clock=clock, p=0.4)
    search = Search(kinds=("restart", "clock-jump"), shape=REDLOCK, budget_s=900, seed=2, reruns=5, rate_runs=10)
    report = explore(runner=runner, search=search, clock=clock)
    c = report.counterexample
    assert c is not None
    assert c.rate.runs == 10 and 0 < c.rate.failures < 10, c.rate  # neither "always" nor "never"
    expected = sum(unit(r.seed) < 0.4 for r in runner.ran if r.schedule == c.schedule and r.rounds == c.rounds)
    assert c.rate.failures == expected  # the rate is what the reruns saw, counted, not assumed
    assert f"fails in {c.rate.failures} of 10 reruns" in report.verdict_text()


def test_no_counterexample_says_what_was_searched() -> None:
    clock = FakeClock()
    runner = FakeRunner(lambda s, r: False, clock=clock, seconds=3.0)
    search = Search(kinds=("crash", "pause"), shape=REDLOCK, budget_s=60, rounds=6)
    report = explore(runner=runner, search=search, clock=clock)
    assert report.counterexample is None
    assert report.trials == len(runner.ran) == len(set(runner.ran))  # a repeated draw is not run or counted twice
    assert 38 <= report.trials <= 40  # 20 batches of up to 2 new trials x 3 s fit in 60 s
    text = report.verdict_text()
    assert text.startswith("no counterexample within this budget (searched ")
    parts = (f"{report.trials} trials", f"{3 * report.trials} trial-seconds", "fault kinds crash, pause",
             "6 rounds per worker", "property no-lost-updates", "fake backend")  # fmt: skip
    for part in parts:
        assert part in text


def test_unknown_trials_are_neither_passes_nor_counterexamples() -> None:
    unknown = TrialOutcome(verdict="unknown", metrics={"lost_updates": 5}, trial_seconds=1, problem="worker died")
    assert judge("no-lost-updates", unknown) == "unknown"
    grant = TrialOutcome(verdict="exclusive", metrics={"grants_while_held": 1}, trial_seconds=1)
    assert judge("no-grant-over-valid-lease", grant) == "violated"
    assert judge("no-lost-updates", grant) == "holds"
    with pytest.raises(InvalidValueError, match="--property"):
        Search(prop="fast")


# --- the CSV and resuming ----------------------------------------------------------------------------


def test_a_resumed_search_replays_its_trials_from_the_csv(tmp_path: Path) -> None:
    rule = lambda s, r: has(s, "clock-jump", lambda v: v["by"].startswith("+"))  # noqa: E731
    search = Search(kinds=("crash", "clock-jump", "pause"), shape=REDLOCK, budget_s=40, seed=9)
    clock = FakeClock()
    first = FakeRunner(rule, clock=clock)
    log = ExploreLog(tmp_path, settings=search.settings(), resume=False)
    cut_short = explore(runner=first, search=search, log=log, clock=clock)
    rows = (tmp_path / CSV_NAME).read_text().splitlines()
    assert len(rows) == 1 + len(first.ran)
    with pytest.raises(ResultsFileError, match="--resume"):
        ExploreLog(tmp_path, settings=search.settings(), resume=False)
    other = Search(kinds=("crash",), shape=REDLOCK, budget_s=40, seed=9)
    with pytest.raises(ResultsFileError, match="kinds="):
        ExploreLog(tmp_path, settings=other.settings(), resume=True)

    clock2 = FakeClock()
    second = FakeRunner(rule, clock=clock2)
    longer = Search(kinds=search.kinds, shape=REDLOCK, budget_s=900, seed=9)
    report = explore(runner=second, search=longer, log=ExploreLog(tmp_path, settings=search.settings(), resume=True),
                     clock=clock2)  # fmt: skip
    assert report.resumed_trials > 0  # the earlier trials are taken from the file ...
    assert not set(second.ran) & set(first.ran)  # ... and none runs again
    assert report.counterexample is not None
    assert cut_short.trials < report.trials


def test_max_nodes_keeps_every_step_to_a_minority() -> None:
    rng = random.Random(11)
    minority = Shape(ttl_ms=1000, work_ms=300, nodes=5, workers=2, max_nodes=2)
    hit = set()
    for _ in range(500):
        for step in random_schedule(rng, kinds=KINDS, shape=minority):
            whom = step.get("nodes")
            if whom is not None:
                assert whom != "all" and nodes_hit(whom) <= 2, step.text
                hit.add(nodes_hit(whom))
    assert hit == {1, 2}


def test_the_log_keeps_histories_relative_so_the_search_directory_can_move(tmp_path: Path) -> None:
    search = Search(kinds=("crash",), shape=REDLOCK, budget_s=40, seed=9)
    first = tmp_path / "first"
    log = ExploreLog(first, settings=search.settings(), resume=False)
    inside = first / "trials.histories" / "t1.jsonl.gz"
    log.append(phase="search", request=TrialRequest(schedule="crash nodes=0 at=start", rounds=8, seed=1),
               outcome=TrialOutcome(verdict="exclusive", metrics={}, trial_seconds=1.0, history=str(inside)),
               result="holds")  # fmt: skip
    assert "trials.histories/t1.jsonl.gz" in (first / CSV_NAME).read_text()
    assert str(first) not in (first / CSV_NAME).read_text()
    moved = first.rename(tmp_path / "moved")
    (outcome,) = ExploreLog(moved, settings=search.settings(), resume=True).outcomes.values()
    assert outcome.history == str(moved / "trials.histories" / "t1.jsonl.gz")


def test_a_batch_starts_only_while_the_time_left_covers_it() -> None:
    """A 12 s budget with batches of 10 s: the first runs, the second would end at 20 s and is not
    started (it was: the card's 12 s search took 27 s); with 25 s both fit."""
    for budget_s, batches in ((12, 1), (25, 2)):
        clock = FakeClock()
        runner = FakeRunner(lambda s, r: False, clock=clock, seconds=10.0)
        report = explore(runner=runner, search=Search(kinds=("pause",), shape=SINGLE, budget_s=budget_s), clock=clock)
        assert clock.now == 10.0 * batches
        assert report.trials == len(runner.ran) == 2 * batches
        assert report.wall_seconds <= budget_s
