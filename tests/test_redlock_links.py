"""Redlock and fenced over proxied links: cut and slowed links, against real nodes."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from lockcompare.backends import BackendConfig, Lease, Refusal
from lockcompare.backends.fenced import FencedLock, fence_counter_key
from lockcompare.backends.redlock import Redlock, clock_drift_ns
from lockcompare.infra.cluster import Cluster
from lockcompare.infra.proxy import ProxySet, port_of
from lockcompare.infra.redis.client import connect

TTL_MS = 1000  # -> a per-node timeout of 100 ms
NODE_TIMEOUT_S = 0.1


@pytest.fixture
def links(cluster: Cluster) -> Iterator[ProxySet]:
    """One worker's proxied link to each of the session cluster's five nodes."""
    with ProxySet(node_ports=[port_of(url) for url in cluster.node_urls], workers=1) as proxies:
        try:
            yield proxies
        finally:
            proxies.heal_all()


@pytest.fixture
def redlock(links: ProxySet) -> Iterator[Redlock]:
    lock = Redlock(config=BackendConfig(node_urls=links.node_urls(worker=0), request_timeout_s=0.5))
    try:
        yield lock
    finally:
        lock.close()


def timed_acquire(lock: Redlock, *, key: str, ttl_ms: int = TTL_MS) -> tuple[Lease | Refusal, float]:
    t0 = time.monotonic()
    result = lock.acquire(key=key, ttl_ms=ttl_ms)
    return result, time.monotonic() - t0


def test_two_blackholed_nodes_cost_one_node_timeout_per_acquire(redlock: Redlock, links: ProxySet, key: str) -> None:
    assert redlock.node_timeout_s(ttl_ms=TTL_MS) == pytest.approx(NODE_TIMEOUT_S)
    for node in (3, 4):
        links.proxy(worker=0, node=node).blackhole()
    # 1st acquire: the connections are open, the two requests vanish (reads time out).
    # 2nd and 3rd: those connections were dropped; reconnecting hangs (SYNs dropped) on both.
    for attempt in range(3):
        lease, took_s = timed_acquire(redlock, key=key)
        assert isinstance(lease, Lease), f"attempt {attempt}: {lease}"  # 3 of 5 is a quorum
        assert NODE_TIMEOUT_S * 0.9 <= took_s < NODE_TIMEOUT_S * 1.6, f"attempt {attempt}: {took_s:.3f} s"
        assert redlock.release(lease) is True
    links.heal_all()
    lease, took_s = timed_acquire(redlock, key=key)  # healed: every node reconnects at once
    assert isinstance(lease, Lease) and took_s < NODE_TIMEOUT_S / 2
    assert redlock.release(lease) is True


def test_three_blackholed_nodes_refuse_with_no_quorum_in_one_timeout(
    redlock: Redlock, links: ProxySet, key: str
) -> None:
    for node in (0, 1, 2):
        links.proxy(worker=0, node=node).blackhole()
    # 1st: the SETs go out on open connections and time out; the release that follows a refusal
    # must try those nodes too (a SET may have landed), and their reconnects hang: two timeouts.
    refusal, took_s = timed_acquire(redlock, key=key)
    assert refusal == Refusal("no-quorum") and took_s < NODE_TIMEOUT_S * 2.6
    # Then the connects hang and no SET leaves: nothing to release there, one timeout in all.
    for attempt in (1, 2):
        refusal, took_s = timed_acquire(redlock, key=key)
        assert refusal == Refusal("no-quorum")
        assert NODE_TIMEOUT_S * 0.9 <= took_s < NODE_TIMEOUT_S * 1.6, f"attempt {attempt}: {took_s:.3f} s"


def test_elapsed_counts_the_whole_fan_out_not_the_quorum_th_grant(links: ProxySet, key: str) -> None:
    class PatientRedlock(Redlock):
        NODE_TIMEOUT_FLOOR_S = 0.3  # waits for the slow nodes instead of giving up on them

    lock = PatientRedlock(config=BackendConfig(node_urls=links.node_urls(worker=0), request_timeout_s=0.5))
    try:
        for node in (3, 4):  # a quorum (0-2) answers at once; the fan-out ends ~60 ms later
            links.proxy(worker=0, node=node).delay(ms=60)
        before = time.monotonic_ns()
        assert lock.acquire(key=key, ttl_ms=50) == Refusal("validity")
        lease = lock.acquire(key=key, ttl_ms=TTL_MS)
        after = time.monotonic_ns()
        assert isinstance(lease, Lease)
        margin = TTL_MS * 1_000_000 - clock_drift_ns(TTL_MS)
        assert lease.valid_until_ns is not None and before + margin <= lease.valid_until_ns <= after + margin
        assert lock.release(lease) is True
    finally:
        lock.close()


def test_fenced_acquire_is_one_round_trip(cluster: Cluster, links: ProxySet, key: str) -> None:
    """SET NX PX and INCR in one script: over a link delayed by 50 ms an acquire takes ~50 ms, not ~100."""
    lock = FencedLock(config=BackendConfig(node_urls=links.node_urls(worker=0), request_timeout_s=1.0))
    node = connect(cluster.node_urls[0], timeout_s=1.0)
    try:
        first = lock.acquire(key=key, ttl_ms=TTL_MS)  # loads the script (EVALSHA, NOSCRIPT, ...)
        assert isinstance(first, Lease) and lock.release(first) is True
        links.proxy(worker=0, node=0).delay(ms=50)
        t0 = time.monotonic()
        lease = lock.acquire(key=key, ttl_ms=TTL_MS)
        took_s = time.monotonic() - t0
        assert isinstance(lease, Lease) and 0.05 <= took_s < 0.075
        assert lease.fencing_token == first.fencing_token + 1  # type: ignore[operator]
        assert node.get(key) == lease.owner.encode()
        assert int(node.get(fence_counter_key(key))) == lease.fencing_token  # type: ignore[arg-type]
        assert lock.acquire(key=key, ttl_ms=TTL_MS) == Refusal("held")
        assert int(node.get(fence_counter_key(key))) == lease.fencing_token  # type: ignore[arg-type]
        assert lock.release(lease) is True
    finally:
        node.delete(key, fence_counter_key(key))
        node.close()
        lock.close()
