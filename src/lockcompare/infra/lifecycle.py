"""Process hygiene shared by everything lockcompare spawns: nothing may outlive a run.

Two mechanisms, because each covers what the other cannot: SIGTERM is turned into an exception so
that every ``finally`` runs (servers and workers are stopped in order), and every child asks the
kernel for PR_SET_PDEATHSIG so that it dies even if lockcompare itself is SIGKILLed.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import os
import signal
import threading
from collections.abc import Callable, Iterator
from multiprocessing.process import BaseProcess
from types import FrameType

from lockcompare.errors import LockcompareError

_PR_SET_PDEATHSIG = 1

# Looked up once in the parent, so that a child does as little as possible between fork and exec.
_prctl = ctypes.CDLL(None, use_errno=True).prctl


def die_with_parent() -> None:
    """Ask the kernel to SIGKILL the calling process when its parent exits (Linux)."""
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


class Terminated(LockcompareError):
    """SIGTERM arrived: unwinding through every ``finally`` so that servers and workers stop."""

    exit_code = 143


#: Code that must not be unwound by an exception from a signal handler: it holds a lock it would
#: never release. logging takes its module lock around every getLogger (redis-py calls it on each
#: connect) and around every fork (os.register_at_fork), and subprocess forks with preexec_fn.
#: Measured: a SIGTERM that landed there left logging's lock held, and every trial thread then
#: hung in getLogger until the run was killed. A finalizer (``__del__``) is no place either: an
#: exception raised there is printed and dropped, and the Ctrl-C with it (seen: redis-py's
#: ConnectionPool.__del__ swallowed one and the run went on).
_UNSAFE_MODULES = ("logging", "subprocess")
_REDELIVER_AFTER_S = 0.02


def _in_unsafe_code(frame: FrameType | None) -> bool:
    while frame is not None:
        if frame.f_code.co_name == "__del__" or frame.f_globals.get("__name__", "").split(".")[0] in _UNSAFE_MODULES:
            return True
        frame = frame.f_back
    return False


def _unwind(signum: int, frame: FrameType | None) -> None:
    """Raise the signal's exception in the main thread — unless it landed inside code that must
    not be unwound: then deliver the same signal again a moment later, at a safer point."""
    if _in_unsafe_code(frame):
        timer = threading.Timer(_REDELIVER_AFTER_S, os.kill, args=(os.getpid(), signum))
        timer.daemon = True
        timer.start()
        return
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise Terminated("terminated by SIGTERM; servers and workers stopped")


@contextlib.contextmanager
def sigterm_unwinds() -> Iterator[None]:
    """Turn SIGTERM into :class:`Terminated` and SIGINT into KeyboardInterrupt for the duration
    (main thread only), both raised only where unwinding is safe (see :func:`_unwind`)."""
    try:
        previous = {sig: signal.signal(sig, _unwind) for sig in (signal.SIGTERM, signal.SIGINT)}
    except ValueError:  # not the main thread: leave the handlers alone
        yield
        return
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


#: Workers are fresh interpreters (spawn): no inherited sockets, threads or locks of the runner.
SPAWN = multiprocessing.get_context("spawn")


def start_worker_process(*, target: Callable[..., None], args: tuple[object, ...]) -> BaseProcess:
    """Start ``target(*args)`` in a spawned process born with SIGINT blocked.

    The mask survives fork and exec. Ctrl-C goes to the whole process group, and a worker hit by it
    while still importing would print a traceback; the runner alone handles it and stops its
    workers. A Ctrl-C that arrives while the mask is up here is delivered when it comes down.
    """
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        proc = SPAWN.Process(target=target, args=args, daemon=True)
        proc.start()
        return proc
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
