"""Each client in a cgroup of its own: an atomic freeze, a process limit, and an end for everything.

A worker leads a process group (infra/procgroup.py), but a group is only a convention: a helper
that calls ``setsid()`` or double-forks leaves it, and then a pause does not freeze it, a strobe
does not starve it and the trial's end does not end it (issue 38: a daemonising helper outlived
lockcompare, reparented to init; a plug-in that forked in its acquire loop exhausted the pid space
and sent the OOM killer through a 2-core machine). A cgroup cannot be left that way: every process
a worker starts is born in the worker's cgroup, whatever it does to its session or its parent.

Where the machine offers it, each worker process gets a cgroup of its own (:func:`new_client_cgroup`),
which it joins before it runs anything (:func:`enter_and_run`; the runner also moves it right after
the spawn). Then:

- a pause freezes the cgroup (v1 ``freezer.state``, v2 ``cgroup.freeze``) and waits until the
  kernel says every task is frozen (v1 goes through ``FREEZING``): :func:`stop_client`;
- ``pids.max`` bounds how many tasks (processes and threads) the client may have; a fork past it
  fails with EAGAIN and the kernel counts it in ``pids.events`` (:meth:`ClientCgroup.limit_hits`);
- the end of a trial kills every process left in the cgroup (frozen first, so nothing forks
  while it is killed) and removes it (:func:`release`);
- cgroups of runs that died (SIGKILL) are swept by the next run's first probe (:func:`probe`).

Two layouts: cgroup v1 with the ``freezer`` and ``pids`` hierarchies (two directories per client,
one in each; measured here: both mounted read-write at /sys/fs/cgroup/{freezer,pids}), and cgroup
v2 where the cgroup lockcompare runs in delegates ``pids`` and has ``cgroup.freeze``. Anywhere else
(no cgroups, not root, a v2 tree without ``pids``) the answer is ``process-group``: the workers'
process groups, as before, and each row of the results says which isolation its trial had.

``LOCKCOMPARE_ISOLATION=process-group`` forces the fallback; ``LOCKCOMPARE_CLIENT_PIDS_MAX``
changes the per-client limit (default :data:`DEFAULT_PIDS_MAX`: a JVM client runs ~40 threads,
each a task).
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import logging
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.process import BaseProcess
from pathlib import Path

from lockcompare.errors import InvalidValueError
from lockcompare.infra.lifecycle import process_alive, start_worker_process
from lockcompare.infra.procgroup import group_members, process_table, signal_group

_log = logging.getLogger(__name__)

PROCESS_GROUP = "process-group"
CGROUP_V1 = "cgroup-v1"
CGROUP_V2 = "cgroup-v2"
ISOLATIONS = (CGROUP_V1, CGROUP_V2, PROCESS_GROUP)

ISOLATION_ENV = "LOCKCOMPARE_ISOLATION"
PIDS_MAX_ENV = "LOCKCOMPARE_CLIENT_PIDS_MAX"
#: Tasks (processes and threads) one client may have: far above what a real client runs (a worker
#: ~5, Node ~11, a JVM ~40), far below the machine's pid space (32768 here).
DEFAULT_PIDS_MAX = 512

_ROOT = Path("/sys/fs/cgroup")
#: ``lockcompare-p<PID of the run>-c<N>``: the owner's pid lets the next run sweep a dead run's.
_OWNED = re.compile(r"^lockcompare-p(\d+)-")
#: How long a freeze may take to become FROZEN (a task in uninterruptible sleep delays it).
FREEZE_TIMEOUT_S = 2.0
KILL_TIMEOUT_S = 5.0


@dataclass(frozen=True, kw_only=True)
class ClientCgroup:
    """One client's cgroup: ``dirs`` is (freezer, pids) in v1, (the cgroup,) in v2."""

    kind: str
    dirs: tuple[Path, ...]
    pids_max: int

    @property
    def name(self) -> str:
        return self.dirs[0].name

    def _file(self, controller: str, name: str) -> Path:
        if self.kind == CGROUP_V2:
            return self.dirs[0] / name
        return (self.dirs[0] if controller == "freezer" else self.dirs[1]) / name

    def add(self, pid: int) -> None:
        """Move ``pid`` (its whole thread group) into the cgroup; its children are born in it."""
        for directory in self.dirs:
            (directory / "cgroup.procs").write_text(str(pid))

    def procs(self) -> list[int]:
        """The processes in the cgroup now (the pids hierarchy: every task is charged there)."""
        try:
            text = self._file("pids", "cgroup.procs").read_text()
        except OSError:
            return []
        return sorted({int(line) for line in text.split()})

    def freeze(self, *, timeout_s: float = FREEZE_TIMEOUT_S) -> bool:
        """Freeze every task of the cgroup; True once the kernel says all are frozen (atomic: a
        process forked meanwhile is born frozen). Raises ProcessLookupError if the cgroup is gone."""
        try:
            if self.kind == CGROUP_V2:
                (self.dirs[0] / "cgroup.freeze").write_text("1")
            else:
                self._file("freezer", "freezer.state").write_text("FROZEN")
        except FileNotFoundError:
            raise ProcessLookupError(f"cgroup {self.name} is gone") from None
        deadline = time.monotonic() + timeout_s
        while not self.frozen():
            if time.monotonic() > deadline:
                _log.warning(
                    "cgroup %s: not FROZEN after %g s (a task in uninterruptible sleep?)", self.name, timeout_s
                )
                return False
            time.sleep(0.0002)
        return True

    def frozen(self) -> bool:
        try:
            if self.kind == CGROUP_V2:
                return "frozen 1" in (self.dirs[0] / "cgroup.events").read_text().splitlines()
            return self._file("freezer", "freezer.state").read_text().strip() == "FROZEN"
        except OSError:
            return False

    def thaw(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            if self.kind == CGROUP_V2:
                (self.dirs[0] / "cgroup.freeze").write_text("0")
            else:
                self._file("freezer", "freezer.state").write_text("THAWED")

    def set_pids_max(self, limit: int) -> None:
        self._file("pids", "pids.max").write_text(str(limit))

    def limit_hits(self) -> int:
        """How many forks (or thread creations) the cgroup's ``pids.max`` refused so far."""
        try:
            text = self._file("pids", "pids.events").read_text()
        except OSError:
            return 0
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "max":
                return int(value)
        return 0

    def kill_all(self, *, spare: frozenset[int] = frozenset(), timeout_s: float = KILL_TIMEOUT_S) -> list[int]:
        """SIGKILL every process in the cgroup but ``spare``; return the pids killed.

        Frozen first, so that nothing forks between the read of the list and the kill (a fork loop
        would otherwise outrun it), then thawed: a frozen task dies only once it runs again.
        """
        killed: list[int] = []
        deadline = time.monotonic() + timeout_s
        while True:
            self.freeze(timeout_s=min(FREEZE_TIMEOUT_S, max(0.0, deadline - time.monotonic())))
            victims = [pid for pid in self.procs() if pid not in spare]
            for pid in victims:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            self.thaw()
            killed.extend(p for p in victims if p not in killed)
            if not victims or time.monotonic() > deadline:
                break
            time.sleep(0.005)  # the killed leave the list as they exit
        return killed

    def remove(self) -> bool:
        """rmdir the cgroup (True if it is gone); it must be empty."""
        removed = True
        for directory in self.dirs:
            for _ in range(50):  # an exiting task leaves the list a moment after its SIGKILL
                try:
                    directory.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.01)
            else:
                removed = False
                _log.warning("cgroup %s could not be removed (still busy); the next run sweeps it", directory)
        return removed


# --- where cgroups can be made ------------------------------------------------------------------


def _own_path(controller: str) -> str | None:
    """This process's cgroup path in the hierarchy of ``controller`` ("" for cgroup v2's)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if (controller == "" and controllers == "" and line.startswith("0::")) or (
            controller and controller in controllers.split(",")
        ):
            return path
    return None


def _v1_bases() -> tuple[Path, Path] | None:
    bases = []
    for controller in ("freezer", "pids"):
        own = _own_path(controller)
        if own is None:
            return None
        bases.append(_ROOT / controller / own.lstrip("/"))
    return bases[0], bases[1]


def _v2_base() -> Path | None:
    own = _own_path("")
    if own is None:
        return None
    for mount in (_ROOT, _ROOT / "unified"):
        base = mount / own.lstrip("/")
        try:
            offered = (base / "cgroup.controllers").read_text().split()
        except OSError:
            continue
        if "pids" not in offered:
            continue
        try:
            if "pids" not in (base / "cgroup.subtree_control").read_text().split():
                (base / "cgroup.subtree_control").write_text("+pids")  # refused where processes live in base
        except OSError:
            continue
        return base
    return None


def _bases(kind: str) -> tuple[Path, ...]:
    if kind == CGROUP_V1:
        return _v1_bases() or ()
    if kind == CGROUP_V2:
        base = _v2_base()
        return (base,) if base is not None else ()
    return ()


def _make(kind: str, name: str) -> ClientCgroup | None:
    """Create cgroup ``name`` of ``kind``, or None (and nothing left behind) if the machine refuses."""
    bases = _bases(kind)
    if not bases:
        return None
    made: list[Path] = []
    try:
        for base in bases:
            (base / name).mkdir()
            made.append(base / name)
        group = ClientCgroup(kind=kind, dirs=tuple(made), pids_max=pids_limit())
        needed = ("cgroup.freeze", "cgroup.events", "pids.max") if kind == CGROUP_V2 else ("freezer.state", "pids.max")
        if not all(group._file("pids" if f.startswith("pids") else "freezer", f).exists() for f in needed):
            raise OSError(f"{name}: the cgroup lacks one of {', '.join(needed)}")
        group.set_pids_max(group.pids_max)
        return group
    except OSError:
        for directory in made:
            with contextlib.suppress(OSError):
                directory.rmdir()
        return None


def pids_limit() -> int:
    """The per-client ``pids.max`` (``LOCKCOMPARE_CLIENT_PIDS_MAX``, else :data:`DEFAULT_PIDS_MAX`)."""
    text = os.environ.get(PIDS_MAX_ENV, "").strip()
    if not text:
        return DEFAULT_PIDS_MAX
    if not text.isdigit() or not 2 <= int(text) <= 100_000:
        raise InvalidValueError(f"{PIDS_MAX_ENV} must be a whole number from 2 to 100000, got {text!r}")
    return int(text)


_probe_lock = threading.Lock()
_probed: str | None = None
_serial = itertools.count()


def probe() -> str:
    """Which isolation this machine offers lockcompare's clients: ``cgroup-v2``, ``cgroup-v1`` or
    ``process-group`` — found once per process by making (and removing) a cgroup of each kind.
    The first probe also sweeps the cgroups of runs that died without removing theirs."""
    global _probed  # noqa: PLW0603 - once per process
    with _probe_lock:
        if _probed is not None:
            return _probed
        forced = os.environ.get(ISOLATION_ENV, "").strip()
        if forced and forced not in ISOLATIONS:
            raise InvalidValueError(f"{ISOLATION_ENV} must be one of {', '.join(ISOLATIONS)}, got {forced!r}")
        _probed = PROCESS_GROUP
        if forced != PROCESS_GROUP:
            sweep_stale()
            for kind in (CGROUP_V2, CGROUP_V1) if not forced else (forced,):
                group = _make(kind, f"lockcompare-p{os.getpid()}-probe{next(_serial)}")
                if group is not None:
                    group.remove()
                    _probed = kind
                    break
        return _probed


def sweep_stale() -> list[Path]:
    """Kill what is left in, and remove, the cgroups of lockcompare runs that are gone; return them."""
    removed: list[Path] = []
    for kind in (CGROUP_V1, CGROUP_V2):
        bases = _bases(kind)
        names: set[str] = set()
        for base in bases:
            with contextlib.suppress(OSError):
                names.update(e.name for e in base.iterdir() if e.is_dir())
        for name in sorted(names):
            match = _OWNED.match(name)
            if match is None or int(match.group(1)) == os.getpid() or process_alive(int(match.group(1))):
                continue
            dirs = tuple(base / name for base in bases if (base / name).is_dir())
            if len(dirs) == len(bases):
                ClientCgroup(kind=kind, dirs=dirs, pids_max=0).kill_all()
            else:  # half a pair: nothing can be frozen, kill what is listed
                for directory in dirs:
                    with contextlib.suppress(OSError):
                        for pid in (directory / "cgroup.procs").read_text().split():
                            with contextlib.suppress(ProcessLookupError):
                                os.kill(int(pid), signal.SIGKILL)
            for directory in dirs:
                with contextlib.suppress(OSError):
                    directory.rmdir()
                    removed.append(directory)
    return removed


# --- clients: made, entered, looked up by their worker's pid, released ---------------------------

_lock = threading.Lock()
_by_pid: dict[int, ClientCgroup] = {}
_made: dict[str, ClientCgroup] = {}


def new_client_cgroup() -> ClientCgroup | None:
    """A fresh cgroup for one client, or None where the machine offers none (process groups then)."""
    kind = probe()
    if kind == PROCESS_GROUP:
        return None
    group = _make(kind, f"lockcompare-p{os.getpid()}-c{next(_serial)}")
    if group is None:
        return None
    with _lock:
        _made[group.name] = group
    return group


def enter_and_run(dirs: tuple[str, ...], target: Callable[..., None], *args: object) -> None:
    """A spawned worker's first act: join its cgroup (``dirs``, empty for none), then ``target(*args)``.
    Nothing the target starts can then be born outside it.

    A cgroup already gone was removed by its run, which removes a worker's cgroup only when the run
    is stopping: the worker has nothing to do and ends quietly (it printed a FileNotFoundError
    traceback at an early Ctrl-C, issue 49)."""
    for directory in dirs:
        try:
            Path(directory, "cgroup.procs").write_text(str(os.getpid()))
        except FileNotFoundError:
            sys.exit(1)
    target(*args)


def start_in_cgroup(*, target: Callable[..., None], args: tuple[object, ...]) -> BaseProcess:
    """Start ``target(*args)`` as lifecycle's worker processes start (a process group of its own,
    dying with its parent), in a cgroup of its own where the machine offers one: the child joins it
    before it runs ``target``, and the parent moves it right after the spawn. End it with
    :func:`release` after reaping it."""
    group = new_client_cgroup()
    adopted: list[BaseProcess] = []

    def join(proc: BaseProcess) -> None:  # before a Ctrl-C can unwind past the live worker
        adopt(proc.pid, group)
        adopted.append(proc)

    try:
        return start_worker_process(target=enter_and_run, args=(dirs_of(group), target, *args), started=join)
    except BaseException:
        # A cgroup whose worker started is ended with it (release, or at exit): removed now, it
        # would be gone before the worker joined it (issue 49). One without a worker goes now.
        if group is not None and not adopted:
            group.remove()
        raise


def dirs_of(group: ClientCgroup | None) -> tuple[str, ...]:
    """What :func:`enter_and_run` is given (picklable: plain strings)."""
    return tuple(str(d) for d in group.dirs) if group is not None else ()


def adopt(pid: int | None, group: ClientCgroup | None) -> None:
    """Record ``group`` as the cgroup of worker ``pid`` and move the worker into it now (it also
    joins by itself first thing: whichever comes first, nothing it starts is born outside)."""
    if pid is None or group is None:
        return
    with contextlib.suppress(ProcessLookupError, OSError):
        group.add(pid)
    with _lock:
        _by_pid[pid] = group


def of(pid: int) -> ClientCgroup | None:
    """The cgroup of worker ``pid`` (None: process-group isolation)."""
    with _lock:
        return _by_pid.get(pid)


def isolation_of(pids: list[int]) -> str:
    """The isolation a trial whose workers are ``pids`` had: a cgroup kind if every worker had one."""
    groups = [of(pid) for pid in pids]
    kinds = {g.kind for g in groups if g is not None}
    return kinds.pop() if len(kinds) == 1 and all(groups) else PROCESS_GROUP


def release(pid: int | None) -> list[int]:
    """Kill every process left in worker ``pid``'s cgroup and remove it; return the pids killed."""
    if pid is None:
        return []
    with _lock:
        group = _by_pid.pop(pid, None)
    if group is None:
        return []
    killed = group.kill_all()
    if group.remove():
        with _lock:
            _made.pop(group.name, None)
    return killed


def end_leftovers(pid: int) -> list[int]:
    """Kill every process in worker ``pid``'s cgroup but the worker (a warm worker between trials):
    no helper of one trial outlives it. Returns the pids killed."""
    group = of(pid)
    return group.kill_all(spare=frozenset({pid})) if group is not None else []


@atexit.register
def _release_all_at_exit() -> None:
    """At interpreter exit, end and remove every cgroup this process made (a run must leave none)."""
    with _lock:
        groups = list(_made.values())
        _made.clear()
        _by_pid.clear()
    for group in groups:
        with contextlib.suppress(OSError):
            group.kill_all(timeout_s=1.0)
            group.remove()


# --- what a fault does to a client ----------------------------------------------------------------


def stop_client(pid: int) -> str:
    """Stop worker ``pid``'s whole client: freeze its cgroup (waiting until FROZEN), else SIGSTOP
    its process group. Returns how (``cgroup freeze`` or ``SIGSTOP``); ProcessLookupError when gone."""
    group = of(pid)
    if group is None:
        signal_group(pid, signal.SIGSTOP)
        return "SIGSTOP"
    group.freeze()
    return "cgroup freeze"


def continue_client(pid: int) -> None:
    """Undo :func:`stop_client`; ProcessLookupError when the client is gone."""
    group = of(pid)
    if group is None:
        signal_group(pid, signal.SIGCONT)
    else:
        group.thaw()


def client_members(pid: int) -> list[int]:
    """The processes a stop of worker ``pid`` reaches: its cgroup's, else its process group's."""
    group = of(pid)
    return group.procs() if group is not None else group_members(pid, process_table())


def cgroup_members(pid: int) -> list[int] | None:
    """The processes in worker ``pid``'s cgroup, or None when it has none (for procgroup.GroupView)."""
    group = of(pid)
    return group.procs() if group is not None else None


def limit_problem(pids: list[int]) -> str:
    """Why a trial cannot be judged because a client hit its ``pids.max`` ("" if none did): a fork
    loop is stopped by the limit, and its trial is ``unknown`` with this reason, the machine unharmed."""
    hits = []
    for index, pid in enumerate(pids):
        group = of(pid)
        refused = group.limit_hits() if group is not None else 0
        if group is not None and refused:
            limit = f"pids.max={group.pids_max}"
            hits.append(f"worker {index}'s client hit its process limit ({limit}): {refused} fork(s) refused")
    return "; ".join(hits)
