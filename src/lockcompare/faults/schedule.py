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
relative to the lease (``holders:K``, ``others:K``, ``worker=holder``, ``holder-member``) are
resolved from what was read ahead of the step (faults/aim.py, faults/holders.py, faults/targets.py)
and confirmed when it lands; one that cannot be resolved is recorded as ``skipped`` with the reason
and aimed nowhere else. Every
injection, heal and skip is an event of the runner's own (``worker == -1``) in the history::

    {"worker": -1, "round": R, "kind": "fault", "fault": "restart", "action": "inject",
     "step": 0, "target": "holders:1", "t0": ns, "t1": ns, "planned_ns": ns, "late_ms": 0.4,
     "nodes": [2], "holders": [owner, None, owner, ...], "lease_owner": owner, "detail": "SIGKILL"}

(``planned_ns``: when the step was due; ``late_ms``: how much later it landed — what the timing
sentinel reads.)

**Aimed when it lands** (faults/aim.py). A lease-aimed step (``holders:K``, ``others:K``,
``worker=holder``, ``holder-member``) triggered by an acquire is aimed at *that* acquire's lease
(``aimed_owner``). What it needs of the servers (the nodes holding the lease, the holder's member)
is read *ahead*, from the moment the acquire is reported; at its planned moment the step confirms
from the worker's lease slot (faults/leases.py, shared memory: no server read) that the lease is
still held, acts at once, and checks the slot again once the fault has acted. The event's ``aim``
says what the fault met: ``struck`` (the lease it was aimed at, held when it acted),
``retargeted`` (that lease had ended, another was held and the servers had been read since it was
granted: the fault struck that one), ``missed`` (that lease had ended and nothing else could be
aimed at without a read: nothing is injected; the event is a ``skipped`` one) or ``raced`` (the
lease ended while the fault acted: which came first is not known). The event names what the step
hit: ``lease_owner``, ``lease_worker``, ``lease_round`` and ``lease_held`` (the lease was held at
the moment the fault acted, as the worker's slot says). analysis/strikes.py counts them; a trial
whose schedule struck nothing has no safety verdict. An inject event also says ``struck``: false
when its fault acted on nothing (a session-kill that found no session, or whose session was no
worker's current lease at kill time).

:meth:`FaultScheduler.heal_all` runs in the runner's ``finally`` (Ctrl-C included): no node stays
down, no clock stays moved, no link stays cut, no worker stays stopped.

The steps and what they act on: faults/steps.py; the events it writes for skipped steps: faults/fault_events.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lockcompare.analysis.history import Event, now_ns
from lockcompare.faults.aim import Aim, Fetched, Lease, SessionGuard, missed
from lockcompare.faults.fault_events import skipped_event, target_fields
from lockcompare.faults.holders import LockHolders
from lockcompare.faults.leases import LeaseSlot
from lockcompare.faults.resolve import HOLDERS, Targets, lease_relative
from lockcompare.faults.roles import roles_now
from lockcompare.faults.steps import Active, FaultContext, PlannedStep, StepState
from lockcompare.faults.targets import Resolution
from lockcompare.infra.cluster import Cluster
from lockcompare.scenario import faultkinds
from lockcompare.scenario.faultkinds.base import FaultAction

if TYPE_CHECKING:
    from lockcompare.faults.freeze import Freezer
    from lockcompare.infra.proxy import ProxySet


@dataclass
class FaultScheduler:
    steps: list[PlannedStep]
    cluster: Cluster
    node_count: int
    workers: int
    links: ProxySet | None = None
    #: Reads which node holds the lock, ahead of each lease-aimed injection (faults/holders.py);
    #: None: not read (external servers, etcd members). Closed by :meth:`heal_all`.
    holders: LockHolders | None = None
    events: list[Event] = field(default_factory=list)
    pids: tuple[int, ...] = ()
    freezer: Freezer | None = None
    _states: list[StepState] = field(default_factory=list)
    _aim: Aim = field(default_factory=Aim)
    _latest_round: dict[int, int] = field(default_factory=dict)
    _targets: Targets = field(init=False)

    def __post_init__(self) -> None:
        self._states = [StepState(planned=p) for p in self.steps]
        self._targets = Targets(
            cluster=self.cluster, node_count=self.node_count, workers=self.workers, aim=self._aim,
            links=self.links, holders=self.holders,
        )  # fmt: skip

    def attach_workers(self, *, pids: tuple[int, ...], freezer: Freezer, leases: Sequence[LeaseSlot] = ()) -> None:
        """The worker processes a ``starve`` step acts on, and their lease slots (faults/leases.py) a
        lease-aimed step confirms its lease against (known once the crew is spawned)."""
        self.pids, self.freezer = pids, freezer
        self._targets.pids = pids
        self._aim.slots = tuple(leases)

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
        self,
        *,
        worker: int,
        round_: int,
        t_ns: int,
        owner: str | None = None,
        session: str | None = None,
        granted_by: list[int] | None = None,
    ) -> None:
        """An acquire a worker reported: the steps it makes due, and the reads they need, started now."""
        reported = now_ns()
        lease = None
        if owner:
            lease = Lease(
                owner=owner, worker=worker, round=round_, reported_ns=reported,
                session=None if session is None else str(session),
                granted_by=None if granted_by is None else tuple(granted_by),
            )  # fmt: skip
            self._aim.reported(lease)
        self._latest_round[worker] = round_
        self._targets.last_acquirer = worker
        for state in self._states:
            step = state.planned.step
            if step.at != "after-acquire" or faultkinds.KINDS[step.kind].in_worker or step.follow != worker:
                continue
            if state.active is not None or (state.injected and not step.every):
                continue
            due = t_ns + state.planned.after_ns
            if state.pending is None or due < state.pending[0]:  # a pending injection is never put off
                state.pending = (due, round_)
                state.aimed, state.trigger_ns = lease, reported
        pending = [s.planned.step.nodes for s in self._states if s.pending is not None and s.planned.step.nodes]
        self._targets.read_ahead(worker, pending=pending, granted=lease is not None and lease.granted_by is not None)

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
            self._aim.close()  # first: a read still running uses the holders' connections
            if self.holders is not None:
                self.holders.close()
        if first is not None:
            raise first

    # -- what -----------------------------------------------------------------------------------

    def _prepare(self, state: StepState, *, planned: int) -> None:
        resolution, _ = self._targets.resolve(state.planned.step, lease=None, since_ns=None)
        if resolution.reason:
            self._skip(state, round_=-1, planned=planned, resolution=resolution, action="prepare")
            return
        fault = state.planned.build(resolution.worker)
        state.prepared = (fault, list(resolution.nodes))  # first: a half-done prepare is healed too
        self._act(state, fault, "prepare", list(resolution.nodes), round_=-1, planned=planned)

    def _inject(self, state: StepState, *, round_: int, planned: int) -> None:
        step = state.planned.step
        self._targets.last_holders = None
        aimed, state.aimed = state.aimed, None
        if aimed is not None and lease_relative(step):
            self._inject_aimed(state, aimed, round_=round_, planned=planned)
            return
        since = state.trigger_ns if step.at == "after-acquire" else None
        resolution, fetched = self._targets.resolve(step, lease=None, since_ns=since)
        if resolution.reason:
            self._skip(state, round_=round_, planned=planned, resolution=self._targets.hinted(resolution))
            return
        self._strike(state, resolution, round_=round_, planned=planned, fetched=fetched, since=since)

    def _inject_aimed(self, state: StepState, aimed: Lease, *, round_: int, planned: int) -> None:
        """A lease-aimed step at its planned moment: confirm its lease (faults/aim.py), resolve its
        targets from what was read ahead, act (module docstring)."""
        step = state.planned.step
        aim: dict[str, Any] = {"aimed_owner": aimed.owner}
        if not self._aim.can_confirm():
            reason = "the workers' lease slots are not attached: the lease it was aimed at cannot be confirmed"
            self._skip(state, round_=round_, planned=planned, resolution=Resolution(reason=reason), extra=aim)
            return
        target, met = aimed, "struck"
        if not self._aim.holds(aimed):
            current = self._aim.current()
            if current is None or not self._targets.read_covers(step, current):
                why = "the lease it was aimed at had ended when it landed (released, or past its deadline)"
                if current is not None:
                    why += f"; worker {current.worker}'s lease, held now, was granted after the servers were read"
                self._skip(
                    state, round_=round_, planned=planned, resolution=missed(why), extra={**aim, "aim": "missed"}
                )
                return
            target, met = current, "retargeted"
        resolution, fetched = self._targets.resolve(step, lease=target, since_ns=target.reported_ns)
        if resolution.reason:
            self._skip(state, round_=round_, planned=planned, resolution=self._targets.hinted(resolution), extra=aim)
            return
        if not self._aim.holds(target):  # it ended while the step waited for what was read ahead
            why = "the lease it was aimed at ended while the step waited for its read ahead"
            self._skip(state, round_=round_, planned=planned, resolution=missed(why), extra={**aim, "aim": "missed"})
            return
        aim |= {"aim": met, "lease_worker": target.worker, "lease_round": target.round}
        self._strike(
            state, resolution, round_=round_, planned=planned, fetched=fetched, aim=aim, lease=target,
            since=target.reported_ns,
        )  # fmt: skip

    def _strike(
        self,
        state: StepState,
        resolution: Resolution,
        *,
        round_: int,
        planned: int,
        fetched: Fetched | None,
        aim: dict[str, Any] | None = None,
        lease: Lease | None = None,
        since: int | None = None,
    ) -> None:
        step = state.planned.step
        if state.prepared is not None:
            fault, nodes = state.prepared
            state.prepared = None
        else:
            fixed = state.planned.fixed_nodes
            fault, nodes = state.planned.build(resolution.worker), list(resolution.nodes if fixed is None else fixed)
        heal_after = state.planned.heal_after_ns
        state.active = Active(fault=fault, nodes=nodes, round=round_, heal_due=None, extra={})
        state.injected += 1
        self._act(
            state, fault, "inject", nodes, round_=round_, planned=planned, resolution=resolution, aim=aim,
            lease=lease, fetched=fetched, since=since,
        )  # fmt: skip
        if heal_after is not None and step.at != "acquire":
            state.active.heal_due = now_ns() + heal_after

    def _heal(self, state: StepState, *, planned: int | None) -> None:
        active = state.active
        assert active is not None
        state.active = None  # first: a heal that raises is not retried forever
        self._act(state, active.fault, "heal", active.nodes, round_=active.round, planned=planned, carried=active.extra)

    def _skip(
        self,
        state: StepState,
        *,
        round_: int,
        planned: int,
        resolution: Resolution,
        action: str = "inject",
        extra: dict[str, Any] | None = None,
    ) -> None:
        self.events.append(
            skipped_event(
                state.planned,
                round_=round_,
                planned=planned,
                resolution=resolution,
                action=action,
                holders=self._targets.last_holders,
                extra=extra,
            )
        )

    def _act(
        self,
        state: StepState,
        fault: FaultAction,
        action: str,
        nodes: list[int],
        *,
        round_: int,
        planned: int | None,
        resolution: Resolution | None = None,
        carried: dict[str, Any] | None = None,
        aim: dict[str, Any] | None = None,
        lease: Lease | None = None,
        fetched: Fetched | None = None,
        since: int | None = None,
    ) -> None:
        """Run one action of a step and record it. ``since``: when the acquire that made an injection
        due was reported (the holders read ahead since then is its evidence)."""
        extra: dict[str, Any] = dict(aim or {})
        if action == "inject" and fetched is not None and isinstance(fetched.value, list):
            extra["holders"] = fetched.value  # read ahead of the step: the nodes that held what it struck
        if action == "inject" and lease is not None and lease.granted_by is not None:
            extra["granted_by"] = list(lease.granted_by)  # the nodes that granted what it struck: its aim
        if resolution is not None and resolution.lease_owner is not None:
            extra["lease_owner"] = resolution.lease_owner
        if resolution is not None and resolution.worker is not None:
            extra["target_worker"] = resolution.worker
        elif carried and "target_worker" in carried:
            extra["target_worker"] = carried["target_worker"]  # a heal names whom its injection hit
        if resolution is not None and resolution.roles is not None:
            extra["roles"] = resolution.roles  # who led as it struck (faults/roles.py)
        by_role = state.planned.step.nodes is not None and state.planned.step.nodes.by_role
        if action == "heal" and by_role:
            extra["roles_before"] = (carried or {}).get("roles")
        takes_guard = action == "inject" and getattr(fault, "takes_guard", False)
        guard = SessionGuard(aim=self._aim, fallback=lease) if takes_guard else None
        on_world = getattr(fault, "scope", "nodes") != "nodes"
        target = (
            FaultContext(cluster=self.cluster, links=self.links, pids=self.pids, freezer=self.freezer)
            if on_world
            else self.cluster
        )
        t0 = now_ns()
        if action == "inject" and fetched is not None:
            extra["aim_age_ms"] = round((t0 - fetched.started_ns) / 1e6, 3)  # how old the read ahead was
            extra["read_wait_ms"] = fetched.wait_ms  # what the step waited for it at its planned moment
        if guard is not None:
            detail = fault.inject(target, nodes, guard=guard)  # type: ignore[call-arg]
        else:
            step_fn = {"inject": fault.inject, "heal": fault.heal}.get(action) or getattr(fault, action)
            detail = step_fn(target, nodes)
        if isinstance(detail, tuple):  # (detail, fields): a fault naming what it struck (session-kill's sessions)
            detail, struck = detail
            extra.update(struck)
        t1 = now_ns()
        if action == "inject" and "holders" not in extra and nodes and self.holders is not None and since is not None:
            # What the nodes held as it struck: the read made ahead of it, collected now it has acted.
            evidence = self._aim.evidence_since(HOLDERS, since, before_ns=t0)
            if evidence is not None:
                extra |= {"holders": evidence.value, "holders_age_ms": round((t0 - evidence.started_ns) / 1e6, 3)}
            elif (
                lease is not None and lease.granted_by is not None
            ):  # no read ran wholly before it: what the grant says
                granted = lease.granted_by
                extra["holders"] = [lease.owner if i in granted else None for i in range(self.node_count)]
                extra["holders_from"] = "granted_by"
        if action == "heal" and by_role:
            # Who leads as the fault ends, read right after the heal acted. Read before it, a frozen
            # leader answers no status request: the read waited its timeout (0.5 s) and the heal
            # landed that late, the freeze lasting longer than its for= (every leader-freeze trial
            # was timing-marked, and the matrix halved its parallelism for each).
            extra["roles"] = roles_now(self.cluster)
        if action == "inject":
            # A fault that found nothing to act on says so by its detail ("skipped: ..."): not a strike.
            extra.setdefault("struck", not str(detail).startswith("skipped"))
            if guard is not None or extra.get("session_owner") is not None or extra.get("sessions_ended"):
                extra |= self._aim.session_hit(extra, guard=guard, aimed=lease)
            elif lease is not None:
                extra |= {"acted_ns": t0, **self._aim.lease_hit(lease, acted_ns=t0)}
            if not extra["struck"] and extra.get("aim") in ("struck", "retargeted"):
                extra["aim"] = "missed"  # it acted on nothing (a session kill that found no session)
        if action == "inject" and state.active is not None:
            state.active.extra = dict(extra)
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
                **target_fields(state.planned.step),
                **extra,
            }
        )
