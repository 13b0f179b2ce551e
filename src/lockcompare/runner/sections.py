"""The critical section itself: how a worker touches the resource once it believes it may.

Every variant enters (INCR occupancy) and exits (DECR) the same way, so conflicts are counted alike
for locks and for lock-free strategies; what differs is how the balance is incremented:

- read-modify-write (``plain``, ``fence-writes``, ``fence-all``, ``token-cas``): read → work →
  write balance+1, with whatever the resource checks; a refused read ends the section unwritten;
- ``atomic``: work → INCRBY (nothing to lose: the resource does the arithmetic);
- ``optimistic``: WATCH+read → work → MULTI/SET/EXEC, read and work again when the balance changed.
- ``partitioned`` / ``partitioned-skew``: read-modify-write of one partition's key (the worker's
  own, or under skew another worker's: the worker picks it), the balance kept as their sum;
- ``idempotent``: work → INCRBY carrying the round's request id, which the resource remembers;
- ``pg-for-update`` / ``pg-serializable``: transactions on the PostgreSQL resource (sections_tx.py).

A worker whose round's reply is lost (the ``lost-reply`` fault, on the increments only) sees its
write land, gets no answer, and sends the same request again: ``atomic`` applies it twice,
``idempotent`` acknowledges the repeat without applying it (the checker's ``double_applications``).
The other sections ignore it: a resent ``SET balance = v`` would count as a second accepted write
of one increment, and lost updates (writes accepted − balance) would count it as lost.

``before_write`` is the hook right before the write: a worker scheduled to freeze at
``before-write`` has read the balance and worked, and wakes to write at once; then a backend with
a ``before_write`` hook has its lease checked (the hook's answer, then the lease's own deadline:
backend_calls.py's ``lease_check``), and a worker scheduled to freeze at ``after-check`` freezes only
now, holding a permission that expires while it sleeps. It returns False when the lease is lost or past its
deadline: the write is skipped (recorded as ``write-skipped``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial

from lockcompare.analysis.history import Recorder, now_ns
from lockcompare.backends import Lease, traits_of
from lockcompare.errors import BackendLoadError
from lockcompare.runner.resource import Check, Resource
from lockcompare.runner.sections_tx import for_update_section, serializable_section


def check_for(backend_cls: type, *, fence: str) -> Check:
    """What the resource checks for this backend under ``--fence`` (writes, all or token).

    Lock-free backends name their own strategy (``resource_check``); ``token`` is antirez's
    check-and-set on the random owner token, open to any backend; ``writes`` / ``all`` fence only
    backends that issue fencing tokens — for the others the resource has nothing to check.
    """
    own = traits_of(backend_cls).resource_check
    if own:
        try:
            return Check(own)
        except ValueError:
            known = ", ".join(c.value for c in Check)
            raise BackendLoadError(f"{backend_cls.__name__}.resource_check {own!r} is not one of {known}") from None
    if fence == "token":
        return Check.TOKEN_CAS
    if traits_of(backend_cls).issues_fencing_tokens:
        return Check.FENCE_ALL if fence == "all" else Check.FENCE_WRITES
    return Check.PLAIN


#: Give up an optimistic update after this many failed EXECs (recorded; it does not hang a trial).
MAX_OPTIMISTIC_ATTEMPTS = 1000


def run_section(
    *,
    check: Check,
    resource: Resource,
    lease: Lease,
    rec: Recorder,
    work_s: float,
    before_write: Callable[[], bool],
    partition: int = 0,
    request_id: str = "",
    lose_reply: bool = False,
) -> None:
    """One critical section, from enter to exit, recorded step by step. ``partition``: the key a
    partitioned section updates; ``request_id`` and ``lose_reply``: an increment's id and whether
    its reply is lost (then it is sent again)."""
    if check is Check.FOR_UPDATE:  # the transaction's row lock comes before the section
        return for_update_section(resource=resource, rec=rec, work_s=work_s, before_write=before_write)
    if check is Check.SERIALIZABLE:
        return serializable_section(resource=resource, rec=rec, work_s=work_s, before_write=before_write)
    rec.timed("enter", resource.enter, result_as="inside")
    try:
        if check in (Check.ATOMIC, Check.IDEMPOTENT):
            time.sleep(work_s)
            if before_write():
                _increment(check, resource, rec, request_id=request_id, lose_reply=lose_reply)
        elif check in (Check.PARTITIONED, Check.PARTITIONED_SKEW):
            _partition(resource, rec, work_s, before_write, partition=partition)
        elif check is Check.OPTIMISTIC:
            _optimistic(resource, rec, work_s, before_write)
        else:
            _read_modify_write(check, resource, lease, rec, work_s, before_write)
    finally:
        rec.timed("exit", resource.exit)


def _increment(check: Check, resource: Resource, rec: Recorder, *, request_id: str, lose_reply: bool) -> None:
    """The increment, sent again when its reply is lost: the write landed, the answer never came."""
    send: Callable[[], bool] = (
        partial(resource.increment_once, request_id, dedupe=True) if check is Check.IDEMPOTENT else resource.increment
    )
    rec.timed("write", send, result_as="accepted", how="incrby", request=request_id)
    if lose_reply:
        # A client that timed out cannot know whether the request was processed; it retries.
        rec.add("reply-lost", t0=now_ns(), request=request_id)
        rec.add("retry", t0=now_ns(), attempt=0, reason="lost-reply")
        rec.timed("write", send, result_as="accepted", how="incrby", request=request_id, resent=True)


def _partition(
    resource: Resource, rec: Recorder, work_s: float, before_write: Callable[[], bool], *, partition: int
) -> None:
    balance = rec.timed("read", lambda: resource.read_partition(partition), result_as="balance", partition=partition)
    time.sleep(work_s)
    if not before_write():
        return
    rec.timed(
        "write",
        lambda: resource.write_partition(partition, balance + 1),
        result_as="accepted",
        value=balance + 1,
        partition=partition,
    )


def _read_modify_write(
    check: Check, resource: Resource, lease: Lease, rec: Recorder, work_s: float, before_write: Callable[[], bool]
) -> None:
    token, owner = lease.fencing_token, lease.owner
    balance = rec.timed(
        "read",
        lambda: resource.read_balance(check=check, fencing_token=token, owner=owner),
        result_as="balance",
        fence=token,
    )
    if balance is None:
        return  # the resource refused even the read: this holder is known to be stale
    time.sleep(work_s)
    if not before_write():
        return
    rec.timed(
        "write",
        lambda: resource.write_balance(balance + 1, check=check, fencing_token=token, owner=owner),
        result_as="accepted",
        value=balance + 1,
        fence=token,
    )


def _optimistic(resource: Resource, rec: Recorder, work_s: float, before_write: Callable[[], bool]) -> None:
    for attempt in range(MAX_OPTIMISTIC_ATTEMPTS):
        pipe, balance = resource.watch_balance()
        rec.add("read", t0=now_ns(), balance=balance, attempt=attempt)
        time.sleep(work_s)
        if attempt == 0 and not before_write():  # the fault hits once per round, not on every retry
            pipe.reset()
            return
        committed = rec.timed(
            "write", partial(resource.commit_balance, pipe, balance + 1), result_as="accepted", value=balance + 1
        )
        if committed:
            return
        rec.add("retry", t0=now_ns(), attempt=attempt)
    rec.add("error", t0=now_ns(), message=f"optimistic update gave up after {MAX_OPTIMISTIC_ATTEMPTS} attempts")
