"""ZooKeeper servers that lockcompare spawned, for the ``zk-*`` backends: find, start, crash, stop.

The same rules as :mod:`lockcompare.infra.etcd.server`: every server listens on 127.0.0.1 only
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
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from lockcompare.errors import BackendNotViableError, InvalidValueError, ServerStartError
from lockcompare.infra.own_servers import Attempt, OwnServer, start_with_retry
from lockcompare.infra.peerlinks import PeerLinks
from lockcompare.infra.spawned import free_port
from lockcompare.redaction import shown as quoted
from lockcompare.urls import parse_url

if TYPE_CHECKING:
    pass

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
#: Measured from the committed leader-crash trials of the five ZooKeeper backends (50 trials of the
#: reproduction of 8c7eb0e and results/archive/consensus-a5a2178/, three servers): the first grant
#: after the crash came 0.3-14.1 s later, mostly ~6.5 s or ~12 s; a five-server ensemble losing its
#: leader and a follower had a new leader after 5.6 and 11.5 s, and the conformance battery's
#: curator-mutex granted again 17.4 s after losing two of five (a loaded machine). Those rounds of
#: about 5 s were the harness's: a follower that dialled its new leader's proxy before the leader
#: listened saw its connection close, not refused, and gave up on that leader, who waited initLimit
#: (5 s) for it and stood down (infra/peerlinks.py REFUSED_WAIT_S, results/derived/zk-election.txt).
#: With the peer links' refused wait, a five-server ensemble serves again well within a second of
#: losing its leader and a follower; the allowance stays, for loaded machines and slow JVMs.
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


class ZooKeeperServer(OwnServer):
    """One ZooKeeper server on loopback; a member of ``peers`` (myid -> (quorum, election) ports) or standalone.

    Its lifecycle is :class:`~lockcompare.infra.spawned.SpawnedServer`'s (crash = SIGKILL of its
    process group, stop, cleanup, the atexit sweep); ``start`` waits until it serves.
    """

    #: A restarted server keeps its znodes and sessions (the transaction log is fsynced).
    keeps_data_across_restarts = True
    program = "ZooKeeper"

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

    def _serves(self) -> bool:
        """``srvr`` names a mode."""
        return bool(mode_of(self.url, timeout_s=0.2))

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

    def attempt(made: Attempt) -> list[ZooKeeperServer]:
        peers = {sid: (free_port(), free_port()) for sid in range(1, count + 1)} if count > 1 else {}
        # An ensemble's servers reach each other through proxies (isolate, split: infra/peerlinks.py).
        links = made.links = PeerLinks(name=f"zk-peers-{os.getpid()}-{free_port()}") if count > 1 else None
        advertised = _proxied(links, peers) if links is not None else peers
        servers = [
            ZooKeeperServer(name=f"zk{sid - 1}", myid=sid, peers=peers, java=java, jar=jar, advertised=advertised)
            for sid in range(1, count + 1)
        ]
        made.servers = servers
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

    return start_with_retry(attempts=attempts, failure=f"ZooKeeper ensemble of {count} did not start", attempt=attempt)


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
