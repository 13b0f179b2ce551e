"""Experiments (timings + faults applied to the same workload) and the trial spec they produce.

Defaults follow the lesson's lab: 2 workers x 40 rounds, 300 ms of work, TTL 1000 ms. Every time
is given at the lesson's scale and multiplied by ``time_scale``, so a quick run keeps the ratios.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field

from lockcompare.errors import InvalidValueError, UnknownNameError


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


#: Lesson-scale defaults of the workload. The acquire deadline is long because a spinning retry is
#: unfair: the releasing worker re-acquires at once, and a rival was seen starving for 10 s.
DEFAULT_ROUNDS = 40
DEFAULT_WORKERS = 2
DEFAULT_ACQUIRE_TIMEOUT_MS = 60_000.0
DEFAULT_RETRY_DELAY_MS = 10.0


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
    paused_workers: tuple[int, ...] = (0,)
    seed: int = 1

    def __post_init__(self) -> None:
        for name in ("ttl_ms", "work_ms", "time_scale", "acquire_timeout_ms", "retry_delay_ms"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise InvalidValueError(f"--{name.replace('_', '-')} must be > 0, got {value:g}")
        if self.pause_ms is not None and self.pause_ms < 0:
            raise InvalidValueError(f"--pause-ms must be >= 0, got {self.pause_ms:g}")
        if self.rounds < 1:
            raise InvalidValueError(f"--rounds must be >= 1, got {self.rounds}")
        if self.workers < 1:
            raise InvalidValueError(f"--workers must be >= 1, got {self.workers}")
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
    node_count: int | None = None  # how many lock nodes a multi-node backend uses (None: all)
    #: (worker, round) pairs at which the worker pauses; explicit, derived from the seed.
    pause_schedule: frozenset[tuple[int, int]] = field(default_factory=frozenset)

    @property
    def trial_id(self) -> str:
        safe_backend = "".join(c if c.isalnum() or c in "-_" else "_" for c in self.backend)
        return f"{safe_backend}.{self.experiment}.t{self.trial}"


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
    *, backend: str, experiment: Experiment, trial: int, overrides: Overrides, node_count: int | None = None
) -> TrialSpec:
    """Scale the experiment's times, apply overrides, and fix the trial's seeded pause schedule."""
    o = overrides
    scale = o.time_scale
    ttl_ms = round((o.ttl_ms if o.ttl_ms is not None else experiment.ttl_ms) * scale)
    if ttl_ms < 1:
        raise InvalidValueError(f"TTL is {ttl_ms} ms after --time-scale {scale:g}: use a larger scale")
    pause_ms = (o.pause_ms if o.pause_ms is not None else experiment.pause_ms) * scale
    seed = trial_seed(o.seed, backend, experiment.name, trial)
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
        node_count=node_count,
        pause_schedule=schedule,
    )
