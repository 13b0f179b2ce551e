"""The contend workload with real redis-server processes and real worker processes: no worker's
planned section runs after a rival has ended, and the rivals' extra rounds are in the history,
marked as such."""

from __future__ import annotations

from pathlib import Path

from lockcompare.analysis.history import Event
from lockcompare.backends import add_plugin_paths
from lockcompare.infra.cluster import Cluster
from lockcompare.runner.crew import WorkerPool
from lockcompare.runner.trial import TrialResult, new_run_id, run_trial
from lockcompare.scenario.experiments import get_experiment
from lockcompare.scenario.trialspec import Overrides, make_spec

ROUNDS = 6
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def contend_trial(cluster: Cluster, *, backend: str, crews=None) -> TrialResult:
    spec = make_spec(
        backend=backend,
        experiment=get_experiment("client-pause"),
        trial=0,
        overrides=Overrides(time_scale=0.1, rounds=ROUNDS, workload="contend"),
    )
    assert spec.workload == "contend" and spec.trial_id != make_spec(
        backend=backend, experiment=get_experiment("client-pause"), trial=0,
        overrides=Overrides(time_scale=0.1, rounds=ROUNDS),
    ).trial_id  # fmt: skip  # the workload is part of the trial's identity
    kwargs = {} if crews is None else {"crews": crews}
    return run_trial(spec=spec, cluster=cluster, run_id=new_run_id(), **kwargs)


def by_worker(history: list[Event]) -> dict[int, list[Event]]:
    workers: dict[int, list[Event]] = {}
    for event in history:
        if event["worker"] >= 0:  # -1: the runner's fault events
            workers.setdefault(event["worker"], []).append(event)
    return workers


def assert_no_worker_ran_alone(result: TrialResult) -> None:
    workers = by_worker(result.history)
    assert sorted(workers) == [0, 1]
    for w, events in workers.items():
        planned = [e for e in events if not e.get("extra")]
        extra = [e for e in events if e.get("extra")]
        assert {e["round"] for e in planned} <= set(range(ROUNDS))
        assert all(e["round"] >= ROUNDS for e in extra)
        assert not extra or min(e["t0"] for e in extra) >= max(e["t1"] for e in planned)  # extras come after
        last_planned_exit = max(e["t1"] for e in planned if e["kind"] == "exit")
        for rival, theirs in workers.items():
            if rival != w:  # the rival was still running (its last step ended later)
                assert max(e["t1"] for e in theirs) > last_planned_exit, (w, rival)
    # Someone finished first and contended on: its extra rounds are in the history.
    extra_enters = [e for e in result.history if e["kind"] == "enter" and e.get("extra")]
    assert extra_enters
    m = result.metrics
    assert m.problem == "" and m.verdict != "unknown"
    assert (m.entries, m.entries_planned, m.extra_entries) == (2 * ROUNDS, 2 * ROUNDS, len(extra_enters))
    # Not asserted here: conflict_measures_agree. At --time-scale 0.1 the resource's count and the
    # intervals' count can differ by one when two steps fall within a round trip (seen once in CI:
    # 12 against 11); the agreement rule is tested on hand-built histories in test_fair_checker.py.


def test_single_under_client_pause_never_leaves_a_worker_alone(cluster: Cluster) -> None:
    result = contend_trial(cluster, backend="single")
    assert_no_worker_ran_alone(result)
    assert result.metrics.grants_while_held == 0  # a correct lease lock never grants over a valid lease


def test_the_careless_lock_is_caught_granting_over_a_valid_lease(cluster: Cluster) -> None:
    add_plugin_paths(first=[str(EXAMPLES)], last=[])
    result = contend_trial(cluster, backend="careless_lock:CarelessLock")
    assert_no_worker_ran_alone(result)
    assert result.metrics.grants_while_held > 0


def test_warm_workers_are_reused_after_a_contend_trial(cluster: Cluster) -> None:
    # A worker told to continue ends only after its stop: nothing is left in its pipe, so the
    # pool takes it back and the next trial runs on the same processes.
    pool = WorkerPool()
    try:
        pool.prestart(2)
        first = contend_trial(cluster, backend="single", crews=pool.start)
        second = contend_trial(cluster, backend="single", crews=pool.start)
        assert pool.spawned == 2
        assert_no_worker_ran_alone(first)
        assert_no_worker_ran_alone(second)
    finally:
        pool.close()
