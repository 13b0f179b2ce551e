"""The closing lines of a matrix run that name its violating trials (render/table.py violation_lines):
pure, on hand-built rows."""

from __future__ import annotations

from lockcompare.render.table import violation_lines


def _row(trial_id: str, verdict: str) -> dict[str, str]:
    return {"trial_id": trial_id, "verdict": verdict}


def test_each_violating_trial_is_named_with_its_verdict_worst_first() -> None:
    rows = [_row("a", "exclusive"), _row("b", "lease-violated"), _row("c", "conflicts-no-damage"),
            _row("d", "lost-updates"), _row("e", "unknown"), _row("f", "double-applied")]  # fmt: skip
    assert violation_lines(rows) == [
        "safety violations in 3 trial(s) (trial id, verdict):",
        "  d  lost-updates",
        "  f  double-applied",
        "  b  lease-violated",
    ]


def test_a_run_without_violations_says_nothing() -> None:
    assert violation_lines([_row("a", "exclusive"), _row("b", "conflicts-no-damage"), _row("c", "unknown")]) == []


def test_the_list_is_capped_with_how_many_more() -> None:
    rows = [_row(f"t{i}", "lost-updates") for i in range(14)]
    lines = violation_lines(rows, limit=10)
    assert lines[0] == "safety violations in 14 trial(s) (trial id, verdict):"
    assert lines[1:11] == [f"  t{i}  lost-updates" for i in range(10)]  # in file order within a verdict
    assert lines[-1] == "  and 4 more"


def test_a_trial_run_again_counts_once_by_its_latest_row() -> None:
    rows = [_row("a", "lost-updates"), _row("a", "exclusive"), _row("b", "lost-updates")]
    assert violation_lines(rows) == ["safety violations in 1 trial(s) (trial id, verdict):", "  b  lost-updates"]
