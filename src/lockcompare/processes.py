"""Whether a process still runs, by its pid: the one answer every layer asks for (the renderer's
dead staging folders, the temporary directories of a killed run, a registered run's liveness).

Standard library only: every layer may use it (render and analysis import no infra).
"""

from __future__ import annotations

import os
from pathlib import Path


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
