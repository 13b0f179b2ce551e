"""Claims are checked, not trusted: a backend's ``has_ttl = False``, its renewal hooks and its lease
check are each put to the test by the battery, against real redis-servers, before they excuse anything.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lockcompare.evaluation.conformance import PropertyResult, Status, battery, check_property, property_named
from lockcompare.infra.cluster import Cluster

REPO = Path(__file__).resolve().parents[1]
SESSION_LIAR = "careless_session_lock:CarelessSessionLock"
NO_TTL = "claim_no_ttl_holds_past_any_ttl"
RENEWS = "claim_renewal_outlives_the_ttl"
CHECKS = "claim_lease_check_learns_of_a_loss"
TTL_LINES = (
    "lease_validity_is_within_the_ttl",
    "lock_is_free_again_after_the_ttl",
    "expired_holder_cannot_release_its_successors_lock",
)


@pytest.fixture
def plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    """The examples and this directory's plug-ins, importable by the spawned backend hosts."""
    monkeypatch.syspath_prepend(str(REPO / "examples"))
    monkeypatch.syspath_prepend(str(REPO / "tests"))


def results(spec: str, cluster: Cluster, *names: str) -> dict[str, PropertyResult]:
    with battery(spec=spec, node_urls=cluster.node_urls) as ctx:
        return {name: check_property(property_named(name), ctx) for name in names}


def test_what_a_backend_claims_is_read_from_its_class_and_hooks() -> None:
    from lockcompare.backends import load_backend
    from lockcompare.evaluation.backend_host import claims_of

    said = {name: claims_of(load_backend(name)) for name in ("single", "single-renew", "pg-advisory")}
    assert [(c.has_ttl, c.renews, c.checks_lease) for c in said.values()] == [
        (True, False, False),
        (True, True, True),
        (False, False, False),
    ]
    try:
        renew = claims_of(load_backend("redis-lock-renew"))
    except Exception as exc:  # noqa: BLE001 - python-redis-lock is optional
        pytest.skip(f"redis-lock-renew not loadable here: {exc}")
    # Whole seconds only (its check_ttl): the battery's short leases are 1000 ms for it, not 150 ms.
    assert (renew.renews, renew.checks_lease, renew.min_ttl_ms) == (True, False, 1000)


def test_a_lock_whose_key_expires_cannot_claim_it_has_no_ttl(cluster: Cluster, plugins: None) -> None:
    """The claim fails by name, and the TTL properties it would have excused are checked instead."""
    found = results(SESSION_LIAR, cluster, NO_TTL, *TTL_LINES)
    claim = found[NO_TTL]
    assert claim.status is Status.FAIL
    assert claim.evidence.startswith("the claim has_ttl = False does not hold: a second client was granted the lock")
    assert "its holder alive and the lease not released: the lock expires" in claim.evidence
    statuses = {name: found[name].status for name in TTL_LINES}
    assert statuses == {
        "lease_validity_is_within_the_ttl": Status.FAIL,  # no deadline, yet the key expires
        "lock_is_free_again_after_the_ttl": Status.PASS,
        "expired_holder_cannot_release_its_successors_lock": Status.FAIL,  # the plain DEL
    }
    assert "has_ttl = False: that claim failed its check" in found["lease_validity_is_within_the_ttl"].evidence


def test_claims_a_lock_does_not_make_are_not_claimed(cluster: Cluster) -> None:
    found = results("single", cluster, NO_TTL, RENEWS, CHECKS)
    assert {name: r.status for name, r in found.items()} == dict.fromkeys(found, Status.NOT_CLAIMED)


def test_a_renewing_lock_is_shown_to_renew_and_its_lease_check_to_learn_of_a_loss(cluster: Cluster) -> None:
    """single-renew: its 150 ms lease outlives two TTLs while its holder lives; frozen, it loses the
    lock to a second client, and its before_write says so once it wakes."""
    found = results("single-renew", cluster, RENEWS, CHECKS)
    assert found[RENEWS].status is Status.PASS, found[RENEWS].evidence
    assert found[RENEWS].evidence.startswith("a 150 ms lease still held")
    assert found[CHECKS].status is Status.PASS, found[CHECKS].evidence
    assert found[CHECKS].evidence.startswith("after a second client took the lock, before_write")


def test_renewal_hooks_that_renew_nothing_fail_the_claim(cluster: Cluster, plugins: None) -> None:
    found = results("claiming_backends:HooksWithoutRenewal", cluster, RENEWS)
    assert found[RENEWS].status is Status.FAIL
    assert found[RENEWS].evidence.startswith(
        "the claim renews (it has drain_renewals / stop_renewal) does not hold: a second client was granted"
    )


def test_a_lease_check_that_never_learns_fails_the_claim(cluster: Cluster, plugins: None) -> None:
    found = results("claiming_backends:CheckThatNeverLearns", cluster, CHECKS)
    assert found[CHECKS].status is Status.FAIL
    assert found[CHECKS].evidence.startswith(
        "the claim checks its lease (it has before_write) does not hold: after a second client took the lock, "
        "before_write answered a lease valid"
    )


def test_evaluate_fails_the_lock_that_claims_no_ttl_naming_the_claim(tmp_path: Path) -> None:
    """From the command line, as a person evaluating it would: exit 1, the claim named in the verdict."""
    out = tmp_path / "ev.csv"
    proc = subprocess.run(
        [sys.executable, "-m", "lockcompare", "--plugin-path", str(REPO / "examples"), "evaluate", SESSION_LIAR,
         "--against", "single", "--time-scale", "0.1", "--rounds", "3", "--out", str(out), "--search-budget", "0"],
        cwd=tmp_path, capture_output=True, text=True, timeout=180, check=False,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    claim = "FAIL         claim has_ttl = False: held past any TTL while its holder lives"
    assert claim in lines, proc.stdout
    assert lines[lines.index(claim) + 1].strip().startswith("the claim has_ttl = False does not hold")
    verdict = next(line for line in lines if line.startswith("Verdict:"))
    assert "claim has_ttl = False" in verdict and verdict.endswith("(exit 1).")
