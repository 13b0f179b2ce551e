"""What every property of the conformance battery stands on (evaluation/conformance.py): the
battery's timings, the outcome types, the context a property runs in and the small helpers the
properties and the claim checks (evaluation/claim_checks.py) share."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from lockcompare.analysis.evidence import LEASE_TOLERANCE_MS
from lockcompare.backends import BackendConfig, Lease, Refusal
from lockcompare.evaluation.backend_host import (
    BackendCallFailed,
    BackendHost,
    Claims,
    RemoteBackend,
)
from lockcompare.evaluation.battery_log import BatteryLog
from lockcompare.infra.cluster import Cluster, embedded_shape, open_cluster, start_embedded
from lockcompare.infra.kinds import RoleKind, Roles, kind_speaking
from lockcompare.infra.warm_pool import WarmPool
from lockcompare.protocols import DEFAULT_PROTOCOL

TTL_MS = 1000
SHORT_TTL_MS = 150
#: Past a SHORT_TTL_MS lease's end by this much, every server has expired the key.
EXPIRY_MARGIN_S = 0.1
#: How far past the TTL a lease's validity may reach: the checker's tolerance, the same one (it was
#: 50 ms here and 0 in the checker, so a lease 8.8 ms past its TTL passed this line and failed the
#: client-pause line of the same card).
VALIDITY_SLACK_NS = int(LEASE_TOLERANCE_MS * 1_000_000)
#: Per-request timeout handed to backends: small, so that a dead node costs little.
REQUEST_TIMEOUT_S = 0.5
#: The deadline of every backend call (construct, acquire, release, close).
CALL_TIMEOUT_S = 5.0
#: Lock nodes of the private clusters the node-loss properties crash.
PRIVATE_NODES = 5
#: How long a backend may take to grant again after a minority of its nodes died: a consensus
#: service (etcd) first elects a new leader when the old one was among them.
RECOVERY_S = 3.0


class Status(StrEnum):
    PASS = "PASS"
    FAIL = "FAIL"
    NOT_CLAIMED = "NOT CLAIMED"
    SKIPPED = "SKIPPED"  # could not be checked here (e.g. the backend's library is not installed)


class PropertyFailed(AssertionError):
    """The backend broke the property; the message is the evidence."""


class NotClaimed(Exception):
    """The backend does not claim the property; the message says why."""


class CannotCheck(Exception):
    """The property could not be put to the test here (SKIPPED); the message says why."""


@dataclass
class BatteryContext:
    """What a property needs: a host running the backend, where the nodes are, and a fresh key.

    ``private_cluster`` opens a cluster of real redis-servers that only this property uses (the
    node-loss properties crash some of its nodes). Instances made through :meth:`new` are closed by
    :func:`check_property` afterwards. ``log`` records the running check (evaluation/battery_log.py);
    with a ``history_dir`` each check's history is saved there, ``<property>.jsonl.gz``.
    """

    host: BackendHost
    node_urls: tuple[str, ...]
    private_cluster: Callable[[], AbstractContextManager[Cluster]] = field(
        default=lambda: open_cluster(node_count=PRIVATE_NODES)
    )
    made: list[RemoteBackend] = field(default_factory=list)
    #: Hosts of clients in a process (group) of their own, stopped by :meth:`close_all`.
    own_hosts: list[BackendHost] = field(default_factory=list)
    log: BatteryLog = field(default_factory=BatteryLog)
    history_dir: Path | None = None

    @property
    def claims(self) -> Claims:
        return self.host.claims()

    def new(
        self, *, node_urls: tuple[str, ...] | None = None, request_timeout_s: float = REQUEST_TIMEOUT_S
    ) -> RemoteBackend:
        config = BackendConfig(node_urls=node_urls or self.node_urls, request_timeout_s=request_timeout_s)
        instance = self.host.new_instance(config=config, log=self.log, worker=self.log.new_client())
        self.made.append(instance)
        return instance

    def new_client_process(self) -> tuple[RemoteBackend, ClientProcess]:
        """An instance alone in a host process of its own: a whole client (with any helper process
        it starts, which inherits the host's process group) that :meth:`ClientProcess.frozen` stops
        without stopping the other clients."""
        host = BackendHost(spec=self.host.spec, call_timeout_s=self.host.call_timeout_s)
        self.own_hosts.append(host)
        config = BackendConfig(node_urls=self.node_urls, request_timeout_s=REQUEST_TIMEOUT_S)
        worker = self.log.new_client()
        instance = host.new_instance(config=config, log=self.log, worker=worker)
        self.made.append(instance)
        return instance, ClientProcess(host=host, log=self.log, worker=worker)

    @staticmethod
    def key() -> str:
        return f"lockcompare-conformance:{uuid.uuid4().hex}"

    def close_all(self) -> None:
        """Close every instance made (each close has the deadline); raise the first failure after all."""
        made, self.made = self.made, []
        first: BackendCallFailed | None = None
        for instance in made:
            try:
                instance.close()
            except BackendCallFailed as exc:
                first = first or exc
        hosts, self.own_hosts = self.own_hosts, []
        for host in hosts:
            host.close()
        if first is not None:
            raise first


@dataclass(frozen=True, kw_only=True)
class ClientProcess:
    """A client's whole process (:meth:`BatteryContext.new_client_process`), whose freeze the check's
    history records: a ``fault`` step ``pause`` on the client's worker, injected and healed."""

    host: BackendHost
    log: BatteryLog
    worker: int

    @contextlib.contextmanager
    def frozen(self) -> Iterator[list[str]]:
        """:meth:`BackendHost.frozen`, recorded (the helpers it could not reach are named)."""
        t0 = time.monotonic_ns()
        with self.host.frozen() as escaped:
            self.log.step(t0=t0, fault="pause", action="inject", target=f"worker {self.worker}",
                          detail="the client's whole process frozen" + _escaped_note(escaped))  # fmt: skip
            try:
                yield escaped
            finally:
                heal_t0 = time.monotonic_ns()
        self.log.step(t0=heal_t0, fault="pause", action="heal", target=f"worker {self.worker}", detail="continued")


# --- helpers -------------------------------------------------------------------------------------


def battery_cluster(servers: object) -> tuple[str, int]:
    """(protocol, lock nodes) of the battery's cluster for a backend whose lock nodes are ``servers``:
    its kind's own count where the kind fixes it (infra/kinds.py LockNodes: one etcd member, one
    PostgreSQL or ZooKeeper server), else :data:`PRIVATE_NODES` nodes (a Redlock's). A kind whose
    nodes are always replicated pairs (Sentinel-managed Redis: its backends are the plain ones, run
    on pairs) is checked on plain nodes of the default protocol, as is a backend that names no kind."""
    kind = kind_speaking(servers) if isinstance(servers, str) else None
    if kind is None or kind.capabilities.always_replicated:
        return DEFAULT_PROTOCOL, PRIVATE_NODES
    return kind.speaks, kind.capabilities.lock_nodes.default or PRIVATE_NODES


def private_cluster_for(
    servers: object, *, redis_server: str | None = None
) -> Callable[[], AbstractContextManager[Cluster]]:
    """What ``private_cluster`` opens for a backend whose lock nodes are ``servers`` (a protocol)."""
    kind, _ = battery_cluster(servers)
    return lambda: open_cluster(node_count=PRIVATE_NODES, redis_server=redis_server, lock_servers=kind)


@contextlib.contextmanager
def prestarted_private_clusters(
    servers: object, *, expected: int, redis_server: str | None = None
) -> Iterator[Callable[[], AbstractContextManager[Cluster]]]:
    """What ``private_cluster`` opens (:func:`private_cluster_for`), from a pool that starts the next
    of the ``expected`` private clusters while a node-loss property runs on the one before: a
    five-member etcd or ZooKeeper ensemble took 1.5-3.5 s to start on the main thread, twice, and
    as long to stop (issue 54). Nothing starts before the first node-loss property asks (a burst of
    JVMs beside a timing check made a lease look 6 ms long), and one at a time (a single starter
    thread). Each is handed out whole and fresh; given back, one whose nodes were crashed is stopped
    on the pool's thread, one left whole is emptied and used again, as the matrix's pool does
    (infra/warm_pool.py). Every cluster is stopped when the block ends."""
    kind, _ = battery_cluster(servers)
    shape = embedded_shape(node_count=PRIVATE_NODES, redis_server=redis_server, lock_servers=kind)
    with WarmPool(build=lambda s: start_embedded(s, redis_server=redis_server), limit=2, starters=1) as pool:
        wanted = expected  # clusters still to hand out, told to the pool at the first one's request

        @contextlib.contextmanager
        def private() -> Iterator[Cluster]:
            nonlocal wanted
            pool.expect([shape] * max(1, wanted))
            wanted -= 1
            cluster = pool.acquire(shape)
            try:
                yield cluster
            finally:
                pool.release(cluster)

        yield private


def _short_ttl_ms(ctx: BatteryContext) -> int:
    """The short lease of the expiry properties: SHORT_TTL_MS, or the backend's shortest (etcd: 1 s)."""
    floor = ctx.claims.min_ttl_ms
    return max(SHORT_TTL_MS, floor if isinstance(floor, int) else 0)


def _expiry_margin_s(ctx: BatteryContext) -> float:
    """How long past a lease's TTL the lock is surely free: the margin, plus the service's own lag."""
    lag = ctx.claims.expiry_lag_ms
    return EXPIRY_MARGIN_S + (lag / 1000 if isinstance(lag, int | float) else 0)


def _recovery_s(ctx: BatteryContext) -> tuple[float, float]:
    """(election, reconnect): how long the backend's kind of lock nodes may take to serve again after
    a minority died (its ``recovery_ms``, else :data:`RECOVERY_S`) and how long its clients may wait
    before they reconnect (its ``reconnect_ms``, else 0); infra/kinds.py Capabilities."""
    servers = ctx.claims.servers
    kind = kind_speaking(servers) if isinstance(servers, str) else None
    if kind is None:
        return RECOVERY_S, 0.0
    capabilities = kind.capabilities
    return max(RECOVERY_S, capabilities.recovery_ms / 1000), capabilities.reconnect_ms / 1000


def _elects(ctx: BatteryContext) -> bool:
    """Do the backend's lock nodes elect a leader after losing one (their kind declares how long that
    may take, ``recovery_ms``: ZooKeeper's)? Independent nodes (a Redlock's) elect nothing."""
    servers = ctx.claims.servers
    kind = kind_speaking(servers) if isinstance(servers, str) else None
    return kind is not None and kind.capabilities.recovery_ms > 0


def _first_lease(ctx: BatteryContext, instance: RemoteBackend, *, key: str, ttl_ms: int, doing: str) -> Lease:
    """A fresh client's first acquire of a free lock. Where the kind's clients take a while to
    connect (its ``reconnect_ms``: ZooKeeper's), a refusal that is not ``held`` is retried for that
    long plus one request timeout: a cold client's first connect is not what a check is about (a
    JVM client under load connected 1.3 s after its first acquire began, refused 'error' at 0.9 s).
    Elsewhere one attempt, as before."""
    _, reconnect_s = _recovery_s(ctx)
    within_s = reconnect_s + REQUEST_TIMEOUT_S if reconnect_s else 0.0
    return _lease_within(instance, key=key, within_s=within_s, doing=doing, ttl_ms=ttl_ms)


def _lease_within(
    instance: RemoteBackend,
    *,
    key: str,
    within_s: float,
    doing: str,
    ttl_ms: int = TTL_MS,
) -> Lease:
    """Acquire, retrying refusals that are not ``held`` for up to ``within_s`` (a leader election)."""
    deadline = time.monotonic() + within_s
    while True:
        outcome = instance.acquire(key=key, ttl_ms=ttl_ms)
        if isinstance(outcome, Lease) or outcome.reason == "held" or time.monotonic() > deadline:
            return _lease(outcome, f"{doing} (retried for {within_s:g} s)" if within_s else doing)
        time.sleep(0.05)


#: How often a node-loss check reads who leads while its client is refused.
ROLES_EVERY_S = 1.0


class RoleWatch:
    """Who leads the lock nodes, read through their kind (a :class:`~lockcompare.infra.kinds.RoleKind`)
    at most every :data:`ROLES_EVERY_S` while a node-loss check waits, and recorded in the check's
    history when it changed (a ``fault`` step ``roles``): a FAIL then says whether no leader served or
    a leader served and the client did not come back. A kind that reads no roles: nothing is read."""

    def __init__(self, ctx: BatteryContext, cluster: Cluster) -> None:
        kind = kind_speaking(str(ctx.claims.servers))
        self._read = (lambda: kind.read_roles(cluster)) if isinstance(kind, RoleKind) else None
        self._log = ctx.log
        self._last: Roles | None = None
        self._read_at = 0.0

    def read(self, *, force: bool = False) -> Roles | None:
        if self._read is None or (not force and time.monotonic() - self._read_at < ROLES_EVERY_S):
            return self._last
        t0 = time.monotonic_ns()
        self._read_at = time.monotonic()
        roles = self._read()
        if roles != self._last:
            self._log.step(t0=t0, fault="roles", action="read", roles=roles.as_event())
        self._last = roles
        return roles

    def said(self) -> str:
        """The latest reading, for a failure's evidence ("" when none)."""
        roles = self.read(force=True)
        if roles is None:
            return ""
        who = "no server led" if roles.leader is None else f"node {roles.leader} led"
        return f"; when it gave up, {who} ({', '.join(roles.modes)})"


def _need(claimed: object, reason: str) -> None:
    if claimed is not True:
        raise NotClaimed(reason)


def _lease(outcome: Lease | Refusal, doing: str) -> Lease:
    if not isinstance(outcome, Lease):
        raise PropertyFailed(f"{doing}: refused ({outcome.reason}), expected a lease")
    return outcome


def _refused(outcome: Lease | Refusal, doing: str) -> Refusal:
    if not isinstance(outcome, Refusal):
        raise PropertyFailed(f"{doing}: granted a lease (owner {outcome.owner[:12]}), expected a refusal")
    return outcome


def _crash(ctx: BatteryContext, cluster: Cluster, indices: range) -> None:
    t0 = time.monotonic_ns()
    for index in indices:
        cluster.node_server(index).crash()
    ctx.log.step(
        t0=t0, fault="crash", action="inject", nodes=list(indices), detail=f"of {len(cluster.node_urls)} lock nodes"
    )


def _escaped_note(escaped: list[str]) -> str:
    """What a failure adds when a helper process left the frozen client's group."""
    return (
        f" (helper process {', '.join(escaped)} left the client's process group: the freeze did not stop it)"
        if escaped
        else ""
    )


@dataclass(frozen=True)
class Property:
    name: str  # the pytest test's name without "test_"
    title: str  # one line on the report card
    check: Callable[[BatteryContext], str]


@dataclass(frozen=True)
class PropertyResult:
    prop: Property
    status: Status
    evidence: str
    #: The check's history (evaluation/battery_log.py), when the battery saved one.
    history: Path | None = None
