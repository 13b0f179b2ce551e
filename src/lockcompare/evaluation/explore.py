"""``lockcompare explore``: search fault schedules for one that breaks a property, shrink it, rate it.

Jepsen's random nemesis plus property-based testing's shrinking, for trials that take seconds and
do not fail every time:

1. **search** — random schedules of 1–4 steps from the asked-for fault kinds
   (:func:`~lockcompare.evaluation.schedules.random_schedule`), each run once as a short trial;
2. **check** — the property on each trial's checker metrics (:data:`PROPERTIES`); a trial the
   checker could not judge is ``unknown``, never a pass or a counterexample;
3. **shrink** — the first schedule that broke it, cut down while it still fails
   (:mod:`~lockcompare.evaluation.shrink`): each candidate is rerun up to ``reruns`` times with
   fresh seeds and still fails when one rerun failed;
4. **rate** — the minimal schedule rerun ``rate_runs`` times: "fails in 7 of 10".

Trials run through a :class:`TrialRunner` — a batch at a time, so the runner can run them in
parallel within its CPU budget — and every trial is appended to ``explored.csv`` the moment it
ends (:mod:`~lockcompare.evaluation.explore_log`). A trial is named by (schedule, rounds, seed) and
its seed is derived from those and the run's seed, so a resumed search replays the same draws and
takes the trials already in the file instead of running them again.

Why not Hypothesis (whose strategies, shrinker and example database the issue suggested): its
engine runs one example at a time in one thread and treats one run as the truth — a failure that
does not recur on replay ends the run with ``FlakyFailure`` — while these trials take seconds, fail
only some of the time, and should run side by side; its budget counts examples, not seconds; and
its shrinker cuts the byte stream the strategies drew from, not the steps, nodes and amounts a
reader of the result cares about. The search here is small: draw, rerun, cut.

The budget is wall time for this invocation. A batch starts only while the time left covers it, at
the wall cost per trial of the batches so far (the first batch always runs: a search under a 12 s
budget started a second 15 s batch 10 s in, and took 27 s); a batch that runs long runs to its end;
once a counterexample is being shrunk, enough is kept back to rate the result, and the rating runs
even if it overshoots. Whatever happens, :meth:`ExploreReport.budget_text` says what was searched.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from lockcompare.errors import ConfigError, InvalidValueError
from lockcompare.evaluation.explore_log import ExploreLog
from lockcompare.evaluation.explore_request import TrialOutcome, TrialRequest
from lockcompare.evaluation.schedules import (
    DEFAULT_KINDS,
    MAX_STEPS,
    Schedule,
    Shape,
    canonical,
    parse_text,
    random_schedule,
    schedule_text,
)
from lockcompare.evaluation.shrink import NO_FAULT, Rate, shrink
from lockcompare.scenario.trialspec import trial_seed

#: Each property, the checker metrics that break it, and what it promises.
PROPERTIES: dict[str, tuple[tuple[str, ...], str]] = {
    "no-lost-updates": (("lost_updates",), "no increment a worker believed it made is missing"),
    "exclusive": (("conflicts", "conflicts_overlap"), "never two workers inside the critical section at once"),
    "no-grant-over-valid-lease": (
        ("grants_while_held", "foreign_releases"),
        "no lease granted while another's was valid, no release that removed another's lock",
    ),
}
DEFAULT_PROPERTY = "no-lost-updates"
#: Batches in a row of schedules all searched before, after which the search says it is exhausted.
EXHAUSTED_AFTER = 200
#: Metrics every outcome carries (the union of the properties'), the explore CSV's metric columns.
METRICS = tuple(dict.fromkeys(m for metrics, _ in PROPERTIES.values() for m in metrics))


class TrialRunner(Protocol):
    """Runs trials of one backend under fault schedules (a fake in tests, real trials otherwise)."""

    @property
    def parallel(self) -> int:
        """Trials worth handing over at once (the runner may still run fewer at a time)."""
        ...

    @property
    def description(self) -> str:
        """The fixed settings of its trials, for the budget statement (backend, time scale, workload)."""
        ...

    def run(self, requests: Sequence[TrialRequest]) -> list[TrialOutcome]: ...

    def command(self, request: TrialRequest) -> str:
        """The ``lockcompare run ...`` command that reruns ``request``."""
        ...


def judge(prop: str, outcome: TrialOutcome) -> str:
    """``violated``, ``holds`` or ``unknown`` (the checker could not judge the trial, or it never ran)."""
    metrics, _ = PROPERTIES[prop]
    if outcome.verdict in ("unknown", "invalid"):
        return "unknown"
    return "violated" if any(int(outcome.metrics.get(m, 0)) > 0 for m in metrics) else "holds"


@dataclass(frozen=True, kw_only=True)
class Search:
    """What to search: the property, the fault kinds, the trials' shape, and how hard to look."""

    prop: str = DEFAULT_PROPERTY
    kinds: tuple[str, ...] = DEFAULT_KINDS
    shape: Shape = field(default_factory=Shape)
    rounds: int = 8  # per worker, in each search trial
    seed: int = 1
    budget_s: float = 900.0
    reruns: int = 5  # per shrink candidate: it still fails when 1 of these does
    rate_runs: int = 10  # of the minimal schedule, for its reproduction rate
    max_steps: int = MAX_STEPS

    def __post_init__(self) -> None:
        if self.prop not in PROPERTIES:
            raise InvalidValueError(f"--property takes {', '.join(PROPERTIES)}, got {self.prop!r}")
        for name in ("rounds", "reruns", "rate_runs", "max_steps"):
            if getattr(self, name) < 1:
                raise InvalidValueError(f"{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}")
        if not (math.isfinite(self.budget_s) and self.budget_s > 0):
            raise InvalidValueError(f"--budget must be > 0, got {self.budget_s:g} s")

    def settings(self) -> dict[str, object]:
        """What a resumed search must share with the first (else its cached trials mean something else)."""
        return {"property": self.prop, "kinds": ",".join(self.kinds), "rounds": self.rounds, "seed": self.seed,
                "max_steps": self.max_steps, "shape": repr(self.shape)}  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class Counterexample:
    found: str  # the schedule the search found, as drawn
    found_rounds: int
    schedule: str  # shrunk
    rounds: int
    rate: Rate  # of the shrunk one, over rate_runs reruns
    moves: tuple[str, ...]  # the cuts that kept it failing
    candidates_tried: int
    shrink_complete: bool  # False: the budget ran out before no cut still failed
    command: str  # lockcompare run ... reproducing one failing trial of it
    failing: TrialOutcome | None  # one failing trial of the shrunk schedule (its history for the timeline)


@dataclass(kw_only=True)
class ExploreReport:
    search: Search
    description: str
    schedules_searched: int = 0
    trials: int = 0
    resumed_trials: int = 0  # taken from the earlier run's CSV, not run now
    trial_seconds: float = 0.0
    wall_seconds: float = 0.0
    unknown: int = 0
    invalid: int = 0
    exhausted: bool = False  # the generator kept drawing schedules already searched
    counterexample: Counterexample | None = None
    csv: str = ""

    def budget_text(self) -> str:
        """What was searched, always said: "none found" means none within this."""
        s = self.search
        resumed = f", {self.resumed_trials} of them from the earlier run" if self.resumed_trials else ""
        unknown = f"; {self.unknown} trial(s) could not be judged" if self.unknown else ""
        invalid = f"; {self.invalid} schedule(s) refused as invalid" if self.invalid else ""
        invalid += "; stopped early: every schedule drawn had been searched" if self.exhausted else ""
        nodes = f" of at most {s.shape.hittable} of {s.shape.nodes} nodes each" if s.shape.max_nodes else ""
        return (
            f"searched {self.schedules_searched} schedules ({self.trials} trials{resumed}, "
            f"{self.trial_seconds:.0f} trial-seconds, {self.wall_seconds:.0f} s wall of a {s.budget_s:.0f} s budget); "
            f"fault kinds {', '.join(s.kinds)}; 1-{s.max_steps} steps{nodes}; {s.rounds} rounds per worker per trial; "
            f"{self.description}; property {s.prop}{unknown}{invalid}"
        )

    def verdict_text(self) -> str:
        if self.counterexample is None:
            return f"no counterexample within this budget ({self.budget_text()})"
        c = self.counterexample
        shrunk = "" if c.shrink_complete else " (shrinking stopped at the budget: a smaller one may exist)"
        schedule = c.schedule or f"no schedule ({NO_FAULT})"
        return f"counterexample: {schedule} at {c.rounds} rounds, fails in {c.rate.text()} reruns{shrunk}"


ProgressFn = Callable[[str, TrialRequest, TrialOutcome, str], None]


class Explorer:
    """One search (see the module docstring). ``clock`` is injectable so tests run on fake time."""

    def __init__(
        self,
        *,
        runner: TrialRunner,
        search: Search,
        log: ExploreLog | None = None,
        clock: Callable[[], float] = time.monotonic,
        progress: ProgressFn | None = None,
    ) -> None:
        self.runner, self.search, self.log, self.clock, self.progress = runner, search, log, clock, progress
        self.report = ExploreReport(search=search, description=runner.description, csv=str(log.path) if log else "")
        self._cache: dict[tuple[str, int, int], TrialOutcome] = dict(log.outcomes) if log else {}
        self._started = clock()
        self._deadline = self._started + search.budget_s
        self._reserve_s = 0.0  # kept back, while shrinking, to rate the result
        self._ran_s = 0.0  # wall seconds spent in the runner ...
        self._ran = 0  # ... running this many trials: the wall cost of one more, as this machine runs them
        self._counted: set[tuple[str, int, int]] = set()

    # --- running trials -----------------------------------------------------------------------

    def seed_for(self, schedule: str, rounds: int, k: int) -> int:
        """Rerun ``k`` of (schedule, rounds): a seed derived from them and the run's, so a resumed
        search asks for the same trials; small, so the reproduce command reads well."""
        return trial_seed(self.search.seed, "explore", schedule, rounds, k) % 1_000_000

    def _left_s(self) -> float:
        return self._deadline - self.clock() - self._reserve_s

    def _expected_s(self, trials: int) -> float:
        """The wall seconds ``trials`` more are expected to take, as the trials so far ran (0 before any)."""
        return self._ran_s / self._ran * trials if self._ran else 0.0

    def _run(self, requests: Sequence[TrialRequest], *, phase: str, force: bool = False) -> list[TrialOutcome] | None:
        """Outcomes of ``requests``, from the cache or run now; None when something must run and the
        budget is spent (unless ``force``)."""
        todo = list(dict.fromkeys(r for r in requests if (r.schedule, r.rounds, r.seed) not in self._cache))
        if todo and not force and self._left_s() < max(self._expected_s(len(todo)), 1e-9):
            return None
        began = self.clock()
        ran = dict(zip(todo, self.runner.run(todo), strict=True)) if todo else {}
        self._ran_s += self.clock() - began
        self._ran += len(ran)
        outcomes = []
        for request in requests:
            key = (request.schedule, request.rounds, request.seed)
            outcome = ran.get(request) or self._cache[key]
            if request in ran:
                self._cache[key] = outcome
                if self.log is not None:
                    self.log.append(phase=phase, request=request, outcome=outcome, result=self.judge(outcome))
            if key not in self._counted:  # a trial used twice in this search (a repeated draw) counts once
                self._counted.add(key)
                self.report.resumed_trials += request not in ran
                self.report.trials += 1
                self.report.trial_seconds += outcome.trial_seconds
                self.report.unknown += outcome.verdict == "unknown"
                self.report.invalid += outcome.verdict == "invalid"
            if self.progress is not None:
                self.progress(phase, request, outcome, self.judge(outcome))
            outcomes.append(outcome)
        self.report.wall_seconds = self.clock() - self._started
        return outcomes

    def judge(self, outcome: TrialOutcome) -> str:
        return judge(self.search.prop, outcome)

    # --- the three phases ---------------------------------------------------------------------

    def run(self) -> ExploreReport:
        rng = random.Random(self.search.seed)
        s = self.search
        searched: set[str] = set()
        repeats = 0  # draws in a row that were all searched before: the space is exhausted
        while self._left_s() > 0 and repeats < EXHAUSTED_AFTER:
            batch = []
            for _ in range(max(1, self.runner.parallel)):
                drawn = random_schedule(rng, kinds=s.kinds, shape=s.shape, max_steps=s.max_steps)
                text = self._canonical(drawn)
                if text is None:
                    continue
                batch.append(TrialRequest(schedule=text, rounds=s.rounds, seed=self.seed_for(text, s.rounds, 0)))
            if not batch:  # every draw refused: counted as a repeat, so refusing everything ends the search
                repeats += 1
                continue
            outcomes = self._run(batch, phase="search")
            if outcomes is None:
                break
            fresh = {r.schedule for r in batch} - searched
            repeats = 0 if fresh else repeats + 1
            searched |= fresh
            self.report.schedules_searched = len(searched)
            failing = [r for r, o in zip(batch, outcomes, strict=True) if self.judge(o) == "violated"]
            if failing:
                self.report.counterexample = self._shrink_and_rate(failing[0])
                break
        self.report.exhausted = repeats >= EXHAUSTED_AFTER
        self.report.wall_seconds = self.clock() - self._started
        return self.report

    def _canonical(self, schedule: Schedule) -> str | None:
        """The canonical text, or None (counted, said in the budget) when the faults package refuses it."""
        try:
            return canonical(schedule_text(schedule))
        except ConfigError:
            self.report.invalid += 1
            return None

    def rerun(self, schedule: str, rounds: int, *, runs: int, phase: str, stop_at_failure: bool) -> Rate | None:
        """Rerun (schedule, rounds) up to ``runs`` times, a batch at a time; with ``stop_at_failure``
        stop after the batch that saw one. None when the budget ran out before anything ran."""
        failures = judged = unknown = marked = 0
        parallel = max(1, self.runner.parallel)
        for start in range(0, runs, parallel):
            ks = range(start, min(runs, start + parallel))
            batch = [
                TrialRequest(schedule=schedule, rounds=rounds, seed=self.seed_for(schedule, rounds, k)) for k in ks
            ]
            outcomes = self._run(batch, phase=phase, force=phase == "rate")
            if outcomes is None:
                if not judged + unknown:
                    return None
                return Rate(failures=failures, runs=judged, unknown=unknown, marked=marked)
            for outcome in outcomes:
                marked += outcome.timing_marked
                result = self.judge(outcome)
                failures += result == "violated"
                judged += result != "unknown"
                unknown += result == "unknown"
            if stop_at_failure and failures:
                break
        return Rate(failures=failures, runs=judged, unknown=unknown, marked=marked)

    def _shrink_and_rate(self, found: TrialRequest) -> Counterexample:
        s = self.search
        # the rating's reruns not yet run (the search's run is rerun 0), at the wall cost seen so far
        self._reserve_s = (s.rate_runs - 1) * self._ran_s / max(1, self._ran)

        def oracle(schedule: Schedule, rounds: int) -> Rate | None:
            text = self._canonical(schedule)
            if text is None:
                return Rate(failures=0, runs=0)  # refused: not a smaller failing schedule
            return self.rerun(text, rounds, runs=s.reruns, phase="shrink", stop_at_failure=True)

        result = shrink(parse_text(found.schedule), rounds=found.rounds, shape=s.shape, oracle=oracle)
        self._reserve_s = 0.0
        text = schedule_text(result.schedule)
        text = self._canonical(result.schedule) or text
        rate = self.rerun(text, result.rounds, runs=s.rate_runs, phase="rate", stop_at_failure=False)
        assert rate is not None  # forced: the rating always runs
        failing = self._first_failing(text, result.rounds, runs=s.rate_runs)
        request = TrialRequest(
            schedule=text,
            rounds=result.rounds,
            seed=failing[0].seed if failing else self.seed_for(text, result.rounds, 0),
        )
        return Counterexample(
            found=found.schedule,
            found_rounds=found.rounds,
            schedule=text,
            rounds=result.rounds,
            rate=rate,
            moves=tuple(result.moves),
            candidates_tried=result.tried,
            shrink_complete=result.complete,
            command=self.runner.command(request),
            failing=failing[1] if failing else None,
        )

    def _first_failing(self, schedule: str, rounds: int, *, runs: int) -> tuple[TrialRequest, TrialOutcome] | None:
        for k in range(runs):
            request = TrialRequest(schedule=schedule, rounds=rounds, seed=self.seed_for(schedule, rounds, k))
            outcome = self._cache.get((schedule, rounds, request.seed))
            if outcome is not None and self.judge(outcome) == "violated":
                return request, outcome
        return None


def explore(
    *,
    runner: TrialRunner,
    search: Search,
    log: ExploreLog | None = None,
    clock: Callable[[], float] = time.monotonic,
    progress: ProgressFn | None = None,
) -> ExploreReport:
    """Search, shrink and rate (see the module docstring); the report says what was searched."""
    return Explorer(runner=runner, search=search, log=log, clock=clock, progress=progress).run()


__all__ = [
    "DEFAULT_PROPERTY", "METRICS", "PROPERTIES", "Counterexample", "ExploreReport", "Explorer", "Search",
    "TrialOutcome", "TrialRequest", "TrialRunner", "explore", "judge",
]  # fmt: skip
