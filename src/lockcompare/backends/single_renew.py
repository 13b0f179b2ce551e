"""``single-renew``: the ``single`` lock plus a watchdog thread that keeps extending the lease.

This is the fix most users reach for when work can outlast the TTL (Redisson's watchdog,
python-redis-lock's ``auto_renewal``): while the lease is held, a thread renews the key every
``ttl / 3`` with an owner-checked script (``if GET == token then PEXPIRE``), so the key never
expires while the holder is alive and never outlives it by more than a TTL.

What it cannot survive — the point of the ``renewal-pause`` experiment: a stop-the-world pause
(SIGSTOP, a long GC, a migrated VM) freezes the watchdog with everything else. The key expires,
another worker acquires it, and when the holder resumes it carries on as if nothing happened until
its watchdog's next renewal answers "not yours" (recorded, and reported by :meth:`before_write`).

Renewal failures: an owner-checked "no" (the key is gone or someone else's) ends the watchdog and
marks the lease lost; a request error (timeout, refused connection) is recorded and retried at the
next tick, because the lease stays valid until its last deadline as far as the holder can know.

Example, against a running redis-server::

    >>> from lockcompare.backends import BackendConfig
    >>> lock = SingleRenewLock(config=BackendConfig(node_urls=("redis://127.0.0.1:6379/0",)))  # doctest: +SKIP
    >>> lease = lock.acquire(key="demo", ttl_ms=300)                                       # doctest: +SKIP
    >>> time.sleep(1.0)           # three TTLs later the key is still ours          # doctest: +SKIP
    >>> lock.before_write(lease).valid_until_ns > lease.valid_until_ns                    # doctest: +SKIP
    True
    >>> lock.release(lease)                                                                 # doctest: +SKIP
    True
"""

from __future__ import annotations

from typing import Any, ClassVar

import redis

from lockcompare.backends.base import BackendConfig, Lease, Refusal
from lockcompare.backends.renewals import RenewalLog, Watchdog
from lockcompare.backends.single import SingleNodeLock

#: Owner-checked extend: a holder whose key expired or was taken over must not extend its successor's.
RENEW_SCRIPT = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
else
  return 0
end
"""


class SingleRenewLock(SingleNodeLock):
    """``single`` (SET NX PX, compare-and-delete) with a watchdog per lease renewing every TTL/3."""

    summary: ClassVar[str] = (
        "single + watchdog thread: owner-checked PEXPIRE every ttl/3 while held (Redisson-style auto-renewal)"
    )
    exclusive: ClassVar[bool] = True
    issues_fencing_tokens: ClassVar[bool] = False

    def __init__(self, *, config: BackendConfig) -> None:
        super().__init__(config=config)
        self._renew = self._client.register_script(RENEW_SCRIPT)
        self._log = RenewalLog()
        self._watchdogs: dict[str, Watchdog] = {}

    def acquire(self, *, key: str, ttl_ms: int) -> Lease | Refusal:
        outcome = super().acquire(key=key, ttl_ms=ttl_ms)
        if isinstance(outcome, Lease):
            self._log.track(outcome)
            renew, owned = self._renew, outcome

            def extend() -> bool:
                return bool(renew(keys=[owned.key], args=[owned.owner, ttl_ms]))

            watchdog = Watchdog(
                extend=extend, transient=(redis.RedisError,), lease=outcome, ttl_ms=ttl_ms, log=self._log
            )
            self._watchdogs[outcome.owner] = watchdog
            watchdog.start()
        return outcome

    def before_write(self, lease: Lease) -> Lease | Refusal:
        """The lease with its deadline moved to the last successful renewal, or ``Refusal("lost")``
        once a renewal found the key gone or someone else's. No request is made."""
        return self._log.believe(lease)

    def drain_renewals(self) -> list[dict[str, Any]]:
        """Renewal attempts since the last call (see :mod:`lockcompare.backends.renewals`)."""
        return self._log.drain()

    def stop_renewal(self, lease: Lease) -> None:
        """Stop renewing ``lease`` without releasing it, as a crash of the watchdog would: the key
        then expires one TTL after its last renewal. The lease can still be released."""
        watchdog = self._watchdogs.pop(lease.owner, None)
        if watchdog is not None:
            watchdog.stop()

    def release(self, lease: Lease) -> bool:
        # Stop renewing first: a renewal racing the delete would find the key gone and record a loss.
        self.stop_renewal(lease)
        self._log.forget(lease.owner)
        return super().release(lease)

    def close(self) -> None:
        # Leases still held are abandoned, not released: their keys expire within one TTL.
        for watchdog in self._watchdogs.values():
            watchdog.stop()
        self._watchdogs.clear()
        super().close()
