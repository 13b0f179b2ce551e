"""Failover on real replicated servers: a PostgreSQL primary + streaming replica, and a Redis master +
replica under three real sentinels. Each test: roles read before and after, the write the replica
never saw is gone on the promoted server, the heal leaves a healthy pair, and after stop() nothing
is left running and no data directory is left."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from lockcompare.infra.cluster import Cluster, ClusterShape, start_embedded
from lockcompare.infra.kinds import RoleKind, get_kind
from lockcompare.infra.sentinel import parse_sentinel_url, sentinel_url
from lockcompare.processes import process_alive
from lockcompare.scenario.faultkinds.failover import Failover


def _require(kind: str) -> None:
    problem = get_kind(kind).problem()
    if problem:
        pytest.skip(problem.splitlines()[0])


def _everything(cluster: Cluster) -> tuple[list[int | None], list[Path]]:
    servers = cluster.all_servers()
    pids = [s.pid for s in servers]
    if cluster.replication is not None:
        pids += list(cluster.replication.pids())
    return pids, [s.data_dir for s in servers]


@contextlib.contextmanager
def _cluster_that_leaves_nothing(shape: ClusterShape) -> Iterator[Cluster]:
    """A started cluster, stopped at the end; then no process it had (at the start or at the end: a
    failover's heal starts new ones) is running and no data directory of it is left."""
    cluster = start_embedded(shape)
    pids, dirs = _everything(cluster)
    try:
        yield cluster
    finally:
        pids, dirs = pids + _everything(cluster)[0], dirs + _everything(cluster)[1]
        cluster.stop()
    assert [p for p in pids if p is not None and process_alive(p)] == []
    assert [d for d in dirs if d.exists()] == []


def test_sentinel_url_names_the_master_and_every_sentinel() -> None:
    url = sentinel_url(service="node0", ports=[26379, 26380, 26381])
    assert parse_sentinel_url(url) == ("node0", [("127.0.0.1", 26379), ("127.0.0.1", 26380), ("127.0.0.1", 26381)])


@pytest.mark.full  # real clusters: seconds each
def test_postgres_failover_promotes_the_replica_and_loses_what_it_never_saw() -> None:
    _require("postgres")
    _require("redis")
    from lockcompare.infra.pg_client import PgSession, SessionLost, with_session_settings

    kind = get_kind("postgres")
    assert isinstance(kind, RoleKind)
    shape = ClusterShape(node_count=1, replicas=1, lock_servers="postgres", resource_kind="redis")
    with _cluster_that_leaves_nothing(shape) as cluster:
        assert kind.read_roles(cluster).modes == ("primary pg0-primary",)
        url = cluster.node_urls[0]
        session = PgSession(url, timeout_s=2.0)
        session.query("create table t (k text primary key)")
        session.query("insert into t values ('replicated')")
        pair = cluster.node_pair(0)
        pair.wait_in_sync()
        waiting = PgSession(with_session_settings(url, {"synchronous_commit": "remote_apply"}), timeout_s=0.5)
        fault = Failover()
        fault.prepare(cluster, [0])  # the replication link is cut from here on
        session.query("insert into t values ('held back')")  # asynchronous: the primary says yes
        with pytest.raises(SessionLost):  # remote_apply: the replica never applies it, no answer
            waiting.query("insert into t values ('waited')")
        _, fields = fault.inject(cluster, [0])
        record = fields["failover"][0]  # type: ignore[index]
        assert (record["master_before"], record["master_after"]) == ("pg0-primary", "pg0-replica1")
        assert kind.read_roles(cluster).modes == ("primary pg0-replica1",)
        # The same multi-host URL finds the promoted replica; the rows it never received are gone.
        rows = PgSession(url, timeout_s=2.0).query("select k from t order by k")
        assert rows == [("replicated",)]
        assert fault.heal(cluster, [0]) == "fresh replica in sync"
        assert cluster.node_urls[0] == url and cluster.problem() == ""
        assert kind.read_roles(cluster).modes == ("primary pg0-replica1",)
        session.close()
        waiting.close()


@pytest.mark.full  # real clusters: seconds each
def test_sentinels_elect_a_leader_promote_the_replica_and_the_lock_key_is_gone() -> None:
    _require("redis")
    from lockcompare.infra.redisconn import connect

    kind = get_kind("sentinel")
    assert isinstance(kind, RoleKind)
    with _cluster_that_leaves_nothing(
        ClusterShape(node_count=1, lock_servers="sentinel", resource_kind="redis")
    ) as cluster:
        assert kind.read_roles(cluster).modes == ("master node0-a",)
        client = connect(cluster.node_urls[0], timeout_s=1.0)  # through the sentinels
        client.set("before", "1")
        cluster.node_pair(0).wait_in_sync()
        fault = Failover()
        fault.prepare(cluster, [0])
        assert client.set("lock", "worker-0", nx=True, px=60_000)  # acknowledged by the master only
        _, fields = fault.inject(cluster, [0])
        record = fields["failover"][0]  # type: ignore[index]
        assert (record["master_before"], record["master_after"]) == ("node0-a", "node0-b")
        assert str(record["promoted_by"]).startswith("sentinel s") and record["replica_on_held_link"] is True
        said = {e["event"] for e in record["election"]}
        assert {"+odown", "+elected-leader", "+promoted-slave", "+switch-master"} <= said
        assert kind.read_roles(cluster).modes == ("master node0-b",)
        # A new connection asks the sentinels: the promoted replica, without the lock key.
        client.connection_pool.disconnect()
        assert client.get("before") == b"1" and client.get("lock") is None
        assert fault.heal(cluster, [0]) == "fresh replica in sync"
        assert cluster.problem() == ""
        client.close()


@pytest.mark.full  # real clusters: seconds each
def test_a_sentinel_lock_with_wait_refuses_while_held_back_and_follows_the_failover() -> None:
    _require("redis")
    from lockcompare.backends.base import BackendConfig, Lease, Refusal
    from lockcompare.backends.sentinel import SentinelFenced

    with _cluster_that_leaves_nothing(
        ClusterShape(node_count=1, lock_servers="sentinel", resource_kind="redis")
    ) as cluster:
        lock = SentinelFenced(config=BackendConfig(node_urls=cluster.node_urls, request_timeout_s=0.5, wait_replicas=1))
        try:
            first = lock.acquire(key="k", ttl_ms=1000)
            assert isinstance(first, Lease) and lock.release(first)
            fault = Failover()
            fault.prepare(cluster, [0])
            assert lock.acquire(key="k", ttl_ms=1000) == Refusal("not-replicated")  # WAIT 1: nobody acknowledged
            fault.inject(cluster, [0])
            fault.heal(cluster, [0])
            # The held connection failed with the master; the next one asks the sentinels (redis_direct.py).
            results = [lock.acquire(key="k", ttl_ms=1000) for _ in range(3)]
            granted = [r for r in results if isinstance(r, Lease)]
            # Token 1 replicated; the refused attempt's increment (2) died with the master, so 2 is issued again
            # (harmless here: the lease that drew it first was never granted).
            assert granted and granted[0].fencing_token == 2
        finally:
            lock.close()
