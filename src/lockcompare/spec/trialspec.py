"""The trial spec: every setting one trial runs with (times already scaled), and its identity."""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from lockcompare.errors import InvalidValueError
from lockcompare.spec.choices import DEFAULT_WORKLOAD, FENCE_MODES, WORKLOADS, Check, PauseHow, PausePoint
from lockcompare.spec.experiments import Experiment

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
#: Random spread of the retry delay and the think time (the Redlock spec retries "after a random
#: delay"). Without it two workers can run in lockstep, and the no-lock baselines swung between
#: 40/80 and 79/80 with the phase they happened to start in. A retry waits retry_delay × U(1-j, 1+j);
#: think time is think × U(1 - j/2, 1 + j/2), so with the defaults (10 ms ± 50 %, 20 ms ± 25 %) the
#: shortest think (15 ms) still covers the longest retry wait (15 ms): a waiting rival gets its poll.
DEFAULT_JITTER = 0.5
#: Deadline on each backend call the harness makes (construct, acquire, release, close). A call
#: that does not return in time makes the trial ``unknown``; the matrix goes on. Not scaled: it
#: bounds a hung call, not a timing of the experiment.
DEFAULT_CALL_TIMEOUT_MS = 5000.0
DEFAULT_FAULT_NODES = 1


@dataclass(frozen=True, kw_only=True)
class Overrides:
    """User overrides, at the lesson's scale (before ``time_scale``); ``None`` keeps the experiment's."""

    ttl_ms: float | None = None
    work_ms: float | None = None
    pause_ms: float | None = None
    rounds: int | None = None  # None: the experiment's (DEFAULT_ROUNDS unless it says otherwise)
    workers: int = DEFAULT_WORKERS
    time_scale: float = 1.0
    acquire_timeout_ms: float | None = None  # None: the experiment's
    retry_delay_ms: float = DEFAULT_RETRY_DELAY_MS
    think_ms: float = DEFAULT_THINK_MS
    pause_point: PausePoint = PausePoint.AFTER_ACQUIRE
    pause_how: PauseHow = PauseHow.SLEEP
    fence: str = "writes"  # see sections.check_for: writes, all, token
    paused_workers: tuple[int, ...] = (0,)
    seed: int = 1
    jitter: float = DEFAULT_JITTER
    call_timeout_ms: float = DEFAULT_CALL_TIMEOUT_MS
    fault_nodes: int = DEFAULT_FAULT_NODES
    restart_delay_ms: float = 0.0
    persistence: str = "none"
    workload: str = DEFAULT_WORKLOAD  # lesson, or contend: no worker runs alone (contend.py)
    wait_replicas: int = 0

    def __post_init__(self) -> None:
        for name in ("ttl_ms", "work_ms", "time_scale", "acquire_timeout_ms", "retry_delay_ms", "call_timeout_ms",
                     "think_ms", "pause_ms"):  # fmt: skip
            value = getattr(self, name)
            if value is not None and not math.isfinite(value):
                raise InvalidValueError(f"--{name.replace('_', '-')} must be a finite number, got {value:g}")
        for name in ("ttl_ms", "work_ms", "time_scale", "acquire_timeout_ms", "retry_delay_ms", "call_timeout_ms"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise InvalidValueError(f"--{name.replace('_', '-')} must be > 0, got {value:g}")
        for name in ("think_ms", "pause_ms"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise InvalidValueError(f"--{name.replace('_', '-')} must be >= 0, got {value:g}")
        if self.fault_nodes < 1:
            raise InvalidValueError(f"--fault-nodes must be >= 1, got {self.fault_nodes}")
        if not (math.isfinite(self.restart_delay_ms) and self.restart_delay_ms >= 0):
            raise InvalidValueError(f"--restart-delay-ms must be a finite number >= 0, got {self.restart_delay_ms:g}")
        if self.workload not in WORKLOADS:
            raise InvalidValueError(f"--workload takes {' or '.join(WORKLOADS)}, got {self.workload!r}")
        if self.wait_replicas < 0:
            raise InvalidValueError(f"--wait-replicas must be >= 0, got {self.wait_replicas}")
        if self.persistence not in ("none", "aof-always"):
            raise InvalidValueError(f"--persistence takes none or aof-always, got {self.persistence!r}")
        if not (math.isfinite(self.jitter) and 0 <= self.jitter < 1):
            raise InvalidValueError(f"--jitter must be in [0, 1), got {self.jitter:g}")
        if self.rounds is not None and self.rounds < 1:
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
    jitter: float = 0.0
    fault: str = ""  # the experiment's node fault ("" for none)
    fault_nodes: int = 0  # how many lock nodes it hits (0 without a fault)
    restart_delay_ms: float = 0.0  # node-restart: down this long before it restarts
    persistence: str = "none"  # node-restart: none, or aof-always (appendfsync always, kept across restarts)
    workload: str = DEFAULT_WORKLOAD  # contend: workers keep contending until all are done (contend.py)
    wait_replicas: int = 0  # failover: replicas that must acknowledge a lease's write (WAIT), 0: none
    #: (worker, round) pairs at which the worker pauses; explicit, derived from the seed.
    pause_schedule: frozenset[tuple[int, int]] = field(default_factory=frozenset)
    #: A bound on each backend call, not a setting of the experiment (not part of the identity).
    call_timeout_ms: float = DEFAULT_CALL_TIMEOUT_MS

    @property
    def entries_planned(self) -> int:
        return self.workers * self.rounds

    def settings(self) -> dict[str, object]:
        """Every setting that can change the trial's result, by CSV column name."""
        return {name: getattr(self, name) for name in IDENTITY_SETTINGS}

    @property
    def trial_id(self) -> str:
        return trial_id_for(self.settings())


#: The settings that make up a trial's identity (and the CSV's setting columns, in this order).
#: Two trials with equal values here are the same trial: --resume skips one whose twin finished.
IDENTITY_SETTINGS = (
    "backend", "experiment", "trial", "seed", "workers", "rounds", "ttl_ms", "work_ms", "pause_ms",
    "time_scale", "acquire_timeout_ms", "retry_delay_ms", "think_ms", "jitter", "node_count", "pause_point",
    "pause_how", "resource_check", "fault_nodes", "restart_delay_ms", "persistence", "workload",
    "wait_replicas",
)  # fmt: skip

#: Settings added after the first results were written, with the value every older row had. A
#: setting at this value is left out of the identity hash, so adding a setting keeps old trial ids.
SETTINGS_SINCE_V1 = {
    "jitter": "0", "fault_nodes": "0", "restart_delay_ms": "0", "persistence": "none", "workload": DEFAULT_WORKLOAD,
    "wait_replicas": "0",
}  # fmt: skip


def canonical(value: object) -> str:
    """A setting as the text that identifies it (the same for a spec and for a row read back)."""
    if value is None:
        return ""
    if isinstance(value, StrEnum):
        return value.value
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def trial_id_for(settings: Mapping[str, object]) -> str:
    """A readable name plus a hash of every identity setting, e.g. ``single.baseline.t0.3f9a1c2e``.

    The readable part names the cell; the hash tells apart trials whose other settings (TTL, work,
    rounds, seed, ...) differ, so a results file and its histories never confuse them.
    """
    text = {name: canonical(settings.get(name)) for name in IDENTITY_SETTINGS}
    hashed = "|".join(f"{k}={v}" for k, v in text.items() if SETTINGS_SINCE_V1.get(k) != v)
    digest = hashlib.sha256(hashed.encode()).hexdigest()[:8]
    safe_backend = "".join(c if c.isalnum() or c in "-_" else "_" for c in text["backend"])
    return f"{safe_backend}.{text['experiment']}.{text['resource_check']}.pause{text['pause_ms']}.t{text['trial']}.{digest}"


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
    rounds = o.rounds if o.rounds is not None else experiment.rounds or DEFAULT_ROUNDS
    ttl_ms = round((o.ttl_ms if o.ttl_ms is not None else experiment.ttl_ms) * scale)
    if ttl_ms < 1:
        raise InvalidValueError(f"TTL is {ttl_ms} ms after --time-scale {scale:g}: use a larger scale")
    pause_ms = (o.pause_ms if o.pause_ms is not None else experiment.pause_ms) * scale
    # No pause: nowhere for it to land and no way to take it (one trial, not one per pause setting).
    pause_point = o.pause_point if pause_ms > 0 else PausePoint.AFTER_ACQUIRE
    pause_how = o.pause_how if pause_ms > 0 else PauseHow.SLEEP
    seed = trial_seed(o.seed, backend, experiment.name, trial)  # the same schedule for every pause length
    schedule = (
        pause_schedule(workers=o.paused_workers, rounds=rounds, probability=experiment.pause_probability, seed=seed)
        if pause_ms > 0
        else frozenset()
    )
    faulty = experiment.fault is not None  # fault settings mean nothing without a fault
    restarting = experiment.fault == "node-restart"
    return TrialSpec(
        backend=backend,
        experiment=experiment.name,
        trial=trial,
        seed=seed,
        workers=o.workers,
        rounds=rounds,
        ttl_ms=ttl_ms,
        work_ms=(o.work_ms if o.work_ms is not None else experiment.work_ms) * scale,
        pause_ms=pause_ms,
        time_scale=scale,
        acquire_timeout_ms=(o.acquire_timeout_ms or experiment.acquire_timeout_ms or DEFAULT_ACQUIRE_TIMEOUT_MS)
        * scale,
        retry_delay_ms=o.retry_delay_ms * scale,
        think_ms=o.think_ms * scale,
        pause_point=pause_point,
        pause_how=pause_how,
        resource_check=resource_check,
        node_count=node_count,
        jitter=o.jitter,
        fault=experiment.fault or "",
        fault_nodes=o.fault_nodes if faulty and experiment.takes_fault_nodes else 0,
        restart_delay_ms=o.restart_delay_ms * scale if restarting else 0.0,
        persistence=o.persistence if restarting else "none",
        workload=o.workload,
        wait_replicas=o.wait_replicas if experiment.fault == "failover" else 0,  # only replicas can acknowledge
        pause_schedule=schedule,
        call_timeout_ms=o.call_timeout_ms,
    )
