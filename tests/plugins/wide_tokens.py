"""``fenced`` with 64-bit fencing tokens, as ZooKeeper's zxids are: ``(epoch << 32) | counter``.

The tokens increase strictly, exactly as ``fenced``'s do; only their size differs. Above 2**53
neighbouring tokens are equal as floats, so a resource that compares them as floats accepts a
stale holder's write — this lock tells such a resource from one that compares integers.
"""

from __future__ import annotations

from dataclasses import replace

from lockcompare.backends.base import Lease, Refusal
from lockcompare.backends.fenced import FencedLock

#: A zxid's epoch in the high 32 bits: tokens near 2**60, far above 2**53.
EPOCH = 2**28


class WideTokenLock(FencedLock):
    """``fenced`` whose tokens are ``(2**28 << 32) | counter``."""

    summary = "fenced with 64-bit tokens (2**28 << 32 | counter, zxid style)"

    def acquire(self, *, key: str, ttl_ms: int) -> Lease | Refusal:
        outcome = super().acquire(key=key, ttl_ms=ttl_ms)
        if isinstance(outcome, Lease) and outcome.fencing_token is not None:
            return replace(outcome, fencing_token=(EPOCH << 32) | outcome.fencing_token)
        return outcome
