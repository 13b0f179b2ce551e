"""The catalogue's experiments of issue 51 on real servers and workers: each fault does what its
description says, read from the history (full tier)."""

from __future__ import annotations

from typing import Any

from lockcompare.backends import load_backend
from lockcompare.infra.cluster import ClusterShape, open_cluster
from lockcompare.runner.plan import ClusterOptions, cluster_shape
from lockcompare.runner.sections import check_for
from lockcompare.runner.trial import TrialResult, new_run_id, run_trial
from lockcompare.scenario.choices import Check
from lockcompare.scenario.experiments import get_experiment
from lockcompare.scenario.trialspec import Overrides, TrialSpec, make_spec

Event = dict[str, Any]


def _spec(backend: str, experiment: str, **settings: Any) -> TrialSpec:
    exp = get_experiment(experiment)
    cls = load_backend(backend, check_viable=False)
    return make_spec(
        backend=backend,
        experiment=exp,
        trial=0,
        overrides=Overrides(**settings),
        resource_check=check_for(cls, fence=exp.fence or "writes"),
    )


def _run(spec: TrialSpec) -> TrialResult:
    shape = _shape(spec)
    with open_cluster(
        node_count=shape.node_count, fake_clocks=shape.fake_clocks, lock_servers=shape.lock_servers
    ) as cluster:
        return run_trial(spec=spec, cluster=cluster, run_id=new_run_id())


def _shape(spec: TrialSpec) -> ClusterShape:
    return cluster_shape(spec, cluster_options=ClusterOptions())


def _faults(result: TrialResult, action: str) -> list[Event]:
    return [e for e in result.history if e["kind"] == "fault" and e["action"] == action]


def test_renewal_cut_stops_the_holders_renewals_and_its_rival_is_granted_while_it_still_works() -> None:
    # x0.5: TTL 500, work 1500; worker 0 cut off from its lock node 250 ms into each lease, for 1000 ms.
    spec = _spec("single-renew", "renewal-cut", time_scale=0.5, rounds=2)
    every_node = list(range(_shape(spec).node_count))  # nodes=all: every lock node, node 0 the lock's
    result = _run(spec)
    history = result.history
    injects, heals = _faults(result, "inject"), _faults(result, "heal")
    assert injects and len(injects) == len(heals)
    for inject, heal in zip(injects, heals, strict=True):
        assert (inject["fault"], inject["nodes"], inject["target_worker_spec"]) == ("cut", every_node, "holder")
        assert inject["detail"] == "worker 0 cut off (blackhole)"
        assert 1000 <= (heal["t0"] - inject["t1"]) / 1e6 < 1250  # for=2 x TTL, scaled
    struck = injects[0]
    cut_from, cut_to = struck["t1"], heals[0]["t0"]
    owner = struck["aimed_owner"]
    renewals = [e for e in history if e["kind"] == "renew" and e["owner"] == owner]
    during = [e for e in renewals if cut_from < e["t0"] < cut_to]
    assert during and not any(e["ok"] for e in during), during  # every renewal in the cut failed
    last_deadline = max(e["valid_until"] for e in renewals if e["ok"] and e["t0"] < cut_from)
    # The rival is granted once the last renewed deadline has passed, while the holder is still cut off.
    rival = [e for e in history if e["kind"] == "acquire" and e["worker"] == 1 and e["ok"] and cut_from < e["t1"]]
    assert rival and last_deadline <= rival[0]["t1"] < cut_to
    # ...and the holder is still in its section (it reaches the resource: the cut is not on that link).
    exits = [e for e in history if e["kind"] == "exit" and e["worker"] == 0 and e["t0"] > rival[0]["t1"]]
    assert exits and exits[0]["round"] == struck["round"]
    skipped = [
        e for e in history if e["kind"] == "write-skipped" and e["worker"] == 0 and e["round"] == struck["round"]
    ]
    assert skipped  # single-renew checks its lease: the lost lease's write is skipped, not lost
    assert result.metrics.conflicts > 0 and result.metrics.lost_updates == 0


def test_the_token_check_refuses_the_paused_holders_write_and_loses_nothing() -> None:
    spec = _spec("redlock", "client-pause-token", time_scale=0.5, rounds=4)
    assert spec.resource_check == Check.TOKEN_CAS  # the experiment brings its fence mode
    result = _run(spec)
    pauses = [e for e in result.history if e["kind"] == "pause" and e["worker"] == 0]
    assert pauses
    refused = [e for e in result.history if e["kind"] == "write" and e["accepted"] is False]
    # The woken holder's token is no longer the one the resource holds; its rival's, read before the
    # holder's own read overwrote it, may be refused too (antirez's price: both colliding writes refused).
    assert any(e["worker"] == 0 and e["round"] in {p["round"] for p in pauses} for e in refused), refused
    assert result.metrics.conflicts > 0 and result.metrics.lost_updates == 0
