"""A lock that reports its lease 8 ms past its TTL: the deadline counted from after the reply instead
of before the call (as redlock-universal did, 8.8 ms on a loaded machine), here a fixed 8 ms past
call start + TTL so the judgement is the same on any machine."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from lockcompare.backends.base import Lease, Refusal
from lockcompare.backends.single import SingleNodeLock

OVERSTATED_MS = 8


class OverstatedLock(SingleNodeLock):
    summary: ClassVar[str] = "single, reporting each lease valid 8 ms past its TTL"

    def acquire(self, *, key: str, ttl_ms: int) -> Lease | Refusal:
        granted = super().acquire(key=key, ttl_ms=ttl_ms)
        if not isinstance(granted, Lease) or granted.valid_until_ns is None:
            return granted
        return dataclasses.replace(granted, valid_until_ns=granted.valid_until_ns + OVERSTATED_MS * 1_000_000)
