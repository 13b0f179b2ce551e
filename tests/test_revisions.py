"""Issue 31: one revision per cell — a resume onto another revision's rows is refused unless asked
(the reason recorded in every new row), and tables mark a cell measured by two revisions."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from lockcompare.analysis.results import inspect_results, read_results, rewrite
from lockcompare.cli import app
from lockcompare.errors import ResultsFileError
from lockcompare.infra.provenance import source_revision
from lockcompare.render.table import REVISION_NOTE, render
from lockcompare.runner.matrix import run_matrix
from lockcompare.runner.outfile import prepare_out
from lockcompare.scenario.parsing import Overrides

QUICK = Overrides(time_scale=0.1, rounds=3, call_timeout_ms=1500)
OTHER = "0123456789abcdef0123456789abcdef01234567"


def _file_of_another_revision(out: Path) -> None:
    run_matrix(backends=["single"], experiments=["baseline"], trials=1, overrides=QUICK, out=out)
    (row,) = inspect_results(out).rows
    rewrite(out, [dict(row, source_revision=OTHER)])  # as if measured by another commit


def test_resume_onto_rows_of_another_revision_is_refused_unless_a_reason_is_given(tmp_path: Path) -> None:
    if not source_revision():
        pytest.skip("the code under test is not in a git checkout: it has no revision to compare")
    out = tmp_path / "r.csv"
    _file_of_another_revision(out)
    with pytest.raises(ResultsFileError, match=f"holds trials of revision {OTHER[:12]}.*--allow-mixed-revisions"):
        prepare_out(out, resume=True)
    result = CliRunner().invoke(
        app, ["matrix", "--backends", "single", "--experiments", "baseline", "--trials", "2", "--time-scale", "0.1",
              "--rounds", "3", "--out", str(out), "--resume"],
    )  # fmt: skip
    assert result.exit_code == 2 and "holds trials of revision" in result.stderr, result.output
    assert len(read_results(out)) == 1  # refused before anything ran
    result = CliRunner().invoke(  # --rerun-marked 0: the notes below are the resume's, not a rerun's
        app, ["matrix", "--backends", "single", "--experiments", "baseline", "--trials", "2", "--time-scale", "0.1",
              "--rounds", "3", "--out", str(out), "--resume", "--allow-mixed-revisions", "a docs-only commit",
              "--rerun-marked", "0"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    rows = read_results(out)
    assert [r["source_revision"] == OTHER for r in rows] == [True, False]
    assert [r["note"] for r in rows] == ["", "resumed over another revision: a docs-only commit"]
    table = render(rows)
    assert "2 (2 revisions)" in table and REVISION_NOTE in table


def test_a_cell_of_one_revision_is_not_marked() -> None:
    rows = [
        {"backend": "single", "experiment": "baseline", "verdict": "exclusive", "source_revision": rev, "trial": t,
         "trial_id": f"t{t}", "entries": 6, "entries_planned": 6, "conflicts": 0, "lost_updates": 0,
         "writes_rejected": 0, "max_concurrency": 1, "overlap_ms": 0.0}
        for t, rev in enumerate([OTHER, OTHER, ""])
    ]  # fmt: skip
    table = render(rows)
    assert "revisions" not in table.split("\n\n")[0] and REVISION_NOTE not in table
    mixed = render([*rows, dict(rows[0], trial=3, trial_id="t3", source_revision="f" * 40)])
    assert "4 (2 revisions)" in mixed and REVISION_NOTE in mixed


def test_a_revision_is_dirty_when_any_code_a_trial_runs_differs(tmp_path: Path) -> None:
    """Hand-built checkout: the package's own files and the shipped clients beside it make a row
    another revision's; results and docs do not (a run may write its results into the checkout)."""
    import subprocess

    from lockcompare.infra.provenance import revision_of

    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    files = {"src/pkg/infra/x.py": "1", "src/pkg/backends/y.py": "1", "clients/node/z.js": "1", "results/r.csv": "1"}
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    git("init", "-q")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    package = tmp_path / "src" / "pkg"
    clean = revision_of(package)
    assert len(clean) == 40
    for name in files:
        (tmp_path / name).write_text("2")
        expect = clean if name.startswith("results/") else clean + "+dirty"
        assert revision_of(package) == expect, name
        (tmp_path / name).write_text("1")
