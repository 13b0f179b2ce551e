"""The evaluate card's last line, a recommendation (evaluation/card_text.py): on hand-built cards."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from lockcompare.analysis.results import COLUMNS
from lockcompare.evaluation.card_lines import CardLine
from lockcompare.evaluation.card_text import recommendation, render_card
from lockcompare.evaluation.conformance import Status
from lockcompare.evaluation.evaluate import ReportCard

_TRIALS = itertools.count()


def _row(experiment: str, *, lost: int = 0, writes: int = 40, check: str = "plain", **extra: Any) -> dict[str, Any]:
    return {c: "" for c in COLUMNS} | {
        "entries_planned": 40, "max_concurrency": 1, "writes_rejected": 0, "reads_rejected": 0, "cs_retries": 0,
        "overlap_ms": 0.0, "acquire_timeouts": 0, "refusals": "", "tokens_backwards": 0,
        "backend": "mine", "experiment": experiment, "workers": 2, "rounds": 20, "entries": 40, "conflicts": 0,
        "lost_updates": lost, "writes_accepted": writes, "stale_writes_rejected": 0, "acquire_p50_ms": 0.3,
        "verdict": "lost-updates" if lost else "exclusive", "problem": "", "resource_check": check,
        "trial_id": f"mine.{experiment}.{check}.t{next(_TRIALS)}", **extra,
    }  # fmt: skip


def _card(rows: list[dict[str, Any]], *lines: tuple[str, Status]) -> ReportCard:
    return ReportCard(
        backend="mine", summary="s", lines=tuple(CardLine(title=t, status=s, evidence="e") for t, s in lines),
        results_csv=Path("ev.csv"), rows=tuple(rows), time_scale=0.1, rounds=20, trials=1,
    )  # fmt: skip


PAUSE = "client pause longer than the TTL (client-pause)"
BASE = "mutual exclusion with a correct TTL (baseline)"


def test_a_lock_that_lost_updates_under_a_pause_is_unsafe_without_fencing_with_the_numbers() -> None:
    card = _card([_row("baseline"), _row("client-pause", lost=20, writes=40)], (BASE, Status.PASS),
                 (PAUSE, Status.NOT_CLAIMED))  # fmt: skip
    assert recommendation(card) == (
        "unsafe without fencing at the resource: 20 of 40 updates lost under a pause longer than the TTL (client-pause)"
    )
    text = render_card(card, fmt="text")
    assert text.rstrip().splitlines()[-1] == f"Recommendation: {recommendation(card)}."  # the card's last line
    assert render_card(card, fmt="markdown").rstrip().endswith(f"**Recommendation:** {recommendation(card)}.")


def test_every_loss_is_counted_worst_first_in_one_line() -> None:
    rows = [_row("client-pause", lost=3, writes=40), _row("short-ttl", lost=30, writes=38)]
    said = recommendation(_card(rows, (PAUSE, Status.NOT_CLAIMED)))
    assert said == (
        "unsafe without fencing at the resource: 3 of 40 updates lost under a pause longer than the TTL "
        "(client-pause); 30 of 38 updates lost with a TTL shorter than the work (short-ttl)"
    )


def test_a_failed_claim_comes_before_any_loss() -> None:
    card = _card([_row("client-pause", lost=20)], (BASE, Status.FAIL), (PAUSE, Status.FAIL))
    assert recommendation(card).startswith(f"do not rely on it: it claims {BASE} and broke it (and 1 more")


def test_a_fenced_lock_losing_with_the_write_only_check_is_told_to_check_every_access() -> None:
    rows = [_row("client-pause", lost=1, check="fence-writes"), _row("client-pause", check="fence-all")]
    said = recommendation(_card(rows, (PAUSE, Status.PASS)))
    assert said.startswith("check the fencing token on every access (--fence all)"), said
    assert "1 of 40 updates lost under a pause" in said


def test_a_clean_card_says_what_is_not_claimed_and_not_checked() -> None:
    card = _card([_row("baseline"), _row("client-pause")], (BASE, Status.PASS), (PAUSE, Status.NOT_CLAIMED),
                 ("fencing tokens", Status.SKIPPED))  # fmt: skip
    assert recommendation(card) == (
        f"every claimed property holds; not claimed: {PAUSE}; not checked here: fencing tokens"
    )
    assert recommendation(_card([_row("baseline")], (BASE, Status.PASS))) == (
        "every claimed property holds; nothing left unclaimed"
    )


def test_an_unjudged_experiment_is_no_evidence_of_loss() -> None:
    rows = [_row("client-pause", lost=20, verdict="unknown", problem="a worker failed")]
    assert recommendation(_card(rows, (PAUSE, Status.NOT_CLAIMED))).startswith("every claimed property holds")
