"""``pottery``: an adapter over ``pottery.Redlock``, the Redlock Python users run in production.

What the library does (pottery 3.0.1, read from its source): ``SET redlock:<key> <uuid4> NX PX ttl``
on every master, fanned out through a fresh thread pool per call; the lock is granted when more
than half of the masters said yes AND ``ttl - (1% of ttl + 2 ms) - elapsed`` is still positive;
a failed attempt deletes its token everywhere again. Release is a Lua compare-and-delete on every
master and succeeds when more than half of them deleted the key. Both return as soon as a majority
answered: the remaining requests finish in background threads.

Units and semantics:

- ``Redlock(auto_release_time=...)`` is in **seconds** (a float) and becomes
  ``PX int(auto_release_time * 1000)``; our ``ttl_ms`` is converted with
  :func:`~lockcompare.backends.redis_py_lock.seconds_for_px` so the node sees exactly ``ttl_ms``.
- Every acquire is ONE attempt: ``Redlock.acquire(blocking=False)`` (no ``timeout``) runs the
  fan-out once and returns a bool. pottery's own retry loop (``uniform(0, 0.2 s)`` sleeps, used when
  ``blocking=True``) is never entered: OUR harness decides the TTL, the retry delay and the deadline.
- Validity: ``Redlock.acquire`` returns only a bool; pottery computes the validity internally, as
  ``ttl - drift - elapsed`` timed from just before the fan-out. The lease carries the same figure on
  the shared clock: ``t0 + ttl - drift``, with ``t0`` read just before calling ``acquire`` (so it is,
  if anything, a few microseconds more conservative than pottery's). ``Redlock.locked()`` reports
  the same thing in **seconds** (despite its docstring's "ms"), from the nodes' PTTLs, but costs a
  second fan-out; the tests check that the two agree.
- Owner: pottery's own random token (``str(uuid4())``, the value stored at the nodes).
- Refusals: pottery does not say why an attempt failed. ``error`` when more than half the masters
  raised (pottery's ``QuorumIsImpossible``), ``validity`` when the attempt outlasted the lease
  (pottery refuses such a quorum), ``held`` otherwise.
- ``Redlock.release()`` raises ``ReleaseUnlockedLock`` when fewer than half the masters still held
  our token (the lease expired, or was taken over): :meth:`PotteryRedlock.release` returns False.

pottery is imported lazily (in :meth:`PotteryRedlock.check_viable` and the constructor), so that
``lockcompare backends`` lists this backend, with what to install, where pottery is missing.
Importing pottery monkey-patches ``json.dumps`` (its encoder becomes the default ``cls``; it
encodes everything else exactly as before).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, ClassVar

import redis

from lockcompare.backends.base import BackendConfig, Lease, Refusal
from lockcompare.backends.held import HeldLocks
from lockcompare.backends.redis_py_lock import library_version, seconds_for_px
from lockcompare.errors import BackendNotViableError
from lockcompare.infra.redis.client import connect

if TYPE_CHECKING:
    from pottery import Redlock

#: pottery's fixed part of the drift allowance (``Redlock.__drift``: ``ttl * 0.01 + .002`` seconds).
_DRIFT_CONSTANT_NS = 2_000_000


class PotteryRedlock:
    """``pottery.Redlock`` over the first ``node_count`` lock nodes (all by default)."""

    #: The client request timeout its users get (used where links are slowed or cut): redis-py 8's
    #: default socket_timeout and socket_connect_timeout, 5 s (redis/_defaults.py), on the client
    #: pottery is given (it sets no timeout of its own).
    client_timeout_s: ClassVar[float] = 5.0
    summary: ClassVar[str] = (
        f"pottery.Redlock (pottery {library_version('pottery')}) on the first node_count nodes (all by "
        "default): SET NX PX fanned out by a thread pool per call, quorum > n/2, validity ttl - 1% - 2 ms - elapsed"
    )
    exclusive: ClassVar[bool] = True
    issues_fencing_tokens: ClassVar[bool] = False
    libraries: ClassVar[tuple[str, ...]] = ("pottery", "redis")  # recorded with their versions in every row
    #: A majority quorum: keeps granting (and stays exclusive) with a minority of its nodes down.
    survives_minority_loss: ClassVar[bool] = True

    @classmethod
    def check_viable(cls) -> None:
        try:
            import pottery  # noqa: F401
        except ImportError:
            raise BackendNotViableError("backend 'pottery' is not viable here: pip install pottery") from None

    def __init__(self, *, config: BackendConfig) -> None:
        self.check_viable()
        from pottery import Redlock

        self._redlock_cls = Redlock
        urls = config.node_urls[: config.node_count] if config.node_count else config.node_urls
        if not urls:
            raise ValueError("this backend needs at least one lock node")
        # Our connections, not pottery's: no hidden retries, short timeouts.
        self._masters = [connect(url, timeout_s=config.request_timeout_s) for url in urls]
        self._held: HeldLocks[Redlock] = HeldLocks()

    @property
    def node_count(self) -> int:
        return len(self._masters)

    def acquire(self, *, key: str, ttl_ms: int) -> Lease | Refusal:
        from pottery import QuorumIsImpossible

        seconds = seconds_for_px(ttl_ms)
        redlock = self._redlock_cls(key=key, masters=self._masters, auto_release_time=seconds)
        drift_ns = round(seconds * redlock._CLOCK_DRIFT_FACTOR * 1e9) + _DRIFT_CONSTANT_NS
        started_ns = time.monotonic_ns()
        try:
            granted = redlock.acquire(blocking=False, raise_on_redis_errors=True)
        except (QuorumIsImpossible, redis.RedisError) as exc:
            return Refusal.failed(exc)
        if not granted:
            elapsed_ns = time.monotonic_ns() - started_ns
            return Refusal("validity" if elapsed_ns >= ttl_ms * 1_000_000 - drift_ns else "held")
        owner = getattr(redlock, "_uuid", "") or f"pottery-{id(redlock):x}-{started_ns}"
        self._held.hold(owner, redlock)
        return Lease(key=key, owner=owner, valid_until_ns=started_ns + ttl_ms * 1_000_000 - drift_ns)

    def release(self, lease: Lease) -> bool:
        """True if a majority deleted our token; False if it had expired there, or too many nodes failed.

        Only leases this instance handed out can be released (False for any other).
        """
        from pottery import PrimitiveError

        return self._held.release(
            lease,
            release=lambda redlock: redlock.release(raise_on_redis_errors=True),
            errors=(PrimitiveError, redis.RedisError),  # ReleaseUnlockedLock, QuorumIsImpossible
        )

    def close(self) -> None:
        self._held.clear()
        for master in self._masters:
            master.close()
