"""The catalogue's claims are checked against runs (issue 42.8): hand-built cells for each rule,
and every claim against the committed reproduction."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lockcompare.analysis.claims_check import ABSENT, CONTRADICTED, HOLDS, check_claims
from lockcompare.analysis.results import read_results
from lockcompare.scenario.claims import EXPECTATIONS, RULES, Expect

RESULTS = Path(__file__).resolve().parent.parent / "results"


def _row(
    backend: str, *, conflicts: int, lost: int = 0, verdict: str = "exclusive", entries: int = 80
) -> dict[str, Any]:
    return {
        "backend": backend, "experiment": "x", "conflicts": conflicts, "entries": entries, "lost_updates": lost,
        "verdict": verdict, "fault_nodes": 1, "faults": "",
    }  # fmt: skip


@pytest.mark.parametrize(
    ("rule", "value", "conflicts", "lost", "holds"),
    [
        ("no-conflicts", 0, [0, 0], [0, 0], True),
        ("no-conflicts", 0, [0, 1], [0, 0], False),
        ("conflicts", 0, [3, 1], [0, 0], True),
        ("conflicts", 0, [3, 0], [0, 0], False),
        ("some-conflicts", 0, [0, 1], [0, 0], True),
        ("lost-updates", 0, [5, 5], [1, 0], False),
        ("no-lost-updates", 0, [5, 5], [0, 0], True),
        ("all-but-first-conflict", 1, [79, 79], [40, 40], True),
        ("all-but-first-conflict", 1, [79, 70], [40, 40], False),
        ("conflict-share-at-least", 0.5, [41, 60], [0, 0], True),
        ("conflict-share-between", 0.35, [41, 40], [0, 0], True),
        ("conflict-share-between", 0.35, [79, 78], [0, 0], False),
    ],
)
def test_each_rule_on_a_hand_built_cell(
    rule: str, value: float, conflicts: list[int], lost: list[int], holds: bool
) -> None:
    rows = [_row("single", conflicts=c, lost=n) for c, n in zip(conflicts, lost, strict=True)]
    [outcome] = check_claims(
        rows, expectations=[Expect(experiment="x", backends=("single",), rule=rule, value=value, says="")]
    )
    assert outcome.status == (HOLDS if holds else CONTRADICTED), outcome


@pytest.mark.parametrize(
    ("verdicts", "holds"),
    [
        (["lease-violated", "lost-updates"], True),
        (["conflicts", "lease-violated"], True),
        (["lease-violated", "exclusive"], False),
        (["lost-updates", "conflicts-no-damage"], True),  # fenced: two inside, the resource saved the balance
        (["lease-violated", "degraded"], False),
    ],
)
def test_lock_broken_asks_every_trial_for_a_broken_promise(verdicts: list[str], holds: bool) -> None:
    rows = [_row("etcd", conflicts=0, verdict=v) for v in verdicts]
    [outcome] = check_claims(
        rows, expectations=[Expect(experiment="x", backends=("etcd",), rule="lock-broken", says="")]
    )
    assert outcome.status == (HOLDS if holds else CONTRADICTED), outcome


def test_a_trial_without_a_verdict_is_no_evidence_either_way() -> None:
    # A client that never said hello (0 entries, verdict unknown) neither contradicts "conflicts"...
    rows = [
        _row("zk-lock", conflicts=0, entries=0, verdict="unknown"),
        _row("zk-lock", conflicts=4, verdict="conflicts"),
    ]
    conflicts = Expect(experiment="x", backends=("zk-lock",), rule="conflicts", says="")
    [outcome] = check_claims(rows, expectations=[conflicts])
    assert (outcome.status, outcome.trials) == (HOLDS, 1)
    # ...nor stands in for a cell that has no judged trial at all.
    [outcome] = check_claims(rows[:1], expectations=[conflicts])
    assert outcome.status == ABSENT


def test_a_comparison_and_a_missing_cell() -> None:
    rows = [_row("single", conflicts=40, lost=39), _row("redlock", conflicts=1, lost=1)]
    fewer = Expect(
        experiment="x", backends=("redlock", "pottery"), rule="fewer-lost-than", value=0.1, than="single", says=""
    )
    outcomes = {o.backend: o.status for o in check_claims(rows, expectations=[fewer])}
    assert outcomes == {"redlock": HOLDS, "pottery": ABSENT}  # a cell the file lacks is never a pass


def test_every_rule_a_claim_uses_is_known() -> None:
    assert {e.rule for e in EXPECTATIONS} <= set(RULES)


def test_the_committed_reproduction_contradicts_no_claim() -> None:
    outcomes = check_claims(read_results(RESULTS / "reproduction.csv"))
    contradicted = [(o.expect.experiment, o.backend, o.seen) for o in outcomes if o.status == CONTRADICTED]
    assert not contradicted
    assert sum(o.status == HOLDS for o in outcomes) > 100  # the check read the file's cells


def test_unsafe_needs_a_violation_in_a_trial_the_machine_did_not_stall() -> None:
    unsafe = Expect(experiment="x", backends=("single",), rule="unsafe", says="")
    marked_only = [_row("single", conflicts=1, lost=1), _row("single", conflicts=0, lost=0)]
    marked_only[0].update(verdict="lost-updates", timing_marked=True)
    [outcome] = check_claims(marked_only, expectations=[unsafe])
    assert outcome.status == CONTRADICTED  # a violation only in a marked trial decides nothing
    marked_only[1].update(verdict="lease-violated")
    [outcome] = check_claims(marked_only, expectations=[unsafe])
    assert outcome.status == HOLDS
