"""``redis-lock-renew`` as the battery can run it: python-redis-lock takes whole-second TTLs, so the
battery's short lease must be one second (``min_ttl_ms``), as a time scale it can express gives it."""

from __future__ import annotations

from typing import ClassVar

from lockcompare.backends.redis_lock_renew import RedisLockRenew


class WholeSecondRenewLock(RedisLockRenew):
    min_ttl_ms: ClassVar[int] = 1000
