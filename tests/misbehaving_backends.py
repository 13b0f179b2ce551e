"""Backends that break the protocol in ways the conformance battery must report, not suffer.

Imported by spec (``misbehaving_backends:HangingLock``) in the battery's child process: tests/ is on
sys.path (pyproject's ``pythonpath``) and a spawned child starts with its parent's sys.path.
"""

from __future__ import annotations

import os
import time
from typing import ClassVar

from lockcompare.backends import BackendConfig, Lease, Refusal
from lockcompare.backends.no_lock import NoLock

#: Where HangingLock appends the pid of each process it hangs in (so a test can check it was killed).
PID_FILE_ENV = "LOCKCOMPARE_TEST_HANG_PID_FILE"


class HangingLock(NoLock):
    """Every acquire blocks for an hour (a socket without a timeout, a deadlock, a retry loop)."""

    summary: ClassVar[str] = "hangs in acquire"

    def __init__(self, *, config: BackendConfig) -> None:
        super().__init__(config=config)
        path = os.environ.get(PID_FILE_ENV)
        if path:
            with open(path, "a", encoding="utf-8") as fh:
                fh.write(f"{os.getpid()}\n")

    def acquire(self, *, key: str, ttl_ms: int) -> Lease | Refusal:
        time.sleep(3600)
        raise AssertionError("unreachable")


class RaisingLock(NoLock):
    """acquire raises: an exception is a failure, never a refusal."""

    summary: ClassVar[str] = "raises in acquire"
    exclusive: ClassVar[bool] = True

    def acquire(self, *, key: str, ttl_ms: int) -> Lease | Refusal:
        raise ConnectionError("node 0 went away")


class NoneReturningLock(NoLock):
    """acquire returns None: neither a Lease nor a Refusal."""

    summary: ClassVar[str] = "returns None from acquire"

    def acquire(self, *, key: str, ttl_ms: int) -> Lease | Refusal:
        return None  # type: ignore[return-value]
