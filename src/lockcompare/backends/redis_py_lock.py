"""``redis-py``: an adapter over ``redis.lock.Lock``, the lock most Python users already run.

What the library does: ``SET name token NX PX ttl`` on one server (lock node 0 here), the token a
``uuid.uuid1()`` hex string (unique, but built from the clock and the host, not random), and a Lua
compare-and-delete on release. It is the ``single`` design, written by someone else.

Units and semantics, as pinned against redis-py 8.1:

- ``Lock(timeout=...)`` is in **seconds** (a float is allowed) and becomes ``PX int(timeout * 1000)``;
  our ``ttl_ms`` is converted with :func:`seconds_for_px` so that the truncation gives back exactly
  ``ttl_ms`` (a plain ``ttl_ms / 1000`` turns 1001 ms into 1000 ms).
- Every acquire is ONE attempt: the ``Lock`` is created with ``blocking=False``, and
  ``acquire(blocking=False)`` returns False at once when the key exists. redis-py's own
  ``sleep`` / ``blocking_timeout`` loop is never used: OUR harness decides the TTL, the retry delay
  and the acquire deadline.
- ``thread_local=False``: the token lives on the ``Lock`` object, not in the acquiring thread.
- Validity: the holder may assume ``start of the request + ttl`` (the key's TTL starts no earlier
  than the request is sent), exactly as for ``single``.
- ``Lock.release()`` raises ``LockNotOwnedError`` when the key expired or belongs to someone else;
  that is a release that did not happen, so :meth:`RedisPyLock.release` returns False.

Example, against a running redis-server::

    >>> from lockcompare.backends import BackendConfig
    >>> lock = RedisPyLock(config=BackendConfig(node_urls=("redis://127.0.0.1:6379/0",)))  # doctest: +SKIP
    >>> lease = lock.acquire(key="demo", ttl_ms=1000)                                      # doctest: +SKIP
    >>> lock.release(lease)                                                                  # doctest: +SKIP
    True
"""

from __future__ import annotations

import math
import time
from importlib.metadata import PackageNotFoundError, version
from typing import ClassVar

import redis
from redis.lock import Lock

from lockcompare.backends.base import BackendConfig, Lease, Refusal, first_node
from lockcompare.backends.held import HeldLocks
from lockcompare.errors import InvalidValueError
from lockcompare.infra.redis.client import connect


def library_version(dist: str) -> str:
    """The installed version of a distribution, or ``"not installed"``."""
    try:
        return version(dist)
    except PackageNotFoundError:
        return "not installed"


def seconds_for_px(ttl_ms: int) -> float:
    """Seconds that a library turning them into ``int(seconds * 1000)`` maps back to ``ttl_ms`` exactly.

    Both redis-py's ``Lock`` and pottery's ``Redlock`` truncate ``seconds * 1000``; for about 0.7% of
    whole-millisecond TTLs the float product lands just below the integer.

    >>> int(1.001 * 1000)
    1000
    >>> int(seconds_for_px(1001) * 1000)
    1001
    """
    if ttl_ms <= 0:
        raise InvalidValueError(f"a lock TTL must be positive, got {ttl_ms} ms")
    seconds = ttl_ms / 1000
    while int(seconds * 1000) < ttl_ms:
        seconds = math.nextafter(seconds, math.inf)
    return seconds


class RedisPyLock:
    """``redis.lock.Lock`` on lock node 0: one non-blocking attempt per acquire, release by token."""

    #: The client request timeout its users get (used where links are slowed or cut): redis-py 8's
    #: default socket_timeout and socket_connect_timeout, 5 s (redis/_defaults.py); redis.lock.Lock
    #: runs on the client it is created from.
    client_timeout_s: ClassVar[float] = 5.0
    summary: ClassVar[str] = (
        f"redis.lock.Lock (redis-py {library_version('redis')}) on one node: "
        "SET NX PX with a uuid1 token, Lua compare-and-delete release"
    )
    exclusive: ClassVar[bool] = True
    issues_fencing_tokens: ClassVar[bool] = False
    #: One server and no failover: when it crashes the lock has none left (analysis/exercised.py).
    unavailable_under: ClassVar[tuple[str, ...]] = ("crash",)
    libraries: ClassVar[tuple[str, ...]] = ("redis",)  # recorded with their versions in every row

    def __init__(self, *, config: BackendConfig) -> None:
        self._client = connect(first_node(config.node_urls), timeout_s=config.request_timeout_s)
        self._held: HeldLocks[Lock] = HeldLocks()

    def acquire(self, *, key: str, ttl_ms: int) -> Lease | Refusal:
        lock = self._client.lock(key, timeout=seconds_for_px(ttl_ms), blocking=False, thread_local=False)
        started_ns = time.monotonic_ns()  # the key's TTL starts no earlier than the request is sent
        try:
            granted = lock.acquire(blocking=False)
        except redis.RedisError as exc:
            return Refusal.failed(exc)
        if not granted:
            return Refusal("held")
        token = lock.local.token
        owner = token.decode() if isinstance(token, bytes) else str(token)
        self._held.hold(owner, lock)
        return Lease(key=key, owner=owner, valid_until_ns=started_ns + ttl_ms * 1_000_000)

    def release(self, lease: Lease) -> bool:
        """True if this call deleted the key; False if it had expired, was someone else's, or a node failed.

        Only leases this instance handed out can be released (False for any other).
        """
        # LockNotOwnedError / LockError derive from RedisError
        return self._held.release(lease, release=lambda lock: lock.release(), errors=(redis.RedisError,))

    def close(self) -> None:
        self._held.clear()
        self._client.close()
