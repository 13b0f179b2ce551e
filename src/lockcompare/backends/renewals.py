"""What a renewing backend (a watchdog that keeps extending the lease) believes, and what it did.

A renewing backend hands out a frozen :class:`~lockcompare.backends.base.Lease` whose
``valid_until_ns`` is only the deadline of the acquire; every successful renewal moves the real
deadline later, and a renewal that finds the key gone or someone else's means the lock is lost. The
watchdog runs in its own thread, so the holder's view lives here, behind a lock, and the worker
asks for it right before its write (``before_write``). Every renewal attempt is also recorded, so
that the runner can put it into the history (``drain``): a watchdog that silently stopped is then
visible as the absence of ``renew`` events after a pause, and a failed one as ``ok: false``.

Each record is a flat dict in the history's own conventions::

    {"t0": ns, "t1": ns, "ok": True, "owner": "…", "valid_until": ns, "reason": None}

``t0`` is the monotonic time just before the renewal request was sent (the new deadline is
``t0 + ttl``, since the server restarts the TTL no earlier than that), ``t1`` just after its reply
or failure; ``valid_until`` is the new deadline, ``None`` when the renewal failed; ``reason`` is
``None``, ``"lost"`` (the key was gone or held by another owner) or ``"error"`` (the request failed:
the lease stays valid until its last deadline, as far as the holder knows).

Example (pure, no Redis)::

    >>> from lockcompare.backends.base import Lease
    >>> log = RenewalLog()
    >>> lease = Lease(key="k", owner="o", valid_until_ns=1_000)
    >>> log.track(lease)
    >>> log.renewed(owner="o", t0=500, t1=600, valid_until_ns=1_500)
    >>> log.believe(lease, now_ns=1_200).valid_until_ns
    1500
    >>> log.believe(lease, now_ns=1_500)        # the last renewal's deadline has passed
    Refusal(reason='expired')
    >>> log.failed(owner="o", t0=1_000, t1=1_100, reason="lost")
    >>> log.believe(lease, now_ns=1_200)
    Refusal(reason='lost')
    >>> [r["ok"] for r in log.drain()], log.drain()
    ([True, False], [])
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from lockcompare.backends.base import Lease, Refusal

FailureReason = Literal["lost", "error"]


@dataclass(kw_only=True)
class _Belief:
    valid_until_ns: int | None
    lost: bool = False


class RenewalLog:
    """Thread-safe: watchdog threads write, the holder's thread reads and drains."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._beliefs: dict[str, _Belief] = {}
        self._records: list[dict[str, Any]] = []

    def track(self, lease: Lease) -> None:
        """Start following a freshly acquired lease (its deadline is the acquire's)."""
        with self._lock:
            self._beliefs[lease.owner] = _Belief(valid_until_ns=lease.valid_until_ns)

    def forget(self, owner: str) -> None:
        """The lease was released (or abandoned): nothing more to believe about it. Records stay."""
        with self._lock:
            self._beliefs.pop(owner, None)

    def renewed(self, *, owner: str, t0: int, t1: int, valid_until_ns: int) -> None:
        with self._lock:
            belief = self._beliefs.get(owner)
            if belief is not None and not belief.lost:
                belief.valid_until_ns = valid_until_ns
            self._records.append(
                {"t0": t0, "t1": t1, "ok": True, "owner": owner, "valid_until": valid_until_ns, "reason": None}
            )

    def failed(self, *, owner: str, t0: int, t1: int, reason: FailureReason) -> None:
        with self._lock:
            belief = self._beliefs.get(owner)
            if belief is not None and reason == "lost":
                belief.lost = True  # only an owner-checked "no" proves the loss; an error proves nothing
            self._records.append(
                {"t0": t0, "t1": t1, "ok": False, "owner": owner, "valid_until": None, "reason": reason}
            )

    def believe(self, lease: Lease, *, now_ns: int | None = None) -> Lease | Refusal:
        """``lease`` as its holder now believes it: moved to the last renewal's deadline;
        ``Refusal("lost")`` once a renewal found the key gone or someone else's; ``Refusal("expired")``
        when that deadline has passed by ``now_ns`` (default: now) — a watchdog that could not renew
        in time (a stopped process, a failing node) leaves a lease that is no permission to write.

        A lease this log does not follow (released, or never tracked) is judged by its own deadline.
        """
        now = time.monotonic_ns() if now_ns is None else now_ns
        with self._lock:
            belief = self._beliefs.get(lease.owner)
            if belief is not None and belief.lost:
                return Refusal("lost")
            deadline = lease.valid_until_ns if belief is None else belief.valid_until_ns
        if deadline is not None and now >= deadline:
            return Refusal("expired")
        return lease if belief is None else dataclasses.replace(lease, valid_until_ns=deadline)

    def drain(self) -> list[dict[str, Any]]:
        """Every renewal recorded since the last drain, oldest first; the log is emptied."""
        with self._lock:
            records, self._records = self._records, []
        return records


#: Renew this many times per TTL (Redisson's watchdog: every lockWatchdogTimeout / 3).
RENEWALS_PER_TTL = 3


class Watchdog:
    """One thread renewing one lease every ``ttl_ms / RENEWALS_PER_TTL`` until stopped or lost.

    ``extend`` is the backend's one owner-checked renewal request: True when the lease was extended
    by a TTL from the moment it was sent, False when the server says it is gone or someone else's
    (the watchdog ends); an exception of ``transient`` (a timeout, a refused connection) is recorded
    and retried at the next tick, since the lease stays valid until its last deadline as far as the
    holder can know. The thread lives in the worker's process: a pause of the process freezes it too.
    """

    def __init__(
        self,
        *,
        extend: Callable[[], bool],
        transient: tuple[type[BaseException], ...],
        lease: Lease,
        ttl_ms: int,
        log: RenewalLog,
    ) -> None:
        self._extend = extend
        self._transient = transient
        self._lease = lease
        self._ttl_ms = ttl_ms
        self._log = log
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"renewal watchdog {lease.owner[:8]}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop renewing (waits for a renewal in flight, bounded by the client's request timeout)."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()

    def _run(self) -> None:
        interval_s = self._ttl_ms / RENEWALS_PER_TTL / 1000
        # Event.wait times out on the monotonic clock: after a SIGSTOP longer than the interval the
        # first renewal is attempted at once, and that is when the holder can learn it lost the key.
        while not self._stop.wait(interval_s):
            if not self._renew_once():
                return

    def _renew_once(self) -> bool:
        """One renewal; False when the lease is lost and the watchdog should end."""
        owner = self._lease.owner
        t0 = time.monotonic_ns()  # the new TTL starts no earlier than the request is sent
        try:
            extended = self._extend()
        except self._transient:
            self._log.failed(owner=owner, t0=t0, t1=time.monotonic_ns(), reason="error")
            return True
        if not extended:
            self._log.failed(owner=owner, t0=t0, t1=time.monotonic_ns(), reason="lost")
            return False
        self._log.renewed(owner=owner, t0=t0, t1=time.monotonic_ns(), valid_until_ns=t0 + self._ttl_ms * 1_000_000)
        return True
