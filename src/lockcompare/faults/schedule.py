"""When the runner injects and heals a node fault during a trial, and how it is recorded.

A fault is tied to a worker's lease, as in Jepsen's scheduled nemesis: the worker reports each
acquire (``("acquired", round, t_ns)`` down its pipe, without waiting); ``delay_ms`` later — while
that worker still holds its lease — the runner injects the fault, and heals it ``heal_after_ms``
after that, or when the trial ends. Every injection and heal is an event of the runner's own
(``worker == -1``) in the trial's history, between the workers' steps:

    {"worker": -1, "round": R, "kind": "fault", "fault": "node-restart", "action": "inject",
     "t0": ns, "t1": ns, "nodes": [0, 1, 2], "detail": "SIGKILL", "holders": [owner, owner, None, ...]}

(``holders``: who held the lock on each node just before a planned injection; faults/holders.py;
``planned_ns``: when a scheduled injection or heal was due, so its lateness is ``t0 - planned_ns``.)

:meth:`FaultScheduler.heal_all` runs in the runner's ``finally``: no node stays down, no clock stays
ahead, no link stays cut, whatever ended the trial.

*Standing* faults (:class:`StandingFault`, e.g. a partition) follow no lease: :meth:`FaultScheduler.start`
injects them once every worker is ready, before the first round (their events have round -1), and
``heal_all`` heals them. A fault acts on the cluster's nodes (it is handed the
:class:`~lockcompare.infra.cluster.Cluster`) unless its class says ``scope = "links"``: then it is handed
the trial's :class:`FaultContext`, which holds the cluster and the workers' proxied links.

A fault may also have a ``prepare(cluster, nodes)`` step, which :meth:`FaultScheduler.start` runs
when the workers are released (recorded as action ``prepare``; healed like an injection if the
trial ends before the injection), and a plan may set ``latest_ms``: inject then at the latest,
counted from the start, when the worker's lease has not triggered the fault sooner (the failover
fault: its master dies whether or not a lease was granted).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lockcompare.analysis.history import Event, now_ns
from lockcompare.errors import ConfigError
from lockcompare.faults.holders import LockHolders
from lockcompare.faults.node import NodeFault
from lockcompare.infra.cluster import Cluster

if TYPE_CHECKING:
    from lockcompare.infra.proxy import ProxySet


@dataclass(frozen=True)
class FaultContext:
    """What a link fault (``scope = "links"``) acts on: the trial's cluster and its workers' links."""

    cluster: Cluster
    links: ProxySet | None = None

    def links_running(self) -> bool:
        return self.links is not None and self.links.is_running()

    def require_links(self) -> ProxySet:
        if self.links is None:
            raise ConfigError("a link fault needs the trial's proxied links (trial.run_trial starts them)")
        return self.links


@dataclass(frozen=True, kw_only=True)
class StandingFault:
    """A fault in place for the whole trial: injected before the first round, healed when it ends."""

    fault: Any  # a NodeFault, or a link fault (faults/network.py)
    nodes: tuple[int, ...]


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
    plan: FaultPlan | None  # None: standing faults only
    cluster: Cluster
    events: list[Event] = field(default_factory=list)
    _inject_at: tuple[int, int] | None = None  # (due ns, round)
    _heal_at: tuple[int, int] | None = None
    _active_round: int | None = None
    _injected: int = 0
    _prepared: bool = False
    _round: int = 0  # the followed worker's latest round with a lease
    links: ProxySet | None = None
    standing: tuple[StandingFault, ...] = ()
    _standing_active: list[StandingFault] = field(default_factory=list)
    #: Faults in place while worker 0 acquires: from the start of each round's acquire until it
    #: returns (the worker waits for the runner at both ends: WorkerPlan.acquire_handshake).
    around_acquire: tuple[StandingFault, ...] = ()
    #: Round 0's acquire is left alone: it opens the worker's connections, and a client's connect
    #: handshake (several round trips in redis-py) is not its acquire (measured: 5 delays, not 1).
    around_acquire_from_round: int = 1
    _around_active: list[tuple[StandingFault, int]] = field(default_factory=list)
    #: Reads which node holds the lock just before each planned injection (faults/holders.py);
    #: None: not read (external servers, etcd members). Closed by :meth:`heal_all`.
    holders: LockHolders | None = None

    def start(self) -> None:
        """When the workers are released: inject the standing faults, run the planned fault's
        ``prepare`` step and start its ``latest_ms``."""
        for standing in self.standing:
            self._standing_active.append(standing)  # first: a half-done inject is healed too
            self._record(standing.fault, "inject", list(standing.nodes), round_=-1)
        if self.plan is None:
            return
        prepare = getattr(self.plan.fault, "prepare", None)
        if prepare is not None:
            self._prepared = True
            self._act("prepare", 0)
        if self.plan.latest_ms is not None:
            self._inject_at = (now_ns() + int(self.plan.latest_ms * 1e6), 0)

    def on_acquire_turn(self, *, worker: int, round_: int, starting: bool) -> None:
        """Inject the around-acquire faults as worker 0 starts a round's acquire; heal them when it ends."""
        if worker != 0:
            return
        if starting and round_ >= self.around_acquire_from_round:
            for around in self.around_acquire:
                self._around_active.append((around, round_))
                self._record(around.fault, "inject", list(around.nodes), round_=round_)
        else:
            self._heal_around()

    def _heal_around(self) -> None:
        while self._around_active:
            around, round_ = self._around_active.pop()
            self._record(around.fault, "heal", list(around.nodes), round_=round_)

    def on_acquired(self, *, worker: int, round_: int, t_ns: int) -> None:
        if self.plan is None:
            return
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
            planned, round_ = self._inject_at
            round_ = max(round_, self._round)  # a deadline injection lands in the latest round
            self._inject_at = None
            self._act("inject", round_, planned_ns=planned)
            self._active_round = round_
            self._injected += 1
            if self.plan is not None and self.plan.heal_after_ms is not None:  # plan is set when _inject_at is
                self._heal_at = (now_ns() + int(self.plan.heal_after_ms * 1e6), round_)
        if self._heal_at is not None and self._heal_at[0] <= now_ns():
            planned, round_ = self._heal_at
            self._heal_at = None
            self._act("heal", round_, planned_ns=planned)
            self._active_round = None

    def heal_all(self) -> None:
        """Heal whatever is still injected (the runner's ``finally``); reset every fake clock."""
        self._inject_at = None
        try:
            if self._active_round is not None:
                self._heal_at = None
                round_, self._active_round = self._active_round, None
                self._act("heal", round_)
            elif self._prepared and not self._injected:
                self._act("heal", self._round)  # prepared, never injected: undo the preparation
        finally:
            self._prepared = False
            try:
                self._heal_around()
                while self._standing_active:
                    standing = self._standing_active.pop()
                    self._record(standing.fault, "heal", list(standing.nodes), round_=-1)
            finally:
                try:
                    self.cluster.reset_clocks()
                finally:
                    if self.holders is not None:
                        self.holders.close()

    def _act(self, action: str, round_: int, *, planned_ns: int | None = None) -> None:
        assert self.plan is not None
        # read before the step (and its t0): the state the fault struck, not the one it made
        seen: dict[str, Any] = (
            {"holders": self.holders.read()} if action == "inject" and self.holders is not None else {}
        )
        if planned_ns is not None:  # when it was due: t0 - planned_ns is how late it landed (analysis/sentinel.py)
            seen["planned_ns"] = planned_ns
        self._record(self.plan.fault, action, list(self.plan.nodes), round_=round_, extra=seen)

    def _record(
        self, fault: Any, action: str, nodes: list[int], *, round_: int, extra: dict[str, Any] | None = None
    ) -> None:
        t0 = now_ns()
        step = {"inject": fault.inject, "heal": fault.heal}.get(action) or getattr(fault, action)
        on_links = getattr(fault, "scope", "nodes") == "links"
        target = FaultContext(cluster=self.cluster, links=self.links) if on_links else self.cluster
        detail = step(target, nodes)
        self.events.append(
            {
                "worker": -1,
                "round": round_,
                "kind": "fault",
                "fault": fault.name,
                "action": action,
                "t0": t0,
                "t1": now_ns(),
                "nodes": nodes,
                "detail": detail,
                **(extra or {}),
            }
        )
