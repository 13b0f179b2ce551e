"""Experiments (timings + faults applied to the same workload) and the trial spec they produce.

Defaults follow the lesson's lab: 2 workers x 40 rounds, 300 ms of work, TTL 1000 ms. Every time
is given at the lesson's scale and multiplied by ``time_scale``, so a quick run keeps the ratios.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field
from enum import StrEnum

from lockcompare.errors import InvalidValueError, UnknownNameError
from lockcompare.resource import Check
from lockcompare.sections import FENCE_MODES


class PausePoint(StrEnum):
    """Where in a round a scheduled pause lands."""

    AFTER_ACQUIRE = "after-acquire"  # the lesson's lab: the zombie wakes before it reads
    BEFORE_WRITE = "before-write"  # read → work → pause → write: the zombie wakes holding a stale read


class PauseHow(StrEnum):
    """How a worker is paused."""

    SLEEP = "sleep"  # in-process sleep, as in the lesson's lab: only the sleeping thread stops
    SIGSTOP = "sigstop"  # a real freeze from outside: every thread of the process stops


@dataclass(frozen=True, kw_only=True)
class Experiment:
    """A named setting: lesson-scale times and which faults apply."""

    name: str
    claim: str
    ttl_ms: float = 1000
    work_ms: float = 300
    pause_ms: float = 0  # > 0: the pausing workers freeze this long right after acquiring
    pause_probability: float = 1.0  # share of a pausing worker's rounds that pause


EXPERIMENTS: dict[str, Experiment] = {
    e.name: e
    for e in (
        Experiment(
            name="baseline",
            claim="TTL 1000 > work 300, no faults: a correct lock gives 0 conflicts; none gives ~half",
        ),
        Experiment(
            name="short-ttl",
            ttl_ms=200,
            claim="TTL 200 < work 300: a textbook-correct lock with too short a TTL is worse than none",
        ),
        Experiment(
            name="client-pause",
            pause_ms=1200,
            claim="worker 0 freezes 1200 ms after acquiring (TTL 1000): the lock lets a second worker in",
        ),
    )
}


#: Lesson-scale defaults of the workload.
DEFAULT_ROUNDS = 40
DEFAULT_WORKERS = 2
DEFAULT_ACQUIRE_TIMEOUT_MS = 60_000.0
DEFAULT_RETRY_DELAY_MS = 10.0
#: Think time between a release and the next acquire. Without it a spinning retry is unfair: the
#: releasing worker re-acquires within a millisecond, before a rival polling every 10 ms looks
#: again. Measured without it: one worker ran 39 rounds in a row while the other waited, so the
#: client-pause trial measured starvation (2/80 conflicts), not the lock. Twice the retry delay
#: guarantees a waiting rival one poll inside the gap.
DEFAULT_THINK_MS = 2 * DEFAULT_RETRY_DELAY_MS


@dataclass(frozen=True, kw_only=True)
class Overrides:
    """User overrides, at the lesson's scale (before ``time_scale``); ``None`` keeps the experiment's."""

    ttl_ms: float | None = None
    work_ms: float | None = None
    pause_ms: float | None = None
    rounds: int = DEFAULT_ROUNDS
    workers: int = DEFAULT_WORKERS
    time_scale: float = 1.0
    acquire_timeout_ms: float = DEFAULT_ACQUIRE_TIMEOUT_MS
    retry_delay_ms: float = DEFAULT_RETRY_DELAY_MS
    think_ms: float = DEFAULT_THINK_MS
    pause_point: PausePoint = PausePoint.AFTER_ACQUIRE
    pause_how: PauseHow = PauseHow.SLEEP
    fence: str = "writes"  # see sections.check_for: writes, all, token
    paused_workers: tuple[int, ...] = (0,)
    seed: int = 1

    def __post_init__(self) -> None:
        for name in ("ttl_ms", "work_ms", "time_scale", "acquire_timeout_ms", "retry_delay_ms"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise InvalidValueError(f"--{name.replace('_', '-')} must be > 0, got {value:g}")
        if self.think_ms < 0:
            raise InvalidValueError(f"--think-ms must be >= 0, got {self.think_ms:g}")
        if self.pause_ms is not None and self.pause_ms < 0:
            raise InvalidValueError(f"--pause-ms must be >= 0, got {self.pause_ms:g}")
        if self.rounds < 1:
            raise InvalidValueError(f"--rounds must be >= 1, got {self.rounds}")
        if self.workers < 1:
            raise InvalidValueError(f"--workers must be >= 1, got {self.workers}")
        if self.fence not in FENCE_MODES:
            raise InvalidValueError(f"--fence must be one of {', '.join(FENCE_MODES)}, got {self.fence!r}")
        bad = [w for w in self.paused_workers if not 0 <= w < self.workers]
        if bad:
            raise InvalidValueError(f"paused worker {bad[0]} does not exist with {self.workers} workers")


@dataclass(frozen=True, kw_only=True)
class TrialSpec:
    """Everything one trial needs, with times already scaled (milliseconds)."""

    backend: str
    experiment: str
    trial: int
    seed: int
    workers: int
    rounds: int
    ttl_ms: int
    work_ms: float
    pause_ms: float
    time_scale: float
    acquire_timeout_ms: float
    retry_delay_ms: float
    think_ms: float = 0.0
    pause_point: PausePoint = PausePoint.AFTER_ACQUIRE
    pause_how: PauseHow = PauseHow.SLEEP
    resource_check: Check = Check.PLAIN
    node_count: int | None = None  # how many lock nodes a multi-node backend uses (None: all)
    #: (worker, round) pairs at which the worker pauses; explicit, derived from the seed.
    pause_schedule: frozenset[tuple[int, int]] = field(default_factory=frozenset)

    @property
    def trial_id(self) -> str:
        safe_backend = "".join(c if c.isalnum() or c in "-_" else "_" for c in self.backend)
        how = "" if self.pause_how is PauseHow.SLEEP else f".{self.pause_how}"
        return (
            f"{safe_backend}.{self.experiment}.{self.resource_check}.{self.pause_point}{how}"
            f".pause{self.pause_ms:g}.t{self.trial}"
        )


def get_experiment(name: str) -> Experiment:
    try:
        return EXPERIMENTS[name]
    except KeyError:
        raise UnknownNameError(f"unknown experiment {name!r} (known: {', '.join(EXPERIMENTS)})") from None


def trial_seed(base_seed: int, *parts: object) -> int:
    """A stable per-trial seed from the run's seed and the trial's coordinates."""
    digest = hashlib.sha256(repr((base_seed, *parts)).encode()).digest()
    return int.from_bytes(digest[:4], "big")


def pause_schedule(
    *, workers: tuple[int, ...], rounds: int, probability: float, seed: int
) -> frozenset[tuple[int, int]]:
    """Which (worker, round) pairs pause: each round of each pausing worker with ``probability``."""
    rng = random.Random(seed)
    return frozenset((w, r) for w in workers for r in range(rounds) if rng.random() < probability)


def make_spec(
    *,
    backend: str,
    experiment: Experiment,
    trial: int,
    overrides: Overrides,
    node_count: int | None = None,
    resource_check: Check = Check.PLAIN,
) -> TrialSpec:
    """Scale the experiment's times, apply overrides, and fix the trial's seeded pause schedule."""
    o = overrides
    scale = o.time_scale
    ttl_ms = round((o.ttl_ms if o.ttl_ms is not None else experiment.ttl_ms) * scale)
    if ttl_ms < 1:
        raise InvalidValueError(f"TTL is {ttl_ms} ms after --time-scale {scale:g}: use a larger scale")
    pause_ms = (o.pause_ms if o.pause_ms is not None else experiment.pause_ms) * scale
    # No pause: nowhere for it to land and no way to take it (one trial, not one per pause setting).
    pause_point = o.pause_point if pause_ms > 0 else PausePoint.AFTER_ACQUIRE
    pause_how = o.pause_how if pause_ms > 0 else PauseHow.SLEEP
    seed = trial_seed(o.seed, backend, experiment.name, trial)  # the same schedule for every pause length
    schedule = (
        pause_schedule(workers=o.paused_workers, rounds=o.rounds, probability=experiment.pause_probability, seed=seed)
        if pause_ms > 0
        else frozenset()
    )
    return TrialSpec(
        backend=backend,
        experiment=experiment.name,
        trial=trial,
        seed=seed,
        workers=o.workers,
        rounds=o.rounds,
        ttl_ms=ttl_ms,
        work_ms=(o.work_ms if o.work_ms is not None else experiment.work_ms) * scale,
        pause_ms=pause_ms,
        time_scale=scale,
        acquire_timeout_ms=o.acquire_timeout_ms * scale,
        retry_delay_ms=o.retry_delay_ms * scale,
        think_ms=o.think_ms * scale,
        pause_point=pause_point,
        pause_how=pause_how,
        resource_check=resource_check,
        node_count=node_count,
        pause_schedule=schedule,
    )
