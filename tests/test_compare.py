"""lockcompare compare on hand-built rows: the two rates of a cell, Fisher's test of them, cells
matched across time scales, and why a cell has no partner."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from lockcompare.analysis.compare import compare_rows, comparison_table, differs, summary_lines
from lockcompare.analysis.intervals import fisher_exact
from lockcompare.cli import app

ROOT = Path(__file__).parent.parent


def rows(backend: str, experiment: str, verdicts: list[str], lost: list[int] | None = None, **settings) -> list[dict]:
    lost = lost or [0] * len(verdicts)
    return [
        {"backend": backend, "experiment": experiment, "conflicts": 0, "entries": 80, "lost_updates": lo,
         "verdict": v, "trial": k, **settings}
        for k, (v, lo) in enumerate(zip(verdicts, lost, strict=True))
    ]  # fmt: skip


def test_two_rates_differ_only_where_fishers_test_says_so() -> None:
    a = rows("sentinel-fenced", "failover", ["lease-violated"] * 5)
    b = rows("sentinel-fenced", "failover", ["lease-violated"] + ["exclusive"] * 4)
    [line] = compare_rows(a, b)
    assert line.p_value == fisher_exact(5, 0, 1, 4) and line.p_value < 0.05
    assert line.flag.startswith("differs (p = 0.0476)") and differs(line)
    # 3 of 5 against 0 of 5 looks different, and five trials each cannot say so: p = 0.167.
    [line] = compare_rows(rows("fenced", "leader-freeze", ["lease-violated"] * 3 + ["exclusive"] * 2),
                          rows("fenced", "leader-freeze", ["exclusive"] * 5))  # fmt: skip
    assert round(line.p_value, 3) == 0.167 and line.flag == "" and not differs(line)
    headers, cells = comparison_table([line])
    assert cells[0][headers.index("violation rate A")] == "3/5 60% [14.7–94.7%]"
    assert cells[0][headers.index("p (Fisher)")] == "0.167"


def test_unobserved_trials_are_left_out_and_a_blind_side_is_not_tested() -> None:
    a = rows("zk-lock", "holder-minority", ["degraded"] * 3 + ["unknown"] * 2)
    b = rows("zk-lock", "holder-minority", ["unknown", "unavailable"])
    [line] = compare_rows(a, b)
    assert (line.rates[0].observed, line.rates[0].unobserved) == (3, 2)
    assert line.p_value is None and line.flag == "not tested: no trial observed the lock in B"
    assert not differs(line)


def test_the_lessons_means_are_notes_beside_the_rates_never_a_difference() -> None:
    a = rows("none", "baseline", ["lost-updates"] * 3, lost=[40, 41, 40])
    b = rows("none", "baseline", ["lost-updates"] * 3, lost=[60, 62, 61])
    [line] = compare_rows(a, b)
    assert line.flag == "lost updates: means apart" and not differs(line)


def test_cells_match_across_time_scales_at_the_lessons_scale() -> None:
    fast = rows("single", "client-pause", ["lost-updates"] * 3, time_scale=0.1, ttl_ms=100.0, pause_ms=120.0)
    slow = rows("single", "client-pause", ["lost-updates"] * 3, time_scale=1.0, ttl_ms=1000.0, pause_ms=1200.0)
    [line] = compare_rows(fast, slow)
    assert line.p_value == 1.0 and line.condition == ""
    said = summary_lines([line], rows_a=fast, rows_b=slow)
    assert any(s.startswith("matched across time scales (A ×0.1, B ×1)") for s in said)
    # A setting that does not scale back to the same lesson value keeps the cells apart, and says why.
    other = rows("single", "client-pause", ["exclusive"] * 3, time_scale=1.0, ttl_ms=2000.0, pause_ms=1200.0)
    lines = compare_rows(fast, other)
    assert [line.flag for line in lines] == [
        "only in A (B's cells of single × client-pause differ in ttl_ms 1000 here, 2000 in B)",
        "only in B (A's cells of single × client-pause differ in ttl_ms 2000 here, 1000 in A)",
    ]
    assert [line.condition for line in lines] == ["ttl_ms=1000", "ttl_ms=2000"]
    assert all(differs(line) for line in lines)


def test_a_file_that_sweeps_the_time_scale_keeps_it_as_a_condition() -> None:
    sweep = rows("single", "baseline", ["exclusive"] * 2, time_scale=0.1, ttl_ms=100.0) + rows(
        "single", "baseline", ["exclusive"] * 2, time_scale=1.0, ttl_ms=1000.0
    )
    assert [line.condition for line in compare_rows(sweep, sweep)] == [
        "ttl_ms=100 time_scale=0.1", "ttl_ms=1000 time_scale=1"
    ]  # fmt: skip


def test_cells_of_a_backend_x_experiment_one_file_did_not_run_are_counted_not_listed() -> None:
    a = rows("single", "baseline", ["exclusive"] * 2) + rows("fenced", "baseline", ["exclusive"] * 2)
    b = rows("single", "baseline", ["exclusive"] * 2) + rows("pottery", "baseline", ["exclusive"] * 2)
    lines = compare_rows(a, b)
    assert [(line.key[0], line.flag) for line in lines] == [
        ("single", ""), ("fenced", "only in A (B did not run fenced × baseline)"),
        ("pottery", "only in B (A did not run pottery × baseline)"),
    ]  # fmt: skip
    assert [differs(line) for line in lines] == [False, True, True]
    _, cells = comparison_table(lines)
    assert [cell[0] for cell in cells] == ["single"]
    said = summary_lines(lines, rows_a=a, rows_b=b)
    assert said[0].startswith("0 of 1 cells tested differ") and "by chance alone" in said[0]
    assert "1 cell(s) in A only, of a backend × experiment B did not run (not listed)" in said


def test_compare_command_on_committed_runs(tmp_path: Path) -> None:
    data = ROOT / "results" / "archive" / "seed-pattern.csv"
    same = CliRunner().invoke(app, ["compare", str(data), str(data)])
    assert same.exit_code == 0, same.output
    assert "0 of 9 cells tested differ" in same.stderr
    fast = ROOT / "results" / "archive" / "seed-pattern-x0.1.csv"
    scaled = CliRunner().invoke(app, ["compare", str(fast), str(data)])
    assert scaled.exit_code == 0, scaled.output  # the same nine cells at two time scales
    assert "matched across time scales (A ×0.1, B ×1)" in scaled.stderr
    other = ROOT / "results" / "archive" / "quorum-vs-pause.csv"
    moved = CliRunner().invoke(app, ["compare", str(data), str(other)])
    assert moved.exit_code == 1  # cells only in one file
    assert "in A only, of a backend × experiment B did not run" in moved.stderr
