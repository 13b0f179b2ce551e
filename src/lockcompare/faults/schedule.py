"""When the runner injects and heals a node fault during a trial, and how it is recorded.

A fault is tied to a worker's lease, as in Jepsen's scheduled nemesis: the worker reports each
acquire (``("acquired", round, t_ns)`` down its pipe, without waiting); ``delay_ms`` later — while
that worker still holds its lease — the runner injects the fault, and heals it ``heal_after_ms``
after that, or when the trial ends. Every injection and heal is an event of the runner's own
(``worker == -1``) in the trial's history, between the workers' steps:

    {"worker": -1, "round": R, "kind": "fault", "fault": "node-restart", "action": "inject",
     "t0": ns, "t1": ns, "nodes": [0, 1, 2], "detail": "SIGKILL"}

:meth:`FaultScheduler.heal_all` runs in the runner's ``finally``: no node stays down, no clock stays
ahead, whatever ended the trial.

A fault may also have a ``prepare(cluster, nodes)`` step, which :meth:`FaultScheduler.start` runs
when the workers are released (recorded as action ``prepare``; healed like an injection if the
trial ends before the injection), and a plan may set ``latest_ms``: inject then at the latest,
counted from the start, when the worker's lease has not triggered the fault sooner (the failover
fault: its master dies whether or not a lease was granted).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from lockcompare.cluster import Cluster
from lockcompare.faults.node import NodeFault
from lockcompare.history import Event, now_ns


@dataclass(frozen=True, kw_only=True)
class FaultPlan:
    fault: NodeFault
    nodes: tuple[int, ...]
    worker: int = 0  # whose leases the fault follows
    delay_ms: float  # after that worker's acquire
    heal_after_ms: float | None  # None: when the trial ends
    every_round: bool  # False: only at the worker's first lease
    latest_ms: float | None = None  # inject at the latest this long after start() (None: only on a lease)


@dataclass
class FaultScheduler:
    plan: FaultPlan
    cluster: Cluster
    events: list[Event] = field(default_factory=list)
    _inject_at: tuple[int, int] | None = None  # (due ns, round)
    _heal_at: tuple[int, int] | None = None
    _active_round: int | None = None
    _injected: int = 0
    _prepared: bool = False
    _round: int = 0  # the followed worker's latest round with a lease

    def start(self) -> None:
        """When the workers are released: run the fault's ``prepare`` step, start ``latest_ms``."""
        prepare = getattr(self.plan.fault, "prepare", None)
        if prepare is not None:
            self._prepared = True
            self._act("prepare", 0, step=prepare)
        if self.plan.latest_ms is not None:
            self._inject_at = (now_ns() + int(self.plan.latest_ms * 1e6), 0)

    def on_acquired(self, *, worker: int, round_: int, t_ns: int) -> None:
        if worker != self.plan.worker or self._active_round is not None:
            return
        self._round = round_
        if self._injected and not self.plan.every_round:
            return
        due = t_ns + int(self.plan.delay_ms * 1e6)
        if self._inject_at is None or due < self._inject_at[0]:  # a pending injection is never put off
            self._inject_at = (due, round_)

    def seconds_to_next(self) -> float | None:
        due = [at for at, _ in filter(None, (self._inject_at, self._heal_at))]
        return max(0.0, (min(due) - now_ns()) / 1e9) if due else None

    def run_due(self) -> None:
        now = now_ns()
        if self._inject_at is not None and self._inject_at[0] <= now:
            _, round_ = self._inject_at
            round_ = max(round_, self._round)  # a deadline injection lands in the latest round
            self._inject_at = None
            self._act("inject", round_)
            self._active_round = round_
            self._injected += 1
            if self.plan.heal_after_ms is not None:
                self._heal_at = (now_ns() + int(self.plan.heal_after_ms * 1e6), round_)
        if self._heal_at is not None and self._heal_at[0] <= now_ns():
            _, round_ = self._heal_at
            self._heal_at = None
            self._act("heal", round_)
            self._active_round = None

    def heal_all(self) -> None:
        """Heal whatever is still injected (the runner's ``finally``); reset every fake clock."""
        self._inject_at = None
        if self._active_round is not None:
            self._heal_at = None
            self._act("heal", self._active_round)
            self._active_round = None
        elif self._prepared and not self._injected:
            self._act("heal", self._round)  # prepared, never injected: undo the preparation
        self._prepared = False
        self.cluster.reset_clocks()

    def _act(self, action: str, round_: int, *, step: Callable[[Cluster, list[int]], str] | None = None) -> None:
        nodes = list(self.plan.nodes)
        t0 = now_ns()
        if step is None:
            step = self.plan.fault.inject if action == "inject" else self.plan.fault.heal
        detail = step(self.cluster, nodes)
        self.events.append(
            {"worker": -1, "round": round_, "kind": "fault", "fault": self.plan.fault.name, "action": action,
             "t0": t0, "t1": now_ns(), "nodes": nodes, "detail": detail}  # fmt: skip
        )
