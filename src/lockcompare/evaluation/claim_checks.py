"""The claim checks of the conformance battery: a backend's declarations about itself tested against
the real lock before they excuse any property (evaluation/conformance.py explains when each runs)."""

from __future__ import annotations

import time

from lockcompare.backends import Lease, Refusal
from lockcompare.evaluation.battery_base import (
    TTL_MS,
    BatteryContext,
    CannotCheck,
    NotClaimed,
    PropertyFailed,
    RemoteBackend,
    _escaped_note,
    _expiry_margin_s,
    _first_lease,
    _lease,
    _short_ttl_ms,
)

# --- claims: each checked before it excuses anything ---------------------------------------------

#: How many TTLs the claim checks wait past a lease's start: "past any TTL", with room for renewals.
CLAIM_TTLS = 2


def _claim_failed(claim: str, what: str) -> PropertyFailed:
    return PropertyFailed(f"the claim {claim} does not hold: {what}")


def _refused_past_the_ttl(
    ctx: BatteryContext, *, claim: str, rival: RemoteBackend, key: str, short_ms: int, started: float, if_granted: str
) -> float:
    """Wait :data:`CLAIM_TTLS` of a ``short_ms`` lease (plus the expiry margin), then have ``rival``
    try ``key``: the claim fails if it is granted, its holder alive (``if_granted`` ends the message:
    what that grant means). Returns how long the lease was held by then (ms since ``started``)."""
    time.sleep(CLAIM_TTLS * short_ms / 1000 + _expiry_margin_s(ctx))
    late = rival.acquire(key=key, ttl_ms=TTL_MS)
    held_ms = (time.monotonic() - started) * 1000
    if isinstance(late, Lease):
        rival.release(late)
        raise _claim_failed(
            claim,
            f"a second client was granted the lock {held_ms:.0f} ms after a {short_ms} ms lease began, its holder "
            f"alive{if_granted}",
        )
    return held_ms


def claim_no_ttl_holds_past_any_ttl(ctx: BatteryContext) -> str:
    """``has_ttl = False``: the holder keeps the lock past any TTL while it lives (and releases it)."""
    if ctx.claims.has_ttl is not False:
        raise NotClaimed("the lock has a TTL (has_ttl is not False): the TTL properties check it")
    claim = "has_ttl = False"
    a, b = ctx.new(), ctx.new()
    key = ctx.key()
    short_ms = _short_ttl_ms(ctx)
    lease = _first_lease(ctx, a, key=key, ttl_ms=short_ms, doing="first acquire")
    started = time.monotonic()
    if isinstance(early := b.acquire(key=key, ttl_ms=TTL_MS), Lease):
        b.release(early)
        raise _claim_failed(claim, "a second client was granted the lock at once, while its holder held it")
    held_ms = _refused_past_the_ttl(
        ctx,
        claim=claim,
        rival=b,
        key=key,
        short_ms=short_ms,
        started=started,
        if_granted=" and the lease not released: the lock expires (declare its TTL instead)",
    )
    if a.release(lease) is not True:
        raise _claim_failed(
            claim, f"the holder's release returned False after {held_ms:.0f} ms: it did not keep the lock"
        )
    after = _lease(b.acquire(key=key, ttl_ms=TTL_MS), "acquire after the holder released")
    b.release(after)
    return (
        f"a {short_ms} ms lease kept {held_ms:.0f} ms while its holder lived (a second client refused), "
        "free once released"
    )


def claim_renewal_outlives_the_ttl(ctx: BatteryContext) -> str:
    """A renewing lock (``drain_renewals`` / ``stop_renewal``): its lease outlives its TTL while the holder lives."""
    if ctx.claims.renews is not True:
        raise NotClaimed("no renewal hooks (drain_renewals, stop_renewal): the lock does not say it renews")
    claim = "renews (it has drain_renewals / stop_renewal)"
    a, b = ctx.new(), ctx.new()
    key = ctx.key()
    short_ms = _short_ttl_ms(ctx)
    lease = _first_lease(ctx, a, key=key, ttl_ms=short_ms, doing="first acquire")
    held_ms = _refused_past_the_ttl(
        ctx,
        claim=claim,
        rival=b,
        key=key,
        short_ms=short_ms,
        started=time.monotonic(),
        if_granted=": nothing renewed it",
    )
    if a.release(lease) is not True:
        raise _claim_failed(claim, f"the holder's release returned False {held_ms:.0f} ms into a {short_ms} ms lease")
    return f"a {short_ms} ms lease still held {held_ms:.0f} ms later (a second client refused), then released"


def claim_lease_check_learns_of_a_loss(ctx: BatteryContext) -> str:
    """A ``before_write`` hook: once the lock went to another client, it says so (a refusal, or a
    lease whose deadline has passed: the worker skips the write either way)."""
    if ctx.claims.checks_lease is not True:
        raise NotClaimed("no before_write hook: its client writes without checking its lease")
    claim = "checks its lease (it has before_write)"
    # The holder's client lives in a process of its own, which is frozen whole (as a GC pause or a
    # stopped VM freezes a client, renewal threads and helper processes included) while a rival
    # takes the expired lock.
    (a, holder), b = ctx.new_client_process(), ctx.new()
    key = ctx.key()
    short_ms = _short_ttl_ms(ctx)
    lease = _first_lease(ctx, a, key=key, ttl_ms=short_ms, doing="first acquire")
    fresh = a.before_write_timed(lease)
    if not isinstance(fresh.value, Lease):
        raise _claim_failed(claim, f"before_write refused a lease just granted ({fresh.value.reason})")
    with holder.frozen() as escaped:
        time.sleep(short_ms / 1000 + _expiry_margin_s(ctx))
        rival = b.acquire(key=key, ttl_ms=TTL_MS)
    if not isinstance(rival, Lease):
        raise CannotCheck(
            f"no loss to learn of: the lock outlived a {short_ms} ms lease while its holder was frozen "
            f"(a second client was refused: {rival.reason}){_escaped_note(escaped)}"
        )
    timed = a.before_write_timed(lease)
    b.release(rival)
    answer = timed.value
    if isinstance(answer, Refusal):
        return f"after a second client took the lock, before_write refused ({answer.reason})"
    if answer.valid_until_ns is not None and answer.valid_until_ns <= timed.t0_ns:
        late_ms = (timed.t0_ns - answer.valid_until_ns) / 1e6
        return f"after a second client took the lock, before_write answered a lease expired {late_ms:.0f} ms before"
    ahead = (
        "with no deadline"
        if answer.valid_until_ns is None
        else (f"valid {(answer.valid_until_ns - timed.t0_ns) / 1e6:.0f} ms more")
    )
    raise _claim_failed(claim, f"after a second client took the lock, before_write answered a lease {ahead}")
