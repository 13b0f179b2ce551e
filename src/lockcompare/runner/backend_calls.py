"""A worker's calls into its backend: each one marked in the call slot the runner watches (the
per-call deadline), checked (a broken plug-in's answer is named as such), and recorded in the history.

The calls of one round, in the order the worker makes them (runner/worker.py holds the loop):
acquire until the acquire deadline (:func:`acquire_until_deadline`, noting the first of each
refusal detail: :class:`RefusalMessages`), the lease check right before the write
(:func:`lease_check`), the release (:func:`release_recorded`), and the renewals a renewing backend
made meanwhile (:func:`record_renewals`).
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from lockcompare.analysis.history import Recorder, now_ns
from lockcompare.backends import Lease, LockBackend, Refusal, traits_of
from lockcompare.errors import ReleaseFailed
from lockcompare.faults import leases

if TYPE_CHECKING:
    from lockcompare.runner.worker import WorkerPlan

T = TypeVar("T")

#: Which backend call a worker is in, as written to its call slot (0: none). The runner reads the
#: slot to enforce the per-call deadline: a worker stuck in one call is stopped from outside.
CALLS = ("", "construct", "acquire", "release", "close", "before_write")

#: The int64 words a worker shares with the runner: its call slot (2), then its lease slot
#: (faults/leases.py: which round's lease it holds, read by the runner when a fault acts).
SHARED_WORDS = 2 + leases.WORDS


class CallSlot:
    """Shared memory of two int64s: the backend call in progress and when it started (monotonic ns).

    The start is written before the call code and the code cleared after the call, so a reader
    never sees a call older than it is (it may see a newer start: an underestimate, never a false
    timeout).
    """

    def __init__(self, shared: Any) -> None:
        self._shared = shared
        #: The lease words after the call's (faults/leases.py), when the array has them.
        self.lease = leases.LeaseSlot(shared, offset=2)

    def call(self, name: str, step: Callable[[], T]) -> T:
        self._shared[1] = time.monotonic_ns()
        self._shared[0] = CALLS.index(name)
        try:
            return step()
        finally:
            self._shared[0] = 0

    def current(self) -> tuple[str, int]:
        """(call name or "", its start in ns)."""
        code = int(self._shared[0])
        return CALLS[code] if 0 <= code < len(CALLS) else "?", int(self._shared[1])


def checked_outcome(outcome: object, *, backend: str) -> Lease | Refusal:
    """``acquire``'s result, or a TypeError naming the backend: anything else is a broken plug-in."""
    if isinstance(outcome, Lease) and (problem := outcome.problem()) is not None:
        raise TypeError(f"backend {backend!r}: acquire returned a Lease whose {problem}")
    if isinstance(outcome, (Lease, Refusal)):
        return outcome
    raise TypeError(f"backend {backend!r}: acquire returned {type(outcome).__name__}, expected a Lease or a Refusal")


def acquire_until_deadline(
    backend: LockBackend,
    plan: WorkerPlan,
    rec: Recorder,
    *,
    slot: CallSlot,
    rng: random.Random,
    abandon: Callable[[], bool] | None = None,
    messages: RefusalMessages | None = None,
) -> Lease | None:
    """Try to acquire until the acquire deadline; record one ``acquire`` event either way.

    ``abandon`` (an extra round's): asked between attempts; True ends the wait at once, recorded
    as an acquire with ``abandoned`` set (not a timeout: nobody is left to contend with).
    ``messages``: the worker's record of the refusal details it has written down already; the
    acquire event carries (``errors``) those its attempts met first.
    """
    t0 = now_ns()
    deadline = t0 + int(plan.acquire_timeout_ms * 1e6)
    refusals: Counter[str] = Counter()
    messages = messages if messages is not None else RefusalMessages()
    new_messages: list[str] = []
    attempts = 0
    while True:
        attempts += 1
        t_attempt = now_ns()
        outcome = checked_outcome(
            slot.call("acquire", lambda: backend.acquire(key=plan.lock_key, ttl_ms=plan.ttl_ms)), backend=plan.backend
        )
        if isinstance(outcome, Lease):
            lease: Lease = outcome
            rec.add(
                "acquire",
                t0=t0,
                t1=now_ns(),
                ok=True,
                attempts=attempts,
                refusals=dict(refusals),
                t_attempt=t_attempt,
                owner=lease.owner,
                fence=lease.fencing_token,
                valid_until=lease.valid_until_ns,
                **({} if lease.granted_by is None else {"granted_by": list(lease.granted_by)}),
                **({} if lease.session is None else {"session": lease.session}),
                **({} if lease.server is None else {"server": lease.server}),
                # A lock without a TTL (pg-advisory: the session is the lease): nothing expires on the nodes.
                **({} if traits_of(type(backend)).has_ttl else {"no_ttl": True}),
                # ...and one whose server ends the session when it has not heard from the client for
                # the TTL (ZooKeeper): the checker ends the lease after that much silence.
                **({"session_timeout_ms": plan.ttl_ms} if traits_of(type(backend)).session_timeout_is_ttl else {}),
                **({"errors": new_messages} if new_messages else {}),
            )
            return lease
        refusals[outcome.reason] += 1
        if (first := messages.first_time(outcome)) is not None:
            new_messages.append(first)
        failed = {"errors": new_messages} if new_messages else {}
        if abandon is not None and abandon():
            rec.add(
                "acquire", t0=t0, t1=now_ns(), ok=False, attempts=attempts, refusals=dict(refusals), abandoned=True,
                **failed,
            )  # fmt: skip
            return None
        if now_ns() >= deadline:
            rec.add("acquire", t0=t0, t1=now_ns(), ok=False, attempts=attempts, refusals=dict(refusals), **failed)
            return None
        time.sleep(jittered(plan.retry_delay_ms, spread=plan.jitter, rng=rng) / 1000)


class RefusalMessages:
    """The refusal details one worker has recorded: the first of each distinct one, and at most
    :attr:`MOST` (a lock that fails the same way a thousand times needs one line, not a thousand).

    A refusal for ``error`` without a detail is written down once as such, so the history still
    says the backend gave no message.

    >>> seen = RefusalMessages()
    >>> refused = Refusal("error", "ConnectionError: refused")
    >>> seen.first_time(refused), seen.first_time(refused)
    ('error: ConnectionError: refused', None)
    >>> seen.first_time(Refusal("held")), seen.first_time(Refusal("error"))
    (None, 'error: (the backend gave no message)')
    """

    MOST = 8
    #: How much of one detail is kept.
    LONGEST = 300

    def __init__(self) -> None:
        self._seen: set[str] = set()

    def first_time(self, refusal: Refusal) -> str | None:
        """``reason: detail`` the first time this worker meets it (None: seen, or nothing to say)."""
        detail = str(refusal.detail or "").strip()
        if not detail and refusal.reason != "error":
            return None
        text = f"{refusal.reason}: {detail[: self.LONGEST] or '(the backend gave no message)'}"
        if text in self._seen or len(self._seen) >= self.MOST:
            return None
        self._seen.add(text)
        return text


def release_recorded(backend: LockBackend, lease: Lease, rec: Recorder, slot: CallSlot) -> None:
    """Release ``lease`` and record it: ``released`` as the backend says; a release that raised
    :class:`~lockcompare.errors.ReleaseFailed` (its request failed: it cannot tell) is recorded
    as not released, with the ``error`` that says so."""
    t0 = now_ns()
    try:
        released = slot.call("release", lambda: backend.release(lease))
    except ReleaseFailed as exc:
        rec.add("release", t0=t0, t1=now_ns(), released=False, error=str(exc)[: RefusalMessages.LONGEST] or "failed")
        return
    rec.add("release", t0=t0, t1=now_ns(), released=released)


def jittered(ms: float, *, spread: float, rng: random.Random) -> float:
    """``ms`` × U(1 - spread, 1 + spread): the seeded random delay that keeps workers out of lockstep."""
    return ms * (1 + spread * (2 * rng.random() - 1)) if spread else ms


def lease_check(backend: LockBackend, lease: Lease, rec: Recorder, slot: CallSlot) -> bool:
    """May the holder write now? Asked right before the write; False skips it (recorded).

    A backend without a ``before_write`` hook models the lesson's client, which never looks at its
    lease again after acquiring: it always writes (the checker then counts a write after the
    deadline as stale). A backend with the hook models a client that checks its lease before
    writing: a renewing backend returns the lease with the deadline it now believes (recorded as a
    ``lease`` event, which the checker uses for stale writes); a lease-checking one may refuse
    (``lost``). Either way the check includes the deadline, whatever the backend answered: a lease
    whose own ``valid_until_ns`` has passed is not permission to write (``expired``) — one rule
    here, for every checking backend, rather than in each. A skipped write is recorded twice: as
    the failed ``lease`` check and as a ``write-skipped`` event (the checker's ``writes_skipped``).
    What no check can stop is a pause *after* it (the ``after-check`` pause point).
    """
    hook = getattr(backend, "before_write", None)
    if hook is None:
        return True
    t0 = now_ns()
    outcome = checked_outcome(slot.call("before_write", lambda: hook(lease)), backend=type(backend).__name__)
    t1 = now_ns()
    if isinstance(outcome, Refusal):
        rec.add("lease", t0=t0, t1=t1, ok=False, reason=outcome.reason)
        rec.add("write-skipped", t0=now_ns(), reason=outcome.reason)
        return False
    deadline = outcome.valid_until_ns
    if deadline is not None and t1 >= deadline:
        rec.add("lease", t0=t0, t1=t1, ok=False, reason="expired", valid_until=deadline)
        rec.add("write-skipped", t0=now_ns(), reason="expired", late_ms=round((t1 - deadline) / 1e6, 3))
        return False
    rec.add("lease", t0=t0, t1=t1, ok=True, valid_until=deadline)
    return True


def record_renewals(backend: LockBackend, rec: Recorder) -> None:
    """Move a renewing backend's renewal records into the history as ``renew`` events (a record
    with a ``kind`` is an event of that kind: an external client's start, exit or bad reply)."""
    drain = getattr(backend, "drain_renewals", None)
    for record in drain() if drain is not None else ():
        fields = dict(record)
        kind = str(fields.pop("kind", "renew"))
        rec.add(kind, t0=int(fields.pop("t0")), t1=int(fields.pop("t1", 0)) or None, **fields)
