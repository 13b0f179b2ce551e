"""The third-party adapters (pottery's Redlock, redis-py's Lock) honour the contract, and map our units."""

from __future__ import annotations

import socket
import sys
import time

import pytest

from lockcompare.backends import (
    BackendConfig,
    Lease,
    Refusal,
    describe_backends,
    load_backend,
)
from lockcompare.backends.pottery_redlock import PotteryRedlock
from lockcompare.backends.redis_py_lock import RedisPyLock, seconds_for_px
from lockcompare.errors import BackendNotViableError, InvalidValueError
from lockcompare.infra.cluster import Cluster
from lockcompare.infra.redis.client import connect
from lockcompare.testing import BackendContract


class TestPottery(BackendContract):
    backend_name = "pottery"


class TestRedisPy(BackendContract):
    backend_name = "redis-py"


def _holders(cluster: Cluster, redis_key: str) -> list[bytes | None]:
    """The value of ``redis_key`` on every lock node, in node order."""
    values = []
    for url in cluster.node_urls:
        client = connect(url, timeout_s=1.0)
        try:
            values.append(client.get(redis_key))
        finally:
            client.close()
    return values


def _closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"redis://127.0.0.1:{port}/0"


# --- units -----------------------------------------------------------------------------------


def test_seconds_for_px_survives_the_libraries_truncation() -> None:
    # Both libraries send PX int(seconds * 1000); ttl_ms / 1000 alone loses a millisecond for 1001.
    assert int(1.001 * 1000) == 1000
    assert all(int(seconds_for_px(ms) * 1000) == ms for ms in range(1, 100_001))
    assert all(abs(seconds_for_px(ms) - ms / 1000) < 1e-12 for ms in (1, 150, 1001, 99_999))


def test_seconds_for_px_refuses_a_ttl_that_is_not_positive() -> None:
    with pytest.raises(InvalidValueError):
        seconds_for_px(0)


@pytest.mark.parametrize("backend_name", ["pottery", "redis-py"])
def test_ttl_is_milliseconds(backend_config: BackendConfig, key: str, backend_name: str) -> None:
    """A 300 ms lease still holds after 0.1 s and is free again after 0.4 s (not 300 s, not 0.3 ms)."""
    cls = load_backend(backend_name)
    holder, other = cls(config=backend_config), cls(config=backend_config)
    try:
        assert holder.acquire(key=key, ttl_ms=300)
        time.sleep(0.1)
        assert not other.acquire(key=key, ttl_ms=300)
        time.sleep(0.3)
        lease = other.acquire(key=key, ttl_ms=300)
        assert isinstance(lease, Lease)
        other.release(lease)
    finally:
        holder.close()
        other.close()


# --- pottery ---------------------------------------------------------------------------------


def test_pottery_key_lives_under_redlock_prefix_on_a_majority(
    cluster: Cluster, backend_config: BackendConfig, key: str
) -> None:
    lock = PotteryRedlock(config=backend_config)
    try:
        lease = lock.acquire(key=key, ttl_ms=2000)
        assert isinstance(lease, Lease)
        time.sleep(0.05)  # pottery returns at quorum; let the remaining SETs land
        holders = _holders(cluster, f"redlock:{key}")
        assert sum(v == lease.owner.encode() for v in holders) > len(cluster.node_urls) // 2
        assert _holders(cluster, key) == [None] * len(cluster.node_urls)
        assert lock.release(lease) is True
    finally:
        lock.close()


def test_pottery_uses_only_the_first_node_count_nodes(cluster: Cluster, key: str) -> None:
    lock = PotteryRedlock(config=BackendConfig(node_urls=cluster.node_urls, node_count=3, request_timeout_s=0.5))
    try:
        assert lock.node_count == 3
        lease = lock.acquire(key=key, ttl_ms=2000)
        assert isinstance(lease, Lease)
        time.sleep(0.05)
        holders = _holders(cluster, f"redlock:{key}")
        assert sum(v is not None for v in holders[:3]) >= 2
        assert holders[3:] == [None] * (len(holders) - 3)
        assert lock.release(lease) is True
    finally:
        lock.close()


def test_pottery_validity_agrees_with_its_own_locked(backend_config: BackendConfig, key: str) -> None:
    """Our deadline (t0 + ttl - drift) and pottery's ``locked()`` (seconds left) describe the same lease.

    Both figures carry timing error that grows on a busy machine, so the bounds are built from the
    durations measured around the two calls, not from a fixed slack: our ``t0`` lies inside the
    acquire call; pottery's figure is the majority's smallest PTTL (the key was set somewhere inside
    the acquire call, and read somewhere inside the ``locked()`` call, whose elapsed time pottery
    subtracts once more). A missing drift (12 ms) or a unit error (x1000) falls outside on a quiet
    machine; a slow one widens the window instead of failing the test.
    """
    lock = PotteryRedlock(config=backend_config)
    try:
        ttl_minus_drift_ns = (1000 - 12) * 1_000_000  # pottery's drift for 1000 ms: 1% + 2 ms
        before = time.monotonic_ns()
        lease = lock.acquire(key=key, ttl_ms=1000)
        after = time.monotonic_ns()
        assert isinstance(lease, Lease) and lease.valid_until_ns is not None
        # never promise more than pottery itself computes: t0 is read inside the acquire call
        assert before + ttl_minus_drift_ns <= lease.valid_until_ns <= after + ttl_minus_drift_ns
        asked = time.monotonic_ns()
        remaining_s = lock._held[lease.owner].locked()
        answered = time.monotonic_ns()
        assert 0 < remaining_s < 1.0  # seconds, not milliseconds
        pottery_deadline = answered + int(remaining_s * 1e9)
        slack_ns = (after - before) + (answered - asked) + 2_000_000  # + PTTL's whole milliseconds
        assert abs(lease.valid_until_ns - pottery_deadline) <= slack_ns, (
            (lease.valid_until_ns - pottery_deadline) / 1e6,
            slack_ns / 1e6,
        )
        assert lock.release(lease) is True
    finally:
        lock.close()


def test_pottery_release_of_a_lease_it_did_not_grant_is_false(backend_config: BackendConfig, key: str) -> None:
    a, b = PotteryRedlock(config=backend_config), PotteryRedlock(config=backend_config)
    try:
        lease = a.acquire(key=key, ttl_ms=2000)
        assert lease
        assert b.release(lease) is False
        assert a.release(lease) is True
        assert a.release(lease) is False  # twice
    finally:
        a.close()
        b.close()


def test_pottery_missing_is_reported_with_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pottery", None)  # makes "import pottery" fail
    with pytest.raises(BackendNotViableError, match="pip install pottery"):
        load_backend("pottery")
    listed = {info.name: info for info in describe_backends()}
    assert "pip install pottery" in listed["pottery"].problem


# --- redis-py --------------------------------------------------------------------------------


def test_redis_py_owner_is_the_token_stored_on_node_0(
    cluster: Cluster, backend_config: BackendConfig, key: str
) -> None:
    lock = RedisPyLock(config=backend_config)
    try:
        lease = lock.acquire(key=key, ttl_ms=2000)
        assert isinstance(lease, Lease)
        assert _holders(cluster, key) == [lease.owner.encode()] + [None] * (len(cluster.node_urls) - 1)
        assert lock.release(lease) is True
        assert lock.release(lease) is False
    finally:
        lock.close()


@pytest.mark.parametrize("backend_cls, dead_nodes", [(PotteryRedlock, 3), (RedisPyLock, 1)])
def test_refusal_reasons(backend_cls: type, dead_nodes: int, backend_config: BackendConfig, key: str) -> None:
    holder, other = backend_cls(config=backend_config), backend_cls(config=backend_config)
    dead = backend_cls(config=BackendConfig(node_urls=(_closed_port_url(),) * dead_nodes, request_timeout_s=0.2))
    try:
        lease = holder.acquire(key=key, ttl_ms=2000)
        assert lease
        assert other.acquire(key=key, ttl_ms=2000) == Refusal("held")
        assert dead.acquire(key=key, ttl_ms=2000) == Refusal("error")
        holder.release(lease)
    finally:
        for lock in (holder, other, dead):
            lock.close()
