"""From a parsed schedule to what a trial runs: planned steps, worker pauses, servers it needs.

Everything here reads a :class:`~lockcompare.scenario.schedule.TrialSchedule`: a schedule whose times
are already the trial's milliseconds (``TrialSpec.schedule``), so nothing here scales a time.
A ``pause`` step is not the runner's to time: it lands at the worker's own pause point (right
after its acquire, or between its read and its write), so it becomes part of that worker's plan
(:func:`worker_pauses`); with ``how=sigstop`` the worker asks the runner to stop it there
(faults/freeze.py), which records the pause as its own fault events.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lockcompare.backends.base import traits_of
from lockcompare.errors import InvalidValueError
from lockcompare.faults.steps import PlannedStep
from lockcompare.scenario import faultkinds
from lockcompare.scenario.faultkinds.base import CLOCK_CONTROL, LINKS, NODES, REPLICATION
from lockcompare.scenario.schedule import Schedule, TrialSchedule, TrialStep

#: The kinds the worker lands itself, at its own pause point (pause): not the runner's steps.
_IN_WORKER = faultkinds.names_where("in_worker")


@dataclass(frozen=True)
class WorkerPause:
    """How one worker pauses (the trial's ms): at ``point``, ``pause_ms`` long, by ``how``, in ``rounds``."""

    pause_ms: float
    how: str
    point: str
    every: bool

    def rounds(self, total: int) -> frozenset[int]:
        return frozenset(range(total)) if self.every else frozenset({0})


def planned_steps(schedule: TrialSchedule, *, ttl_ms: float, lock_key: str = "") -> list[PlannedStep]:
    """The runner's steps (pauses excluded: see :func:`worker_pauses`). ``ttl_ms``: the trial's;
    ``lock_key``: the trial's lock (a session-kill step finds the session holding it)."""
    return [
        _planned(i, step, ttl_ms=ttl_ms, lock_key=lock_key)
        for i, step in enumerate(schedule.steps)
        if step.kind not in _IN_WORKER
    ]


def with_lease_declaration(steps: list[PlannedStep], *, backend: type) -> list[PlannedStep]:
    """``steps`` whose faults look for the lease where ``backend`` declares it lives: a fault with a
    ``lease_znodes`` field (session-kill) gets the backend's class attribute of that name (a
    ZooKeeper path with ``{key}``, or a callable returning the lease's znodes: infra/zookeeper/sessions.py).
    A backend that declares nothing leaves every step as it was."""
    declared = traits_of(backend).lease_znodes
    if declared is None:
        return steps

    def declaring(build: Callable[[int | None], Any]) -> Callable[[int | None], Any]:
        def built(worker: int | None) -> Any:
            fault = build(worker)
            if dataclasses.is_dataclass(fault) and any(f.name == "lease_znodes" for f in dataclasses.fields(fault)):
                return dataclasses.replace(fault, lease_znodes=declared)  # type: ignore[type-var]
            return fault

        return built

    return [dataclasses.replace(p, build=declaring(p.build)) for p in steps]


def _planned(index: int, step: TrialStep, *, ttl_ms: float, lock_key: str) -> PlannedStep:
    def ns(ms: float | None) -> int | None:
        return None if ms is None else int(ms * 1e6)

    run = faultkinds.KINDS[step.kind].runtime(step, ttl_ms=ttl_ms, lock_key=lock_key)
    return PlannedStep(
        index=index,
        step=step.written,
        build=run.build,
        after_ns=int(step.after_ms * 1e6),
        heal_after_ns=ns(run.heal_after_ms),
        latest_ns=ns(run.latest_ms),
        prepares=run.prepares,
        fixed_nodes=run.fixed_nodes,
    )


def worker_pauses(schedule: TrialSchedule) -> dict[int, WorkerPause]:
    """Each paused worker's pause (one pause step per worker)."""
    pauses: dict[int, WorkerPause] = {}
    for step in schedule.of_kind(*faultkinds.names_where("pauses_worker")):  # lost replies: below
        worker = step.written.worker
        assert worker is not None and worker.index is not None and step.for_ms  # steps._check
        if worker.index in pauses:
            raise InvalidValueError(f"two pause steps for worker {worker.index}: give it one")
        pauses[worker.index] = WorkerPause(
            pause_ms=step.for_ms, how=step.param("how"), point=step.param("point"), every=step.written.every
        )
    return pauses


def worker_lost_replies(schedule: Schedule, *, rounds: int) -> dict[int, frozenset[int]]:
    """The rounds whose increment's reply each worker loses (scenario/faultkinds/lost_reply.py)."""
    lost: dict[int, frozenset[int]] = {}
    for step in schedule.of_kind(*faultkinds.names_where("loses_replies")):
        assert step.worker is not None and step.worker.index is not None  # the kind's check
        lost[step.worker.index] = lost.get(step.worker.index, frozenset()) | (
            frozenset(range(rounds)) if step.every else frozenset({0})
        )
    return lost


def timing_extras(schedule: TrialSchedule, *, ttl_ms: float) -> dict[str, object]:
    """What the trial's timing rests on beyond its settings (analysis/sentinel.py's plan), in the
    trial's ms: the earliest offset of a step that follows a lease (``fault_offset_ms``; at=start
    and at=acquire steps follow none, a worker's pause is its own), and each kind's margin past the
    TTL (``extra_margins``: slow's reply delay)."""
    extra: dict[str, object] = {}
    offsets = [
        s.after_ms for s in schedule.steps if s.at == "after-acquire" and not faultkinds.KINDS[s.kind].pauses_worker
    ]
    if offsets:
        extra["fault_offset_ms"] = min(offsets)
    margins: dict[str, float] = {}
    for step in schedule.steps:
        if (margin := faultkinds.KINDS[step.kind].ttl_margin) is not None:
            name, param = margin
            margins[name] = max(margins.get(name, -math.inf), step.time(param) - ttl_ms)
    if margins:
        extra["extra_margins"] = tuple(margins.items())
    return extra


def touches_servers(schedule: Schedule) -> bool:
    """Whether a step acts on lock nodes or their links (pauses and starvation act on workers only)."""
    return bool(schedule.of_kind(*faultkinds.acting_on(NODES, LINKS)))


def restarts_node_0_only(schedule: Schedule) -> bool:
    """Whether every step acting on lock nodes or their links restarts node 0 (True without such
    steps): a kind whose standalone server restarts in place keeps its one server for such a
    schedule (infra/kinds.py ``LockNodes.restart_in_place``: ZooKeeper's server restart), where a
    leader crash, a cut or a step naming another server needs its quorum (``under_faults``)."""
    steps = schedule.of_kind(*faultkinds.acting_on(NODES, LINKS))
    return all(
        s.kind == "restart" and s.nodes is not None and s.nodes.mode == "fixed" and s.nodes.indices == (0,)
        for s in steps
    )


def needs_links(schedule: Schedule) -> bool:
    """Whether the workers must reach the lock nodes through proxied links (a slow or cut step), or
    the resource (:func:`needs_resource_link`)."""
    return bool(schedule.of_kind(*faultkinds.acting_on(LINKS))) or needs_resource_link(schedule)


def needs_resource_link(schedule: Schedule) -> bool:
    """Whether the workers must reach the resource through proxied links (a resource-delay or resource-cut step)."""
    return bool(schedule.of_kind(*faultkinds.names_where("on_resource_link")))


def acquire_handshake_workers(schedule: Schedule) -> set[int]:
    """Workers whose acquires an ``at=acquire`` step surrounds (they wait for the runner)."""
    return {s.worker.index for s in schedule.steps if s.at == "acquire" and s.worker and s.worker.index is not None}


def reports_acquires(schedule: Schedule) -> bool:
    """Whether workers must report their acquires (a step follows them or reads the holder)."""
    return any(s.at == "after-acquire" for s in schedule.steps if s.kind not in _IN_WORKER)


def cluster_needs(schedule: Schedule) -> dict[str, Any]:
    """What the lock nodes must be able to take: ``persistence``, ``fake_clocks``, ``replicas``."""
    kept = {dict(s.params)["persistence"] for s in schedule.steps if "persistence" in dict(s.params)}
    if len(kept) > 1:
        raise InvalidValueError("restart steps with different persistence= cannot share one cluster")
    asked = {need for kind in schedule.kinds() for need in faultkinds.KINDS[kind].needs}
    needs = {
        "persistence": kept.pop() if kept else "none",
        "fake_clocks": CLOCK_CONTROL in asked,
        "replicas": 1 if REPLICATION in asked else 0,
    }
    if needs["replicas"] and (needs["fake_clocks"] or needs["persistence"] != "none"):
        # A master/replica pair runs without libfaketime and without AOF (infra/redis/failover_pair.py):
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
