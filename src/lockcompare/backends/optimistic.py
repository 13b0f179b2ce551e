"""``optimistic``: no lock — optimistic concurrency with WATCH / MULTI / EXEC at the resource.

Read the balance under WATCH, work, then write it in a MULTI/EXEC that fails if anyone changed
the balance since the read; on failure read and work again. No increment is lost; the price is
repeated work, which the results report as retries.
"""

from __future__ import annotations

from typing import ClassVar

from lockcompare.backends.no_lock import NoLock


class OptimisticUpdate(NoLock):
    """Lock-free: compare-and-set on the balance with WATCH/MULTI/EXEC, retried on conflict."""

    summary: ClassVar[str] = "lock-free: WATCH/MULTI/EXEC compare-and-set on the balance, retried on conflict"
    resource_check: ClassVar[str] = "optimistic"
