"""Process hygiene shared by everything lockcompare spawns: nothing may outlive a run.

Two mechanisms, because each covers what the other cannot: SIGTERM is turned into an exception so
that every ``finally`` runs (servers and workers are stopped in order), and every child asks the
kernel for PR_SET_PDEATHSIG so that it dies even if lockcompare itself is SIGKILLed.
"""

from __future__ import annotations

import contextlib
import ctypes
import signal
from collections.abc import Iterator
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
