"""Cgroups in the file system: one client's cgroup and its files (:class:`ClientCgroup`: freeze,
thaw, kill, remove, the pids limit), which kind of cgroup the machine lets lockcompare make
(:func:`probe`), and the sweep of the cgroups dead runs left (:func:`sweep_stale`). What each client
does with its cgroup is cgroup.py's.

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

import contextlib
import itertools
import logging
import os
import re
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from lockcompare.errors import InvalidValueError
from lockcompare.processes import process_alive

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
        path, value = self.thaw_write()
        with contextlib.suppress(FileNotFoundError):
            Path(path).write_text(value)

    def thaw_write(self) -> tuple[str, str]:
        """The file a thaw writes and what it writes there (faults/continuer.py makes the write in a
        process of its own)."""
        if self.kind == CGROUP_V2:
            return str(self.dirs[0] / "cgroup.freeze"), "0"
        return str(self._file("freezer", "freezer.state")), "THAWED"

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


_serial = itertools.count()


def make_owned(kind: str, *, role: str) -> ClientCgroup | None:
    """A new cgroup of ``kind`` named ``lockcompare-p<this pid>-<role><N>`` (see :data:`_OWNED`), or
    None where the machine refuses it."""
    return _make(kind, f"lockcompare-p{os.getpid()}-{role}{next(_serial)}")


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
                group = make_owned(kind, role="probe")
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
