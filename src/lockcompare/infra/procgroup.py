"""A worker's process group: what a pause, a starvation strobe and a kill reach, read from /proc.

Every process lockcompare spawns as a worker (or a battery's backend host) leads a process group of
its own (:func:`lockcompare.infra.lifecycle.start_worker_process`), and any helper process a backend
starts — a lock client in Node driven over a pipe, a renewal daemon — inherits that group. Faults
and teardown signal the group, not the pid: a pause that stopped only the worker while its helper
kept renewing the lease made an unsafe lock look safe (issue 25: 10 of 10 pauses had renewals
inside them, 0/20 conflicts, ``exclusive``).

A helper can leave the group (``setsid()``, ``setpgid()``); nothing then freezes it with its
worker. :func:`escaped_helpers` finds those among the worker's descendants so the runner can name
them. Members and descendants come from one scan of every /proc/PID/stat (pgid and parent pid):
unlike ``/proc/PID/task/TID/children`` (an optional kernel feature) it also finds a member whose
parent exited. A helper that double-forked away from its parent and left the group is no
descendant any more and is not found.

Without cgroups nothing kills a helper that left the group when its worker's group is signalled, so
the runner ends the helpers it named at their trial's end (:meth:`GroupView.end_escaped`; a reused
warm worker's whole subtree but itself, :func:`end_descendants`), and a process belongs to the trial
during which it started: a view made for a trial on a reused worker names only processes started
since that trial began (``since_ticks``, against each process's start time in /proc), never a
previous trial's (issue 48.5: a helper that outlived its trial had the next trial on the same worker
judged ``unknown`` in its name).

Example (pure, a hand-built table)::

    >>> table = {10: Proc(pid=10, ppid=1, pgid=10, state="S", comm="python"),
    ...          11: Proc(pid=11, ppid=10, pgid=10, state="T", comm="node"),
    ...          12: Proc(pid=12, ppid=11, pgid=12, state="S", comm="daemon")}
    >>> group_members(10, table)
    [10, 11]
    >>> [p.pid for p in escaped_helpers(10, table)]
    [12]
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

_PROC = Path("/proc")


@dataclass(frozen=True, kw_only=True)
class Proc:
    """The fields of /proc/PID/stat this module uses."""

    pid: int
    ppid: int
    pgid: int
    state: str  # R, S, D, T (stopped), t (traced), Z (zombie), ...
    comm: str
    start_ticks: int = 0  # when it started, in clock ticks since boot (field 22): with the pid, who it is
    cpu_ticks: int = 0  # user + system CPU time so far, in clock ticks (fields 14 and 15)


def read_stat(pid: int) -> Proc | None:
    """``pid``'s /proc/PID/stat, or None when it is gone (or unreadable)."""
    try:  # os.read, not pathlib or open(): a scan reads every process's stat (half the cost per file)
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
        try:
            raw = os.read(fd, 4096)
        finally:
            os.close(fd)
    except OSError:
        return None
    head, _, tail = raw.rpartition(b")")
    fields = tail.split()
    if len(fields) < 20:
        return None
    comm = head.partition(b"(")[2].decode(errors="replace")
    return Proc(
        pid=pid, ppid=int(fields[1]), pgid=int(fields[2]), state=fields[0].decode(), comm=comm,
        start_ticks=int(fields[19]), cpu_ticks=int(fields[11]) + int(fields[12]),
    )  # fmt: skip


_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def boot_ticks() -> int:
    """Now, in the unit and on the clock of a process's start time in /proc (ticks since boot)."""
    return int(time.clock_gettime(time.CLOCK_BOOTTIME) * _TICKS_PER_S)


def process_table() -> dict[int, Proc]:
    """Every process visible in /proc, by pid (one scan: a few ms with a hundred processes)."""
    table: dict[int, Proc] = {}
    try:
        entries = os.listdir(_PROC)
    except OSError:
        return table
    for name in entries:
        if name.isdigit():
            proc = read_stat(int(name))
            if proc is not None:
                table[proc.pid] = proc
    return table


def group_members(pgid: int, table: dict[int, Proc]) -> list[int]:
    """The live (not zombie) processes of process group ``pgid``, by pid."""
    return sorted(p.pid for p in table.values() if p.pgid == pgid and p.state != "Z")


def descendants(pid: int, table: dict[int, Proc]) -> list[Proc]:
    """Every process below ``pid`` in the parent tree (children, their children, ...)."""
    children: dict[int, list[Proc]] = {}
    for proc in table.values():
        children.setdefault(proc.ppid, []).append(proc)
    found: list[Proc] = []
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child.pid)
    return sorted(found, key=lambda p: p.pid)


def escaped_helpers(pid: int, table: dict[int, Proc], *, since_ticks: int = 0) -> list[Proc]:
    """Live descendants of group leader ``pid`` that are not in its group (they called setsid or
    setpgid, or a descendant of theirs did): a signal to the group does not reach them. Only those
    started at ``since_ticks`` or later (:func:`boot_ticks`): an older one is an earlier trial's."""
    return [p for p in descendants(pid, table) if p.pgid != pid and p.state != "Z" and p.start_ticks >= since_ticks]


def end_processes(procs: list[Proc]) -> list[int]:
    """SIGKILL each of ``procs`` that is still the process it was (same pid, same start time: a pid
    reused since is another process, never touched); the pids signalled."""
    killed = []
    for proc in procs:
        now = read_stat(proc.pid)
        if now is None or now.start_ticks != proc.start_ticks or now.state in ("Z", "X"):
            continue
        try:
            os.kill(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
        killed.append(proc.pid)
    return killed


def end_descendants(pid: int, *, escaped_only: bool = False) -> list[int]:
    """SIGKILL every live process below ``pid`` (only those outside its group with ``escaped_only``),
    ``pid`` itself spared: what a trial started, ended at the trial's end. Stopped first, all of
    them, so none forks a replacement while the others are killed; the pids signalled."""
    table = process_table()
    found = escaped_helpers(pid, table) if escaped_only else descendants(pid, table)
    found = [p for p in found if p.state not in ("Z", "X")]
    for proc in found:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGSTOP)
    return end_processes(found)


def command_line(pid: int) -> str:
    """``pid``'s command line as one string ("" when it is gone), each path cut to its file name
    (``python3 client.py redis://... --escape``: the ends of a command name it) and the whole to
    120 characters."""
    try:
        raw = (_PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return ""
    words = [w.decode(errors="replace") for w in raw.rstrip(b"\0").split(b"\0") if w]
    text = " ".join(w.rsplit("/", 1)[-1] if w.startswith("/") else w for w in words)
    return text if len(text) <= 120 else text[:117] + "..."


def describe_escaped(proc: Proc) -> str:
    """``pid 1234 (python3 child.py ...)``: how a helper that left the group is named."""
    return f"pid {proc.pid} ({command_line(proc.pid) or proc.comm})"


def any_stopped(pids: list[int]) -> bool:
    """True if any of ``pids`` is in the stopped state (``T`` in /proc/PID/stat)."""
    for pid in pids:
        proc = read_stat(pid)
        if proc is not None and proc.state == "T":
            return True
    return False


def signal_group(pid: int, sig: int) -> None:
    """Send ``sig`` to the process group led by ``pid``; to ``pid`` alone when it does not (yet)
    lead one (a child between exec and its own ``setpgid``). Raises ProcessLookupError when
    neither the group nor the process exists."""
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        os.kill(pid, sig)


def kill_group(pid: int | None) -> None:
    """SIGKILL the group led by ``pid`` (and ``pid``), ignoring what is already gone.

    Only for a process not yet reaped (alive or a zombie: its pid cannot be reused); after the
    reap, :func:`sweep_group` ends what is left of its group.
    """
    if pid is None:
        return
    try:
        signal_group(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def sweep_group(pid: int | None) -> None:
    """SIGKILL whatever is left of the group ``pid`` led (helpers outliving their reaped leader).

    The group's id stays reserved while it has members, so this can reach no other process.
    """
    if pid is None:
        return
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


class GroupView:
    """The members of the groups some leaders lead, and the helpers that left them, re-read from
    /proc at most every ``max_age_s`` (a scan costs a few ms: not at every tick of a watch loop).

    :meth:`stopped` reads the stat of each known member at every call (cheap): a member that
    joined since the last scan is seen at the next one.
    """

    def __init__(
        self,
        *,
        leaders: list[int],
        max_age_s: float = 1.0,
        cgroup_members: Callable[[int], list[int] | None] | None = None,
        since_ticks: int = 0,
    ) -> None:
        self.leaders = list(leaders)
        self.max_age_s = max_age_s
        #: Processes started before this (:func:`boot_ticks`) are an earlier trial's: never named here.
        self.since_ticks = since_ticks
        #: A leader's cgroup members (None: it has no cgroup): then they are what a stop reaches, and
        #: a helper has escaped only if it left the cgroup — leaving the group no longer matters.
        self._cgroup_members = cgroup_members
        self._members: dict[int, list[int]] = {pid: [pid] for pid in self.leaders}
        self._escaped: dict[int, list[Proc]] = {pid: [] for pid in self.leaders}
        self._named: dict[int, Proc] = {}  # every helper returned by newly_escaped, by pid
        self._read_at: float | None = None

    def refresh(self, *, force: bool = False) -> None:
        now = time.monotonic()
        if not force and self._read_at is not None and now - self._read_at < self.max_age_s:
            return
        table = process_table()
        self._read_at = now
        members_of = self._cgroup_members
        for leader in self.leaders:
            in_cgroup = members_of(leader) if members_of is not None else None
            if in_cgroup is None:
                self._members[leader] = group_members(leader, table) or [leader]
                self._escaped[leader] = escaped_helpers(leader, table, since_ticks=self.since_ticks)
                continue
            self._members[leader] = in_cgroup or [leader]
            outside = [
                p
                for p in descendants(leader, table)
                if p.pid not in set(in_cgroup) and p.state != "Z" and p.start_ticks >= self.since_ticks
            ]
            if outside:  # read again: one that exited between the two reads has not escaped
                inside = set(members_of(leader) or []) if members_of is not None else set()
                outside = [p for p in outside if p.pid not in inside and (read_stat(p.pid) or p).state not in "ZX"]
                outside = [p for p in outside if read_stat(p.pid) is not None]
            self._escaped[leader] = outside

    def stopped(self, leader: int) -> bool:
        """True if any process of ``leader``'s group is stopped (SIGSTOP, Ctrl-Z of a helper...)."""
        return any_stopped(self._members.get(leader, [leader]))

    def end_escaped(self) -> list[int]:
        """SIGKILL every helper this view saw outside its leader's group that is still running (the
        trial's end: a leader that exited left its helpers to init, where no scan finds them)."""
        seen = {p.pid: p for escaped in self._escaped.values() for p in escaped}
        seen.update(self._named)
        return end_processes(list(seen.values()))

    def newly_escaped(self) -> list[tuple[int, Proc]]:
        """(leader, helper) for each helper outside its leader's group not returned before."""
        fresh = []
        for leader in self.leaders:
            for proc in self._escaped.get(leader, []):
                if proc.pid not in self._named:
                    self._named[proc.pid] = proc
                    fresh.append((leader, proc))
        return fresh
