"""ZooKeeper servers that lockcompare spawned, for the ``zk-*`` backends: find, start, crash, stop.

The same rules as :mod:`lockcompare.infra.etcd_server`: every server listens on 127.0.0.1 only
(client, quorum and election ports chosen free), keeps its data in a private temp directory removed
by :meth:`ZooKeeperServer.cleanup`, stays a child process (PR_SET_PDEATHSIG, its own process group,
killed by group), and whatever is not cleaned up is stopped and removed when the interpreter exits.

The server is Debian's ``zookeeper`` package (3.8: ``/usr/share/java/zookeeper.jar``, whose manifest
names its libraries) run on the machine's Java: no pip wheel ships a ZooKeeper server.

Timing, and why:

- ``tickTime`` is 50 ms and ``minSessionTimeout`` 2 x tickTime = 100 ms (ZooKeeper's own default
  ratio), so a session timeout equal to the trial's TTL is granted down to ``--time-scale 0.1``
  (TTL 100 ms); a shorter TTL is refused up front (:func:`session_timeout_ms`). The server checks
  for expired sessions once per tick, so a session ends at most one tick (50 ms) after its timeout.
  ``maxSessionTimeout`` is raised to 120 s (default 20 ticks = 1 s would clip longer TTLs).
- ``syncLimit`` 20 ticks (1 s): a follower is dropped after 1 s without the leader, well above the
  scheduling hiccups of a loaded 2-core machine; ``initLimit`` 100 ticks (5 s) for the JVMs' start.
- The JVM starts cheaply: ``-Xmx64m``, serial GC, C1 only, no perf data, no admin server (Jetty).
  Measured on this 2-core machine with other work running (load ~7): 3.4-5.4 s from spawn to a
  server answering ``srvr``; resident memory ~56 MB. That start-up is why clusters come from the pool.

ZooKeeper persists (its transaction log is fsynced before a reply), so a server restarted on its
data directory keeps every znode and every session: a session survives a restart of the server if
its client reconnects within the session timeout (the restarted server times sessions afresh).
"""

from __future__ import annotations

import os
import shutil
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from lockcompare.errors import BackendNotViableError, ClusterError, ConfigError, InvalidValueError, ServerStartError
from lockcompare.infra.kinds import ZOOKEEPER_PROTOCOL, Capabilities, Capability, LockNodes, Roles, Server, UserServers
from lockcompare.infra.peerlinks import PeerLinks
from lockcompare.infra.spawned import SpawnedServer, free_port
from lockcompare.redaction import shown as quoted
from lockcompare.urls import parse_url

if TYPE_CHECKING:
    from lockcompare.infra.cluster import Cluster
    from lockcompare.infra.fakeclock import FakeClock

ENV_JAR = "LOCKCOMPARE_ZOOKEEPER_JAR"
DEBIAN_JAR = Path("/usr/share/java/zookeeper.jar")
HOW_TO_GET_ONE = "apt-get install -y zookeeper (Debian's ZooKeeper 3.8 on Java 17), or set LOCKCOMPARE_ZOOKEEPER_JAR"

TICK_MS = 50
#: The shortest session the embedded servers grant (ZooKeeper's default: 2 x tickTime).
MIN_SESSION_MS = 2 * TICK_MS
MAX_SESSION_MS = 120_000
#: Sessions are checked for expiry once per tick: a session ends up to one tick after its timeout.
EXPIRY_LAG_MS = TICK_MS

#: The longest a ZooKeeper client waits before it reconnects to another server (the Java client's random
#: 0-1000 ms): a 0.5 s connect budget made "survives the loss of a minority" fail for every ZooKeeper
#: lock while its leader-crash trials kept granting (issue 48.3).
RECONNECT_MS = 1000

#: How long an ensemble may take to serve again after its leader died (with or without a follower).
#: Measured from the committed leader-crash trials of the five ZooKeeper backends (50 trials of
#: results/reproduction.csv and consensus.csv, three servers): the first grant after the crash came
#: 0.3-14.1 s later, mostly ~6.5 s or ~12 s; a five-server ensemble losing its leader and a follower
#: had a new leader after 5.6 and 11.5 s, and the conformance battery's curator-mutex granted again
#: 17.4 s after losing two of five (a loaded machine). (Rounds of about 5 s look like ZooKeeper's
#: default election connect timeout, cnxTimeout, spent on the dead peer: not measured further.)
RECOVERY_MS = 20_000

#: Where lockcompare keeps its znodes: every lock is ``/lockcompare/<key>``; nothing outside is touched.
CHROOT = "/lockcompare"

JVM_FLAGS = (
    "-Xmx64m", "-Xms16m", "-Xss512k", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:-UsePerfData",
    "-Djava.net.preferIPv4Stack=true", "-Dzookeeper.admin.enableServer=false",
    # A server looking for a leader re-sends its vote with a backoff up to 60 s: 30 of ZooKeeper's
    # default 2 s ticks. Kept at 30 ticks of ours (1.5 s): a server cut off for seconds (isolate,
    # split) rejoins within ~2 s of the heal instead of up to a minute later (measured: 3-35 s).
    f"-Dzookeeper.fastleader.maxNotificationInterval={30 * TICK_MS}",
)  # fmt: skip
MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"

_START_TIMEOUT_S = 30.0


def find_zookeeper() -> tuple[Path, Path]:
    """(java, zookeeper.jar), or :class:`BackendNotViableError` naming the install command."""
    explicit = os.environ.get(ENV_JAR)
    jar = Path(explicit).expanduser() if explicit else DEBIAN_JAR
    if not jar.is_file():
        raise BackendNotViableError(f"no ZooKeeper server found ({jar} is missing): {HOW_TO_GET_ONE}")
    java_home = os.environ.get("JAVA_HOME")
    java = Path(java_home) / "bin" / "java" if java_home else None
    if java is None or not java.is_file():
        found = shutil.which("java")
        if not found:
            raise BackendNotViableError(f"no java to run ZooKeeper on: {HOW_TO_GET_ONE}")
        java = Path(found)
    return java, jar


def is_zookeeper_url(url: str) -> bool:
    """Lock nodes are ZooKeeper servers when their URL says ``zk://HOST:PORT``."""
    return url.startswith("zk://")


def hosts_of(urls: Sequence[str]) -> str:
    """kazoo's connection string (``host:port,host:port``) for ``zk://`` URLs."""
    return ",".join(url.removeprefix("zk://").rstrip("/") for url in urls)


def zookeeper_urls(hosts: str) -> tuple[str, ...]:
    """``--zookeeper HOST:PORT,...`` as ``zk://`` URLs, or one line saying what is wrong.

    >>> zookeeper_urls("127.0.0.1:2181, zk2:2182")
    ('zk://127.0.0.1:2181', 'zk://zk2:2182')
    """
    urls = []
    for part in (p.strip() for p in hosts.split(",")):
        address = parse_url("zk://" + part.removeprefix("zk://"))  # never raises (issue 38)
        shown = quoted("zk://" + part.removeprefix("zk://")).removeprefix("zk://")
        if address.has_userinfo or any(c in part for c in "@\uff20\ufe6b"):
            raise InvalidValueError(f"--zookeeper takes HOST:PORT,... without a user or password, got {shown!r}")
        if address.problem or address.port is None or address.path.strip("/") or address.query:
            raise InvalidValueError(
                f"--zookeeper takes HOST:PORT,... (a ZooKeeper server's client port), got {shown!r}"
            )
        urls.append(f"zk://{address.host_text}:{address.port}")
    return tuple(urls)


def lock_path(key: str) -> str:
    """The znode a lock ``key`` lives under (kazoo's Lock puts its contenders below it)."""
    return f"{CHROOT}/{key.replace('/', '_')}"


def session_timeout_ms(ttl_ms: float) -> int:
    """The session timeout for a trial's TTL, or one line saying why ZooKeeper cannot grant it."""
    timeout = round(ttl_ms)
    if timeout < MIN_SESSION_MS or timeout > MAX_SESSION_MS:
        raise InvalidValueError(
            f"ZooKeeper sessions here last {MIN_SESSION_MS}-{MAX_SESSION_MS} ms (2-2400 x tickTime {TICK_MS} ms), "
            f"not a TTL of {ttl_ms:g} ms (use --time-scale >= 0.1)"
        )
    return timeout


def four_letter(host: str, port: int, word: str, *, timeout_s: float = 0.5) -> str:
    """A ZooKeeper four-letter command's answer ("" when the server does not answer)."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as conn:
            conn.sendall(word.encode())
            chunks = []
            while chunk := conn.recv(4096):
                chunks.append(chunk)
    except OSError:
        return ""
    return b"".join(chunks).decode(errors="replace")


def mode_of(url: str, *, timeout_s: float = 0.5) -> str:
    """``standalone``, ``leader`` or ``follower`` when the server serves clients, else ""."""
    host, _, port = url.removeprefix("zk://").rstrip("/").rpartition(":")
    for line in four_letter(host, int(port), "srvr", timeout_s=timeout_s).splitlines():
        if line.startswith("Mode:"):
            return line.split(":", 1)[1].strip()
    return ""


class ZooKeeperServer(SpawnedServer):
    """One ZooKeeper server on loopback; a member of ``peers`` (myid -> (quorum, election) ports) or standalone.

    Its lifecycle is :class:`~lockcompare.infra.spawned.SpawnedServer`'s (crash = SIGKILL of its
    process group, stop, cleanup, the atexit sweep); ``start`` waits until it serves.
    """

    #: A restarted server keeps its znodes and sessions (the transaction log is fsynced).
    keeps_data_across_restarts = True

    def __init__(
        self,
        *,
        name: str,
        myid: int = 1,
        peers: dict[int, tuple[int, int]] | None = None,
        java: Path | None = None,
        jar: Path | None = None,
        start_timeout_s: float = _START_TIMEOUT_S,
        advertised: dict[int, tuple[int, int]] | None = None,
    ) -> None:
        if java is None or jar is None:
            java, jar = find_zookeeper()
        super().__init__(name=name, dir_tag=f"zookeeper-{name}", port=free_port())
        self.java, self.jar = java, jar
        self.myid = myid
        self.peers = dict(peers or {})
        #: Where it reaches its peers (myid -> quorum, election port): their proxies in an ensemble
        #: with peer links (infra/peerlinks.py); its own entry stays its real ports (it binds them).
        self.advertised = dict(advertised or self.peers)
        self.peer_links: PeerLinks | None = None
        self._extra_ports.extend(self.peers.get(myid, ()))  # its own quorum and election ports
        self.start_timeout_s = start_timeout_s
        #: The whole ensemble, this server included (start_servers sets it); empty when standalone.
        self.ensemble: list[ZooKeeperServer] = []
        self._write_config()

    @property
    def url(self) -> str:
        return f"zk://127.0.0.1:{self.port}"

    def _write_config(self) -> None:
        data = self._dir / "data"
        data.mkdir(exist_ok=True)
        lines = [
            f"tickTime={TICK_MS}",
            f"minSessionTimeout={MIN_SESSION_MS}",
            f"maxSessionTimeout={MAX_SESSION_MS}",
            "initLimit=100",
            "syncLimit=20",
            f"dataDir={data}",
            f"clientPort={self.port}",
            "clientPortAddress=127.0.0.1",
            "admin.enableServer=false",
            "4lw.commands.whitelist=srvr,ruok,mntr",
            "preAllocSize=1024",  # KB: the default preallocates 64 MB of transaction log per server
        ]
        if self.peers:
            (data / "myid").write_text(f"{self.myid}\n")
            reach = {**self.advertised, self.myid: self.peers[self.myid]}
            lines += [f"server.{sid}=127.0.0.1:{q}:{e}" for sid, (q, e) in sorted(reach.items())]
        (self._dir / "zoo.cfg").write_text("\n".join(lines) + "\n")

    def start(self) -> None:
        """Spawn and wait until the server serves clients. An ensemble member serves only within a
        quorum: while too few of its ensemble run (a crash of all, healed one by one), it is spawned
        and not waited for; the start that completes the quorum waits."""
        self.spawn()
        if self.ensemble and sum(s.is_running() for s in self.ensemble) <= len(self.ensemble) // 2:
            return
        self.wait_ready()

    def spawn(self) -> None:
        cmd = [str(self.java), *JVM_FLAGS, f"-Dzookeeper.log.dir={self._dir}", "-cp", str(self.jar), MAIN_CLASS,
               str(self._dir / "zoo.cfg")]  # fmt: skip
        self._popen(cmd, log=self._log)

    def mode(self) -> str:
        return mode_of(self.url) if self.is_running() else ""

    def cleanup(self) -> None:
        super().cleanup()
        if self.peer_links is not None:
            self.peer_links.release(self.name)

    def wait_ready(self) -> None:
        """Wait until ``srvr`` names a mode; kill the server if it never does."""
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self._proc is None or self._proc.poll() is not None:
                self._proc = None
                raise ServerStartError(
                    f"{self.name}: ZooKeeper exited during start-up: {self._last_log_line(self._log)}"
                )
            if mode_of(self.url, timeout_s=0.2):
                return
            time.sleep(0.02)
        self._kill()
        raise ServerStartError(
            f"{self.name}: ZooKeeper did not serve on {self.url} within {self.start_timeout_s:g} s; killed it"
        )

    @property
    def _log(self) -> Path:
        return self._dir / "zookeeper.out"


def start_servers(*, count: int, attempts: int = 2) -> list[ZooKeeperServer]:
    """A standalone server (``count`` 1) or an ensemble of ``count``, each serving; all removed if it fails.

    An ensemble is returned leader first: the catalogue's leader crash strikes node 0, and the
    cluster refuses to hand out an ensemble whose leader has moved (infra/cluster.py).
    """
    if count < 1:
        raise ServerStartError(f"a ZooKeeper ensemble needs at least one server, got {count}")
    java, jar = find_zookeeper()
    problem = ""
    for _ in range(attempts):
        peers = {sid: (free_port(), free_port()) for sid in range(1, count + 1)} if count > 1 else {}
        # An ensemble's servers reach each other through proxies (isolate, split: infra/peerlinks.py).
        links = PeerLinks(name=f"zk-peers-{os.getpid()}-{free_port()}") if count > 1 else None
        servers: list[ZooKeeperServer] = []
        try:
            advertised = _proxied(links, peers) if links is not None else peers
            servers = [
                ZooKeeperServer(name=f"zk{sid - 1}", myid=sid, peers=peers, java=java, jar=jar, advertised=advertised)
                for sid in range(1, count + 1)
            ]
            for server in servers:
                server.ensemble = servers if count > 1 else []
            for server in servers:
                server.spawn()
            for server in servers:
                server.wait_ready()
            if count > 1:
                servers.sort(key=lambda s: s.mode() != "leader")
                for index, server in enumerate(servers):
                    server.name = f"zk{index}"
            if links is not None:
                links.attach(servers, added_as=[s.myid - 1 for s in servers])  # a partition names nodes by index
            return servers
        except ServerStartError as exc:
            problem = str(exc)
            for server in servers:
                server.cleanup()
            if links is not None:
                links.stop()
        except BaseException:
            for server in servers:
                server.cleanup()
            if links is not None:
                links.stop()
            raise
    raise ServerStartError(f"ZooKeeper ensemble of {count} did not start: {problem}")


def _proxied(links: PeerLinks, peers: dict[int, tuple[int, int]]) -> dict[int, tuple[int, int]]:
    """A proxy in front of each server's quorum and election ports (started); their ports by myid.

    The election handshake carries the sender's own election address, which a server that wins the
    tie-break dials back (QuorumCnxManager.handleConnection): the proxies rewrite it to the
    sender's proxy, so that no connection between two servers bypasses the links."""
    links.start()
    advertised = {
        sid: (links.add(member=sid - 1, target_port=q), links.add(member=sid - 1, target_port=e))
        for sid, (q, e) in sorted(peers.items())
    }
    links.rewrite([(f"127.0.0.1:{peers[sid][1]}", f"127.0.0.1:{advertised[sid][1]}") for sid in sorted(peers)])
    return advertised


def mode_and_epoch(url: str, *, timeout_s: float = 0.5) -> tuple[str, int]:
    """``srvr``'s Mode ("" when the server does not serve) and the epoch of its last zxid."""
    host, _, port = url.removeprefix("zk://").rstrip("/").rpartition(":")
    mode, epoch = "", 0
    for line in four_letter(host, int(port), "srvr", timeout_s=timeout_s).splitlines():
        if line.startswith("Mode:"):
            mode = line.split(":", 1)[1].strip()
        elif line.startswith("Zxid:"):
            try:
                epoch = int(line.split(":", 1)[1].strip(), 16) >> 32
            except ValueError:
                epoch = 0
    return mode, epoch


def zookeeper_version(url: str) -> str:
    """The server's version from ``srvr`` ("3.8.0"), or "unknown"."""
    host, _, port = url.removeprefix("zk://").rstrip("/").rpartition(":")
    for line in four_letter(host, int(port), "srvr").splitlines():
        if line.startswith("Zookeeper version:"):
            return line.split(":", 1)[1].strip().split("-", 1)[0]
    return "unknown"


@dataclass(frozen=True, kw_only=True)
class ZooKeeperKind:
    """ZooKeeper: a standalone server or an ensemble (leader first), always persisting (a restarted
    server keeps its znodes and sessions), real clocks, replication by consensus only. It can end a
    client's session from the server side (infra/zookeeper_sessions.py), so it takes session-kill
    (:class:`~lockcompare.infra.kinds.SessionKind`)."""

    name: str = "zookeeper"
    speaks: str = ZOOKEEPER_PROTOCOL
    session_reopens: str = "kazoo opens a new one at its next reconnect"
    capabilities: Capabilities = field(
        default_factory=lambda: Capabilities(
            offers=frozenset({Capability.SESSION_CONTROL, Capability.ROLES, Capability.PEER_LINKS}),
            reasons={
                Capability.CLOCK_CONTROL: "ZooKeeper times sessions on the leader's monotonic clock, not the wall "
                "clock (and libfaketime is applied to Redis-protocol servers only)",
                Capability.REPLICATION: "a ZooKeeper ensemble replicates by consensus: there is no asynchronous "
                "replica to promote",
                Capability.LEASE_HOLDERS: "lockcompare cannot read which ZooKeeper server holds a lock "
                "(nodes=holders:K and others:K never resolve; name the servers, e.g. nodes=0)",
            },
            # A standalone server (restarted in place by the server restart), else an ensemble of three
            # (faults/plan.py restarts_node_0_only: a leader crash, a partition that leaves the holder in the minority).
            lock_nodes=LockNodes(default=1, under_faults=3, restart_in_place=True),
            # zk://HOST:PORT, or HOST:PORT as --zookeeper takes it
            user_servers=UserServers(
                alias="--zookeeper",
                use="the lock nodes of the backends on it",
                parse=lambda texts, _flag: zookeeper_urls(",".join(texts)),
            ),
            # ZooKeeper's Java client (Curator's too) waits a random 0-1000 ms before it reconnects
            # (ClientCnxn.startConnect); kazoo backs off from 100 ms, doubling, with jitter.
            reconnect_ms=RECONNECT_MS,
            recovery_ms=RECOVERY_MS,
        )
    )

    def problem(self, *, binary: str | None = None) -> str:
        # The harness itself speaks to these servers through kazoo (cleanup between trials, lease
        # holders, health): without it no lock of any language can be measured on them.
        from lockcompare.infra.zookeeper_client import kazoo_client_class

        try:
            find_zookeeper()
            kazoo_client_class()
        except BackendNotViableError as exc:
            return str(exc)
        return ""

    def start_nodes(
        self, *, count: int, persistence: str = "none", clocks: Sequence[FakeClock] = (), binary: str | None = None
    ) -> list[Server]:
        if clocks or persistence != "none":
            raise ConfigError(
                "ZooKeeper servers run with real clocks and always persist: no fake clocks or --persistence"
            )
        return list(start_servers(count=count))

    def new_server(self, *, name: str, binary: str | None = None) -> Server:
        raise ConfigError("a ZooKeeper server is started with its ensemble (start_nodes), never alone")

    def end_holder_sessions(
        self,
        urls: Sequence[str],
        *,
        nodes: Sequence[int],
        lock_key: str,
        lease_znodes: object = None,
        holds: Callable[[object], bool] | None = None,
    ) -> tuple[str, dict[str, object]]:
        """Close the session holding ``lock_key`` (infra/zookeeper_sessions.py): a session is the
        ensemble's, not one server's, so ``nodes`` does not narrow it (all of ``urls`` are its hosts).
        ``sessions_ended``: ZooKeeper session ids; ``session_owner``: the holder's identifier;
        ``holds`` confirms the holder's identifier against the workers' current leases at kill time."""
        from lockcompare.infra.zookeeper_sessions import expire_holder_session

        detail, sessions, whose = expire_holder_session(
            list(urls),
            lock_key=lock_key,
            lease_znodes=lease_znodes,  # type: ignore[arg-type]  # checked by the backend loader
            holds=holds,
        )
        return detail, {"sessions_ended": sessions, **whose}

    def read_roles(self, cluster: Cluster, *, timeout_s: float = 0.5) -> Roles:
        """Each server's ``srvr`` Mode (leader, follower, standalone; "not serving" while it looks for a
        leader, "down" when it does not answer); of two leaders (an old one not yet stepped down),
        the one with the higher epoch."""
        modes, claims = [], []
        for index, url in enumerate(cluster.node_urls):
            host, _, port = url.removeprefix("zk://").rstrip("/").rpartition(":")
            if not four_letter(host, int(port), "ruok", timeout_s=timeout_s):
                modes.append("down")
                continue
            mode, epoch = mode_and_epoch(url, timeout_s=timeout_s)
            modes.append(mode or "not serving")
            if mode in ("leader", "standalone"):
                claims.append((epoch, index))
        epoch, leader = max(claims) if claims else (0, None)
        return Roles(leader=leader, modes=tuple(modes), term=epoch)

    def owns(self, url: str) -> bool:
        return is_zookeeper_url(url)

    def answers(self, url: str, *, timeout_s: float) -> bool:
        return bool(mode_of(url, timeout_s=timeout_s))

    def unusable(self, url: str, *, timeout_s: float) -> str:
        return "" if self.answers(url, timeout_s=timeout_s) else f"ZooKeeper server {url} does not serve (no mode)"

    def version(self, url: str) -> str:
        return f"zookeeper {zookeeper_version(url)}"

    def empty(self, urls: Sequence[str]) -> str:
        from lockcompare.infra.zookeeper_client import delete_children_containing

        try:
            delete_children_containing(urls, "")  # lockcompare's own path, emptied
        except ClusterError as exc:
            return f"emptying ZooKeeper failed: {exc}"
        if len(urls) > 1 and mode_of(urls[0]) != "leader":
            # The catalogue's leader crash strikes node 0: an ensemble whose leader moved is rebuilt.
            return "the ZooKeeper ensemble's leader is no longer node 0"
        return ""

    def delete_keys(self, urls: Sequence[str], prefix: str) -> None:
        from lockcompare.infra.zookeeper_client import delete_children_containing

        for url in dict.fromkeys(urls):
            try:
                delete_children_containing([url], prefix)  # only the trial's own znodes
            except ClusterError:
                pass  # a server that is down: its sessions end, and their ephemeral znodes with them


ZOOKEEPER = ZooKeeperKind()
