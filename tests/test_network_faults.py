"""Link faults on real servers: the workers' proxied links are cut and slowed while the runner's own
connections go direct; every link heals and every proxy process ends, whatever happens; one
trial per link experiment gives the verdict its claim names."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from lockcompare.faults import network
from lockcompare.faults.plan import planned_steps
from lockcompare.faults.schedule import FaultScheduler
from lockcompare.infra.cluster import Cluster, open_cluster
from lockcompare.infra.proxy import ProxySet, port_of
from lockcompare.infra.redis.client import connect
from lockcompare.render.timeline import render_timeline
from lockcompare.runner.matrix import Sweep, plan_matrix
from lockcompare.runner.trial import TrialResult, new_run_id, run_trial
from lockcompare.scenario.experiments import get_experiment
from lockcompare.scenario.schedule import at_scale, parse_schedule
from lockcompare.scenario.trialspec import Overrides, make_spec
from test_lifecycle import alive, descendants, interrupt_and_check, wait_for_rows

QUICK = dict(time_scale=0.1, rounds=6)


@pytest.fixture
def links(cluster: Cluster) -> Iterator[ProxySet]:
    with ProxySet(node_ports=[port_of(url) for url in cluster.node_urls], workers=2) as proxies:
        yield proxies


def _trial(backend: str, experiment: str, cluster: Cluster, **kw: object) -> TrialResult:
    spec = make_spec(
        backend=backend, experiment=get_experiment(experiment), trial=0, overrides=Overrides(**(QUICK | kw))
    )  # fmt: skip
    return run_trial(spec=spec, cluster=cluster, run_id=new_run_id())


def test_a_cut_link_times_the_workers_call_out_while_the_admin_path_answers(
    cluster: Cluster, links: ProxySet, key: str
) -> None:
    steps = planned_steps(at_scale(parse_schedule("cut nodes=0 worker=0 at=start"), scale=1), ttl_ms=1000)
    scheduler = FaultScheduler(steps=steps, cluster=cluster, node_count=1, workers=2, links=links)
    worker = connect(links.node_urls(worker=0)[0], timeout_s=0.2)
    other = connect(links.node_urls(worker=1)[0], timeout_s=0.2)
    admin = connect(cluster.node_urls[0], timeout_s=0.2)
    try:
        assert worker.ping()
        scheduler.start()
        t0 = time.monotonic()
        with pytest.raises(redis.TimeoutError):
            worker.set(key, "w0", nx=True, px=1000)
        assert 0.18 <= time.monotonic() - t0 < 0.4  # the client's own bound, once
        assert admin.ping() and other.ping()  # the runner's direct path and worker 1's link still answer
    finally:
        scheduler.heal_all()
        for client in (worker, other, admin):
            client.close()
    assert [(e["fault"], e["action"], e["round"]) for e in scheduler.events] == [
        ("cut", "inject", -1), ("cut", "heal", -1)
    ]  # fmt: skip
    healed = connect(links.node_urls(worker=0)[0], timeout_s=0.2)
    try:
        assert healed.ping()
    finally:
        healed.delete(key)
        healed.close()


def test_a_slow_link_delays_grants_by_at_least_the_delay_and_refusals_not_at_all(
    cluster: Cluster, links: ProxySet, key: str
) -> None:
    worker = connect(links.node_urls(worker=0)[0], timeout_s=1.0)
    admin = connect(cluster.node_urls[0], timeout_s=1.0)
    # 300 ms: long enough that "delayed" and "not delayed" stay apart by more than a busy machine's
    # scheduling noise; "not delayed" is anything under half the delay.
    steps = planned_steps(at_scale(parse_schedule("slow nodes=0 worker=0 at=acquire delay=300"), scale=1), ttl_ms=1000)
    scheduler = FaultScheduler(steps=steps, cluster=cluster, node_count=1, workers=2, links=links)
    try:
        assert worker.ping()
        scheduler.on_acquire_turn(worker=0, round_=1, starting=True)
        t0 = time.monotonic()
        assert worker.set(key, "w0", nx=True, px=5000) is True
        granted_s = time.monotonic() - t0
        t0 = time.monotonic()
        assert worker.set(key, "w0", nx=True, px=5000) is None  # held: a null reply, not delayed
        refused_s = time.monotonic() - t0
        assert 0.3 <= granted_s < 0.45 and refused_s < 0.15, (granted_s, refused_s)
        assert admin.get(key) == b"w0"  # the request itself landed at once
        scheduler.on_acquire_turn(worker=0, round_=1, starting=False)
        t0 = time.monotonic()
        assert worker.ping() and time.monotonic() - t0 < 0.15  # healed once the acquire is over
    finally:
        scheduler.heal_all()
        admin.delete(key)
        worker.close()
        admin.close()


def test_a_trial_that_raises_mid_fault_leaves_no_proxy_process(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[ProxySet] = []
    real_start = network.start_links

    def remember(**kw):  # type: ignore[no-untyped-def]
        found = real_start(**kw)
        started.append(found)
        return found

    def broken_crew(plans):  # type: ignore[no-untyped-def]
        assert started and started[0].is_running()
        started[0].proxy(worker=0, node=0).blackhole()  # mid-fault
        raise RuntimeError("the trial broke mid-fault")

    monkeypatch.setattr(network, "start_links", remember)
    spec = make_spec(backend="single", experiment=get_experiment("partition"), trial=0, overrides=Overrides(**QUICK))
    with pytest.raises(RuntimeError, match="mid-fault"):
        run_trial(spec=spec, cluster=cluster, run_id=new_run_id(), crews=broken_crew)
    pid = started[0].pid
    assert pid is not None and not started[0].is_running()
    deadline = time.monotonic() + 5
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not alive(pid)


def test_fault_nodes_sweeps_only_where_it_applies() -> None:
    specs = plan_matrix(
        backends=["redlock"], experiments=["partition", "slow-response", "partition-clock-jump"], trials=1,
        overrides=Overrides(**QUICK), node_count=None, sweep=Sweep(fault_nodes=(2, 3)),
    )  # fmt: skip
    assert sorted((s.experiment, s.fault_nodes) for s in specs) == [
        ("partition", 2), ("partition", 3), ("partition-clock-jump", 0), ("slow-response", 0)
    ]  # fmt: skip


def test_redlock_keeps_granting_with_a_minority_cut_and_refuses_worker_0_with_a_majority(cluster: Cluster) -> None:
    # Half the lesson's scale, as for slow replies: "never a conflict" must not rest on 70 ms of slack.
    minority = _trial("redlock", "partition", cluster, fault_nodes=2, time_scale=0.5)
    # Still granting worker 0 (3 of 5 reachable); its acquires are slower (one per-node timeout each),
    # so it may lose a round's race to worker 1 now and then: exclusive or degraded, never a conflict.
    assert minority.metrics.conflicts == 0 and minority.metrics.verdict in ("exclusive", "degraded")
    assert any(e["kind"] == "enter" and e["worker"] == 0 for e in minority.history)
    majority = _trial("redlock", "partition", cluster, fault_nodes=3, time_scale=0.5)
    assert majority.metrics.conflicts == 0 and majority.metrics.verdict == "degraded"
    assert "no-quorum" in majority.metrics.refusals
    entered = {e["worker"] for e in majority.history if e["kind"] == "enter"}
    assert entered == {1}  # the cut is there from the first round: worker 0 never reached a majority
    cuts = [e for e in majority.history if e["kind"] == "fault"]
    assert [(e["action"], e["nodes"]) for e in cuts] == [("inject", [0, 1, 2]), ("heal", [0, 1, 2])]


def test_slow_grants_make_single_conflict_and_redlock_refuse(cluster: Cluster) -> None:
    # At half the lesson's scale: worker 1's own leases (TTL 500 ms, work 150 ms) must not expire
    # under it when the machine stalls, or redlock's "0 conflicts" would be the machine's doing; at
    # 0.1 a CPU-throttled run (70 ms of slack) lost one that way.
    single = _trial("single", "slow-response", cluster, time_scale=0.5)
    assert single.metrics.conflicts > 0 and single.metrics.stale_writes_accepted > 0
    redlock = _trial("redlock", "slow-response", cluster, time_scale=0.5)
    assert redlock.metrics.conflicts == 0 and redlock.metrics.verdict == "degraded"
    assert "no-quorum" in redlock.metrics.refusals  # its per-node timeout (TTL/10) gave up on the late grants


def test_kleppmanns_partition_and_clock_jump_give_two_workers_a_majority_at_once() -> None:
    with open_cluster(fake_clocks=True) as cluster:
        result = _trial("redlock", "partition-clock-jump", cluster)
    assert result.metrics.conflicts > 0
    acquires = [e for e in result.history if e["kind"] == "acquire" and e["ok"]]
    assert {tuple(e["granted_by"]) for e in acquires} == {(0, 1, 2), (0, 3, 4)}
    releases = {(e["worker"], e["round"]): e["t0"] for e in result.history if e["kind"] == "release"}
    both = [
        (a, b)
        for a in acquires
        if a["worker"] == 0
        for b in acquires
        if b["worker"] == 1 and a["t1"] < b["t1"] < releases[(0, a["round"])]
    ]
    assert both, "worker 1 never got its majority while worker 0 held its own"
    text = render_timeline(result.history)
    assert "granted_by=[0, 1, 2]" in text and "granted_by=[0, 3, 4]" in text and "clock-jump" in text


def test_partition_clock_jump_needs_five_nodes_said_in_one_line(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from lockcompare.cli import app

    result = CliRunner().invoke(
        app, ["run", "--backend", "redlock", "--experiment", "partition-clock-jump", "--redlock-nodes", "3",
              "--time-scale", "0.1", "--out", str(tmp_path / "x.csv")],
    )  # fmt: skip
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "needs 5 lock nodes; this backend uses 3" in lines[0], result.stderr


def test_sigterm_during_a_partition_trial_leaves_no_proxy_or_server(tmp_path: Path) -> None:
    out = tmp_path / "interrupted.csv"
    cmd = [
        sys.executable, "-m", "lockcompare", "matrix", "--backends", "single", "--experiments", "partition",
        "--trials", "20", "--rounds", "6", "--time-scale", "0.1", "--jobs", "1", "--out", str(out),
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        wait_for_rows(out, proc, rows=1)
        time.sleep(0.3)  # inside the next trial: its proxy process is running
        children = descendants(proc.pid)
        assert len(children) >= 7, "expected 6 redis-servers, the proxy process and workers"
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    interrupt_and_check(proc, out, "sigterm", children=children)
