"""A plug-in that brings a protocol of its own: "tinylock", a server kind, a backend and an external client.

The whole plug-in is this package plus the entry points in the dist-info beside it (the kind under
``lockcompare.servers``, the backend under ``lockcompare.backends``); the external client's manifest
(tinylock.toml, ``servers = "tinylock"``) is passed to ``--backends`` by path. No built-in kind
speaks its protocol, so whatever lockcompare still decides by a protocol's name shows up here.
It is written against the public surface only (``lockcompare``'s exports and its errors).

Its servers are server.py (stdlib Python, one process per server on a free loopback port): one lock
node by default (``LockNodes(default=1)``), no persistence, clocks, replicas, roles, sessions or
peer links, each said why. ``$LOCKCOMPARE_TINYLOCK_TRACE`` (a file), when set, gets one line per
server started (pid, port, name), so that a test can tell its servers ran and are gone.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from lockcompare import BackendConfig, Capabilities, Capability, Lease, LockNodes, Refusal, Server
from lockcompare.errors import ConfigError, InvalidValueError, ServerStartError
from lockcompare_tinylock.wire import SCHEME, Conn, ask

if TYPE_CHECKING:
    from lockcompare.infra.fakeclock import FakeClock

PROTOCOL = "tinylock"
TRACE_ENV = "LOCKCOMPARE_TINYLOCK_TRACE"
SERVER_SCRIPT = Path(__file__).with_name("server.py")
MANIFEST = Path(__file__).with_name("tinylock.toml")

NO_CLOCK = "tinylock servers run on their own monotonic clock, which nobody may move: no clock jumps"
NO_REPLICAS = "tinylock servers have no replicas to promote: no failover"
NO_ROLES = "tinylock servers name no leader: no leader-aimed faults"
NO_SESSIONS = "tinylock has no client sessions to end: no session-kill"
NO_PEERS = "tinylock servers never talk to each other: no peer links to cut"
NO_HOLDERS = "tinylock servers do not list their locks: no holder-aimed faults"

_started: list[TinylockServer] = []


class TinylockServer:
    """One server.py process on a loopback port of its own (kept across restarts)."""

    keeps_data_across_restarts = False

    def __init__(self, *, name: str) -> None:
        self.name = name
        self.port: int | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._dir = Path(tempfile.mkdtemp(prefix=f"tinylock-{name}-"))

    @property
    def url(self) -> str:
        return f"{SCHEME}://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    @property
    def data_dir(self) -> Path:
        return self._dir

    def is_running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> None:
        if self.port is None:
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                self.port = probe.getsockname()[1]
        self._process = subprocess.Popen(
            [sys.executable, str(SERVER_SCRIPT), "--port", str(self.port)],
            cwd=self._dir, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        if self not in _started:
            _started.append(self)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                break
            try:
                if ask(self.url, "PING", timeout_s=0.5) == "PONG":
                    _trace(self)
                    return
            except OSError:
                time.sleep(0.05)
        self.crash()
        raise ServerStartError(f"tinylock server {self.name} did not answer on port {self.port}")

    def restart(self) -> None:
        self.stop()
        self.start()

    def crash(self) -> None:
        self._end(signal.SIGKILL)

    def stop(self) -> None:
        self._end(signal.SIGTERM)

    def cleanup(self) -> None:
        self.crash()
        shutil.rmtree(self._dir, ignore_errors=True)

    def _end(self, signum: int) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.send_signal(signum)
            try:
                self._process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()


@atexit.register
def _sweep() -> None:
    for server in _started:
        server.cleanup()


def _trace(server: TinylockServer) -> None:
    path = os.environ.get(TRACE_ENV)
    if path:
        with open(path, "a") as fh:
            fh.write(f"{server.pid} {server.port} {server.name}\n")


class TinylockKind:
    """The kind: tinylock servers, speaking the tinylock protocol."""

    name = "tinylock"
    speaks = PROTOCOL
    capabilities = Capabilities(
        offers=frozenset(),
        reasons={
            Capability.CLOCK_CONTROL: NO_CLOCK,
            Capability.REPLICATION: NO_REPLICAS,
            Capability.ROLES: NO_ROLES,
            Capability.SESSION_CONTROL: NO_SESSIONS,
            Capability.PEER_LINKS: NO_PEERS,
            Capability.LEASE_HOLDERS: NO_HOLDERS,
        },
        lock_nodes=LockNodes(default=1, under_faults=3),
    )

    def problem(self, *, binary: str | None = None) -> str:
        return ""  # stdlib Python: it runs wherever lockcompare does

    def start_nodes(
        self, *, count: int, persistence: str = "none", clocks: Sequence[FakeClock] = (), binary: str | None = None
    ) -> list[Server]:
        if persistence != "none":
            raise InvalidValueError(f"tinylock servers keep nothing on disk: --persistence none, not {persistence}")
        if clocks:
            raise ConfigError(NO_CLOCK)
        nodes = [TinylockServer(name=f"tinylock-node{i}") for i in range(count)]
        try:
            for node in nodes:
                node.start()
        except BaseException:
            for node in nodes:
                node.cleanup()
            raise
        return list(nodes)

    def new_server(self, *, name: str, binary: str | None = None) -> Server:
        return TinylockServer(name=name)

    def owns(self, url: str) -> bool:
        return url.startswith(f"{SCHEME}://")

    def answers(self, url: str, *, timeout_s: float) -> bool:
        try:
            return ask(url, "PING", timeout_s=timeout_s) == "PONG"
        except (OSError, RuntimeError, ValueError):
            return False

    def unusable(self, url: str, *, timeout_s: float) -> str:
        return "" if self.answers(url, timeout_s=timeout_s) else f"tinylock server {url} does not answer"

    def version(self, url: str) -> str:
        try:
            return ask(url, "VERSION")
        except (OSError, RuntimeError, ValueError):
            return "tinylock ?"

    def empty(self, urls: Sequence[str]) -> str:
        for url in urls:
            try:
                ask(url, "FLUSH")
            except (OSError, RuntimeError, ValueError) as exc:
                return f"tinylock server {url}: {exc}"
        return ""

    def delete_keys(self, urls: Sequence[str], prefix: str) -> None:
        for url in urls:
            try:
                ask(url, "DELPREFIX", prefix)
            except (OSError, RuntimeError, ValueError):
                continue  # a server that is down is skipped


TINYLOCK = TinylockKind()


class TinylockLock:
    """ACQUIRE on lock node 0 with a random owner; release by owner (the server checks it)."""

    summary: ClassVar[str] = "tinylock plug-in: ACQUIRE key owner ttl on node 0, owner-checked RELEASE"
    exclusive: ClassVar[bool] = True
    issues_fencing_tokens: ClassVar[bool] = False
    servers: ClassVar[str] = PROTOCOL
    client_timeout_s: ClassVar[float] = 2.0
    unavailable_under: ClassVar[tuple[str, ...]] = ("crash",)

    def __init__(self, *, config: BackendConfig) -> None:
        self._url = config.node_urls[0]
        self._timeout_s = config.request_timeout_s
        self._conn: Conn | None = None

    def _call(self, *words: object) -> str:
        if self._conn is None:
            self._conn = Conn(self._url, timeout_s=self._timeout_s)
        try:
            return self._conn.call(*words)
        except (OSError, RuntimeError):
            self.close()  # reconnect at the next call (a server that restarted)
            raise

    def acquire(self, *, key: str, ttl_ms: int) -> Lease | Refusal:
        owner = os.urandom(16).hex()
        start = time.monotonic_ns()
        try:
            answer = self._call("ACQUIRE", key, owner, ttl_ms)
        except (OSError, RuntimeError) as exc:
            return Refusal.failed(exc)
        if not answer.startswith("OK "):
            return Refusal()
        return Lease(key=key, owner=owner, valid_until_ns=start + ttl_ms * 1_000_000, granted_by=(0,))

    def release(self, lease: Lease) -> bool:
        try:
            return self._call("RELEASE", lease.key, lease.owner) == "1"
        except (OSError, RuntimeError):
            return False

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
