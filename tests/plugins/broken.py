"""Plug-ins that misbehave in the ways a harness must survive (used by tests/test_trustworthy.py)."""

from __future__ import annotations

import time

from lockcompare.backends.base import Refusal
from lockcompare.backends.single import SingleNodeLock


class NeverGrants(SingleNodeLock):
    """Refuses every acquire: nothing is ever observed, so nothing may be called exclusive."""

    summary = "refuses every acquire"

    def acquire(self, *, key: str, ttl_ms: int):  # type: ignore[override]
        return Refusal("no-quorum")


class HangsInAcquire(SingleNodeLock):
    """An acquire that never returns (a stuck socket, a deadlock in a library)."""

    summary = "acquire never returns"

    def acquire(self, *, key: str, ttl_ms: int):  # type: ignore[override]
        time.sleep(3600)


class RaisesInInit(SingleNodeLock):
    summary = "cannot be constructed"

    def __init__(self, *, config) -> None:  # type: ignore[no-untyped-def]
        raise RuntimeError("no licence key")


class ReturnsWrongType(SingleNodeLock):
    summary = "acquire returns an int"

    def acquire(self, *, key: str, ttl_ms: int):  # type: ignore[override]
        return 1


class DeclaresNothing:
    """Implements the calls but says nothing about itself (no summary, exclusive or
    issues_fencing_tokens): run/matrix refuse it rather than judge it as if it were a lock."""

    def __init__(self, *, config) -> None:  # type: ignore[no-untyped-def]
        self.config = config

    def acquire(self, *, key: str, ttl_ms: int):  # type: ignore[no-untyped-def]
        return Refusal("held")

    def release(self, lease) -> bool:  # type: ignore[no-untyped-def]
        return False

    def close(self) -> None:
        pass
