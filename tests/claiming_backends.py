"""Backends that claim more than they do, for the battery's claim checks (tests/test_claims.py).

Both are ``single`` (SET NX PX, compare-and-delete) with a hook that says something untrue.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, ClassVar

from lockcompare.backends import Lease, Refusal
from lockcompare.backends.single import SingleNodeLock


class HooksWithoutRenewal(SingleNodeLock):
    """Has the renewal hooks of a renewing lock, and no watchdog behind them."""

    summary: ClassVar[str] = "single with renewal hooks and no watchdog"

    def drain_renewals(self) -> list[dict[str, Any]]:
        return []

    def stop_renewal(self, lease: Lease) -> None:
        pass


class CheckThatNeverLearns(SingleNodeLock):
    """A ``before_write`` that always answers the lease as good for another TTL from now."""

    summary: ClassVar[str] = "single with a before_write that always says yes"

    def before_write(self, lease: Lease) -> Lease | Refusal:
        return dataclasses.replace(lease, valid_until_ns=time.monotonic_ns() + 1_000_000_000)
