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
  kernel says every task is frozen (v1 goes through ``FREEZING``): :func:`stop_client` (a worker
  that asks for a pause stops its own process group first: :func:`stop_own_client`);
- ``pids.max`` bounds how many tasks (processes and threads) the client may have; a fork past it
  fails with EAGAIN and the kernel counts it in ``pids.events`` (:meth:`ClientCgroup.limit_hits`);
- the end of a trial kills every process left in the cgroup (frozen first, so nothing forks
  while it is killed) and removes it (:func:`release`);
- cgroups of runs that died (SIGKILL) are swept by the next run's first probe (:func:`probe`).

The cgroups themselves (their files, which kind the machine offers, the sweep of dead runs') are
cgroup_fs.py's; their names are re-exported here, where the runner and the faults ask for them.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable
from multiprocessing.process import BaseProcess
from pathlib import Path

from lockcompare.infra.cgroup_fs import (
    CGROUP_V1,
    CGROUP_V2,
    DEFAULT_PIDS_MAX,
    ISOLATION_ENV,
    ISOLATIONS,
    PIDS_MAX_ENV,
    PROCESS_GROUP,
    ClientCgroup,
    make_owned,
    pids_limit,
    probe,
    sweep_stale,
)
from lockcompare.infra.lifecycle import start_worker_process
from lockcompare.infra.procgroup import group_members, process_table, signal_group

# --- clients: made, entered, looked up by their worker's pid, released ---------------------------

_lock = threading.Lock()
_by_pid: dict[int, ClientCgroup] = {}
_made: dict[str, ClientCgroup] = {}


def new_client_cgroup() -> ClientCgroup | None:
    """A fresh cgroup for one client, or None where the machine offers none (process groups then)."""
    kind = probe()
    if kind == PROCESS_GROUP:
        return None
    group = make_owned(kind, role="c")
    if group is None:
        return None
    with _lock:
        _made[group.name] = group
    return group


def enter_and_run(dirs: tuple[str, ...], target: Callable[..., object], *args: object) -> None:
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


def start_in_cgroup(*, target: Callable[..., object], args: tuple[object, ...]) -> BaseProcess:
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


def stop_own_client() -> None:
    """In a worker: SIGSTOP its own process group now — itself, every thread, every helper that stayed
    in the group — and return once someone has continued it. The signal reaches the sender before
    ``killpg`` returns, so nothing the worker does after asking for a pause runs until then, unlike
    a stop from the runner, which lands when the runner gets to it (a few ms on a loaded machine,
    while the client's other threads run on). The runner freezes the worker's cgroup as well, once
    it sees the worker stopped (faults/freeze.py: ``adopt_stop``): a helper that left the group stops
    then. Not a freeze of its own cgroup: a task frozen in a v1 cgroup does not die of SIGKILL until
    thawed, and a trial cut short before the runner read the request must still end its workers."""
    os.killpg(os.getpgrp(), signal.SIGSTOP)


def continue_client(pid: int) -> None:
    """Undo :func:`stop_client`; ProcessLookupError when the client is gone."""
    group = of(pid)
    if group is None:
        signal_group(pid, signal.SIGCONT)
    else:
        group.thaw()


def thaw_write_of(pid: int) -> tuple[str, str] | None:
    """The freezer file a thaw of worker ``pid``'s cgroup writes, and its value (None: no cgroup)."""
    group = of(pid)
    return group.thaw_write() if group is not None else None


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


#: What the runner and the faults use: this module's functions and cgroup_fs.py's names.
__all__ = [
    "CGROUP_V1",
    "CGROUP_V2",
    "DEFAULT_PIDS_MAX",
    "ISOLATIONS",
    "ISOLATION_ENV",
    "PIDS_MAX_ENV",
    "PROCESS_GROUP",
    "ClientCgroup",
    "adopt",
    "cgroup_members",
    "client_members",
    "continue_client",
    "dirs_of",
    "end_leftovers",
    "enter_and_run",
    "isolation_of",
    "limit_problem",
    "new_client_cgroup",
    "of",
    "pids_limit",
    "probe",
    "release",
    "start_in_cgroup",
    "stop_client",
    "stop_own_client",
    "sweep_stale",
]
