"""The second abuse battery's defects (issue 26), each as a test: one writer per real file, fields a
reader accepts, a report that writes only its own files and reads only the results' folder, one
redaction for every URL form, one bounded number parser, plug-in imports probed."""

from __future__ import annotations

import csv
import os
import shutil
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lockcompare.analysis.results import inspect_results, read_results
from lockcompare.backends import load_backend
from lockcompare.cli import app
from lockcompare.errors import BackendLoadError, InvalidValueError, ResultsBusyError
from lockcompare.files import lock_path_for, results_lock
from lockcompare.redaction import redact
from lockcompare.render.table import format_table, markdown_text, spreadsheet_text
from lockcompare.scenario.numbers import parse_number
from lockcompare.scenario.schedule import MAX_SCHEDULE_CHARS, parse_schedule

DATA = Path(__file__).parent / "data"
TINY = DATA / "golden" / "tiny.csv"


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


# --- one writer per real file -----------------------------------------------------------------------


def test_a_symlink_and_its_target_share_one_lock_file(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "alias.csv").symlink_to(tmp_path / "real" / "x.csv")
    assert lock_path_for(tmp_path / "alias.csv") == tmp_path / "real" / "x.csv.lock"


def test_a_hard_link_is_the_same_writer(tmp_path: Path) -> None:
    real, alias = tmp_path / "x.csv", tmp_path / "y.csv"
    real.write_text("schema_version\n")
    os.link(real, alias)
    with results_lock(real), pytest.raises(ResultsBusyError, match="another name for the same file"):
        with results_lock(alias):
            pass
    assert not lock_path_for(alias).exists()  # the refused run removed its own lock file
    with results_lock(alias):  # free again once the first run is done
        pass


def test_an_out_name_that_is_not_utf8_is_refused_before_anything_runs(tmp_path: Path) -> None:
    name = os.fsdecode(b"x\xff.csv")
    result = invoke("run", "--rounds", "2", "--out", str(tmp_path / name))
    assert result.exit_code == 2 and "not UTF-8" in result.stderr
    assert list(tmp_path.iterdir()) == []


# --- every field bounded where it is written, and readable ------------------------------------------


def test_a_long_schedule_is_refused_up_front() -> None:
    with pytest.raises(InvalidValueError, match=f"at most {MAX_SCHEDULE_CHARS} characters"):
        parse_schedule("; ".join(["crash nodes=0 at=start"] * 3000))
    with pytest.raises(InvalidValueError, match="at most 64 steps"):
        parse_schedule("; ".join(["crash nodes=0 at=start"] * 65))


def test_a_field_longer_than_the_csv_modules_default_and_a_bom_are_read(tmp_path: Path) -> None:
    rows = list(csv.DictReader(TINY.open(newline="")))
    rows[0]["problem"] = "x" * 200_000
    out = tmp_path / "long.csv"
    with out.open("w", newline="", encoding="utf-8-sig") as fh:  # utf-8-sig: with a byte-order mark
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    found = inspect_results(out)
    assert len(found.rows) == len(rows) and not found.truncated_lines
    assert found.rows[0]["problem"] == "x" * 200_000


# --- report and table -------------------------------------------------------------------------------


def test_markdown_cells_are_escaped_and_csv_formulas_neutralised() -> None:
    assert markdown_text("a|b\n<script>x") == "a\\|b &lt;script>x"
    assert markdown_text("<1 ms") == "<1 ms"
    assert [spreadsheet_text(v) for v in ("=cmd|x", "+1+1", "@sum", "-x", "-3", "3")] == [
        "'=cmd|x", "'+1+1", "'@sum", "'-x", "-3", "3"
    ]  # fmt: skip
    assert format_table(["a"], [["=1+1"]], fmt="csv") == "a\n'=1+1"
    assert "\\|" in format_table(["a"], [["x|y"]], fmt="github")


def _hostile_csv(tmp_path: Path) -> Path:
    shutil.copytree(TINY.parent, tmp_path / "golden")
    csv_path = tmp_path / "golden" / TINY.name
    rows = list(csv.DictReader(csv_path.open(newline="")))
    for row in rows:
        row["history"] = "../../../../../../../../etc/passwd"
        row["run_id"] = "<script>alert(1)</script>|x\ny"
    with csv_path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    return csv_path


def test_report_reads_no_history_outside_the_results_folder_and_escapes_cells(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from lockcompare.render.report import REPORT_NAME, write_report

    write_report(results=_hostile_csv(tmp_path), out=tmp_path / "rep")
    text = (tmp_path / "rep" / REPORT_NAME).read_text()
    assert "root:" not in text and "leaves the results' folder" in text
    outside_code = "".join(part for i, part in enumerate(text.split("`")) if i % 2 == 0)
    assert "<script" not in outside_code


def test_report_refuses_a_folder_holding_files_it_did_not_write(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from lockcompare.errors import RenderError
    from lockcompare.render.report import write_report

    out = tmp_path / "rep"
    out.mkdir()
    (out / "README.md").write_text("mine")
    (out / "matrix-client-pause.png").write_text("mine")
    with pytest.raises(RenderError, match="that lockcompare did not write"):
        write_report(results=TINY, out=out)
    assert sorted(p.read_text() for p in out.iterdir()) == ["mine", "mine"]


# --- redaction --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "redis://:s3cret@127.0.0.1:6379/0",
        "redis://user:s3cret@host:bad/0",
        "redis://:s3/cr@et@127.0.0.1:6379/0",
        "rediss://u:s3cret@h:1/0",
        "redis://127.0.0.1:1/0?password=s3cret",
        "postgresql://u:s3cret@db:5432/x",
        "postgresql+psycopg://u:s3cret@db:5432/x",
        "postgresql://u@db/x?sslmode=require&password=s3cret",
        "http://root:s3cret@127.0.0.1:2379",
        "host=db user=u password=s3cret dbname=x",
    ],
)
def test_one_redaction_hides_the_password_of_every_url_form(url: str) -> None:
    assert "s3cret" not in redact(url) and "s3" not in redact(url).replace("s3cr", "")
    assert "s3cret" not in redact(f"cannot reach '{url}': refused")


def test_pieces_of_a_misparsed_password_are_hidden_too() -> None:
    url = "postgresql://u:s3/cretC@127.0.0.1:1/db"
    assert (
        redact('invalid integer value "s3" for "port"', passwords_of=(url,)) == 'invalid integer value "***" for "port"'
    )


@pytest.mark.parametrize(
    "args",
    [
        ["run", "--postgres", "postgresql+psycopg://u:s3cret@127.0.0.1:1/db", "--backend", "pg-lease"],
        ["run", "--nodes", "redis://:s3/cret@127.0.0.1:1/0", "--resource", "redis://127.0.0.1:1/1"],
        ["run", "--nodes", "redis://127.0.0.1:1/0?password=s3cret", "--resource", "redis://127.0.0.1:1/1"],
    ],
)
def test_no_error_line_prints_a_password(args: list[str]) -> None:
    result = invoke(*args, "--rounds", "2")
    assert result.exit_code != 0
    assert "s3cret" not in result.output and "s3/cret" not in result.output


# --- one bounded number parser ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, message",
    [
        ("²", "digits 0-9"),
        ("1" * 5000, "5000 characters"),
        ("1e308", "<= 600000 ms"),
        ("inf", "finite"),
        ("nan", "finite"),
        ("-1", ">= 0"),
    ],
)
def test_the_number_parser_refuses_in_one_line(text: str, message: str) -> None:
    with pytest.raises(InvalidValueError, match=message):
        parse_number(text, what="for=", low=0, high=600_000, unit=" ms")


@pytest.mark.parametrize(
    "faults, message",
    [
        ("pause worker=0 after-acquire=0 for=1e7", "for= must be <= 600000 ms"),
        ("crash nodes=² after-acquire=5", "nodes= takes a whole number"),
        ("crash nodes=0 after-acquire=1e308", "after-acquire= must be <= 600000 ms"),
        ("crash nodes=" + "1" * 5000 + " at=start", "5000 characters"),
        ("pause worker=" + "1" * 5000 + " after-acquire=0 for=5", "5000 characters"),
    ],
)
def test_schedule_numbers_are_bounded(faults: str, message: str) -> None:
    result = invoke("run", "--faults", faults, "--rounds", "2")
    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert message in line and len(line) < 300


@pytest.mark.parametrize(
    "args, message",
    [
        (["explore", "single", "--max-steps", "100000000"], "--max-steps must be in 1..64"),
        (["explore", "single", "--jobs", "1000"], "--jobs must be <= 64"),
        (["explore", "single", "--budget", "9" * 400], "400 characters"),
        (["explore", "single", "--budget", "10000h"], "at most 168 h"),
        (["explore", "single", "--resume", "--out", "/nonexistent/explore"], "not a directory of an earlier search"),
        (["run", "--from", f"{TINY}:{'1' * 5000}"], "5000 characters"),
    ],
)
def test_explore_and_run_from_numbers_are_bounded(args: list[str], message: str) -> None:
    result = invoke(*args)
    assert result.exit_code == 2 and message in result.stderr


def test_history_window_is_bounded() -> None:
    (row,) = [r for r in read_results(TINY) if r["backend"] == "single"]
    history = TINY.parent / str(row["history"])
    result = invoke("history", str(history), "--from-ms", "-1e308", "--to-ms", "1e308")
    assert result.exit_code == 2 and "--from-ms must be >= 0 ms" in result.stderr


# --- plug-in imports, probed ------------------------------------------------------------------------

PLUGINS = {
    "p_exit3": ("raise SystemExit(3)\n", r"called sys.exit\(3\) while being imported"),
    "p_osexit": ("import os\nos._exit(0)\n", "exited with code 0 before the import ended"),
    "p_slow": ("import time\ntime.sleep(60)\n", "did not finish within 2 s"),
    "p_fork": (
        "import os, time\nif os.fork() == 0:\n    time.sleep(300)\n    os._exit(0)\n",
        "started a process that kept running",
    ),
}


@pytest.mark.parametrize("module", sorted(PLUGINS))
def test_a_plugin_import_that_exits_hangs_or_forks_is_one_line_and_leaves_nothing(
    tmp_path: Path, module: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lockcompare import backends

    code, message = PLUGINS[module]
    name = f"{module}_{tmp_path.name}".replace("-", "_")
    (tmp_path / f"{name}.py").write_text(code + f"# {tmp_path}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(backends, "PLUGIN_IMPORT_TIMEOUT_S", 2.0)
    monkeypatch.setattr(backends.probe_import, "__kwdefaults__", {"timeout_s": 2.0})
    with pytest.raises(BackendLoadError, match=message):
        load_backend(f"{name}:Lock")
    assert name not in sys.modules
    left = [pid for pid in os.listdir("/proc") if pid.isdigit() and _cmdline_has(pid, str(tmp_path))]
    assert left == []


def _cmdline_has(pid: str, text: str) -> bool:
    try:
        return text in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False
