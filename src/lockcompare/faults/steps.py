"""What the schedule runner works with: a step ready to run (:class:`PlannedStep`, built by
faults/plan.py), the state it keeps for each step while the trial runs, and what a fault acting on
more than the nodes is handed (:class:`FaultContext`).

A fault object acts on the cluster's nodes (``inject(cluster, nodes)``) unless its class says
``scope = "world"`` (or any scope but ``"nodes"``): then it is handed the trial's
:class:`FaultContext` (cluster, links, worker pids). It may have ``prepare(cluster, nodes)``, run at
the start (action ``prepare``, undone by its heal if the trial ends first), and a step may set
``latest_ns``: inject then at the latest, counted from the start, when no acquire triggered it
sooner (failover: its master dies either way).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lockcompare.errors import ConfigError
from lockcompare.faults.aim import Lease
from lockcompare.infra.cluster import Cluster
from lockcompare.scenario.faultkinds.base import FaultAction
from lockcompare.scenario.schedule import FaultStep

if TYPE_CHECKING:
    from lockcompare.faults.freeze import Freezer
    from lockcompare.infra.proxy import ProxySet


@dataclass(frozen=True)
class FaultContext:
    """What a ``scope = "world"`` fault acts on: the cluster, the workers' links, the worker processes."""

    cluster: Cluster
    links: ProxySet | None = None
    pids: tuple[int, ...] = ()
    freezer: Freezer | None = None

    def links_running(self) -> bool:
        return self.links is not None and self.links.is_running()

    def require_links(self) -> ProxySet:
        if self.links is None:
            raise ConfigError("a link fault needs the trial's proxied links (trial.run_trial starts them)")
        return self.links


@dataclass(frozen=True, kw_only=True)
class PlannedStep:
    """One step, ready to run: times in ns (scaled); ``build(worker)`` makes its fault object."""

    index: int
    step: FaultStep
    build: Callable[[int | None], FaultAction]
    after_ns: int = 0
    heal_after_ns: int | None = None
    latest_ns: int | None = None
    from_round: int = 1  # at=acquire: the first round whose acquire it surrounds
    prepares: bool = False  # its fault has a prepare step, run at the start (failover)
    fixed_nodes: tuple[int, ...] | None = None  # the nodes a worker-aimed step acts on (session-kill: 0)


@dataclass
class Active:
    fault: FaultAction
    nodes: list[int]
    round: int
    heal_due: int | None
    extra: dict[str, Any]


@dataclass
class StepState:
    planned: PlannedStep
    pending: tuple[int, int] | None = None  # (due ns, round)
    aimed: Lease | None = None  # the lease whose acquire made the pending injection due
    trigger_ns: int | None = None  # when that acquire was reported (reads since then serve the step)
    active: Active | None = None
    injected: int = 0
    prepared: tuple[FaultAction, list[int]] | None = None  # (fault, nodes) of a prepare not yet injected
