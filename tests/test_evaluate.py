"""lockcompare evaluate: the card's judgement on hand-built rows, and two real (tiny) evaluations."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lockcompare.cli import app
from lockcompare.evaluation.backend_host import Claims
from lockcompare.evaluation.card_lines import judge_experiments
from lockcompare.evaluation.card_text import render_card
from lockcompare.evaluation.conformance import Status
from lockcompare.evaluation.evaluate import evaluate

REPO = Path(__file__).resolve().parents[1]

LEASE_LOCK = Claims(summary="x", exclusive=True, issues_fencing_tokens=False)
FENCED_LOCK = Claims(summary="x", exclusive=True, issues_fencing_tokens=True)


def row(backend: str, experiment: str, *, conflicts: int = 0, lost: int = 0, entries: int = 80, **extra) -> dict:
    return {
        "backend": backend, "experiment": experiment, "workers": 2, "rounds": 40, "entries": entries,
        "conflicts": conflicts, "lost_updates": lost, "stale_writes_rejected": 0, "acquire_p50_ms": 0.3,
        "verdict": "exclusive" if conflicts == 0 else "lost-updates", "problem": "", **extra,
    }  # fmt: skip


def card_of(rows: list[dict], claims: Claims, backend: str = "mine") -> dict[str, tuple[Status, str]]:
    return {
        line.title: (line.status, line.evidence)
        for line in judge_experiments(rows=rows, backend=backend, claims=claims)
    }


def healthy(backend: str = "mine", *, pause_conflicts: int = 30, pause_lost: int = 12) -> list[dict]:
    return [
        row(backend, "baseline"),
        row(backend, "client-pause", conflicts=pause_conflicts, lost=pause_lost),
        row(backend, "short-ttl", conflicts=79, lost=40),
    ]


def test_a_lease_lock_that_lets_a_paused_holder_in_needs_fencing_it_does_not_fail() -> None:
    card = card_of(healthy() + healthy("single"), LEASE_LOCK)
    status, evidence = card["client pause longer than the TTL (client-pause)"]
    assert status is Status.NOT_CLAIMED and evidence.startswith("needs fencing: 30 conflicts in 80 entries")
    assert "single 30/80 conflicts, 12 lost, 0 granted while held" in evidence
    assert card["mutual exclusion with a correct TTL (baseline)"][0] is Status.PASS
    assert card["TTL shorter than the work (short-ttl)"][0] is Status.NOT_CLAIMED
    assert card["progress (entries completed / planned)"][0] is Status.PASS


def test_a_lease_granted_over_a_valid_lease_fails_the_pause_line_whatever_the_conflicts() -> None:
    rows = [row("mine", "baseline"), row("mine", "client-pause", conflicts=25, lost=12, grants_while_held=130),
            row("mine", "short-ttl", conflicts=79, lost=40), *healthy("single", pause_conflicts=30)]  # fmt: skip
    status, evidence = card_of(rows, LEASE_LOCK)["client pause longer than the TTL (client-pause)"]
    assert status is Status.FAIL and evidence.startswith("two valid leases at once: 25 conflicts in 80 entries")
    assert "130 leases granted while another's was valid" in evidence
    assert "single 30/80 conflicts, 12 lost, 0 granted while held" in evidence  # rows without the column: 0


BASELINE = "mutual exclusion with a correct TTL (baseline)"


@pytest.mark.parametrize(
    ("extra", "status"),
    [
        ({"timing_marked": "true"}, Status.SKIPPED),  # the holder stalled past its TTL: the machine's
        ({"timing_marked": "false"}, Status.FAIL),  # no stall to blame: the lock's
        ({"timing_marked": "true", "grants_while_held": 1}, Status.FAIL),  # a grant over a valid lease
        ({"timing_marked": "true", "foreign_releases": 1}, Status.FAIL),  # a release of a rival's lock
    ],
)
def test_baseline_conflicts_only_a_stalled_machine_explains_are_skipped_not_failed(extra: dict, status: Status) -> None:
    rows = [row("mine", "baseline", conflicts=1, **extra), *healthy("mine")[1:], *healthy("single")]
    got, evidence = card_of(rows, LEASE_LOCK)[BASELINE]
    assert got is status, evidence
    assert evidence.startswith("1 conflicts in 80 entries")
    assert ("the machine stalled the holder past its TTL" in evidence) is (status is Status.SKIPPED)


def test_baseline_conflicts_in_an_unmarked_trial_fail_beside_a_marked_one() -> None:
    rows = [row("mine", "baseline", conflicts=1, timing_marked="true", trial_id="m"),
            row("mine", "baseline", conflicts=1, timing_marked="false", trial_id="u"),
            *healthy("mine")[1:]]  # fmt: skip
    assert card_of(rows, LEASE_LOCK)[BASELINE][0] is Status.FAIL


def fenced_pause_rows(*, writes_lost: int, all_lost: int) -> list[dict]:
    return [
        row("mine", "baseline", resource_check="fence-writes"),
        row("mine", "client-pause", conflicts=39, lost=writes_lost, resource_check="fence-writes", trial_id="w"),
        row("mine", "client-pause", conflicts=39, lost=all_lost, resource_check="fence-all", trial_id="a"),
        row("mine", "short-ttl", conflicts=79, lost=40, resource_check="fence-writes"),
    ]


PAUSE = "client pause longer than the TTL (client-pause)"


def test_a_fencing_lock_is_judged_by_fencings_guarantee_not_by_write_only_lost_updates() -> None:
    # Write-only fencing lost an update (the zombie wrote before its successor's first write) but
    # never accepted a write below an earlier accepted token, and --fence all lost nothing: PASS.
    rows = fenced_pause_rows(writes_lost=1, all_lost=0)
    lines = judge_experiments(rows=rows, backend="mine", claims=FENCED_LOCK, token_order={"w": 0, "a": 0})
    status, evidence = {line.title: (line.status, line.evidence) for line in lines}[PAUSE]
    assert status is Status.PASS, evidence
    assert evidence.startswith("fenced: 0 writes accepted below an earlier accepted token; --fence all: 0 lost")
    assert "write-only fencing: 39 conflicts in 80 entries" in evidence and "1 lost updates" in evidence


@pytest.mark.parametrize(
    ("writes_lost", "all_lost", "order", "why"),
    [
        (0, 0, {"w": 1, "a": 0}, "1 writes accepted below an earlier accepted token"),  # the promise broken
        (0, 2, {"w": 0, "a": 0}, "--fence all: 2 lost updates"),  # damage even with every access fenced
        (0, 0, {"w": 0, "a": None}, "1 trial histories unreadable: not checked"),  # nothing claimed unseen
        (0, 0, {}, "2 trial histories unreadable"),
    ],
)
def test_a_fencing_lock_fails_when_its_guarantee_breaks_or_cannot_be_checked(
    writes_lost: int, all_lost: int, order: dict, why: str
) -> None:
    rows = fenced_pause_rows(writes_lost=writes_lost, all_lost=all_lost)
    lines = judge_experiments(rows=rows, backend="mine", claims=FENCED_LOCK, token_order=order)
    status, evidence = {line.title: (line.status, line.evidence) for line in lines}[PAUSE]
    assert status is Status.FAIL and why in evidence, evidence


def test_a_fencing_lock_without_fence_all_trials_is_not_passed() -> None:
    rows = [r for r in fenced_pause_rows(writes_lost=0, all_lost=0) if r["resource_check"] != "fence-all"]
    lines = judge_experiments(rows=rows, backend="mine", claims=FENCED_LOCK, token_order={"w": 0})
    status, evidence = {line.title: (line.status, line.evidence) for line in lines}[PAUSE]
    assert status is Status.FAIL and "no trial with --fence all" in evidence


def test_baseline_conflicts_and_unfinished_rounds_fail() -> None:
    rows = [row("mine", "baseline", conflicts=2, entries=70), *healthy()[1:]]
    card = card_of(rows, LEASE_LOCK)
    assert card["mutual exclusion with a correct TTL (baseline)"][0] is Status.FAIL
    status, evidence = card["progress (entries completed / planned)"]
    assert status is Status.FAIL and "baseline 70/80" in evidence


def test_a_baseline_with_no_entries_is_not_exclusion() -> None:
    rows = [row("mine", "baseline", entries=0), *healthy()[1:]]
    assert card_of(rows, LEASE_LOCK)["mutual exclusion with a correct TTL (baseline)"][0] is Status.FAIL


def test_entries_planned_from_a_newer_csv_is_used_when_present() -> None:
    rows = [row("mine", "baseline", entries=80, entries_planned="100"), *healthy()[1:]]
    assert "baseline 80/100" in card_of(rows, LEASE_LOCK)["progress (entries completed / planned)"][1]


def test_redlock_passes_its_card(tmp_path: Path) -> None:
    card = evaluate(backend="redlock", against=(), out=tmp_path / "ev.csv", time_scale=0.1, rounds=3)
    assert [line.title for line in card.lines if line.status is Status.FAIL] == []
    assert card.exit_code == 0
    claimed = {line.title: line.status for line in card.lines}
    assert claimed["survives the loss of a minority of nodes"] is Status.PASS
    assert claimed["refuses without a quorum of its nodes"] is Status.PASS
    assert "every claimed property holds (exit 0)" in render_card(card, fmt="markdown")


@pytest.mark.serial  # a stalled baseline trial adds a FAIL line of the machine's (seen beside two other workers)
def test_the_careless_lock_fails_from_the_command_line_via_plugin_path(tmp_path: Path) -> None:
    """A real console run in another directory: --plugin-path reaches the spawned workers too."""
    out = tmp_path / "ev.csv"
    proc = subprocess.run(
        [sys.executable, "-m", "lockcompare", "--plugin-path", str(REPO / "examples"), "evaluate",
         "careless_lock:CarelessLock", "--against", "single", "--time-scale", "0.1", "--rounds", "3",
         "--out", str(out), "--search-budget", "0"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    failed = [line for line in lines if line.startswith("FAIL")]
    assert failed[0] == "FAIL         a release never deletes another owner's lock", proc.stdout
    assert "deleted its successor's lock" in lines[lines.index(failed[0]) + 1]
    # With so few rounds a lease granted over the sleeper's valid one is likely, not certain.
    assert failed[1:] in ([], ["FAIL         client pause longer than the TTL (client-pause)"]), proc.stdout
    assert f"results: {out}" in proc.stdout and out.exists()


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["evaluate", "no_such_module:Lock"], "cannot import 'no_such_module'"),
        (["evaluate", "single", "--against", "nope"], "unknown backend 'nope'"),
        (["evaluate", "single", "--format", "html"], "'html' is not one of markdown, text"),
    ],
)
def test_evaluate_bad_input_is_one_line(args: list[str], fragment: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "x.csv")])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("lockcompare: error: ") and fragment in lines[0], result.stderr
    assert not (tmp_path / "x.csv").exists()


def test_evaluate_refuses_to_overwrite_results_before_running_anything(tmp_path: Path) -> None:
    (tmp_path / "x.csv").write_text("kept\n")
    result = CliRunner().invoke(app, ["evaluate", "single", "--out", str(tmp_path / "x.csv")])
    assert result.exit_code == 2 and "x.csv exists" in result.stderr and "battery:" not in result.stderr
    assert (tmp_path / "x.csv").read_text() == "kept\n"
