"""Process hygiene shared by everything lockcompare spawns: nothing may outlive a run.

Two mechanisms, because each covers what the other cannot: SIGTERM is turned into an exception so
that every ``finally`` runs (servers and workers are stopped in order), and every child asks the
kernel for PR_SET_PDEATHSIG so that it dies even if lockcompare itself is SIGKILLed.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import functools
import importlib.machinery
import io
import multiprocessing
import multiprocessing.context
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
import typing
from collections.abc import Callable, Iterator
from multiprocessing import popen_spawn_posix, reduction, resource_tracker, spawn, util
from multiprocessing.process import BaseProcess
from pathlib import Path
from types import FrameType

from lockcompare import interrupts
from lockcompare.infra.procgroup import kill_group, signal_group, sweep_group
from lockcompare.processes import die_with_parent, process_alive


def dying_with_this_process() -> Callable[[], None]:
    """A ``preexec_fn`` for a child of this process: :func:`die_with_parent`, checked against it."""
    return functools.partial(die_with_parent, parent_pid=os.getpid())


#: Code that must not be unwound by an exception from a signal handler: it holds a lock it would
#: never release. logging takes its module lock around every getLogger (redis-py calls it on each
#: connect) and around every fork (os.register_at_fork), and subprocess forks with preexec_fn.
#: Measured: a SIGTERM that landed there left logging's lock held, and every trial thread then
#: hung in getLogger until the run was killed. A finalizer (``__del__``) is no place either: an
#: exception raised there is printed and dropped, and the Ctrl-C with it (seen: redis-py's
#: ConnectionPool.__del__ swallowed one and the run went on).
_UNSAFE_MODULES = ("logging", "subprocess")
#: Nor a context manager's own ``__enter__`` or ``__exit__`` (:data:`_PAIRED`): an exception raised
#: in ``__enter__`` after it took a lock skips the ``__exit__`` that would give it back, and one
#: raised in ``__exit__`` before it gave back all it holds leaves the rest held. Python runs the
#: handler at the first bytecode after the C-level acquire returns, which for
#: ``threading.Condition`` (every ``Future.result``, ``Event.wait``, ``concurrent.futures.wait``)
#: is still inside its ``__enter__``: a signal landing there leaves a Future's lock held by the
#: main thread, the trial thread that finishes it blocks forever in ``set_result``, and the run
#: waits for that thread in its executor's shutdown, for ever (tests/test_unwind_points.py drives
#: the scheduler's loop into it; the likely cause of a matrix that did not exit after SIGQUIT,
#: 1 run in ~17, which did not recur in 270 runs here). contextlib's
#: generator-based ones are exempt: their setup and teardown are the generator's own code, with
#: its own ``try``/``finally``, which unwinds like any other.
_PAIRED = ("__enter__", "__exit__")
_REDELIVER_AFTER_S = 0.02


def _in_unsafe_code(frame: FrameType | None) -> bool:
    while frame is not None:
        name, module = frame.f_code.co_name, frame.f_globals.get("__name__", "")
        if name == "__del__" or module.split(".")[0] in _UNSAFE_MODULES:
            return True
        if name in _PAIRED and module != "contextlib":
            return True
        frame = frame.f_back
    return False


def _unwind(signum: int, frame: FrameType | None) -> None:
    """Raise the signal's exception in the main thread — unless it landed inside code that must
    not be unwound: then deliver the same signal again a moment later, at a safer point.

    Noted either way: a command that ends before the signal comes again (it landed in the last
    ``__exit__``) still ends with the signal's line and exit code (cli/core.py), and the signal is
    not sent again once these handlers are gone (the early ones of ``__main__`` would end the
    process with a shorter line, a plain Python with no line at all)."""
    interrupts.note(signum)  # even if some library swallows what is raised here (issue 49)
    if _in_unsafe_code(frame):
        timer = threading.Timer(_REDELIVER_AFTER_S, _deliver_again, args=(signum,))
        timer.daemon = True
        timer.start()
        return
    raise interrupts.exception_for(signum)


def _deliver_again(signum: int) -> None:
    if signal.getsignal(signum) is _unwind or _holding_back:  # held back meanwhile: it comes back after
        os.kill(os.getpid(), signum)


@contextlib.contextmanager
def sigterm_unwinds() -> Iterator[None]:
    """Turn SIGTERM (and SIGHUP, SIGQUIT: a closed terminal, a Ctrl-\\) into :class:`Terminated` and
    SIGINT into KeyboardInterrupt for the duration (main thread only), all raised only where
    unwinding is safe (see :func:`_unwind`). Left to their defaults, SIGHUP and SIGQUIT ended a
    matrix with no message and 3-12 temporary directories behind (issue 38)."""
    interrupts.clear()
    try:
        previous = {sig: signal.signal(sig, _unwind) for sig in UNWINDING_SIGNALS}
    except ValueError:  # not the main thread: leave the handlers alone
        yield
        return
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


#: The signals that end a run the way SIGTERM does: every ``finally`` runs, one line, exit 128+N.
UNWINDING_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)

#: Workers are fresh interpreters (spawn): no inherited sockets, threads or locks of the runner.
SPAWN = multiprocessing.get_context("spawn")


class _DataFirstPopen(popen_spawn_posix.Popen):
    """The spawn start method with one change: the child's start-up data is in its pipe before the
    child exists, so no child ever reads half of it.

    The standard library forks the child first and writes its data after. A parent SIGKILLed in
    between (a worker still starting when the run was killed) left a child that read a cut pipe
    and printed ``EOFError: Ran out of input`` from ``multiprocessing.spawn``, before any of our
    code could run (issue 49). Written first, the data is whole whenever a child reads it: the
    child starts, finds its parent gone in :func:`_child_main` and exits 0, quietly; a parent
    killed before the fork leaves no child at all. The pipe is grown to hold the data (a worker's
    is a few KB; the kernel's default pipe holds 64 KB). Data larger than a pipe can be made
    (fs.pipe-max-size) is written after the fork, as the standard library does.
    """

    def _launch(self, process_obj: BaseProcess) -> None:
        # popen_spawn_posix.Popen._launch of CPython 3.11-3.13, with the write moved before the fork.
        fds: list[int] = self._fds  # type: ignore[attr-defined]  # the fds the child inherits
        tracker_fd = typing.cast(int, resource_tracker.getfd())  # starts the tracker: never None here
        fds.append(tracker_fd)
        prep_data = spawn.get_preparation_data(process_obj.name)
        data = io.BytesIO()
        multiprocessing.context.set_spawning_popen(self)
        try:
            reduction.dump(prep_data, data)
            reduction.dump(process_obj, data)
        finally:
            multiprocessing.context.set_spawning_popen(None)
        payload = data.getvalue()  # bytes, not a view: see infra/messages.py
        parent_r = child_w = child_r = parent_w = None
        try:
            parent_r, child_w = os.pipe()
            child_r, parent_w = os.pipe()
            written_first = _pipe_holds(parent_w, size=len(payload))
            if written_first:
                _write_whole(parent_w, payload)
            cmd = spawn.get_command_line(tracker_fd=tracker_fd, pipe_handle=child_r)
            fds.extend([child_r, child_w])
            self.pid = util.spawnv_passfds(spawn.get_executable(), cmd, fds)  # type: ignore[arg-type]
            self.sentinel = parent_r
            if not written_first:
                _write_whole(parent_w, payload)
        finally:
            self.finalizer = util.Finalize(self, _close_all, ([fd for fd in (parent_r, parent_w) if fd is not None],))
            for fd in (child_r, child_w):
                if fd is not None:
                    os.close(fd)


def _pipe_holds(fd: int, *, size: int) -> bool:
    """True if the pipe ``fd`` can hold ``size`` bytes unread (grown to that if it must be)."""
    try:
        return fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ) >= size or fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, size) >= size
    except OSError:  # beyond fs.pipe-max-size (1 MB by default) for an unprivileged process
        return False


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        os.close(fd)


def _write_whole(fd: int, data: bytes) -> None:
    with open(fd, "wb", closefd=False) as pipe:
        pipe.write(data)


class _DataFirstProcess(multiprocessing.context.SpawnProcess):
    """A spawned process started by :class:`_DataFirstPopen`."""

    @staticmethod
    def _Popen(process_obj: BaseProcess) -> popen_spawn_posix.Popen:
        return _DataFirstPopen(process_obj)


def parent_gone(parent_pid: int) -> bool:
    """True once the process that started us has exited (we were re-parented)."""
    return os.getppid() != parent_pid


def _child_main(target: Callable[..., object], parent_pid: int, args: tuple[object, ...]) -> None:
    """Every spawned child's entry: lead a process group of its own, die with the parent, quietly.

    The group comes first, before anything can start a helper process: every helper a backend
    starts inherits it, so a pause, a strobe or a kill of the group reaches the whole client
    (infra/procgroup.py). The runner never signals a group before the child has said it is ready;
    until then :func:`~lockcompare.infra.procgroup.signal_group` falls back to the pid.
    PR_SET_PDEATHSIG is asked for next; a parent that died before the request (while this
    interpreter was still starting) sends no signal, so the parent is checked once after it. A
    pipe that breaks because the runner is gone ends the child without a traceback: there is no
    one left to report to.
    """
    os.setpgid(0, 0)
    die_with_parent()
    if parent_gone(parent_pid):
        os._exit(0)
    try:
        target(*args)
    except (BrokenPipeError, ConnectionResetError, EOFError):
        if parent_gone(parent_pid):
            os._exit(0)
        raise


def start_worker_process(
    *,
    target: Callable[..., object],
    args: tuple[object, ...],
    started: Callable[[BaseProcess], None] | None = None,
) -> BaseProcess:
    """Start ``target(*args)`` in a spawned process born with SIGINT blocked, which then leads a
    process group of its own (stop and kill it with :mod:`lockcompare.infra.procgroup`).
    ``started(proc)`` runs right after the spawn with signals still held back: what must be
    recorded about a live child (its cgroup) is recorded before a Ctrl-C can unwind the caller.

    The mask survives fork and exec. Ctrl-C goes to the terminal's process group, which the child
    belongs to until its ``setpgid``, and a worker hit by it while still importing would print a
    traceback; the runner alone handles it and stops its workers, group by group. A Ctrl-C that
    arrives while the mask is up here is delivered when it comes down.
    """
    _spare_children_the_main_script()
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        with _signals_deferred(), _STARTING, _cwd_that_exists():
            proc = _DataFirstProcess(target=_child_main, args=(target, os.getpid(), args), daemon=True)
            proc.start()
            # Inside the deferral: a signal held back during start() is delivered when it ends,
            # and the child it then unwinds past must already be on record (issue 49).
            if proc.pid is not None:
                _groups_started.add(proc.pid)
            if started is not None:
                started(proc)
        return proc
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


@contextlib.contextmanager
def _cwd_that_exists() -> Iterator[None]:
    """Spawn asks ``os.getcwd()`` for the child's working directory, which fails once the user's was
    deleted (every command failed with "No such file or directory", issue 38): start the child from
    ``/`` then, and come back to the deleted directory by its descriptor (relative paths keep
    failing there, as they should)."""
    try:
        os.getcwd()
    except FileNotFoundError:
        pass
    else:
        yield
        return
    here = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.chdir("/")
        yield
    finally:
        os.fchdir(here)
        os.close(here)


def _spare_children_the_main_script() -> None:
    """Keep spawned children from re-running the ``lockcompare`` console script before their target.

    ``spawn`` re-runs the parent's ``__main__`` *file* in every child (as ``__mp_main__``); for the
    console script that imports the whole CLI, about 0.2 CPU-s per worker process and a third of
    a small matrix's CPU (py-spy, issue 30). Every target here is a function of an importable
    module, so the child needs none of it. A main module with a ``__spec__`` naming a
    ``__main__`` module is never re-run (multiprocessing.spawn's own rule for ``python -m``), so
    the console script is given the spec ``python -m lockcompare`` would have. Any other main
    module (a user's script that may define a plug-in) is left as it is.
    """
    main = sys.modules.get("__main__")
    if main is None or getattr(main, "__spec__", None) is not None or not hasattr(main, "__file__"):
        return
    if getattr(getattr(main, "main", None), "__module__", None) in ("lockcompare.__main__", "lockcompare.cli"):
        main.__spec__ = importlib.machinery.ModuleSpec("lockcompare.__main__", None)


#: Groups led by processes start_worker_process started and reap_group has not swept yet.
_groups_started: set[int] = set()


@atexit.register
def _sweep_groups_at_exit() -> None:
    """At interpreter exit, SIGKILL every group a spawned child led: multiprocessing's own exit
    handler terminates its daemonic children by pid only, which would leave their helper
    processes (no longer in lockcompare's group, so no Ctrl-C reaches them) running."""
    for pid in list(_groups_started):
        sweep_group(pid)
    _groups_started.clear()


def terminate_group(proc: BaseProcess) -> None:
    """SIGTERM ``proc``'s process group (the process and every helper that stayed in its group)."""
    if proc.pid is not None and proc.is_alive():
        with contextlib.suppress(ProcessLookupError):
            signal_group(proc.pid, signal.SIGTERM)


def reap_group(proc: BaseProcess, *, timeout_s: float = 5.0) -> None:
    """Wait up to ``timeout_s`` for ``proc`` to exit, SIGKILL its group if it has not, reap it, and
    SIGKILL what is left of its group: a helper must not outlive its worker (nor a stopped one be
    left behind: SIGKILL ends a stopped process, SIGTERM waits for its SIGCONT)."""
    if proc.pid is None:
        return
    proc.join(timeout=timeout_s)
    if proc.is_alive():
        kill_group(proc.pid)
        proc.join()
    sweep_group(proc.pid)
    _groups_started.discard(proc.pid)


def kill_and_reap_group(proc: BaseProcess) -> None:
    """SIGKILL ``proc``'s whole group now and reap ``proc``."""
    if proc.pid is not None and proc.is_alive():
        kill_group(proc.pid)
    reap_group(proc, timeout_s=5.0)


#: Held while a child's start-up data is written. A trial thread (--jobs > 1) is not shielded by
#: _signals_deferred: on Ctrl-C the main thread exits, and the interpreter would stop the thread
#: mid-write, leaving a child that prints a cut-off traceback. At exit, wait for that write to end
#: (and start nothing more); the child then dies with us, quietly. Registered after
#: _sweep_groups_at_exit, so it runs first (atexit runs last-in first-out): the sweep then ends that child too.
#: (:class:`_DataFirstPopen` writes before the fork, so a cut write now leaves no child unless the
#: data outgrew a pipe; the lock still keeps a start from beginning while the interpreter exits.)
_STARTING = threading.Lock()


@atexit.register
def _let_starts_finish() -> None:
    _STARTING.acquire(timeout=10)


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """Hold SIGINT and SIGTERM back until the block ends, then deliver them again.

    Blocking a signal in this thread does not stop Python from running its handler here: another
    thread takes the signal and the handler runs at the next bytecode. An exception raised while
    ``start()`` writes the child's start-up data leaves a child that reads half of it and prints
    a traceback (measured: ``EOFError: Ran out of input`` after a Ctrl-C 0.7 s into a run); since
    :class:`_DataFirstPopen` that write precedes the fork. The deferral still keeps a started
    child on record before a signal unwinds its caller (see :func:`start_worker_process`).
    """
    global _holding_back  # noqa: PLW0603 - main thread only
    pending: list[int] = []
    try:
        previous = {sig: signal.signal(sig, lambda signum, _frame: pending.append(signum)) for sig in _DEFERRED}
    except ValueError:  # not the main thread: handlers run in the main thread, never here
        yield
        return
    _holding_back = True
    try:
        yield
    finally:
        _holding_back = False
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for signum in dict.fromkeys(pending):
            os.kill(os.getpid(), signum)


_DEFERRED = UNWINDING_SIGNALS
#: True while :func:`_signals_deferred` holds signals back (main thread), for :func:`_deliver_again`.
_holding_back = False


#: Temporary directories lockcompare makes carry their owner's pid: ``lockcompare-p<PID>-<kind>-*``.
#: A SIGKILLed run cannot remove its own; the next run removes those whose owner is gone.
_OWNED = re.compile(r"^lockcompare-p(\d+)-")
_swept = False


def owned_tempdir(kind: str) -> Path:
    """A new private temporary directory tagged with this process's pid (see :func:`remove_orphaned_dirs`)."""
    global _swept  # noqa: PLW0603 - once per process
    if not _swept:
        _swept = True
        remove_orphaned_dirs()
    return Path(tempfile.mkdtemp(prefix=f"lockcompare-p{os.getpid()}-{kind}-"))


def remove_orphaned_dirs(directory: Path | None = None) -> list[Path]:
    """Remove the tagged temporary directories whose owning process is gone; return them."""
    base = directory or Path(tempfile.gettempdir())
    removed: list[Path] = []
    try:
        entries = list(base.iterdir())
    except OSError:
        return removed
    for entry in entries:
        match = _OWNED.match(entry.name)
        if match is None or int(match.group(1)) == os.getpid() or process_alive(int(match.group(1))):
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed
