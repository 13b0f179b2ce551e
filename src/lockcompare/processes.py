"""Whether a process still runs, by its pid: the one answer every layer asks for (the renderer's
dead staging folders, the temporary directories of a killed run, a registered run's liveness);
and a child's request to die with its parent, which every layer that starts processes makes (the
runner's workers, the renderer's pool).

Standard library only: every layer may use it (render and analysis import no infra).
"""

from __future__ import annotations

import ctypes
import os
import signal
from pathlib import Path

_PR_SET_PDEATHSIG = 1

# Looked up once in the parent, so that a child does as little as possible between fork and exec.
_prctl = ctypes.CDLL(None, use_errno=True).prctl


def die_with_parent(sig: int = signal.SIGKILL, *, parent_pid: int | None = None) -> None:
    """Ask the kernel to send ``sig`` (SIGKILL) to the calling process when its parent exits (Linux).

    ``parent_pid``: the parent that forked us. One that died before the request (SIGKILLed while
    the child was between fork and here) sends nothing: the child exits at once instead (seen: a
    redis-server outlived a run SIGKILLed at 3 s on a loaded machine, issue 49)."""
    _prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)
    if parent_pid is not None and os.getppid() != parent_pid:
        os._exit(1)


def process_alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie has exited: /proc says so, PID 1 may not reap).

    In doubt (a process of another user, /proc unreadable) it answers True: callers remove what a
    dead process left, and must never remove what a live one still uses.

    >>> process_alive(os.getpid())
    True
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return True
