"""Where a report card's time goes (issue 54: ``evaluate --quick`` within 60 s): its matrices' trials
in one run, and the node-loss properties' clusters started while the property before runs."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from lockcompare.analysis.results import read_results
from lockcompare.evaluation import battery_base
from lockcompare.evaluation.battery_base import PRIVATE_NODES, prestarted_private_clusters
from lockcompare.evaluation.evaluate import evaluate
from lockcompare.infra.cluster import Cluster, ClusterShape


@pytest.mark.full  # a battery and seven trials on real servers
def test_every_matrix_of_a_card_runs_in_one_run(tmp_path: Path) -> None:
    # fenced issues tokens: its client-pause runs again with --fence all, a matrix of its own
    out = tmp_path / "ev.csv"
    evaluate(backend="fenced", against=("single",), out=out, time_scale=0.1, rounds=3)
    rows = list(read_results(out))
    fence_all = [r for r in rows if r["backend"] == "fenced" and r["experiment"] == "client-pause"]
    assert len(fence_all) == 2, [r["trial_id"] for r in fence_all]  # --fence writes and --fence all
    assert len({r["trial_id"] for r in rows}) == len(rows) == 7
    assert {r["run_id"] for r in rows} == {rows[0]["run_id"]}  # one run: one pool, one crew


@pytest.mark.full  # two five-node clusters of real redis-servers
def test_the_next_private_cluster_starts_while_a_node_loss_property_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    builds: list[ClusterShape] = []
    built = threading.Condition()
    start = battery_base.start_embedded

    def recorded(shape: ClusterShape, **kwargs: object) -> Cluster:
        cluster = start(shape, **kwargs)  # type: ignore[arg-type]
        with built:
            builds.append(shape)
            built.notify_all()
        return cluster

    monkeypatch.setattr(battery_base, "start_embedded", recorded)
    with prestarted_private_clusters("redis", expected=2) as private_cluster:
        assert builds == []  # nothing starts before a node-loss property asks
        with private_cluster() as first:
            with built:  # the second is built meanwhile, without being asked for
                assert built.wait_for(lambda: len(builds) == 2, timeout=60), builds
            assert len(first.node_urls) == PRIVATE_NODES and first.problem() == ""
            first.node_server(0).crash()
        with private_cluster() as second:
            assert len(builds) == 2  # the one started meanwhile, not a third
            assert second.problem() == "" and set(second.node_urls).isdisjoint(first.node_urls)
    # the block ends once every cluster is stopped: the crashed one on the pool's thread, the other at close
    assert not any(server.is_running() for server in (*first.all_servers(), *second.all_servers()))
