"""``node-freeze``: a lock node's server stopped (SIGSTOP) for a while, then continued — checked on a
real redis-server and real workers, from the history."""

from __future__ import annotations

import pytest

from lockcompare.errors import InvalidValueError
from lockcompare.infra.cluster import open_cluster
from lockcompare.infra.health import answers
from lockcompare.runner.trial import TrialResult, new_run_id, run_trial
from lockcompare.scenario.experiments import get_experiment
from lockcompare.scenario.schedule import parse_schedule
from lockcompare.scenario.trialspec import Overrides, make_spec

FREEZE_MS = 1500  # lesson scale: 750 ms at --time-scale 0.5, longer than the 500 ms TTL


def test_a_freeze_needs_its_length_and_lock_nodes() -> None:
    step = parse_schedule("node-freeze nodes=holders:1 after-acquire=50 for=1500").steps[0]
    assert step.text == "node-freeze nodes=holders:1 after-acquire=50 once for=1500"
    with pytest.raises(InvalidValueError, match="node-freeze needs for=MS > 0"):
        parse_schedule("node-freeze nodes=0 at=start")
    with pytest.raises(InvalidValueError, match="node-freeze needs nodes="):
        parse_schedule("node-freeze worker=0 after-acquire=50 for=100")


def _freeze_one_node(nodes: str) -> tuple[float, TrialResult]:
    """A trial of ``single`` on one real node frozen for FREEZE_MS (×0.5); the stated freeze in ms."""
    overrides = Overrides(
        time_scale=0.5, rounds=3, faults=f"node-freeze nodes={nodes} after-acquire=50 once for={FREEZE_MS}"
    )
    spec = make_spec(backend="single", experiment=get_experiment("baseline"), trial=0, overrides=overrides)
    with open_cluster(node_count=1) as cluster:
        result = run_trial(spec=spec, cluster=cluster, run_id=new_run_id())
        assert answers(cluster.node_urls[0])  # continued: the node answers after the trial
    return FREEZE_MS * spec.time_scale, result


def test_a_frozen_node_is_stopped_for_the_stated_time_and_its_clients_wait_for_it() -> None:
    stated_ms, result = _freeze_one_node("holders:1")
    faults = [e for e in result.history if e["kind"] == "fault"]
    assert [(e["fault"], e["action"], e["nodes"]) for e in faults] == [
        ("node-freeze", "inject", [0]),
        ("node-freeze", "heal", [0]),
    ]
    inject, heal = faults
    assert inject["detail"].startswith("SIGSTOP (pid ")
    assert heal["detail"] == "SIGCONT (node 0 was T)"  # read from /proc just before SIGCONT: stopped
    frozen_ms = (heal["t0"] - inject["t1"]) / 1e6
    assert stated_ms <= frozen_ms < stated_ms + 250, frozen_ms
    # The holder's release was sent to the frozen node and answered only once it continued.
    waited = [
        e for e in result.history if e["worker"] >= 0 and e["kind"] == "release" and e["t0"] < heal["t0"] < e["t1"]
    ]
    assert waited, "no worker call waited for the frozen node"
    assert all(e["t1"] >= heal["t0"] for e in waited)


def test_a_frozen_leader_is_continued_on_time_and_the_heal_reads_who_leads_after() -> None:
    # Aimed by role, the heal records who leads as the fault ends. Read before the SIGCONT, the
    # frozen leader answered no status request: the read waited its 0.5 s timeout, and the heal
    # landed that late (every leader-freeze trial of a reproduction was timing-marked).
    stated_ms, result = _freeze_one_node("leader")
    inject, heal = [e for e in result.history if e["kind"] == "fault"]
    assert (inject["action"], heal["action"], heal["detail"]) == ("inject", "heal", "SIGCONT (node 0 was T)")
    frozen_ms = (heal["t0"] - inject["t1"]) / 1e6
    assert stated_ms <= frozen_ms < stated_ms + 250, frozen_ms  # under the read's 500 ms timeout
    assert heal["late_ms"] < 250, heal["late_ms"]
    assert heal["roles_before"]["leader"] == 0 and heal["roles"]["leader"] == 0  # read, continued: it answers
