"""The lifecycle every server lockcompare spawns shares, whatever its kind: one base class.

A server kind (redis-server, valkey-server, an etcd member, a PostgreSQL server, ...) supplies how
to spawn its process and how to tell that it is ready; this module owns the rest, once:

- loopback ports handed out by :func:`free_port` stay reserved until :func:`release_port` (a node
  a fault took down keeps its port while nothing listens on it);
- a private data directory (tagged with our pid, swept after a SIGKILLed run) kept across
  :meth:`SpawnedServer.crash` and restart, removed by :meth:`SpawnedServer.cleanup`;
- the process is a child in a process group of its own (Ctrl-C reaches lockcompare, which then
  stops it in order) that dies with its parent (PR_SET_PDEATHSIG: the machines this runs on have a
  PID 1 that does not reap orphans);
- crash = SIGKILL of the whole group, then reap; stop = a polite signal, a grace period, then the
  same; both safe to call twice;
- one registry of servers whose cleanup() has not run, swept when the interpreter exits.
"""

from __future__ import annotations

import atexit
import itertools
import os
import shutil
import signal
import socket
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

from lockcompare.errors import ServerStartError
from lockcompare.infra.lifecycle import dying_with_this_process, owned_tempdir

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


#: Every spawned server's environment carries this variable with a value of its own. A binary that
#: daemonises (forks, calls setsid, exits) leaves its group and its parent, but not its
#: environment: the copy in the background is found by it and ended (issue 38: a --redis-server
#: that forked and exited left five servers behind, one per start attempt). redis-server writes
#: its process title over the memory /proc shows as its environment, so a server whose working
#: directory is its private data directory (redis chdirs to --dir) counts as marked too.
SPAWN_MARK = "LOCKCOMPARE_SPAWNED"
_spawn_numbers = itertools.count()


def marked_processes(mark: str, *, directory: Path | None = None) -> list[int]:
    """The live processes whose environment holds ``SPAWN_MARK=mark``, or whose working directory is
    ``directory`` or below it (one scan of /proc)."""
    needle = f"\0{SPAWN_MARK}={mark}\0".encode()
    inside = str(directory) if directory is not None else None
    found: list[int] = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return found
    for name in names:
        if not name.isdigit() or int(name) == os.getpid():
            continue
        if inside is not None:
            try:
                cwd = os.readlink(f"/proc/{name}/cwd").removesuffix(" (deleted)")
            except OSError:
                cwd = ""
            if cwd == inside or cwd.startswith(inside + "/"):
                found.append(int(name))
                continue
        try:
            with open(f"/proc/{name}/environ", "rb") as fh:
                environ = fh.read()
        except OSError:
            continue
        if needle in b"\0" + environ + b"\0":
            found.append(int(name))
    return found


def kill_marked(mark: str, *, directory: Path | None = None) -> list[int]:
    """SIGKILL every process carrying ``mark`` (or working in ``directory``); return their pids."""
    pids = marked_processes(mark, directory=directory)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return pids


def kill_group_and_reap(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL a server started with ``start_new_session`` (its whole process group) and reap it."""
    if proc.poll() is None:
        # Not reaped yet, so the pid (= its process group) is still ours.
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()


def signal_and_wait(proc: subprocess.Popen[bytes], sig: int, *, grace_s: float) -> None:
    """Send ``sig`` and wait up to ``grace_s`` for the process to exit (the caller kills what is left)."""
    if proc.poll() is None:
        try:
            proc.send_signal(sig)
            proc.wait(timeout=grace_s)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass


def terminate_politely(proc: subprocess.Popen[bytes], *, grace_s: float = 3.0) -> None:
    """SIGTERM and wait up to ``grace_s`` for the process to exit (the caller then kills what is left)."""
    signal_and_wait(proc, signal.SIGTERM, grace_s=grace_s)


class SpawnedServer:
    """A server process lockcompare spawned: pid, data directory, crash, stop, cleanup, restart.

    A subclass sets :attr:`name` and :attr:`port` (None until its first start), implements
    :meth:`start` (spawning through :meth:`_popen`) and :attr:`url`, and may change the signals of
    :meth:`crash` and :meth:`stop` (class attributes ``crash_signal`` / ``stop_signal``).
    """

    #: What a crash sends before SIGKILL of the group (None: SIGKILL at once, the process loses
    #: everything not persisted). PostgreSQL sends SIGQUIT so the postmaster reaps its backends.
    crash_signal: ClassVar[int | None] = None
    #: What stop() sends first, and how long it waits before SIGKILL.
    stop_signal: ClassVar[int] = signal.SIGTERM
    stop_grace_s: ClassVar[float] = 3.0
    #: Whether a server restarted on its data directory still holds what it acknowledged (a
    #: node-restart fault says so in the history). Redis: only with persistence "aof-always".
    keeps_data_across_restarts: bool = False

    def __init__(self, *, name: str, dir_tag: str, port: int | None = None) -> None:
        self.name = name
        self.port: int | None = port
        self._proc: subprocess.Popen[bytes] | None = None
        self._dir = owned_tempdir(dir_tag)
        self._extra_ports: list[int] = []  # released with the port at cleanup (etcd's peer port)
        self._mark = f"{os.getpid()}-{next(_spawn_numbers)}"  # see SPAWN_MARK
        self._exited_alone = False  # the process once exited by itself: look for a background copy
        _not_cleaned_up.add(self)

    # -- what a kind supplies ------------------------------------------------------------------

    @property
    def url(self) -> str:
        raise NotImplementedError

    def start(self) -> None:
        raise NotImplementedError

    # -- shared lifecycle ----------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def data_dir(self) -> Path:
        """Where the server keeps its data and log; survives crash and restart, not cleanup()."""
        return self._dir

    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def _popen(
        self,
        cmd: list[str],
        *,
        env: dict[str, str] | None = None,
        log: Path | None = None,
        preexec_fn: Callable[[], object] | None = None,
        user: int | None = None,
        group: int | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start ``cmd`` as this server's process (its own session, dying with its parent)."""
        if self.is_running():
            raise ServerStartError(f"{self.name} is already running (pid {self.pid})")
        out = open(log, "ab") if log is not None else None  # closed below: the child keeps its copy
        try:
            self._proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=out if out is not None else subprocess.DEVNULL,
                stderr=out if out is not None else subprocess.DEVNULL,
                env={**os.environ, **(env or {}), SPAWN_MARK: self._mark},
                start_new_session=True,  # Ctrl-C reaches lockcompare, which then stops us in order
                # Trials run in threads, but the pre-exec function is one prctl call through a ctypes
                # function resolved at import: the child takes no lock another thread could hold.
                preexec_fn=preexec_fn or dying_with_this_process(),  # noqa: PLW1509
                user=user,
                group=group,
            )
        except OSError as exc:
            raise ServerStartError(f"{self.name}: cannot run {cmd[0]}: {exc}") from None
        finally:
            if out is not None:
                out.close()
        return self._proc

    def _last_log_line(self, log: Path) -> str:
        try:
            lines = log.read_text(errors="replace").strip().splitlines()
        except OSError:
            lines = []
        return lines[-1][:300] if lines else "it logged nothing"

    def _kill(self) -> None:
        """SIGKILL the server's whole process group (whatever it forked too) and reap it."""
        proc, self._proc = self._proc, None
        if proc is not None:
            self._exited_alone |= proc.poll() is not None
            kill_group_and_reap(proc)
        if self._exited_alone:  # a daemonised copy left the group: it still carries the mark
            kill_marked(self._mark, directory=self._dir)

    def daemonised(self) -> list[int]:
        """Processes of this server that left it behind (it forked into the background), ended now."""
        return kill_marked(self._mark, directory=self._dir)

    def crash(self) -> None:
        """End the server at once (it loses everything not persisted) and reap it; its data
        directory stays. Safe to call twice."""
        if self._proc is not None and self.crash_signal is not None:
            signal_and_wait(self._proc, self.crash_signal, grace_s=self.stop_grace_s)
        self._kill()

    def stop(self) -> None:
        """Stop the server politely, then kill whatever is left, and reap it. Safe to call twice."""
        if self._proc is not None:
            signal_and_wait(self._proc, self.stop_signal, grace_s=self.stop_grace_s)
        self._kill()

    def restart(self) -> None:
        """Start again on the same port and data directory; a running server is crashed first.

        What the server still holds afterwards is :attr:`keeps_data_across_restarts`."""
        if self.port is None:
            raise ServerStartError(f"{self.name} cannot restart: it was never started")
        self.crash()
        self.start()

    def cleanup(self) -> None:
        """Stop and remove the data directory; the ports go back. Safe to call twice."""
        self.stop()
        shutil.rmtree(self._dir, ignore_errors=True)
        release_port(self.port)
        for port in self._extra_ports:
            release_port(port)
        _not_cleaned_up.discard(self)


#: Every server whose cleanup() has not run yet. An interrupt can land between a server's start
#: and the moment its owner records it (measured: a Ctrl-C during a cluster's start-up left six
#: data directories in /tmp); whatever is left is stopped and removed when the interpreter exits.
_not_cleaned_up: set[SpawnedServer] = set()


@atexit.register
def _clean_up_leftovers() -> None:
    for server in list(_not_cleaned_up):
        server.cleanup()
