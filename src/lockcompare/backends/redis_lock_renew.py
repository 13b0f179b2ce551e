"""``redis-lock-renew``: an adapter over python-redis-lock with ``auto_renewal=True``, exposing
exactly what the library gives its users; ``redis-lock-renew-checked``: the same plus a lease
check that lockcompare adds (see :class:`RedisLockRenewChecked`).

What the library does (python-redis-lock 4.0.1, read from its source): ``SET lock:<name> <id> NX
EX expire`` on one server (lock node 0 here), ``id`` 18 random bytes in base64; with
``auto_renewal=True`` a daemon thread calls ``Lock.extend()`` every ``expire * 2/3`` seconds, an
owner-checked ``EXPIRE`` by Lua. Release stops that thread, then deletes the key by an
owner-checked script (which also pushes to a ``lock-signal:<name>`` list for blocked waiters).

Units and semantics:

- ``expire`` is in **whole seconds** (the library applies ``int()``), minimum 1 s. A TTL that is
  not a whole number of seconds, or below 1 s, raises :class:`~lockcompare.errors.InvalidValueError`
  (a config error, not a :class:`Refusal`: a refusal would be retried until the acquire deadline
  and the trial would look like an unavailable lock). :func:`expire_seconds` is the mapping, and
  :meth:`RedisLockRenew.check_ttl` lets a runner check a TTL before starting anything.
- Every acquire is ONE attempt: ``Lock.acquire(blocking=False)`` (a GET, then SET NX EX) returns
  False at once when the key exists; the library's BLPOP wait is never used.
- Validity: the request's start + ``expire``; each successful renewal moves it to that renewal's
  start + ``expire`` (:meth:`RedisLockRenew.before_write`).
- Renewals are observed, not re-implemented: the library's own thread runs, calling our subclass's
  ``extend``, which records the attempt (for the history's ``renew`` events) and then behaves
  exactly as the library's (it re-raises). So, as in production, the first failed renewal
  (``NotAcquired`` after a freeze longer than the expiry, or a connection error) ends the renewal
  thread for good, with the library's traceback on stderr. ``NotAcquired`` is recorded as
  ``lost``; a Redis error as ``error``.
- The library gives its user no signal that the lease is gone: the thread dies, the holder is not
  told, and its next write goes ahead. So ``redis-lock-renew`` has no ``before_write``: the worker
  writes as a user of the library would. What the recorded renewals know (the lease was lost) is
  put to use only by ``redis-lock-renew-checked``, a variant that lockcompare adds.
- ``Lock.release()`` raises ``NotAcquired`` when the key expired or belongs to someone else: a
  release that did not happen, so :meth:`RedisLockRenew.release` returns False.
- The library logs a WARNING for every refused non-blocking acquire; with no logging configured,
  Python would print each one to stderr. A ``NullHandler`` on the ``redis_lock`` logger keeps the
  workers quiet without hiding the records from an application that configures logging.

python-redis-lock is imported lazily, so that ``lockcompare backends`` lists this backend, with
what to install, where it is missing.

Example, against a running redis-server::

    >>> from lockcompare.backends import BackendConfig
    >>> lock = RedisLockRenew(config=BackendConfig(node_urls=("redis://127.0.0.1:6379/0",)))  # doctest: +SKIP
    >>> lease = lock.acquire(key="demo", ttl_ms=1000)                                       # doctest: +SKIP
    >>> lock.release(lease)                                                                   # doctest: +SKIP
    True
"""

from __future__ import annotations

import functools
import logging
import time
from typing import TYPE_CHECKING, Any, ClassVar

import redis

from lockcompare.backends.base import BackendConfig, Lease, Refusal, first_node
from lockcompare.backends.redis_py_lock import library_version
from lockcompare.backends.renewals import RenewalLog
from lockcompare.errors import BackendNotViableError, InvalidValueError
from lockcompare.infra.redis.client import connect

if TYPE_CHECKING:
    import redis_lock

#: The key python-redis-lock stores a lock named ``name`` under.
KEY_PREFIX = "lock:"


def expire_seconds(ttl_ms: int) -> int:
    """python-redis-lock's ``expire`` for ``ttl_ms``: whole seconds, at least 1, nothing rounded.

    >>> expire_seconds(2000)
    2
    >>> expire_seconds(1500)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    lockcompare.errors.InvalidValueError: backend ... takes TTLs in whole seconds, at least 1000 ms; got 1500 ms
    """
    if ttl_ms < 1000 or ttl_ms % 1000:
        raise InvalidValueError(
            "backend 'redis-lock-renew' (python-redis-lock) takes TTLs in whole seconds, "
            f"at least 1000 ms; got {ttl_ms} ms"
        )
    return ttl_ms // 1000


@functools.cache
def _observed_lock_class() -> type[redis_lock.Lock]:
    """``redis_lock.Lock`` whose ``extend`` records each renewal in the instance's ``renewal_log``.

    Built on first use because the library is optional at import time.
    """
    import redis_lock

    class ObservedLock(redis_lock.Lock):
        renewal_log: RenewalLog

        def extend(self, expire: int | None = None) -> None:
            t0 = time.monotonic_ns()  # EXPIRE restarts the key's TTL no earlier than this
            try:
                super().extend(expire)
            except redis_lock.NotAcquired:
                self.renewal_log.failed(owner=self.id, t0=t0, t1=time.monotonic_ns(), reason="lost")
                raise
            except redis.RedisError:
                self.renewal_log.failed(owner=self.id, t0=t0, t1=time.monotonic_ns(), reason="error")
                raise
            seconds = int(expire) if expire else self._expire
            self.renewal_log.renewed(
                owner=self.id, t0=t0, t1=time.monotonic_ns(), valid_until_ns=t0 + seconds * 1_000_000_000
            )

        def stop_renewal(self) -> None:
            self._stop_lock_renewer()  # the library's own shutdown of its thread (4.0.1)

    return ObservedLock


class RedisLockRenew:
    """``redis_lock.Lock(expire=ttl, auto_renewal=True)`` on lock node 0, one attempt per acquire."""

    #: The client request timeout its users get (used where links are slowed or cut): redis-py 8's
    #: default socket_timeout and socket_connect_timeout, 5 s (redis/_defaults.py), on the client
    #: python-redis-lock is given.
    client_timeout_s: ClassVar[float] = 5.0
    summary: ClassVar[str] = (
        f"redis_lock.Lock (python-redis-lock {library_version('python-redis-lock')}) on one node, "
        "auto_renewal=True: SET NX EX, a thread renews every expire*2/3 (whole seconds, >= 1 s)"
    )
    exclusive: ClassVar[bool] = True
    issues_fencing_tokens: ClassVar[bool] = False
    #: One server and no failover: when it crashes the lock has none left (analysis/exercised.py).
    unavailable_under: ClassVar[tuple[str, ...]] = ("crash",)
    libraries: ClassVar[tuple[str, ...]] = ("python-redis-lock", "redis")  # recorded with their versions in every row
    #: The library's shortest expiry (whole seconds, at least 1): the battery's short lease uses it.
    min_ttl_ms: ClassVar[int] = 1000
    #: Where the lease lives (faults/holders.py): python-redis-lock keeps the owner under
    #: ``lock:<name>`` and a list ``lock-signal:<name>`` beside it, which the default ``*<key>`` also
    #: matched: 678 injection events of the reproduction read ``'<list>'`` instead of the owner.
    key_pattern: ClassVar[str] = "lock:{key}"
    key_type: ClassVar[str] = "string"

    @classmethod
    def check_viable(cls) -> None:
        try:
            import redis_lock  # noqa: F401
        except ImportError:
            raise BackendNotViableError(
                "backend 'redis-lock-renew' is not viable here: pip install python-redis-lock"
            ) from None

    @classmethod
    def check_ttl(cls, *, ttl_ms: int) -> None:
        """Raise :class:`InvalidValueError` unless the library can express ``ttl_ms``."""
        expire_seconds(ttl_ms)

    def __init__(self, *, config: BackendConfig) -> None:
        self.check_viable()
        logging.getLogger("redis_lock").addHandler(_NULL_HANDLER)  # see the module docstring
        self._lock_cls = _observed_lock_class()
        self._client = connect(first_node(config.node_urls), timeout_s=config.request_timeout_s)
        self._log = RenewalLog()
        self._held: dict[str, redis_lock.Lock] = {}

    def acquire(self, *, key: str, ttl_ms: int) -> Lease | Refusal:
        expire = expire_seconds(ttl_ms)
        lock = self._lock_cls(self._client, key, expire=expire, auto_renewal=True)
        lock.renewal_log = self._log
        started_ns = time.monotonic_ns()  # the key's TTL starts no earlier than the request is sent
        try:
            granted = lock.acquire(blocking=False)
        except redis.RedisError as exc:
            return Refusal.failed(exc)
        if not granted:
            return Refusal("held")
        lease = Lease(key=key, owner=lock.id, valid_until_ns=started_ns + expire * 1_000_000_000)
        self._log.track(lease)
        self._held[lease.owner] = lock
        return lease

    def drain_renewals(self) -> list[dict[str, Any]]:
        """Renewal attempts since the last call (see :mod:`lockcompare.backends.renewals`)."""
        return self._log.drain()

    def stop_renewal(self, lease: Lease) -> None:
        """Stop the library's renewal thread for ``lease`` without releasing it (as a crashed
        watchdog would): the key expires one expiry after its last renewal."""
        lock = self._held.get(lease.owner)
        if lock is not None:
            lock.stop_renewal()

    def release(self, lease: Lease) -> bool:
        """True if this call deleted the key; False if it had expired, was someone else's, or a node failed.

        Only leases this instance handed out can be released (False for any other).
        """
        import redis_lock

        lock = self._held.pop(lease.owner, None)
        if lock is None:
            return False
        self._log.forget(lease.owner)
        try:
            lock.release()  # stops the renewal thread first, then the owner-checked delete
        except (redis_lock.NotAcquired, redis.RedisError):
            return False
        return True

    def close(self) -> None:
        # Leases still held are abandoned, not released: their keys expire within one expiry.
        for lock in self._held.values():
            lock.stop_renewal()
        self._held.clear()
        self._client.close()


class RedisLockRenewChecked(RedisLockRenew):
    """``redis-lock-renew`` plus a check the library does not make: before each write, a lease whose
    renewal raised ``NotAcquired`` in the library's thread is reported lost and the write skipped."""

    summary: ClassVar[str] = (
        f"redis-lock-renew (python-redis-lock {library_version('python-redis-lock')}) plus a check "
        "lockcompare adds: NotAcquired in the library's renewal thread is caught and the write skipped "
        "(the library itself only lets the thread die)"
    )

    def before_write(self, lease: Lease) -> Lease | Refusal:
        """The lease with its deadline moved to the last successful renewal, or ``Refusal("lost")``
        once the library's renewal raised ``NotAcquired``. No request is made."""
        return self._log.believe(lease)


#: One handler object, so that repeated constructions add it once (``addHandler`` skips duplicates).
_NULL_HANDLER = logging.NullHandler()
