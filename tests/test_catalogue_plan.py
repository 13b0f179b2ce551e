"""What the plan makes of the catalogue's experiments (issue 51): which backends an experiment is for,
and the settings it brings (pure: the plan reads declarations, starts nothing)."""

from __future__ import annotations

import logging

import pytest

from lockcompare.errors import InvalidValueError
from lockcompare.runner.matrix import plan_matrix
from lockcompare.scenario.choices import Check
from lockcompare.scenario.experiments import EXPERIMENTS
from lockcompare.scenario.trialspec import Overrides

RENEWAL_EXPERIMENTS = sorted(name for name, e in EXPERIMENTS.items() if e.rests_on_renewal)


def planned(backends: list[str], experiments: list[str], **settings: object) -> list[tuple[str, str]]:
    specs = plan_matrix(
        backends=backends, experiments=experiments, trials=1, overrides=Overrides(**settings), node_count=None
    )
    return sorted((s.backend, s.experiment) for s in specs)


def test_the_renewal_experiments_are_the_ones_whose_work_outlasts_the_ttl() -> None:
    assert {"renewal-pause", "cpu-starvation"} <= set(RENEWAL_EXPERIMENTS)
    for name in RENEWAL_EXPERIMENTS:
        assert EXPERIMENTS[name].work_ms > EXPERIMENTS[name].ttl_ms, name


@pytest.mark.parametrize("experiment", RENEWAL_EXPERIMENTS)
def test_a_renewal_experiment_leaves_out_a_lease_lock_that_does_not_renew(
    experiment: str, caplog: pytest.LogCaptureFixture
) -> None:
    # single's lease lapses under work longer than its TTL with no fault at all: the cell would measure
    # the missing renewal. A renewing lock and a lock without a TTL (a session) are kept.
    with caplog.at_level(logging.WARNING, logger="lockcompare"):
        kept = planned(["single", "single-renew", "etcd", "pg-advisory"], [experiment])
    assert ("single", experiment) not in kept and ("etcd", experiment) in kept
    renewal_lines = [line for line in caplog.text.splitlines() if "the lock does not renew its lease" in line]
    assert len(renewal_lines) == 1 and f"skipping single x {experiment}: its work outlasts the TTL" in renewal_lines[0]
    # single-renew and pg-advisory are kept, or left out for a fault their servers cannot take (no peers)


def test_the_same_backend_alone_is_refused_with_the_reason() -> None:
    with pytest.raises(InvalidValueError, match=r"'redlock', renewal-pause: .*does not renew its lease"):
        planned(["redlock"], ["renewal-pause"])


def test_the_python_etcd_lock_renews_and_runs_the_renewal_experiments() -> None:
    assert planned(["etcd", "etcd-fenced"], ["renewal-pause"]) == [
        ("etcd", "renewal-pause"),
        ("etcd-fenced", "renewal-pause"),
    ]


def test_a_given_fence_overrides_the_experiments_own() -> None:
    [spec] = plan_matrix(
        backends=["fenced"],
        experiments=["client-pause-token"],
        trials=1,
        overrides=Overrides(fence="all"),
        node_count=None,
    )
    assert spec.resource_check == Check.FENCE_ALL
    [spec] = plan_matrix(
        backends=["fenced"], experiments=["client-pause-token"], trials=1, overrides=Overrides(), node_count=None
    )
    assert spec.resource_check == Check.TOKEN_CAS


def test_acquire_pause_runs_where_the_acquire_has_a_pause_point_and_leaves_out_the_others(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Redlock's fan-out and single's held connection send and read in steps of their own; fenced's acquire
    # is one script call, pottery's a library's, etcd's a gRPC call: no point between request and reply.
    with caplog.at_level(logging.WARNING, logger="lockcompare"):
        kept = planned(["redlock", "single", "single-renew", "fenced", "pottery", "etcd"], ["acquire-pause"])
    assert kept == [("redlock", "acquire-pause"), ("single", "acquire-pause"), ("single-renew", "acquire-pause")]
    (line,) = [line for line in caplog.text.splitlines() if "no pause point" in line]
    assert "skipping fenced, pottery, etcd x acquire-pause: its acquire has no pause point between" in line


def test_acquire_pause_pauses_inside_the_acquire_unless_the_pause_point_is_given() -> None:
    [spec] = plan_matrix(
        backends=["redlock"], experiments=["acquire-pause"], trials=1, overrides=Overrides(), node_count=None
    )
    assert spec.pause_point.value == "in-acquire" and spec.pause_ms == 1200
    assert "point=in-acquire" in spec.faults
    [spec] = plan_matrix(
        backends=["redlock"],
        experiments=["acquire-pause"],
        trials=1,
        overrides=Overrides(pause_point="after-acquire"),
        node_count=None,
    )
    assert spec.pause_point.value == "after-acquire"
    # Any pausing experiment takes the point: client-pause inside the acquire is refused for fenced too.
    with pytest.raises(InvalidValueError, match=r"'fenced', client-pause: its acquire has no pause point"):
        planned(["fenced"], ["client-pause"], pause_point="in-acquire")


def test_a_holder_member_fault_is_left_out_for_a_client_on_every_node(caplog: pytest.LogCaptureFixture) -> None:
    # etcd's Go client keeps a connection to every member (its manifest's connects_to_every_node): the
    # runner found "the holder is connected to 3 nodes" in every round and every trial ended unknown.
    # The plan leaves the cell out with the reason; the Python etcd lock, attached to one member, stays.
    with caplog.at_level(logging.WARNING, logger="lockcompare"):
        kept = planned(["etcd-go-mutex", "etcd-go-fenced", "etcd"], ["holder-minority", "leader-isolated"])
    assert ("etcd", "holder-minority") in kept and ("etcd-go-mutex", "leader-isolated") in kept
    assert ("etcd-go-mutex", "holder-minority") not in kept and ("etcd-go-fenced", "holder-minority") not in kept
    [line] = [line for line in caplog.text.splitlines() if "connected to every lock node" in line]
    assert "skipping etcd-go-mutex, etcd-go-fenced x holder-minority" in line
