"""A hostile plug-in: its acquire forks a child on every attempt of its retry loop (issue 38: such
a plug-in exhausted the pid space and brought the OOM killer). For tests/test_cgroups.py only.

It is a fork loop, but never an unbounded one: it refuses to start unless it runs inside a
lockcompare client cgroup whose ``pids.max`` is at most :data:`MAX_LIMIT` (set by the runner
before the worker starts anything), and each acquire gives up after :data:`LOOP_S` seconds or
:data:`MAX_ATTEMPTS` forks anyway. Every child sleeps until it is killed (by the trial's end).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import ClassVar

from lockcompare.backends import BackendConfig, Lease, Refusal
from lockcompare.errors import BackendError

MAX_LIMIT = 256
LOOP_S = 2.0
MAX_ATTEMPTS = 20_000


def own_pids_limit() -> int | None:
    """``pids.max`` of the lockcompare client cgroup this process is in (None: in none, or unbounded)."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "lockcompare-p" not in path:
            continue
        if "pids" in controllers.split(","):
            limit = Path("/sys/fs/cgroup/pids", path.lstrip("/"), "pids.max")
        elif line.startswith("0::"):
            limit = Path("/sys/fs/cgroup", path.lstrip("/"), "pids.max")
        else:
            continue
        text = limit.read_text().strip() if limit.exists() else "max"
        return int(text) if text.isdigit() else None
    return None


class ForkLoopLock:
    summary: ClassVar[str] = "forks a child on every attempt of its acquire loop (bounded only by pids.max)"
    exclusive: ClassVar[bool] = True
    issues_fencing_tokens: ClassVar[bool] = False

    def __init__(self, *, config: BackendConfig) -> None:
        limit = own_pids_limit()
        if limit is None or limit > MAX_LIMIT:
            raise BackendError(
                f"fork_loop runs only in a lockcompare cgroup with pids.max <= {MAX_LIMIT} (got {limit})"
            )

    def acquire(self, *, key: str, ttl_ms: int) -> Lease | Refusal:
        refused = 0
        deadline = time.monotonic() + LOOP_S
        for _ in range(MAX_ATTEMPTS):
            if time.monotonic() > deadline:
                break
            try:
                pid = os.fork()
            except OSError:  # EAGAIN: pids.max reached; a careless retry loop just tries again
                refused += 1
                time.sleep(0.001)
                continue
            if pid == 0:
                try:
                    time.sleep(120)
                finally:
                    os._exit(0)
        raise BackendError(f"fork_loop: {refused} fork(s) refused; giving up")

    def release(self, lease: Lease) -> bool:
        return False

    def close(self) -> None:
        pass
