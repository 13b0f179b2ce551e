"""The report card's session-kill line and the matrix's one skip line, on hand-built inputs (no server)."""

from __future__ import annotations

from typing import Any

import pytest

from lockcompare.evaluation.backend_host import Claims
from lockcompare.evaluation.card_lines import judge_experiments
from lockcompare.evaluation.conformance import Status


def row(experiment: str, *, conflicts: int = 0, lost: int = 0) -> dict[str, Any]:
    return {
        "trial_id": f"pg.{experiment}.t0", "resource_check": "fence-writes",
        "backend": "pg", "experiment": experiment, "entries": 40, "entries_planned": 40, "workers": 2,
        "rounds": 20, "conflicts": conflicts, "lost_updates": lost, "stale_writes_rejected": 0,
        "grants_while_held": 0, "foreign_releases": 0, "acquire_p50_ms": 0.2, "verdict": "exclusive", "problem": "",
    }  # fmt: skip


def session_line(*, fenced: bool, conflicts: int, lost: int) -> Any:
    rows = [row(e) for e in ("baseline", "client-pause", "short-ttl")]
    rows.append(row("session-kill", conflicts=conflicts, lost=lost))
    claims = Claims(summary="s", exclusive=True, issues_fencing_tokens=fenced)
    (line,) = [ln for ln in judge_experiments(rows=rows, backend="pg", claims=claims) if "session" in ln.title]
    return line


def test_a_session_lock_that_ends_with_its_session_is_not_claimed_with_the_evidence() -> None:
    line = session_line(fenced=False, conflicts=10, lost=10)
    assert line.status is Status.NOT_CLAIMED
    # the evidence, then the sizes the card judged (issue 38: every line gives them)
    assert line.evidence.startswith("the lock ends with its session: 10 conflicts in 40 entries, 10 lost updates")
    assert "timing-marked" in line.evidence


@pytest.mark.parametrize(("lost", "status"), [(0, Status.PASS), (1, Status.FAIL)])
def test_a_fenced_design_must_lose_nothing_when_the_session_ends(lost: int, status: Status) -> None:
    assert session_line(fenced=True, conflicts=3, lost=lost).status is status


def test_no_session_line_without_a_session_kill_trial() -> None:
    rows = [row(e) for e in ("baseline", "client-pause", "short-ttl")]
    claims = Claims(summary="s", exclusive=True, issues_fencing_tokens=False)
    assert not [ln for ln in judge_experiments(rows=rows, backend="pg", claims=claims) if "session" in ln.title]
