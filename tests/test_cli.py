"""The CLI through typer's CliRunner: listings, bad input (one line, non-zero exit), a small real run."""

from __future__ import annotations

import csv
import tempfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from expect import assert_lock_held_up, error_lines
from lockcompare.analysis.checker import VERDICT_MEANINGS
from lockcompare.analysis.verdicts import VIOLATIONS
from lockcompare.cli import app
from lockcompare.infra.spawned import free_port
from lockcompare.render.timeline import STEP_KINDS, load_history
from lockcompare.scenario.experiments import EXPERIMENTS

runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, list(args))


def assert_one_line_error(result, code: int, fragment: str) -> None:
    assert result.exit_code == code, result.output
    lines = error_lines(result.stderr)  # without the "skipping <optional backend>" notes
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("lockcompare: error: ") and fragment in lines[0], lines[0]
    assert "Traceback" not in result.output


def test_backends_lists_the_builtins() -> None:
    result = invoke("backends")
    assert result.exit_code == 0
    for name in ("none", "single", "fenced"):
        assert any(line.startswith(name + " ") for line in result.stdout.splitlines())


def test_experiments_lists_each_claim() -> None:
    result = invoke("experiments")
    assert result.exit_code == 0
    experiments, _, verdicts = result.stdout.partition("\nVerdicts")
    lines = [line for line in experiments.splitlines() if line and not line.startswith(" ")]
    assert [line.split()[0] for line in lines[:-1]] == list(EXPERIMENTS)  # the last: how faults read
    schedules = [
        line.split("faults: ", 1)[1] for line in experiments.splitlines() if line.lstrip().startswith("faults: ")
    ]
    assert len(schedules) == len(EXPERIMENTS) and "restart nodes=holders:1" in " ".join(schedules)
    assert [line.split()[0] for line in verdicts.splitlines()[1:]] == list(VERDICT_MEANINGS)


@pytest.mark.parametrize(
    "args, code, fragment",
    [
        (["matrix", "--backends", "nope"], 2, "unknown backend 'nope'"),
        (["matrix", "--backends", "single", "--experiments", "nope"], 2, "unknown experiment 'nope'"),
        (["matrix", "--backends", "single", "--ttl-ms", "0"], 2, "--ttl-ms must be > 0"),
        (["matrix", "--backends", "single", "--work-ms", "-3"], 2, "--work-ms must be > 0"),
        (["matrix", "--backends", "single", "--trials", "0"], 2, "--trials must be >= 1"),
        (["matrix", "--trials", "abc"], 2, "--trials"),
        (["matrix", "--format", "html"], 2, "'html' is not one of"),
        (["matrix", "--nodes", "localhost:6379", "--resource", "redis://127.0.0.1:1"], 2, "not a redis URL"),
        (["matrix", "--backends", "single", "--nodes", "redis://127.0.0.1:1"], 2, "--nodes and --resource go together"),
        (["run", "--backend", "no.such.module:Lock"], 2, "cannot import 'no.such.module'"),
        (["run", "--backend", "lockcompare.analysis.stats:mean_ci"], 2, "is not a class"),
        (["run", "--backend", "lockcompare.analysis.stats:MeanCI"], 2, "is not a lock backend"),
        (["matrix", "--bogus"], 2, "No such option: --bogus"),
        (["matrix", "--backends", "single", "--pause-ms", "600,abc"], 2, "--pause-ms takes a number, got 'abc'"),
        (["matrix", "--backends", "single", "--workers", "1000"], 2, "--workers must be <= 16"),
        (["matrix", "--backends", "single", "--time-scale", "1e9"], 2, "--time-scale must be <= 10"),
        (["matrix", "--backends", "single", "--ttl-ms", "5,6"], 2, "--ttl-ms takes one value"),
        (["matrix", "--backends", "single", "--pause-point", "sometime"], 2, "--pause-point takes"),
        (["matrix", "--backends", "single", "--fence", "maybe"], 2, "--fence takes writes, all, token"),
        (["run", "--pause-ms", "600,850"], 2, "use matrix to sweep a list"),
        (["bench", "--backends", "single,nope"], 2, "unknown backend 'nope'"),
        (["matrix", "--backends", "redlock", "--redlock-nodes", "0"], 2, "--redlock-nodes takes 3, 5, 7"),
        (["matrix", "--backends", "redlock", "--redlock-nodes", "99"], 2, "--redlock-nodes takes 3, 5, 7"),
        (["table", "/nonexistent/results.csv"], 2, "cannot read /nonexistent/results.csv"),
        (["history", "/nonexistent/trial.jsonl.gz"], 2, "cannot read /nonexistent/trial.jsonl.gz"),
        (["history", "/nonexistent/trial.jsonl.gz", "--kinds", "faults"], 2, "--kinds takes step kinds among"),
    ],
)
def test_bad_input_gives_one_line_and_an_exit_code(args: list[str], code: int, fragment: str) -> None:
    assert_one_line_error(invoke(*args), code, fragment)


def test_unreachable_node_is_one_line(tmp_path: Path) -> None:
    dead = f"redis://127.0.0.1:{free_port()}/0"
    result = invoke(
        "matrix", "--backends", "single", "--nodes", dead, "--resource", dead, "--out", str(tmp_path / "x.csv")
    )
    assert_one_line_error(result, 1, f"redis server {dead} does not answer")
    assert not (tmp_path / "x.csv").exists()


def test_missing_redis_server_binary_is_one_line(tmp_path: Path) -> None:
    result = invoke(
        "matrix",
        "--backends",
        "single",
        "--redis-server",
        str(tmp_path / "redis-server"),
        "--out",
        str(tmp_path / "x.csv"),
    )
    assert_one_line_error(result, 1, "not an executable file")
    assert not (tmp_path / "x.csv").exists()


def test_table_of_a_file_that_is_not_ours(tmp_path: Path) -> None:
    path = tmp_path / "other.csv"
    path.write_text("a,b\n1,2\n")
    assert_one_line_error(invoke("table", str(path)), 2, "not a lockcompare results file")


def test_small_real_matrix_writes_complete_rows_and_a_table(tmp_path: Path) -> None:
    out = tmp_path / "small.csv"
    result = invoke(
        "matrix", "--backends", "none,single,fenced", "--experiments", "baseline,client-pause",
        "--trials", "1", "--rounds", "4", "--time-scale", "0.1", "--out", str(out),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    with out.open() as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 6
    assert all(row["verdict"] in {"exclusive", "conflicts-no-damage", "lost-updates"} for row in rows), [
        (r["backend"], r["experiment"], r["verdict"], r["problem"]) for r in rows
    ]
    by_cell = {(r["backend"], r["experiment"]): r for r in rows}
    assert_lock_held_up(by_cell[("single", "baseline")])
    # Fencing's guarantee, whatever the interleaving: no write is accepted with a token below one the
    # resource already accepted. (Write-only fencing can still lose an update when a stalled machine
    # lets the zombie write before the new holder's first write: "Fencing depth" in the README; a
    # CPU-quota run lost 1 of 8 that way, so lost_updates == 0 is not asserted here.)
    writes = [
        e for e in load_history(tmp_path / by_cell[("fenced", "client-pause")]["history"]) if e["kind"] == "write"
    ]
    accepted = [e for e in writes if e["accepted"]]
    assert accepted
    # (pairs that surely took effect in this order: one returned before the other was sent)
    assert all(a["fence"] <= b["fence"] for a in accepted for b in accepted if a["t1"] < b["t0"]), accepted
    assert all((tmp_path / r["history"]).is_file() for r in rows)
    assert "| single    | baseline" in result.stdout
    # the run ends naming every trial with a safety violation, with its verdict (none here: no line)
    violating = [r for r in rows if r["verdict"] in VIOLATIONS]
    closing = result.stderr.rstrip().splitlines()
    assert all(f"  {r['trial_id']}  {r['verdict']}" in closing for r in violating), closing
    assert (f"safety violations in {len(violating)} trial(s) (trial id, verdict):" in closing) == bool(violating)

    again = invoke("matrix", "--backends", "single", "--experiments", "baseline", "--out", str(out))
    assert_one_line_error(again, 2, "exists: pass --resume")

    resumed = invoke(
        "matrix", "--backends", "none,single,fenced", "--experiments", "baseline,client-pause",
        "--trials", "1", "--rounds", "4", "--time-scale", "0.1", "--out", str(out), "--resume",
    )  # fmt: skip
    assert resumed.exit_code == 0 and "0 trials run, 6 already in" in resumed.stderr

    rendered = invoke("table", str(out), "--format", "latex")
    assert rendered.exit_code == 0 and "\\begin{tabular}" in rendered.stdout

    timeline = invoke("history", str(tmp_path / by_cell[("fenced", "client-pause")]["history"]))
    assert timeline.exit_code == 0
    steps = [line.split()[4] for line in timeline.stdout.splitlines()[2:]]
    assert steps.count("pause") == 4 and steps.count("write") == 8  # worker 0 paused in each of its 4 rounds
    assert set(steps) <= set(STEP_KINDS)  # --kinds knows every step a history holds
    some = invoke("history", str(tmp_path / by_cell[("fenced", "client-pause")]["history"]), "--kinds", "pause,write")
    assert sorted({line.split()[4] for line in some.stdout.splitlines()[2:]}) == ["pause", "write"]

    # run --from reruns one recorded trial with its settings and seed: same trial id, the recorded
    # verdict beside the new one, and the file it reran from is left untouched.
    number = 1 + [(r["backend"], r["experiment"]) for r in rows].index(("single", "baseline"))
    before = out.read_bytes()
    rerun = invoke("run", "--from", f"{out}:{number}")
    assert rerun.exit_code == 0, rerun.output
    fields = {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in rerun.stdout.splitlines())}
    assert fields["trial_id"] == by_cell[("single", "baseline")]["trial_id"]
    # The verdicts agree unless the machine stalled past the lease's 70 ms of slack in one of the two
    # runs (seen under a CPU quota); either way the rerun says what was recorded, and whether it differs.
    now, _, recorded = fields["verdict"].partition("   recorded: ")
    assert recorded.removesuffix("   (differs)") == by_cell[("single", "baseline")]["verdict"]
    assert recorded.endswith("(differs)") == (now != by_cell[("single", "baseline")]["verdict"]), fields["verdict"]
    assert out.read_bytes() == before
    assert_one_line_error(invoke("run", "--from", f"{out}:99"), 2, "row 99 does not exist")
    assert_one_line_error(invoke("run", "--from", f"{out}:1", "--rounds", "3"), 2, "drop --rounds")


def test_run_prints_one_trials_metrics_and_keeps_its_history(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Without --out the row and its history are kept in a folder of their own (printed), which
    `history <trial id> --results` reads; a refused run leaves no folder behind."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the kept folder lands in this test's directory
    result = invoke("run", "--backend", "single", "--experiment", "baseline", "--rounds", "3", "--time-scale", "0.1")
    assert result.exit_code == 0, result.output
    fields = {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in result.stdout.splitlines())}
    assert fields["backend"] == "single" and fields["entries"] == "6" and fields["conflicts"].isdigit()
    assert_lock_held_up(fields)
    (kept,) = tmp_path.glob("lockcompare-run-*")
    assert Path(fields["results"]) == kept / "run.csv" and Path(fields["history"]).parent == kept / "run.histories"
    read_it = f"read it: lockcompare history {fields['trial_id']} --results {kept / 'run.csv'}"
    assert read_it in result.stderr.splitlines()
    timeline = invoke("history", fields["trial_id"], "--results", fields["results"])
    assert timeline.exit_code == 0, timeline.output
    assert [line.split()[4] for line in timeline.stdout.splitlines()[2:]].count("write") == 6
    assert_one_line_error(invoke("run", "--backend", "nope"), 2, "unknown backend 'nope'")
    assert list(tmp_path.glob("lockcompare-run-*")) == [kept]


def test_backends_that_cannot_run_here_are_named_once_per_reason(monkeypatch, capsys) -> None:
    from lockcompare.cli.options import _default_backends

    monkeypatch.setenv("LOCKCOMPARE_ETCD", "/nonexistent/etcd")
    usable = _default_backends()
    assert "etcd" not in usable and "etcd-fenced" not in usable and "single" in usable
    lines = capsys.readouterr().err.splitlines()
    # (the Go etcd client's line, where it is not built, is its own reason: not counted here)
    assert [line for line in lines if "etcd" in line and "etcd-go" not in line] == [
        "lockcompare: skipping etcd, etcd-fenced: the etcd backends are not viable here: "
        "LOCKCOMPARE_ETCD=/nonexistent/etcd: not an executable file"
    ]


def test_version_prints_the_package_version_and_revision() -> None:
    from lockcompare.infra.provenance import lockcompare_version, source_revision

    result = invoke("--version")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"lockcompare {lockcompare_version()} ({source_revision() or 'unknown revision'})"


def test_plugin_path_is_accepted_after_the_subcommand(tmp_path: Path, monkeypatch) -> None:
    """Typed where users type it: after the subcommand, as before it (issue 53.5); the directory
    is then where plug-ins are imported from."""
    import sys

    monkeypatch.setattr(sys, "path", list(sys.path))
    result = invoke("backends", "--plugin-path", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert sys.path[0] == str(tmp_path)


def test_hoisting_keeps_what_follows_a_double_dash() -> None:
    from lockcompare.cli.core import hoist_global_options

    assert hoist_global_options(["evaluate", "x", "--plugin-path", "d"]) == ["--plugin-path", "d", "evaluate", "x"]
    assert hoist_global_options(["run", "--plugin-path=d", "--", "--plugin-path", "e"]) == [
        "--plugin-path=d",
        "run",
        "--",
        "--plugin-path",
        "e",
    ]


def test_history_by_trial_id_finds_the_row_and_its_file() -> None:
    """`history <trial-id>`: the id (or its unique start) looked up in the CSV named (issue 53.5)."""
    lab = Path(__file__).resolve().parents[1] / "results" / "lab-loop.csv"
    with lab.open() as f:
        first = next(csv.DictReader(f))
    by_file = invoke("history", str(lab.parent / first["history"]), "--kinds", "acquire")
    by_id = invoke("history", first["trial_id"], "--results", str(lab), "--kinds", "acquire")
    assert by_id.exit_code == 0, by_id.output
    assert by_id.stdout == by_file.stdout and "acquire" in by_id.stdout
    prefix = first["trial_id"].rsplit(".", 1)[0]  # without its hash: still one trial
    assert invoke("history", prefix, "--results", str(lab), "--kinds", "acquire").stdout == by_file.stdout
    assert_one_line_error(invoke("history", "none.", "--results", str(lab)), 2, "give more of the id")
    assert_one_line_error(invoke("history", "no-such-trial", "--results", str(lab)), 2, "no trial 'no-such-trial'")


def test_docs_lists_and_prints_the_pages_the_help_points_at() -> None:
    listed = invoke("docs")
    assert listed.exit_code == 0 and "verdicts" in listed.stdout, listed.output
    shown = invoke("docs", "docs/verdicts.md")
    assert shown.exit_code == 0 and shown.stdout.startswith("# Verdicts"), shown.output
    assert_one_line_error(invoke("docs", "no-such-page"), 2, "no documentation page 'no-such-page'")
