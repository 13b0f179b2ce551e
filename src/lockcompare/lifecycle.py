"""Process hygiene shared by everything lockcompare spawns: nothing may outlive a run.

Two mechanisms, because each covers what the other cannot: SIGTERM is turned into an exception so
that every ``finally`` runs (servers and workers are stopped in order), and every child asks the
kernel for PR_SET_PDEATHSIG so that it dies even if lockcompare itself is SIGKILLed.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import signal
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


def _raise_on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise Terminated("terminated by SIGTERM; servers and workers stopped")


@contextlib.contextmanager
def sigterm_unwinds() -> Iterator[None]:
    """Turn SIGTERM into :class:`Terminated` for the duration (main thread only)."""
    try:
        previous = signal.signal(signal.SIGTERM, _raise_on_sigterm)
    except ValueError:  # not the main thread: leave the handler alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


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
