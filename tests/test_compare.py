"""lockcompare compare on hand-built rows: which cells agree, which differ, which cannot be judged."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from lockcompare.analysis.compare import compare_rows, comparison_table, differs
from lockcompare.cli import app


def rows(backend: str, experiment: str, conflicts: list[int], lost: list[int], **settings) -> list[dict]:
    return [
        {"backend": backend, "experiment": experiment, "conflicts": c, "entries": 80, "lost_updates": lo,
         "trial": k, **settings}
        for k, (c, lo) in enumerate(zip(conflicts, lost, strict=True))
    ]  # fmt: skip


def test_cells_whose_means_lie_inside_each_others_interval_agree() -> None:
    a = rows("single", "client-pause", [39, 40, 38], [20, 20, 19])
    b = rows("single", "client-pause", [40, 39, 39], [20, 19, 20])
    [line] = compare_rows(a, b)
    assert line.flag == "" and not differs(line)
    assert line.conflict_rate[0].n == 3 and abs(line.conflict_rate[0].mean - 39 / 80) < 1e-12


def test_a_cell_differs_when_each_mean_lies_outside_the_others_interval() -> None:
    a = rows("none", "baseline", [40, 41, 40], [40, 40, 40])
    b = rows("none", "baseline", [60, 62, 61], [40, 40, 40])
    [line] = compare_rows(a, b)
    assert line.flag == "conflict rate differs" and differs(line)


def test_one_mean_outside_is_named_but_not_counted() -> None:
    a = rows("redlock", "short-ttl", [79, 79, 79], [40, 40, 40])  # a zero-wide interval
    b = rows("redlock", "short-ttl", [79, 78, 79], [40, 39, 40])
    [line] = compare_rows(a, b)
    assert line.flag == (
        "conflict rate: B's mean outside the other's interval; lost updates: B's mean outside the other's interval"
    )
    assert not differs(line)


def test_identical_zero_wide_cells_agree_and_different_ones_differ() -> None:
    zero = rows("single", "baseline", [0, 0, 0], [0, 0, 0])
    assert compare_rows(zero, zero)[0].flag == ""
    one = rows("single", "baseline", [1, 1, 1], [0, 0, 0])
    assert compare_rows(zero, one)[0].flag == "conflict rate differs"


def test_cells_in_one_file_only_and_single_trials() -> None:
    a = rows("single", "baseline", [0], [0]) + rows("fenced", "baseline", [0, 0], [0, 0])
    b = rows("single", "baseline", [0], [0]) + rows("pottery", "baseline", [0, 0], [0, 0])
    flags = {line.key[0]: line.flag for line in compare_rows(a, b)}
    assert flags == {
        "single": "conflict rate: fewer than 2 trials, not judged; lost updates: fewer than 2 trials, not judged",
        "fenced": "only in A",
        "pottery": "only in B",
    }
    assert [differs(line) for line in compare_rows(a, b)] == [False, True, True]


def test_conditions_split_cells_and_show_in_the_table() -> None:
    a = rows("fenced", "client-pause", [30, 31], [0, 0], pause_ms=600.0) + rows(
        "fenced", "client-pause", [40, 41], [0, 0], pause_ms=1200.0
    )
    lines = compare_rows(a, a)
    assert [line.condition for line in lines] == ["pause_ms=600", "pause_ms=1200"]
    headers, cells = comparison_table(lines)
    assert headers[2] == "condition" and cells[0][3] == "38.1% ±7.9 (n=2)"  # t(1) = 12.706 and cells[0][-1] == "ok"


def test_compare_command_exit_code(tmp_path: Path) -> None:
    data = Path(__file__).parent.parent / "results" / "archive" / "seed-pattern.csv"
    same = CliRunner().invoke(app, ["compare", str(data), str(data)])
    assert same.exit_code == 0, same.output
    other = Path(__file__).parent.parent / "results" / "archive" / "quorum-vs-pause.csv"
    moved = CliRunner().invoke(app, ["compare", str(data), str(other)])
    assert moved.exit_code == 1  # cells only in one file
    assert "only in A" in moved.stdout
