"""From a parsed schedule to what a trial runs: planned steps, worker pauses, servers it needs.

Times in a schedule are lesson-scale milliseconds; everything here is scaled by ``time_scale``.
A ``pause`` step is not the runner's to time: it lands at the worker's own pause point (right
after its acquire, or between its read and its write), so it becomes part of that worker's plan
(:func:`worker_pauses`); with ``how=sigstop`` the worker asks the runner to stop it there
(faults/freeze.py), which records the pause as its own fault events.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lockcompare.errors import ConfigError, InvalidValueError
from lockcompare.faults.failover import Failover
from lockcompare.faults.freeze import Strobe
from lockcompare.faults.network import LinkCut, LinkDelay
from lockcompare.faults.node import ClockJump, NodeCrash, NodeRestart
from lockcompare.faults.schedule import PlannedStep
from lockcompare.faults.session import SessionKill
from lockcompare.faults.steps import LINK_KINDS, NODE_KINDS, FaultStep, Schedule

#: Kinds whose ``for`` omitted means "until the trial ends" (the others heal at once).
_UNTIL_THE_END = ("crash", "cut", "slow", "starve")


@dataclass(frozen=True)
class WorkerPause:
    """How one worker pauses (times scaled): at ``point``, ``pause_ms`` long, by ``how``, in ``rounds``."""

    pause_ms: float
    how: str
    point: str
    every: bool

    def rounds(self, total: int) -> frozenset[int]:
        return frozenset(range(total)) if self.every else frozenset({0})


def planned_steps(schedule: Schedule, *, time_scale: float, ttl_ms: float, lock_key: str = "") -> list[PlannedStep]:
    """The runner's steps (pauses excluded: see :func:`worker_pauses`). ``ttl_ms`` is scaled;
    ``lock_key``: the trial's lock (a session-kill step finds the session holding it)."""
    return [
        _planned(i, step, time_scale=time_scale, ttl_ms=ttl_ms, lock_key=lock_key)
        for i, step in enumerate(schedule.steps)
        if step.kind != "pause"
    ]


def _planned(index: int, step: FaultStep, *, time_scale: float, ttl_ms: float, lock_key: str) -> PlannedStep:
    def ns(ms: float) -> int:
        return int(ms * time_scale * 1e6)

    heal_after = None if step.for_ms is None and step.kind in _UNTIL_THE_END else ns(step.for_ms or 0)
    kind = step.kind
    if kind == "crash":
        build: Any = lambda _w: NodeCrash()  # noqa: E731
    elif kind == "restart":
        persistence = step.param("persistence")
        build = lambda _w: NodeRestart(persistence=persistence)  # noqa: E731
    elif kind == "clock-jump":
        jump_s = step.number("by") * time_scale / 1000
        build = lambda _w: ClockJump(jump_s=jump_s)  # noqa: E731
    elif kind == "failover":
        build = lambda _w: Failover()  # noqa: E731
        return PlannedStep(
            index=index, step=step, build=build, after_ns=ns(step.after_ms), heal_after_ns=heal_after,
            latest_ns=int(ttl_ms * 1e6), prepares=True,
        )  # fmt: skip
    elif kind == "slow":
        delay_ms = step.number("delay") * time_scale
        # Around an acquire only grants are late: a late refusal only slowed the worker's retries
        # (measured: its rival then finished first and nothing could conflict; network.py).
        nulls = step.at != "acquire"
        build = lambda w: LinkDelay(worker=w, ms=delay_ms, nulls=nulls)  # noqa: E731
    elif kind == "cut":
        build = lambda w: LinkCut(worker=w)  # noqa: E731
    elif kind == "starve":
        duty, period_s = step.number("duty"), step.number("period") * time_scale / 1000
        build = lambda w: Strobe(worker=w, duty=duty, period_s=period_s)  # noqa: E731
    elif kind == "session-kill":
        # The server finds the session holding the lock itself (faults/session.py), on the one
        # PostgreSQL lock node; worker=holder names, in the history, whose lease that was.
        build = lambda _w: SessionKill(lock_key=lock_key)  # noqa: E731
        return PlannedStep(
            index=index, step=step, build=build, after_ns=ns(step.after_ms), heal_after_ns=0, fixed_nodes=(0,)
        )
    else:  # pragma: no cover - steps.KINDS and this list move together
        raise ConfigError(f"no runtime for fault kind {kind!r}")
    return PlannedStep(index=index, step=step, build=build, after_ns=ns(step.after_ms), heal_after_ns=heal_after)


def worker_pauses(schedule: Schedule, *, time_scale: float) -> dict[int, WorkerPause]:
    """Each paused worker's pause (one pause step per worker)."""
    pauses: dict[int, WorkerPause] = {}
    for step in schedule.of_kind("pause"):
        assert step.worker is not None and step.worker.index is not None and step.for_ms  # steps._check
        if step.worker.index in pauses:
            raise InvalidValueError(f"two pause steps for worker {step.worker.index}: give it one")
        pauses[step.worker.index] = WorkerPause(
            pause_ms=step.for_ms * time_scale, how=step.param("how"), point=step.param("point"), every=step.every
        )
    return pauses


def touches_servers(schedule: Schedule) -> bool:
    """Whether a step acts on lock nodes or their links (pauses and starvation act on workers only)."""
    return bool(schedule.of_kind(*NODE_KINDS, *LINK_KINDS))


def needs_links(schedule: Schedule) -> bool:
    """Whether the workers must reach the lock nodes through proxied links (a slow or cut step)."""
    return bool(schedule.of_kind(*LINK_KINDS))


def acquire_handshake_workers(schedule: Schedule) -> set[int]:
    """Workers whose acquires an ``at=acquire`` step surrounds (they wait for the runner)."""
    return {s.worker.index for s in schedule.steps if s.at == "acquire" and s.worker and s.worker.index is not None}


def reports_acquires(schedule: Schedule) -> bool:
    """Whether workers must report their acquires (a step follows them or reads the holder)."""
    return any(s.at == "after-acquire" for s in schedule.steps if s.kind != "pause")


def cluster_needs(schedule: Schedule) -> dict[str, Any]:
    """What the lock nodes must be able to take: ``persistence``, ``fake_clocks``, ``replicas``."""
    kept = {s.param("persistence") for s in schedule.of_kind("restart")}
    if len(kept) > 1:
        raise InvalidValueError("restart steps with different persistence= cannot share one cluster")
    needs = {
        "persistence": kept.pop() if kept else "none",
        "fake_clocks": bool(schedule.of_kind("clock-jump")),
        "replicas": 1 if schedule.of_kind("failover") else 0,
    }
    if needs["replicas"] and (needs["fake_clocks"] or needs["persistence"] != "none"):
        # A master/replica pair runs without libfaketime and without AOF (infra/replication.py):
        # said now, before any server starts, instead of by the cluster mid-matrix.
        other = "clock-jump" if needs["fake_clocks"] else f"restart persistence={needs['persistence']}"
        raise InvalidValueError(
            f"failover cannot share a schedule with {other}: failover nodes run without fake clocks or persistence"
        )
    return needs


def check_schedule(schedule: Schedule, *, lock_nodes: int, workers: int) -> None:
    """Refuse, before any server starts, a schedule that names nodes or workers the trial lacks, or
    asks of its lock nodes what one cluster cannot be (:func:`cluster_needs`)."""
    cluster_needs(schedule)
    for step in schedule.steps:
        if step.nodes is not None:
            wanted = max(step.nodes.indices, default=-1) + 1 if step.nodes.mode == "fixed" else step.nodes.count
            if wanted > lock_nodes:
                raise InvalidValueError(
                    f"fault step {step.text!r} needs {wanted} lock nodes; this backend uses {lock_nodes}"
                )
        named = [step.follow, *([step.worker.index] if step.worker and step.worker.index is not None else [])]
        if max(named) >= workers:
            raise InvalidValueError(f"fault step {step.text!r}: worker {max(named)} does not exist ({workers} workers)")
