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
from lockcompare.infra.peerlinks import cluster_process_ids
from lockcompare.infra.redis.client import parse_sentinel_url, sentinel_url
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
    from lockcompare.infra.postgres.client import PgSession, SessionLost, with_session_settings

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
    from lockcompare.infra.redis.client import connect

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


@pytest.mark.full  # real clusters: seconds each
def test_a_held_connection_follows_the_sentinels_to_the_promoted_master() -> None:
    """The lock's hot path (backends/redis_direct.py) holds one connection; after the master died
    under it, the next connection asks the sentinels and lands on the promoted replica (issue 48.1:
    it used to redial the dead master's port until the workers gave up)."""
    _require("redis")
    import redis

    from lockcompare.backends.redis_direct import DirectCommands
    from lockcompare.infra.redis.client import connect

    with _cluster_that_leaves_nothing(
        ClusterShape(node_count=1, lock_servers="sentinel", resource_kind="redis")
    ) as cluster:
        client = connect(cluster.node_urls[0], timeout_s=1.0)
        direct = DirectCommands(client)
        try:
            pair = cluster.node_pair(0)
            assert direct.call("SET", "before", "1") == b"OK"
            master = f"127.0.0.1:{pair.master_port}"
            assert direct.server == master
            pair.wait_in_sync()
            fault = Failover()
            fault.prepare(cluster, [0])
            _, fields = fault.inject(cluster, [0])
            record = fields["failover"][0]  # type: ignore[index]
            assert record["server_before"] == master
            assert record["server_after"] == f"127.0.0.1:{pair.master_port}" != master  # the promoted replica
            with pytest.raises(redis.ConnectionError):  # the held connection was on the dead master
                direct.call("GET", "before")
            assert direct.call("GET", "before") == b"1"  # a new one: the sentinels named the promoted replica
            assert direct.server == record["server_after"]
            assert fault.heal(cluster, [0]) == "fresh replica in sync"
            assert direct.call("SET", "after", "1") == b"OK" and direct.server == record["server_after"]
        finally:
            direct.close()
            client.close()


@pytest.mark.full  # a real trial: ~10 s
def test_a_sentinel_lock_keeps_granting_after_the_failover_and_on_the_promoted_server() -> None:
    """A failover trial of sentinel-single enters most of its planned rounds, and the history shows
    each grant before the promotion on the old master and each after it on the promoted replica."""
    _require("redis")
    from lockcompare.runner.trial import new_run_id, run_trial
    from lockcompare.scenario.experiments import get_experiment
    from lockcompare.scenario.trialspec import Overrides, make_spec

    with _cluster_that_leaves_nothing(
        ClusterShape(node_count=1, lock_servers="sentinel", resource_kind="redis")
    ) as cluster:
        spec = make_spec(
            backend="sentinel-single",
            experiment=get_experiment("failover"),
            trial=0,
            overrides=Overrides(rounds=10, time_scale=1.0),
        )
        result = run_trial(spec=spec, cluster=cluster, run_id=new_run_id())
    planned = spec.rounds * spec.workers
    assert result.metrics.entries > planned / 2, f"{result.metrics.entries} of {planned} planned rounds entered"
    inject = next(e for e in result.history if e["kind"] == "fault" and e["action"] == "inject")
    record = inject["failover"][0]
    grants = [e for e in result.history if e["kind"] == "acquire" and e["ok"]]
    before = {e["server"] for e in grants if e["t1"] < inject["t0"]}
    after = [e["server"] for e in grants if e["t0"] > inject["t1"]]
    assert before == {record["server_before"]}
    assert after and set(after) == {record["server_after"]}
    # Every worker was granted again after the promotion: none was left dialling the dead master.
    assert {e["worker"] for e in grants if e["t0"] > inject["t1"]} == set(range(spec.workers))


def test_a_trial_is_charged_for_the_proxy_process_in_its_requests_path() -> None:
    """The CPU budget measures every process of a trial's cluster (runner/scheduler.py): a failover
    cluster's requests cross its links' proxy process, which is no server of it."""
    _require("redis")
    with _cluster_that_leaves_nothing(ClusterShape(node_count=1, replicas=1, resource_kind="redis")) as cluster:
        assert cluster.replication is not None
        measured = cluster_process_ids(cluster)
        servers = {server.pid for server in cluster.all_servers()}
        assert servers < set(measured)
        assert set(measured) - servers == {cluster.replication.host.pid}
        assert all(process_alive(pid) for pid in measured)
