"""Parallel trials: each on its own cluster from the pool, warm workers reused, nothing left behind."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from expect import assert_lock_held_up
from lockcompare.analysis.results import read_results
from lockcompare.infra.cluster import Cluster, ClusterShape, start_embedded
from lockcompare.infra.pool import ClusterPool, SharedCluster
from lockcompare.infra.redis.client import connect
from lockcompare.runner.crew import WorkerPool
from lockcompare.runner.matrix import run_matrix
from lockcompare.runner.scheduler import CpuBudget, Finished, run_scheduled
from lockcompare.runner.trial import TrialResult, new_run_id, run_trial
from lockcompare.scenario.experiments import get_experiment
from lockcompare.scenario.trialspec import Overrides, make_spec
from test_lifecycle import alive, descendants

QUICK = Overrides(time_scale=0.1, rounds=3)
SHAPE = ClusterShape(node_count=3)


def spec(trial: int, *, backend: str = "single", rounds: int = 3, acquire_timeout_ms: float = 60_000):
    overrides = Overrides(time_scale=0.1, rounds=rounds, acquire_timeout_ms=acquire_timeout_ms)
    return make_spec(backend=backend, experiment=get_experiment("baseline"), trial=trial, overrides=overrides)


def crash_once_used(cluster: Cluster) -> None:
    """Crash lock node 0 once a worker has sent it a SET (an acquire attempt of the trial)."""
    client = connect(cluster.node_urls[0], timeout_s=1)
    try:
        deadline = time.monotonic() + 30
        while "cmdstat_set" not in client.info("commandstats") and time.monotonic() < deadline:
            time.sleep(0.002)
    finally:
        client.close()
    cluster.servers[0].crash()


def test_a_trial_that_breaks_its_cluster_leaves_its_neighbours_alone_and_the_pool_replaces_it() -> None:
    # Trial 0's workers give up a round after 50 ms: their lock node dies under them.
    specs = [spec(0, rounds=10, acquire_timeout_ms=500), spec(1, rounds=10), spec(2, rounds=10), spec(3), spec(4)]
    handed: dict[int, Cluster] = {}
    lock = threading.Lock()
    run_id = new_run_id()
    workers = WorkerPool()

    def run_one(s, cluster: Cluster) -> TrialResult:
        with lock:
            handed[s.trial] = cluster
        if s.trial == 0:
            # Trial 0 loses a lock node while its neighbours run (a crash fault would do this): as
            # soon as its workers have tried to lock, not after a fixed delay, which a stalled
            # machine can stretch past the end of the trial.
            threading.Thread(target=crash_once_used, args=(cluster,), daemon=True).start()
        return run_trial(spec=s, cluster=cluster, run_id=run_id, crews=workers.start)

    done: list[Finished] = []
    with ClusterPool(build=start_embedded, limit=3) as pool:
        try:
            run_scheduled(
                specs, jobs=3, run_one=run_one, clusters=pool, shape_for=lambda s: SHAPE,
                kind_of=lambda s: s.backend, budget=CpuBudget(cpus=64), on_start=lambda s, n: None,
                on_done=done.append, on_cancel=workers.kill_all,
            )  # fmt: skip
        finally:
            workers.close()
        broken = handed[0]
        assert pool.replaced and "node0" in pool.replaced[0], pool.replaced
        assert not any(server.is_running() for server in broken.all_servers()), "a broken cluster is stopped"
        assert all(handed[t] is not broken for t in (3, 4)), "a broken cluster is never handed out again"
        three = [pool.acquire(SHAPE) for _ in range(3)]  # two healthy idle ones, and a replacement
        assert broken not in three and pool.built == 4
    by_trial = {f.spec.trial: f for f in done}
    assert sorted(by_trial) == [0, 1, 2, 3, 4]
    for t in (1, 2, 3, 4):
        m = by_trial[t].result.metrics
        assert m.entries == 2 * by_trial[t].spec.rounds, (t, m)
        assert_lock_held_up(m)  # its neighbour's broken node did not touch it
    # Its lock node died under it (the lead's checker will call this "unavailable" or "degraded").
    assert by_trial[0].result.metrics.entries < 2 * 10
    assert {by_trial[t].jobs_concurrent for t in (0, 1, 2)} == {3}
    assert workers.spawned < 2 * len(specs), "warm workers are reused between trials"


def test_the_pool_flushes_its_own_servers_and_never_an_external_cluster() -> None:
    with ClusterPool(build=start_embedded) as pool:
        cluster = pool.acquire(SHAPE)
        connect(cluster.node_urls[0]).set("left-over", "x")
        pool.release(cluster)
        again = pool.acquire(SHAPE)
        assert again is cluster and pool.built == 1
        assert connect(cluster.node_urls[0]).get("left-over") is None
        other = pool.acquire(ClusterShape(node_count=1))  # another shape: another cluster
        assert other is not cluster and len(other.node_urls) == 1
        # The same servers seen as somebody else's: neither the shared source nor reset() flushes them.
        users = Cluster(node_urls=other.node_urls, resource_url=other.resource_url, embedded=False, server_version="x")
        external = SharedCluster(users)
        connect(other.node_urls[0]).set("theirs", "y")
        external.release(external.acquire(SHAPE))
        users.reset()
        assert connect(other.node_urls[0]).get("theirs") == b"y"


def test_a_cluster_marked_broken_is_replaced() -> None:
    with ClusterPool(build=start_embedded) as pool:
        cluster = pool.acquire(SHAPE)
        cluster.mark_broken("clock jumped")
        pool.release(cluster)
        assert pool.replaced == ["clock jumped"]
        assert pool.acquire(SHAPE) is not cluster and pool.built == 2


def test_parallel_matrix_matches_its_plan_and_leaves_no_process(tmp_path: Path) -> None:
    before = descendants(os.getpid())
    out = tmp_path / "par.csv"
    started = time.monotonic()
    report = run_matrix(
        backends=["none", "single"], experiments=["baseline", "short-ttl"], trials=2, overrides=QUICK, out=out, jobs=3
    )
    assert time.monotonic() - started < 60
    rows = read_results(out)
    assert report.trials_run == len(rows) == 8
    assert len({r["trial_id"] for r in rows}) == 8
    assert report.jobs_used >= 2
    for row in rows:
        if row["backend"] == "single" and row["experiment"] == "baseline":
            assert_lock_held_up(row)
    left = [pid for pid in descendants(os.getpid()) - before if alive(pid)]
    assert not left, "servers and workers are stopped when the matrix ends"


def test_cpu_budget_admits_by_measured_busy_fraction() -> None:
    budget = CpuBudget(cpus=2, share=0.75, prior=0.5)
    assert budget.admits(running=[], kind="pottery")
    assert budget.admits(running=["x", "x"], kind="x")  # 3 x 0.5 = 1.5
    assert not budget.admits(running=["x", "x", "x"], kind="x")
    budget.record(kind="x", busy=0.2)
    budget.record(kind="x", busy=0.3)
    assert budget.estimate("x") == 0.25
    assert budget.admits(running=["x"] * 5, kind="x")  # 6 x 0.25 = 1.5
    assert not budget.admits(running=["x"] * 6, kind="x")
    budget.record(kind="pottery", busy=1.3)
    assert budget.admits(running=[], kind="pottery")  # one trial always runs, whatever it costs
    assert not budget.admits(running=["pottery"], kind="x")


class _OneCluster:
    """A cluster source for scheduling tests that need no servers."""

    cluster = Cluster(node_urls=("redis://127.0.0.1:1/0",), resource_url="redis://127.0.0.1:1/0", embedded=False,
                      server_version="none")  # fmt: skip

    def acquire(self, shape: ClusterShape) -> Cluster:
        return self.cluster

    def release(self, cluster: Cluster) -> None:
        pass


def test_solo_trials_run_with_nothing_beside_them() -> None:
    specs = ["a0", "solo0", "a1", "a2", "solo1", "a3"]
    done: list[Finished] = []
    run_scheduled(
        specs, jobs=4, run_one=lambda s, c: time.sleep(0.05), clusters=_OneCluster(), shape_for=lambda s: SHAPE,
        kind_of=lambda s: s[0], budget=CpuBudget(cpus=64), solo=lambda s: s.startswith("solo"),
        on_start=lambda s, n: None, on_done=done.append, on_cancel=lambda: None,
    )  # fmt: skip
    peak = {f.spec: f.jobs_concurrent for f in done}
    assert sorted(peak) == sorted(specs)
    assert peak["solo0"] == peak["solo1"] == 1
    assert max(peak[s] for s in specs if s.startswith("a")) > 1


def test_a_worker_outlives_the_thread_that_first_needed_it() -> None:
    """A warm worker dies with the thread that spawned it; the pool's own thread spawns them all, so
    one taken and given back by a thread that has since ended (a scheduler pass's) is still alive for
    the next trial (the marked trials' reruns took dead ones: "a warm worker process died")."""
    pool = WorkerPool()
    taken: list = []

    def a_pass() -> None:
        worker = pool._take()
        taken.append(worker)
        pool._give_back(worker, reusable=True)

    try:
        thread = threading.Thread(target=a_pass)
        thread.start()
        thread.join()
        (worker,) = taken
        deadline = time.monotonic() + 1.0  # the parent-death signal, were it the ended thread's, lands at once
        while worker.proc.is_alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert worker.proc.is_alive(), "the worker died with the thread that took it"
        assert pool._take() is worker  # lent again, alive
    finally:
        pool.close()
    assert not alive(worker.proc.pid)
