"""The built-in single-node backends honour the shipped contract against real redis-server nodes."""

from __future__ import annotations

from lockcompare.testing import BackendContract


class TestNoLock(BackendContract):
    backend_name = "none"


class TestSingle(BackendContract):
    backend_name = "single"


class TestFenced(BackendContract):
    backend_name = "fenced"


class TestAtomic(BackendContract):
    backend_name = "atomic"


class TestOptimistic(BackendContract):
    backend_name = "optimistic"


class TestPartitioned(BackendContract):
    backend_name = "partitioned"


class TestIdempotent(BackendContract):
    backend_name = "idempotent"
