"""One tolerance for "a lease valid past its TTL" (issue 38.3): the conformance battery and the
checker judge a lease 8 ms past its TTL the same way, and each says by how much.

A real backend (tests/plugins/overstated.py: single, its deadline 8 ms late), real redis-server
nodes, real worker processes."""

from __future__ import annotations

import pytest

from lockcompare.analysis.evidence import LEASE_TOLERANCE_MS, grant_depths_ms, grants_while_held
from lockcompare.analysis.results import make_row
from lockcompare.evaluation.backend_host import Timed, claims_of
from lockcompare.evaluation.battery_timing import ValidityReach
from lockcompare.evaluation.card_lines import judge_experiments
from lockcompare.evaluation.conformance import Status, battery, check_property, property_named
from lockcompare.infra.cluster import Cluster
from lockcompare.runner.trial import new_run_id, run_trial
from lockcompare.scenario.experiments import get_experiment
from lockcompare.scenario.trialspec import Overrides, make_spec
from plugins.overstated import OVERSTATED_MS, OverstatedLock

SPEC = "plugins.overstated:OverstatedLock"
MS = 1_000_000


def test_the_tolerance_is_below_the_overstatement_it_must_catch() -> None:
    assert 0 < LEASE_TOLERANCE_MS < OVERSTATED_MS


@pytest.mark.full  # real servers and worker processes (conftest's full tier)
def test_the_battery_fails_a_lease_8_ms_past_its_ttl_and_says_by_how_much(cluster: Cluster) -> None:
    with battery(spec=SPEC, node_urls=cluster.node_urls) as ctx:
        result = check_property(property_named("lease_validity_is_within_the_ttl"), ctx)
    assert result.status is Status.FAIL, result.evidence
    assert "ms past the TTL (tolerance 5 ms, as the checker's)" in result.evidence
    past = float(result.evidence.split(": ")[-1].split(" ms past")[0])
    assert OVERSTATED_MS - 1 < past < OVERSTATED_MS + 1  # what it judged: the overstatement, within a ms


def _reach(*, valid_ms: float, call_ms: float, library_ms: float | None) -> str:
    """The validity property's judgement of a lease valid until ``valid_ms`` after a call that took
    ``call_ms``, ``library_ms`` of it inside the library (None: a backend in the host's process)."""
    timed = Timed(
        value=None, t0_ns=0, t1_ns=int(call_ms * MS), library_ns=None if library_ms is None else int(library_ms * MS)
    )
    return ValidityReach.of(timed, int(valid_ms * MS)).judged(ttl_ms=1000, slack_ms=LEASE_TOLERANCE_MS)


def test_a_lease_in_the_hosts_process_is_judged_from_its_call_exactly_at_the_tolerance() -> None:
    tolerance = LEASE_TOLERANCE_MS
    assert _reach(valid_ms=1000 + tolerance, call_ms=9, library_ms=None) == "within"
    assert _reach(valid_ms=1000 + tolerance + 0.01, call_ms=9, library_ms=None) == "beyond"
    assert _reach(valid_ms=0, call_ms=9, library_ms=None) == "beyond"  # expired before the call began


def test_an_external_clients_hop_is_not_counted_against_it_nor_for_it() -> None:
    past = 1000 + LEASE_TOLERANCE_MS + 3  # 3 ms past the tolerance, from the harness's call
    # 4 ms of the call outside the library: the 3 ms may be the pipe's, not the library's.
    assert _reach(valid_ms=past, call_ms=4.5, library_ms=0.5) == "unclear"
    # 1 ms outside it: even from the latest start the library could have had, 2 ms too far.
    assert _reach(valid_ms=past, call_ms=1.5, library_ms=0.5) == "beyond"
    # A client that reports no library time: the whole call may be hop.
    assert _reach(valid_ms=past, call_ms=4.5, library_ms=0) == "unclear"
    assert _reach(valid_ms=1000, call_ms=4.5, library_ms=0.5) == "within"


def test_the_checker_tolerates_a_grant_inside_the_tolerance_and_counts_one_past_it() -> None:
    def history(rival_grant_ms: float) -> list[dict]:
        holder = {"worker": 0, "round": 0, "kind": "acquire", "ok": True, "t0": 0, "t1": 1 * MS, "t_attempt": 0,
                  "owner": "a", "valid_until": 1000 * MS}  # fmt: skip
        rival = {"worker": 1, "round": 0, "kind": "acquire", "ok": True, "t0": int((rival_grant_ms - 0.3) * MS),
                 "t1": int(rival_grant_ms * MS), "t_attempt": int((rival_grant_ms - 0.3) * MS), "owner": "b",
                 "valid_until": int((rival_grant_ms + 1000) * MS)}  # fmt: skip
        return [holder, rival]

    inside = history(1000 - (LEASE_TOLERANCE_MS - 1))
    assert grants_while_held(inside) == 0 and grant_depths_ms(inside) == [(pytest.approx(LEASE_TOLERANCE_MS - 1), True)]
    past = history(1000 - OVERSTATED_MS)
    assert grants_while_held(past) == 1 and grant_depths_ms(past) == [(pytest.approx(OVERSTATED_MS), False)]


@pytest.mark.full  # real servers and worker processes (conftest's full tier)
def test_the_client_pause_card_line_judges_the_same_lease_the_same_way_with_its_size(cluster: Cluster) -> None:
    """At x0.1 the rival retries every ~1 ms, so it is granted inside the 8 ms the holder wrongly
    believes it still has: "two valid leases at once", the depth stated beside the tolerance."""
    spec = make_spec(
        backend=SPEC, experiment=get_experiment("client-pause"), trial=0,
        overrides=Overrides(time_scale=0.1, rounds=4),  # type: ignore[arg-type]
    )  # fmt: skip
    result = run_trial(spec=spec, cluster=cluster, run_id=new_run_id())
    m = result.metrics
    assert m.grants_while_held > 0 and m.verdict != "exclusive", m  # lost-updates too: single has no fencing
    assert LEASE_TOLERANCE_MS < m.deepest_grant_ms <= OVERSTATED_MS + 1, m.deepest_grant_ms
    row = make_row(result, host={}, run_id="r", cluster_kind="embedded", server_version="", history_path="")
    (pause,) = [
        line for line in judge_experiments(rows=[row], backend=SPEC, claims=claims_of(OverstatedLock))
        if "client-pause" in line.title
    ]  # fmt: skip
    assert pause.status is Status.FAIL and "two valid leases at once" in pause.evidence
    assert f"deepest grant {m.deepest_grant_ms:.1f} ms inside another's valid lease (tolerance 5 ms)" in pause.evidence
    assert "of 1 trial(s) timing-marked" in pause.evidence
