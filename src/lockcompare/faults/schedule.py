"""The schedule runner: injects and heals a trial's fault steps on time, and records every one.

Jepsen's scheduled nemesis, kept small. Each :class:`PlannedStep` (built from a parsed
:class:`~lockcompare.scenario.schedule.FaultStep` by faults/plan.py, times already scaled) lands

- ``at=start``: when the workers are released (before any round; its events have round -1);
- ``after-acquire``: ``after_ns`` after an acquire of the worker it follows (workers report each
  acquire, ``("acquired", round, [t_ns, owner])``, without waiting), every round or once; a step
  still injected is not injected again, and a pending injection is never put off;
- ``at=acquire``: around each acquire of its worker (the worker waits for the runner before and
  after it: WorkerPlan.acquire_handshake), from the worker's second round.

It heals ``for`` after the injection (``heal_after_ns``; None: when the trial ends). Targets given
relative to the lease (``holders:K``, ``others:K``, ``worker=holder``) are resolved at injection
from the lock key read on every node just before (faults/holders.py, faults/targets.py); one that
cannot be resolved is recorded as ``skipped`` with the reason and aimed nowhere else. Every
injection, heal and skip is an event of the runner's own (``worker == -1``) in the history::

    {"worker": -1, "round": R, "kind": "fault", "fault": "restart", "action": "inject",
     "step": 0, "target": "holders:1", "t0": ns, "t1": ns, "planned_ns": ns, "late_ms": 0.4,
     "nodes": [2], "holders": [owner, None, owner, ...], "lease_owner": owner, "detail": "SIGKILL"}

(``planned_ns``: when the step was due; ``late_ms``: how much later it landed — what the timing
sentinel reads.)

**Aimed when it lands.** A lease-aimed step (``holders:K``, ``others:K``, ``worker=holder``)
triggered by an acquire is aimed at *that* acquire's lease (``aimed_owner``). Its target is read
when it lands, not when it was due: a read slower than :data:`AIM_FRESH_MS` (a stalled machine) is
read again before the fault acts, and the event says how old the read was (``aim_age_ms``). The
event's ``aim`` then says what the fault met: ``struck`` (the lease it was aimed at, still held),
``retargeted`` (that lease had ended, another was held: the fault struck the current one) or
``missed`` (that lease had ended and none was held: nothing is injected; the event is a
``skipped`` one with ``aim: missed``). analysis/strikes.py counts them; a trial whose schedule
struck nothing has no safety verdict. An inject event also says ``struck``: false when its fault
acted on nothing (a session-kill that found no session).

:meth:`FaultScheduler.heal_all` runs in the runner's ``finally`` (Ctrl-C included): no node stays
down, no clock stays moved, no link stays cut, no worker stays stopped.

A fault object acts on the cluster's nodes (``inject(cluster, nodes)``) unless its class says
``scope = "world"``: then it is handed the trial's :class:`FaultContext` (cluster, links, worker
pids). It may have ``prepare(cluster, nodes)``, run at the start (action ``prepare``, undone by its
heal if the trial ends first), and a step may set ``latest_ns``: inject then at the latest, counted
from the start, when no acquire triggered it sooner (failover: its master dies either way).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lockcompare.analysis.history import Event, now_ns
from lockcompare.analysis.holders import UNREADABLE
from lockcompare.errors import ConfigError
from lockcompare.faults.holders import LockHolders
from lockcompare.faults.roles import aim_by_role, roles_now
from lockcompare.faults.targets import Resolution, current_owner, resolve_nodes, resolve_worker
from lockcompare.infra.cluster import Cluster
from lockcompare.scenario import faultkinds
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
class _Active:
    fault: FaultAction
    nodes: list[int]
    round: int
    heal_due: int | None
    extra: dict[str, Any]


#: How old (ms) the holders read may be when a lease-aimed fault lands before it is read again: a
#: loopback read takes ~1 ms; one slower than this ran on a stalled machine, and the lease it saw may
#: have ended meanwhile (measured: faults that struck 300-606 ms after their read, on a lease released
#: 40-106 ms before they landed).
AIM_FRESH_MS = 20.0


@dataclass
class _State:
    planned: PlannedStep
    pending: tuple[int, int] | None = None  # (due ns, round)
    aimed: str | None = None  # the owner whose acquire made the pending injection due (its lease)
    active: _Active | None = None
    injected: int = 0
    prepared: tuple[FaultAction, list[int]] | None = None  # (fault, nodes) of a prepare not yet injected


@dataclass
class FaultScheduler:
    steps: list[PlannedStep]
    cluster: Cluster
    node_count: int
    workers: int
    links: ProxySet | None = None
    #: Reads which node holds the lock before each injection (faults/holders.py); None: not read
    #: (external servers, etcd members). Closed by :meth:`heal_all`.
    holders: LockHolders | None = None
    events: list[Event] = field(default_factory=list)
    pids: tuple[int, ...] = ()
    freezer: Freezer | None = None
    _states: list[_State] = field(default_factory=list)
    _owners: dict[str, int] = field(default_factory=dict)  # owner token -> worker
    _latest_owner: dict[int, str] = field(default_factory=dict)  # worker -> its latest owner token
    _latest_round: dict[int, int] = field(default_factory=dict)
    _last_acquirer: int | None = None
    _session_workers: dict[str, int] = field(default_factory=dict)  # server session of a lease -> worker
    _last_holders: list[str | None] | None = None  # what the latest _resolve read
    _seen_lease: bool = False  # some read of this trial found a lease (the key pattern matches the backend's)

    def __post_init__(self) -> None:
        self._states = [_State(planned=p) for p in self.steps]

    def attach_workers(self, *, pids: tuple[int, ...], freezer: Freezer) -> None:
        """The worker processes a ``starve`` step acts on (known once the crew is spawned)."""
        self.pids, self.freezer = pids, freezer

    def freezes_workers(self) -> bool:
        """Whether a step stops worker processes from outside (its kind says so: ``freezes_worker``)."""
        return any(faultkinds.KINDS[p.step.kind].freezes_worker for p in self.steps)

    # -- when -----------------------------------------------------------------------------------

    def start(self) -> None:
        """When the workers are released: inject the ``at=start`` steps, prepare, start ``latest``."""
        now = now_ns()
        for state in self._states:
            p = state.planned
            if p.step.at == "start":
                self._inject(state, round_=-1, planned=now)
            if p.prepares and p.step.at == "after-acquire":
                self._prepare(state, planned=now)
            if p.latest_ns is not None:
                state.pending = (now + p.latest_ns, 0)

    def on_acquire_turn(self, *, worker: int, round_: int, starting: bool) -> None:
        """Inject the ``at=acquire`` steps of ``worker`` as it starts an acquire; heal them when it ends."""
        for state in self._states:
            p = state.planned
            if p.step.at != "acquire" or p.step.worker is None or p.step.worker.index != worker:
                continue
            if starting and round_ >= p.from_round and state.active is None:
                self._inject(state, round_=round_, planned=now_ns())
            elif not starting and state.active is not None:
                self._heal(state, planned=now_ns())

    def on_acquired(
        self, *, worker: int, round_: int, t_ns: int, owner: str | None = None, session: str | None = None
    ) -> None:
        if owner:
            self._owners[owner] = worker
            self._latest_owner[worker] = owner
        if session is not None:
            self._session_workers[str(session)] = worker
        self._latest_round[worker] = round_
        self._last_acquirer = worker
        confirm = False
        for state in self._states:
            step = state.planned.step
            if step.at != "after-acquire" or faultkinds.KINDS[step.kind].in_worker or step.follow != worker:
                continue
            if state.active is not None or (state.injected and not step.every):
                continue
            due = t_ns + state.planned.after_ns
            if state.pending is None or due < state.pending[0]:  # a pending injection is never put off
                state.pending = (due, round_)
                state.aimed = owner
                confirm = confirm or (state.planned.after_ns > AIM_FRESH_MS * 1e6 and self._lease_relative(step))
        if confirm and not self._seen_lease and self.holders is not None:
            # Until a read has seen this backend's lease, read once now, while the acquire just reported
            # holds it: a landing that then finds none missed a lease that ended, not one it cannot see.
            self._seen_lease = any(v not in (None, UNREADABLE) for v in self.holders.read())

    def seconds_to_next(self) -> float | None:
        due = [s.pending[0] for s in self._states if s.pending is not None]
        due += [s.active.heal_due for s in self._states if s.active is not None and s.active.heal_due is not None]
        return max(0.0, (min(due) - now_ns()) / 1e9) if due else None

    def run_due(self) -> None:
        for state in self._states:
            if state.pending is not None and state.pending[0] <= now_ns():
                planned, round_ = state.pending
                state.pending = None
                follow = state.planned.step.follow
                self._inject(state, round_=max(round_, self._latest_round.get(follow, 0)), planned=planned)
            active = state.active
            if active is not None and active.heal_due is not None and active.heal_due <= now_ns():
                self._heal(state, planned=active.heal_due)

    def heal_all(self) -> None:
        """Heal whatever is still injected or prepared (the runner's ``finally``); reset every fake clock.

        Every step is healed even when one heal raises; the first error is raised at the end."""
        first: BaseException | None = None
        for state in reversed(self._states):
            state.pending = None
            try:
                if state.active is not None:
                    self._heal(state, planned=None)
                elif state.prepared is not None:
                    fault, nodes = state.prepared
                    state.prepared = None
                    self._act(state, fault, "heal", nodes, round_=self._latest_round.get(0, 0), planned=None)
            except BaseException as exc:  # noqa: BLE001 - raised below, once every step had its heal
                first = first or exc
        try:
            self.cluster.reset_clocks()
        finally:
            if self.holders is not None:
                self.holders.close()
        if first is not None:
            raise first

    # -- what -----------------------------------------------------------------------------------

    def _prepare(self, state: _State, *, planned: int) -> None:
        step = state.planned.step
        resolution = self._resolve(step, read=False)
        if resolution.reason:
            self._skip(state, round_=-1, planned=planned, resolution=resolution, action="prepare")
            return
        fault = state.planned.build(resolution.worker)
        state.prepared = (fault, list(resolution.nodes))  # first: a half-done prepare is healed too
        self._act(state, fault, "prepare", list(resolution.nodes), round_=-1, planned=planned)

    def _inject(self, state: _State, *, round_: int, planned: int) -> None:
        step = state.planned.step
        aimed, state.aimed = state.aimed, None
        read_at = now_ns()
        resolution = self._resolve(step, read=True)
        if self._last_holders is not None and (now_ns() - read_at) / 1e6 > AIM_FRESH_MS:
            read_at = now_ns()  # a slow read: what it saw first may have ended, so read when landing
            resolution = self._resolve(step, read=True)
        aim = self._aim(step, aimed=aimed, resolution=resolution)
        if aim:
            aim["aim_age_ms"] = round((now_ns() - read_at) / 1e6, 3)
        if resolution.reason:
            if aim.get("aim") == "missed":
                resolution = Resolution(
                    reason=f"missed: the lease it was aimed at had ended when it landed ({resolution.reason})"
                )
            elif self._last_holders is not None and not self._seen_lease:
                pattern = getattr(self.holders, "pattern", "?")
                resolution = Resolution(
                    reason=f"{resolution.reason} (no read in this trial found a lease under the key pattern "
                    f"{pattern!r}: a backend whose key lies elsewhere declares key_pattern, docs/plugins.md)"
                )
            self._skip(state, round_=round_, planned=planned, resolution=resolution, extra=aim)
            return
        if state.prepared is not None:
            fault, nodes = state.prepared
            state.prepared = None
        else:
            fixed = state.planned.fixed_nodes
            fault, nodes = state.planned.build(resolution.worker), list(resolution.nodes if fixed is None else fixed)
        heal_after = state.planned.heal_after_ns
        state.active = _Active(fault=fault, nodes=nodes, round=round_, heal_due=None, extra={})
        state.injected += 1
        self._act(state, fault, "inject", nodes, round_=round_, planned=planned, resolution=resolution, aim=aim)
        if heal_after is not None and step.at != "acquire":
            state.active.heal_due = now_ns() + heal_after

    def _heal(self, state: _State, *, planned: int | None) -> None:
        active = state.active
        assert active is not None
        state.active = None  # first: a heal that raises is not retried forever
        self._act(state, active.fault, "heal", active.nodes, round_=active.round, planned=planned, carried=active.extra)

    def _resolve(self, step: FaultStep, *, read: bool) -> Resolution:
        if step.nodes is not None and step.nodes.by_role:  # asked of the servers' kind (faults/roles.py)
            return aim_by_role(
                step.nodes, cluster=self.cluster, worker=self._last_acquirer, pids=self.pids, links=self.links
            )
        lease_relative = (step.nodes is not None and step.nodes.from_lease) or (
            step.worker is not None and step.worker.index is None
        )
        holders = self.holders.read() if read and self.holders is not None and step.at != "acquire" else None
        self._last_holders = holders
        self._seen_lease = self._seen_lease or any(v not in (None, UNREADABLE) for v in holders or ())
        preferred = self._latest_owner.get(step.follow)
        nodes: tuple[int, ...] = ()
        owner = None
        if step.nodes is not None:
            r = resolve_nodes(step.nodes, node_count=self.node_count, holders=holders, preferred_owner=preferred)
            if r.reason:
                return r
            nodes, owner = r.nodes, r.lease_owner
        worker = None
        if step.worker is not None:
            r = resolve_worker(
                step.worker, workers=self.workers, holders=holders, owners=self._owners,
                preferred_owner=preferred, last_acquirer=self._last_acquirer,
            )  # fmt: skip
            if r.reason:
                return r
            worker, owner = r.worker, owner or r.lease_owner
        if not lease_relative:
            owner = None
        return Resolution(nodes=nodes, worker=worker, lease_owner=owner)

    @staticmethod
    def _lease_relative(step: FaultStep) -> bool:
        return (step.nodes is not None and step.nodes.from_lease) or (
            step.worker is not None and step.worker.index is None
        )

    def _aim(self, step: FaultStep, *, aimed: str | None, resolution: Resolution) -> dict[str, Any]:
        """What a lease-aimed step triggered by an acquire met when it landed (module docstring);
        {} for a step aimed at fixed targets, or where the holders cannot be read."""
        if not self._lease_relative(step) or aimed is None or self._last_holders is None:
            return {}
        current = current_owner(self._last_holders, preferred=aimed)
        if current is None and not self._seen_lease:
            return {}  # no read has ever found this backend's lease: not known to have ended
        if current == aimed:
            met = "struck" if not resolution.reason else ""
        else:
            met = "missed" if current is None else "retargeted"
        return {"aimed_owner": aimed, **({"aim": met} if met else {})}

    def _skip(
        self,
        state: _State,
        *,
        round_: int,
        planned: int,
        resolution: Resolution,
        action: str = "inject",
        extra: dict[str, Any] | None = None,
    ) -> None:
        t = now_ns()
        self.events.append(
            {
                "worker": -1,
                "round": round_,
                "kind": "fault",
                "fault": state.planned.step.kind,
                "action": "skipped",
                "step": state.planned.index,
                "t0": t,
                "t1": t,
                "planned_ns": planned,
                "late_ms": (t - planned) / 1e6,
                "nodes": [],
                "reason": resolution.reason,
                **({"roles": resolution.roles} if resolution.roles is not None else {}),  # what a role step read
                "skipped": action,
                **self._target_fields(state.planned.step),
                **({"holders": self._last_holders} if self._last_holders is not None else {}),
                **(extra or {}),
            }
        )

    def _act(
        self,
        state: _State,
        fault: FaultAction,
        action: str,
        nodes: list[int],
        *,
        round_: int,
        planned: int | None,
        resolution: Resolution | None = None,
        carried: dict[str, Any] | None = None,
        aim: dict[str, Any] | None = None,
    ) -> None:
        extra: dict[str, Any] = dict(aim or {})
        if action == "inject" and self._last_holders is not None:
            extra["holders"] = self._last_holders  # read before the step (and its t0): what it struck
        if resolution is not None and resolution.lease_owner is not None:
            extra["lease_owner"] = resolution.lease_owner
        if resolution is not None and resolution.worker is not None:
            extra["target_worker"] = resolution.worker
        elif carried and "target_worker" in carried:
            extra["target_worker"] = carried["target_worker"]  # a heal names whom its injection hit
        if resolution is not None and resolution.roles is not None:
            extra["roles"] = resolution.roles  # who led as it struck (faults/roles.py)
        if action == "inject" and state.active is not None:
            state.active.extra = dict(extra)
        by_role = state.planned.step.nodes is not None and state.planned.step.nodes.by_role
        if action == "heal" and by_role:
            extra["roles_before"] = (carried or {}).get("roles")
        t0 = now_ns()
        step_fn = {"inject": fault.inject, "heal": fault.heal}.get(action) or getattr(fault, action)
        on_world = getattr(fault, "scope", "nodes") != "nodes"
        target = (
            FaultContext(cluster=self.cluster, links=self.links, pids=self.pids, freezer=self.freezer)
            if on_world
            else self.cluster
        )
        detail = step_fn(target, nodes)
        if isinstance(detail, tuple):  # (detail, fields): a fault naming what it struck (session-kill's sessions)
            detail, struck = detail
            extra.update(struck)
        t1 = now_ns()
        if action == "heal" and by_role:
            # Who leads as the fault ends, read right after the heal acted. Read before it, a frozen
            # leader answers no status request: the read waited its timeout (0.5 s) and the heal
            # landed that late, the freeze lasting longer than its for= (every leader-freeze trial
            # was timing-marked, and the matrix halved its parallelism for each).
            extra["roles"] = roles_now(self.cluster)
        if action == "inject":
            # A fault that found nothing to act on says so by its detail ("skipped: ..."): not a strike.
            extra.setdefault("struck", not str(detail).startswith("skipped"))
            if extra.get("session_owner") is not None or extra.get("sessions_ended"):
                extra |= self._session_aim(extra)
        self.events.append(
            {
                "worker": -1,
                "round": round_,
                "kind": "fault",
                "fault": state.planned.step.kind,  # one name: the kind's, as in the step
                "action": action,
                "step": state.planned.index,
                "t0": t0,
                "t1": t1,
                "nodes": nodes,
                "detail": detail,
                **({"planned_ns": planned, "late_ms": (t0 - planned) / 1e6} if planned is not None else {}),
                **self._target_fields(state.planned.step),
                **extra,
            }
        )

    def _session_aim(self, extra: dict[str, Any]) -> dict[str, Any]:
        """Whose session a session-kill ended: ``session_worker``, from ``session_owner`` (ZooKeeper:
        the identifier the lock's holder stored, which starts the owner token its acquire returned) or
        from the first of ``sessions_ended`` (PostgreSQL: a backend pid a lease reported as its session);
        and — when that is not the worker it was aimed at — ``aim: retargeted`` (the lease it was aimed
        at had ended and the lock's holder at kill time was another worker)."""
        session_owner = extra.get("session_owner")
        if session_owner is not None:
            ident = str(session_owner)
            worker = next(
                (w for owner, w in self._owners.items() if owner == ident or owner.startswith(ident + ".")), None
            )
        else:
            worker = self._session_workers.get(str(extra["sessions_ended"][0]))
        fields: dict[str, Any] = {"session_worker": worker}
        aimed = extra.get("target_worker")
        if worker is not None and isinstance(aimed, int) and worker != aimed:
            fields["aim"] = "retargeted"
        return fields

    @staticmethod
    def _target_fields(step: FaultStep) -> dict[str, str]:
        fields = {}
        if step.nodes is not None:
            fields["target"] = step.nodes.text
        if step.worker is not None:
            fields["target_worker_spec"] = step.worker.text
        return fields
