"""``atomic``: no lock at all — the critical section is one atomic INCRBY at the resource.

The lesson's last section: the best lock is often none. The resource does the arithmetic, so
concurrent workers cannot lose an increment however they overlap or pause.
"""

from __future__ import annotations

from typing import ClassVar

from lockcompare.backends.no_lock import NoLock


class AtomicIncrement(NoLock):
    """Lock-free: every critical section is ``INCRBY balance 1``."""

    summary: ClassVar[str] = "lock-free: the critical section is one atomic INCRBY at the resource"
    resource_check: ClassVar[str] = "atomic"
