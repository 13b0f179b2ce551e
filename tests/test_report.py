"""The Markdown report of a golden results CSV (real runs, tests/data/golden), the commands that
reproduce its cells (one rerun for real), and the provenance columns newer CSVs carry."""

from __future__ import annotations

import doctest
import importlib.util
import shlex
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lockcompare.analysis import cells as cells_module
from lockcompare.analysis import reproduce
from lockcompare.analysis.reproduce import matrix_command
from lockcompare.analysis.results import read_results
from lockcompare.cli import app
from lockcompare.infra.kinds import get_kind
from lockcompare.render.plots import MATRIX_HEIGHT_PX, WIDTH_PX, timeline_height_px
from lockcompare.render.report import MANIFEST_NAME, REPORT_NAME, row_for_history, write_report
from lockcompare.render.table import render
from lockcompare.scenario.settings import IDENTITY_SETTINGS
from png_header import png_size

GOLDEN = Path(__file__).parent / "data" / "golden"
TINY = GOLDEN / "tiny.csv"
needs_matplotlib = pytest.mark.skipif(
    importlib.util.find_spec("matplotlib") is None,
    reason="matplotlib is not installed: pip install -e '.[test]' (or '.[plot]') to run the report tests",
)


@pytest.fixture(scope="module")
def golden_report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Path]]:
    """The golden CSV's report, rendered once for the tests that only read it."""
    out = tmp_path_factory.mktemp("golden") / "report"
    return out, write_report(results=TINY, out=out)


@needs_matplotlib
def test_report_of_the_golden_csv(golden_report: tuple[Path, list[Path]]) -> None:
    out, written = golden_report
    assert [p.name for p in written] == [
        REPORT_NAME, "glance.png", "matrix-client-pause.png", "timeline-single.client-pause.png", "html"
    ]  # fmt: skip
    assert sorted(p.name for p in out.iterdir()) == sorted([MANIFEST_NAME, *(p.name for p in written)])
    assert png_size(out / "matrix-client-pause.png") == (WIDTH_PX, MATRIX_HEIGHT_PX)
    assert png_size(out / "timeline-single.client-pause.png") == (WIDTH_PX, timeline_height_px(2))

    text = (out / REPORT_NAME).read_text()
    rows = read_results(TINY)
    assert render(rows, fmt="github", wide=True) in text  # the summary, as `lockcompare table --wide` prints it
    assert "![who survives what](glance.png)" in text
    assert "| single    | client-pause | 1        | 1/1 100% [2.5–100%]       | 3 / 6" in text
    assert "| fenced    | client-pause | 1        | 0/1 0% [0–97.5%]          | 2 / 6" in text
    assert "![matrix-client-pause](matrix-client-pause.png)" in text
    # the first (here: the only) trial that lost an update, with a link to its history
    assert "### single × client-pause" in text
    (trial,) = [r["trial_id"] for r in rows if r["backend"] == "single"]
    assert f"![timeline of {trial}](timeline-single.client-pause.png)" in text
    assert "No trial lost an update in: fenced × client-pause (1 trial)." in text
    for row in rows:
        assert f"| {row['run_id']} | 1        | {row['started_at']}" in text
    assert "--backends fenced --experiments client-pause --trials 1 --workers 2 --rounds 3 --ttl-ms 1000" in text
    assert "--fence writes" in text


@needs_matplotlib
def test_report_links_resolve_from_its_folder(golden_report: tuple[Path, list[Path]]) -> None:
    out, _ = golden_report
    text = (out / REPORT_NAME).read_text()
    history = read_results(TINY)[1]["history"]
    link = text.split(f"[`{history}`](")[1].split(")")[0]
    assert (out / link).resolve() == (GOLDEN / history).resolve()


@needs_matplotlib
def test_rendering_twice_gives_the_same_bytes_and_removes_stale_pictures(tmp_path: Path) -> None:
    out = tmp_path / "r"
    first = {p.name: p.read_bytes() for p in write_report(results=TINY, out=out) if p.is_file()}
    (out / "timeline-gone.cell.png").write_bytes(b"old")  # as an earlier rendering that showed it wrote it
    with (out / MANIFEST_NAME).open("a") as fh:
        fh.write("timeline-gone.cell.png\n")
    (out / "notes.txt").write_text("mine")
    (out / "timeline-mine.png").write_bytes(b"mine")  # the user's own, under one of our patterns
    second = {p.name: p.read_bytes() for p in write_report(results=TINY, out=out) if p.is_file()}
    assert first == second
    assert not (out / "timeline-gone.cell.png").exists()
    assert (out / "notes.txt").read_text() == "mine" and (out / "timeline-mine.png").read_bytes() == b"mine"


@needs_matplotlib
def test_provenance_columns_are_shown_when_the_csv_has_them(tmp_path: Path) -> None:
    """Schema-4 rows carry provenance: every column some row fills is shown, per run."""
    write_report(results=TINY, out=tmp_path / "r")
    text = (tmp_path / "r" / REPORT_NAME).read_text()
    header = next(line for line in text.splitlines() if line.startswith("| run_id"))
    assert [c.strip() for c in header.strip("|").split("|")] == [
        "run_id", "trials", "started_at", "cluster", "server_version",
        "lockcompare_version", "source_revision", "host", "cpu_count", "load_avg_1m", "concurrent_runs",
    ]  # fmt: skip
    for row in read_results(TINY):
        assert row["run_id"] in text and row["source_revision"] in text


@needs_matplotlib
def test_cli_report(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["report", str(TINY), "--out", str(tmp_path / "r")])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0] == str(tmp_path / "r" / REPORT_NAME)


def test_cli_report_of_a_missing_csv_is_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["report", str(tmp_path / "nope.csv"), "--out", str(tmp_path / "r")])
    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("lockcompare: error: cannot read ") and "nope.csv" in line


def test_a_history_finds_its_row_in_the_csv_beside_it(tmp_path: Path) -> None:
    (single,) = [r for r in read_results(TINY) if r["backend"] == "single"]
    assert row_for_history(GOLDEN / single["history"])["trial_id"] == single["trial_id"]  # type: ignore[index]
    loose = tmp_path / "x.jsonl.gz"
    shutil.copy(GOLDEN / single["history"], loose)
    assert row_for_history(loose) is None


# --- commands ---------------------------------------------------------------------------------------


def test_docstring_examples() -> None:
    for module in (reproduce, cells_module):
        assert doctest.testmod(module).failed == 0


def test_the_command_gives_times_at_the_lesson_scale_with_the_stored_scale() -> None:
    (fenced,) = [r for r in read_results(TINY) if r["backend"] == "fenced"]
    assert matrix_command([fenced]) == (
        "lockcompare matrix --backends fenced --experiments client-pause --trials 1 --workers 2 --rounds 3 "
        "--ttl-ms 1000 --work-ms 300 --pause-ms 1200 --time-scale 0.1 --acquire-timeout-ms 60000 --retry-delay-ms 10 "
        "--think-ms 20 --jitter 0.5 --pause-point after-acquire --pause-how sleep --workload lesson "
        "--resource-kind redis --fence writes --server redis --seed 1"
    )


def test_the_command_names_what_it_cannot_know() -> None:
    (single,) = [r for r in read_results(TINY) if r["backend"] == "single"]
    odd = single | {"seed": 12345, "cluster": "external", "node_count": 3, "trial": 2}
    command = matrix_command([odd])
    assert "--trials 3" in command and "--redlock-nodes 3" in command and "--seed" not in command.split("#")[0]
    assert command.endswith(
        "  # base --seed unknown (the CSV keeps only each trial's derived seed)"
        "  # ran against external servers: add --nodes URL,... --resource URL"
    )
    with pytest.raises(ValueError, match="different settings"):
        matrix_command([single, single | {"work_ms": 40.0}])


def test_rerunning_the_command_writes_a_row_with_the_same_settings(tmp_path: Path) -> None:
    """The real check of 'exact': run the command (3 rounds at 0.1 scale, ~1 s) and compare rows."""
    (single,) = [r for r in read_results(TINY) if r["backend"] == "single"]
    no_server = get_kind(single["server"]).problem(binary=None)
    if no_server:  # the row's server is part of its identity: another server would be another trial
        pytest.skip(f"the row ran on {single['server']}, which cannot run here: {no_server}")
    args = [*shlex.split(matrix_command([single]))[1:], "--out", str(tmp_path / "again.csv")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    (again,) = read_results(tmp_path / "again.csv")
    for column in ("trial_id", *IDENTITY_SETTINGS):
        assert again[column] == single[column], column
