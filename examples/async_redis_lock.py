"""A plug-in over an asyncio lock client: ``redis.asyncio`` driven from lockcompare's synchronous calls.

lockcompare calls a backend synchronously (``acquire``, ``release``, ``close``, and the optional
hooks), one call at a time, from the worker's main thread. An asyncio library needs an event loop;
the loop cannot be the worker's (there is none), and ``asyncio.run`` per call would throw the
connections away each time. So the backend owns one loop, running forever in a daemon thread
started by the constructor, and every call hands a coroutine to it
(``asyncio.run_coroutine_threadsafe``) and waits for the result with a deadline shorter than
lockcompare's own (a hung call is then a refusal here, not a killed worker).

Two classes:

- ``AsyncRedisLock`` — SET NX PX with a random token, compare-and-delete release, on lock node 0.
- ``AsyncRenewingLock`` — the same plus a watchdog *task* on the loop that extends the lease
  every TTL/3 (owner-checked PEXPIRE), with the hooks a renewing lock needs: ``before_write``
  (the deadline the holder now believes, or ``Refusal("lost")``), ``drain_renewals`` (each renewal
  attempt, for the history's ``renew`` events) — both kept by lockcompare's ``RenewalLog``.

A pause stops the whole worker process (SIGSTOP): the loop thread and its watchdog stop with it, as
a real client's would. Run it::

    lockcompare --plugin-path examples run --backend async_redis_lock:AsyncRenewingLock --time-scale 0.1
    lockcompare --plugin-path examples evaluate async_redis_lock:AsyncRedisLock --quick
"""

from __future__ import annotations

import asyncio
import secrets
import threading
import time
from collections.abc import Coroutine
from typing import Any, ClassVar, TypeVar

import redis
import redis.asyncio

from lockcompare.backends import BackendConfig, Lease, Refusal
from lockcompare.backends.renewals import RenewalLog

T = TypeVar("T")

RELEASE = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"
EXTEND = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0"


class AsyncRedisLock:
    """SET NX PX + random token + compare-and-delete, through ``redis.asyncio`` on a loop thread."""

    summary: ClassVar[str] = "redis.asyncio SET NX PX + random token + compare-and-delete, loop in a thread"
    exclusive: ClassVar[bool] = True
    issues_fencing_tokens: ClassVar[bool] = False
    #: The client request timeout its users get (used where links are slowed or cut).
    client_timeout_s: ClassVar[float] = 2.0

    def __init__(self, *, config: BackendConfig) -> None:
        self._timeout_s = config.request_timeout_s
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="asyncio-lock-loop", daemon=True)
        self._thread.start()
        # The client is made on the loop: redis.asyncio binds its connections to the running loop.
        self._client = self._run(self._connect(config.node_urls[0]))

    async def _connect(self, url: str) -> redis.asyncio.Redis:
        # No hidden retries and short timeouts: a dead node must fail fast (a refusal, not a stall).
        return redis.asyncio.Redis.from_url(
            url, socket_timeout=self._timeout_s, socket_connect_timeout=self._timeout_s, retry_on_timeout=False
        )

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine`` on the loop thread and wait for it, at most a little past the request timeout."""
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout=self._timeout_s + 1)

    def acquire(self, *, key: str, ttl_ms: int) -> Lease | Refusal:
        owner = secrets.token_hex(16)
        started_ns = time.monotonic_ns()  # the key's TTL starts no earlier than the request is sent
        try:
            granted = self._run(self._client.set(key, owner, nx=True, px=ttl_ms))
        except (redis.RedisError, TimeoutError, OSError):
            return Refusal("error")
        if not granted:
            return Refusal("held")
        lease = Lease(key=key, owner=owner, valid_until_ns=started_ns + ttl_ms * 1_000_000)
        self._granted(lease, ttl_ms=ttl_ms)
        return lease

    def _granted(self, lease: Lease, *, ttl_ms: int) -> None:
        """A lease was granted (the renewing subclass starts its watchdog here)."""

    def release(self, lease: Lease) -> bool:
        try:
            return bool(self._run(self._client.eval(RELEASE, 1, lease.key, lease.owner)))
        except (redis.RedisError, TimeoutError, OSError):
            return False

    def close(self) -> None:
        try:
            self._run(self._client.aclose())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=self._timeout_s + 1)
            if not self._thread.is_alive():
                self._loop.close()


class AsyncRenewingLock(AsyncRedisLock):
    """``AsyncRedisLock`` plus a watchdog task that extends the lease every TTL/3 while it is held."""

    summary: ClassVar[str] = "redis.asyncio lock + a watchdog task extending the lease every TTL/3 (loop in a thread)"

    def __init__(self, *, config: BackendConfig) -> None:
        super().__init__(config=config)
        self._log = RenewalLog()
        self._watchdogs: dict[str, asyncio.Future[None]] = {}

    def _granted(self, lease: Lease, *, ttl_ms: int) -> None:
        self._log.track(lease)
        self._watchdogs[lease.owner] = asyncio.run_coroutine_threadsafe(self._watch(lease, ttl_ms), self._loop)

    async def _watch(self, lease: Lease, ttl_ms: int) -> None:
        while True:
            await asyncio.sleep(ttl_ms / 3000)
            t0 = time.monotonic_ns()  # PEXPIRE restarts the TTL no earlier than this
            try:
                extended = await self._client.eval(EXTEND, 1, lease.key, lease.owner, ttl_ms)
            except (redis.RedisError, OSError):
                self._log.failed(owner=lease.owner, t0=t0, t1=time.monotonic_ns(), reason="error")
                continue
            if not extended:  # the key is gone or someone else's: the lock is lost, stop renewing
                self._log.failed(owner=lease.owner, t0=t0, t1=time.monotonic_ns(), reason="lost")
                return
            self._log.renewed(owner=lease.owner, t0=t0, t1=time.monotonic_ns(), valid_until_ns=t0 + ttl_ms * 1_000_000)

    def before_write(self, lease: Lease) -> Lease | Refusal:
        """The lease with the deadline its last renewal gave it, or ``Refusal("lost")``."""
        return self._log.believe(lease)

    def drain_renewals(self) -> list[dict[str, Any]]:
        """Renewal attempts since the last call, for the history's ``renew`` events."""
        return self._log.drain()

    def stop_renewal(self, lease: Lease) -> None:
        """Stop renewing ``lease`` without releasing it (as a crashed watchdog would)."""
        watchdog = self._watchdogs.pop(lease.owner, None)
        if watchdog is not None:
            watchdog.cancel()

    def release(self, lease: Lease) -> bool:
        self.stop_renewal(lease)  # stop first: a renewal racing the delete would find it gone ("lost")
        self._log.forget(lease.owner)
        return super().release(lease)

    def close(self) -> None:
        for owner in list(self._watchdogs):
            self._watchdogs.pop(owner).cancel()
        super().close()
