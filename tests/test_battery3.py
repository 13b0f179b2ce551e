"""The third abuse battery's defects (issue 38), each as a test: one address parser that never raises,
one redaction for every form, manifests read as bytes, a daemonising server binary refused and
ended, a killed run's temporary directories swept by any command, one histories folder per results
file, SIGHUP and SIGQUIT like SIGTERM, a report put in place whole, no working directory needed,
durations bounded by their server, and a --quick card that keeps its word."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lockcompare.backends.external.manifest import load_manifest
from lockcompare.cli import app
from lockcompare.errors import BackendLoadError
from lockcompare.evaluation.defaults import DEFAULT_SEARCH_BUDGET_S, QUICK_TIME_SCALE
from lockcompare.evaluation.scales import card_seconds, quick_rounds, trial_seconds
from lockcompare.redaction import redact, remember_secrets
from lockcompare.render.staging import staged_folder
from lockcompare.runner.outfile import claim_history_dir, history_dir
from lockcompare.urls import parse_url

DATA = Path(__file__).parent / "data"
TINY = DATA / "golden" / "tiny.csv"
LC = [sys.executable, "-m", "lockcompare"]


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def one_line_error(result, *, secret: str) -> str:
    assert result.exit_code != 0, result.output
    assert "Traceback" not in result.output and isinstance(result.exception, SystemExit)
    assert secret not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lockcompare: error: "), result.stderr
    return lines[0]


# --- one parser, never raising ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "password", "host", "port"),
    [
        ("redis://:ab＠s3cret@127.0.0.1:6379/0", "ab＠s3cret", "127.0.0.1", 6379),  # urllib: NFKC ValueError
        ("redis://[::1]:6379", None, "::1", 6379),  # urllib: fine, redis-py's from_url: fine
        ("postgresql://u:a/b@c@[::1]:5432/db", "a/b@c", "::1", 5432),
        ("host=127.0.0.1 port=5432 user=u password='a b\\'c' dbname=x", "a b'c", "127.0.0.1", 5432),
        ("redis://:p%20w@h:1/0", "p w", "h", 1),
    ],
)
def test_every_address_form_parses(text: str, password: str | None, host: str, port: int) -> None:
    address = parse_url(text)
    assert (address.problem, address.password, address.host, address.port) == ("", password, host, port)


@pytest.mark.parametrize(
    "text", ["redis://[::1:6379", "redis://::1:6379", "redis://h:99999", "redis://h:x/0", "host='open", "x", ""]
)
def test_a_broken_address_is_a_problem_not_an_exception(text: str) -> None:
    assert parse_url(text).problem


def test_no_text_makes_the_parser_raise() -> None:
    rng = random.Random(38)
    alphabet = "redis:/@[]%?#=' \\＠﹫:1.0aé\x00\n"
    for _ in range(3000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
        parse_url(text)
        parse_url("redis://" + text)


def test_a_keyword_string_becomes_a_url_libpq_reads_back() -> None:
    url = parse_url("host=db port=5 user=u password='a b' dbname=x sslmode=disable").to_url(scheme="postgresql")
    assert url == "postgresql://u:a%20b@db:5/x?sslmode=disable"
    assert parse_url(url).password == "a b"


# --- one redaction -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "redis server redis://:ab s3cret@127.0.0.1:1/0 does not answer",  # a raw space
        "redis server 'redis://:ab's3cret@127.0.0.1:1/0' does not answer",  # a quote
        'redis server "redis://:ab"s3cret@127.0.0.1:1/0" does not answer',
        "zk://u:s3cret＠127.0.0.1:1",  # a full-width @ where the @ is
        "host=h port=1 password='s3 cret' dbname=x",  # libpq's keyword form, quoted
        "host=h port=1 password = s3cret",
    ],
)
def test_no_password_survives_redaction(text: str) -> None:
    shown = redact(text)
    assert "s3cret" not in shown and "s3 cret" not in shown and "***" in shown


def test_a_password_the_command_was_given_is_hidden_wherever_it_is_quoted() -> None:
    remember_secrets(["--dask", "u:k9-secret@127.0.0.1:1"])
    assert redact("invalid address 'u:k9-secret@127.0.0.1:1'") == "invalid address 'u:***@127.0.0.1:1'"
    assert "k9-secret" not in redact("said k9-secret plainly")


@pytest.mark.parametrize(
    "args",
    [
        ["run", "--nodes", "redis://:ab＠s3cret@127.0.0.1:1/0", "--resource", "redis://127.0.0.1:1/1"],
        ["run", "--nodes", "redis://[::1]:1/0", "--resource", "redis://:s3cret@[::1:1/1"],
        ["run", "--nodes", "redis://:ab s3cret@127.0.0.1:1/0", "--resource", "redis://127.0.0.1:1/1"],
        ["run", "--nodes", "redis://:ab's3cret@127.0.0.1:port/0", "--resource", "redis://127.0.0.1:1/1"],
        ["run", "--backend", "zk-lock", "--zookeeper", "u:s3cret＠127.0.0.1:1"],
        ["run", "--backend", "pg-lease", "--postgres", "host=127.0.0.1 port=1 password='s3 cret"],
        ["matrix", "--backends", "single", "--experiments", "baseline", "--dask", "u:s3cret@127.0.0.1:1"],
    ],
)
def test_every_server_option_fails_in_one_line_without_its_password(args: list[str], tmp_path: Path) -> None:
    if "--dask" in args:
        args = [*args, "--out", str(tmp_path / "x.csv")]
    line = one_line_error(invoke(*args), secret="s3cret")
    assert "s3 cret" not in line


# --- manifests, server binaries ------------------------------------------------------------------


def test_a_manifest_in_another_encoding_is_one_line(tmp_path: Path) -> None:
    manifest = tmp_path / "client.toml"
    manifest.write_bytes('protocol = 1\nname = "caf\xe9"\n'.encode("latin-1"))
    with pytest.raises(BackendLoadError, match="not UTF-8"):
        load_manifest(manifest)
    line = one_line_error(invoke("run", "--backend", str(manifest), "--rounds", "2"), secret="\x00")
    assert "not UTF-8" in line


def _working_under(directory: Path) -> list[int]:
    """Live processes whose working directory lies under ``directory`` (redis-server writes its
    process title over its environment, so a marker variable cannot find it; its --dir can)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            cwd = os.readlink(entry / "cwd")
            state = (entry / "stat").read_text().rsplit(")", 1)[-1].split()[0]
        except (OSError, ValueError, IndexError):
            continue
        if cwd.startswith(str(directory)) and state != "Z":
            found.append(int(entry.name))
    return found


@pytest.mark.parametrize("how", ["--daemonize yes", "& (a shell's background job)"])
def test_a_daemonising_server_binary_is_refused_and_nothing_is_left(how: str, tmp_path: Path) -> None:
    from lockcompare.infra.redis.kind import redis_protocol_binary

    binary = redis_protocol_binary()
    wrapper = tmp_path / "redis-daemon"
    if how.startswith("--daemonize"):
        wrapper.write_text(f'#!/bin/sh\nexec "{binary}" "$@" --daemonize yes\n')
    else:
        wrapper.write_text(f'#!/bin/sh\n"{binary}" "$@" >/dev/null 2>&1 &\nexit 0\n')
    wrapper.chmod(0o755)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    done = subprocess.run(
        [*LC, "run", "--rounds", "2", "--time-scale", "0.1", "--redis-server", str(wrapper)],
        env={**os.environ, "TMPDIR": str(tmp)}, capture_output=True, text=True, timeout=120, cwd=tmp_path, check=False,
    )  # fmt: skip
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "went into the background" in done.stderr.strip().splitlines()[-1]
    time.sleep(0.5)
    left = _working_under(tmp)
    for pid in left:  # the test's own leftovers, ended so a failure leaves nothing running
        os.kill(pid, signal.SIGKILL)
    assert left == []


# --- temporary directories, histories, signals, report, working directory --------------------------


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_any_command_sweeps_a_killed_runs_temporary_directories(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    left = tmp / f"lockcompare-p{_dead_pid()}-node-abc"
    left.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp)}
    done = subprocess.run([*LC, "table", str(TINY)], env=env, capture_output=True, timeout=60, check=False)
    assert done.returncode == 0
    assert not left.exists()


def test_two_results_files_of_one_stem_never_share_a_histories_folder(tmp_path: Path) -> None:
    csv_out, tsv_out = tmp_path / "x.csv", tmp_path / "x.tsv"
    assert claim_history_dir(csv_out) == tmp_path / "x.histories"
    csv_out.write_text("schema_version,history\n9,x.histories/a.jsonl.gz\n")
    assert history_dir(tsv_out) == tmp_path / "x.tsv.histories"  # x.csv's rows point into x.histories
    tsv_out.write_text("schema_version,history\n9,x.tsv.histories/a.jsonl.gz\n")
    assert history_dir(csv_out) == tmp_path / "x.histories"  # the same answers on --resume
    assert history_dir(tsv_out) == tmp_path / "x.tsv.histories"
    assert history_dir(tmp_path / "y.csv") == tmp_path / "y.histories"
    (tmp_path / "z.log").write_text("a run's log, no results file")
    assert history_dir(tmp_path / "z.csv") == tmp_path / "z.histories"


def test_a_results_file_being_written_keeps_its_histories_folder_from_a_sibling(tmp_path: Path) -> None:
    (tmp_path / "x.csv.lock").write_text("")  # x.csv's run has started, no row yet
    assert history_dir(tmp_path / "x.tsv") == tmp_path / "x.tsv.histories"


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGQUIT])
def test_sighup_and_sigquit_end_a_matrix_like_sigterm(sig: signal.Signals, tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp), "LOCKCOMPARE_RUNS_DIR": str(tmp_path / "runs")}
    proc = subprocess.Popen(
        [*LC, "matrix", "--backends", "single", "--experiments", "baseline", "--trials", "2", "--rounds", "30",
         "--time-scale", "0.1", "--jobs", "1", "--out", str(tmp_path / "x.csv")],
        env=env, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "x.csv.lock").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1.0)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 128 + sig
    assert err.strip().splitlines()[-1] == f"lockcompare: error: terminated by {sig.name}; servers and workers stopped"
    time.sleep(0.5)
    assert [p.name for p in tmp.iterdir()] == []


def test_an_interrupted_rendering_leaves_the_previous_folder_whole(tmp_path: Path) -> None:
    out = tmp_path / "rep"
    out.mkdir()
    (out / "README.md").write_text("previous")
    (out / "notes.txt").write_text("mine")
    with pytest.raises(KeyboardInterrupt), staged_folder(out, ours={"README.md"}) as into:
        (into / "README.md").write_text("half")
        (into / "matrix-x.png").write_bytes(b"png")
        raise KeyboardInterrupt
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rep"]  # no staging folder left
    assert (out / "README.md").read_text() == "previous" and not (out / "matrix-x.png").exists()
    with staged_folder(out, ours={"README.md"}) as into:
        (into / "README.md").write_text("new")
    assert (out / "README.md").read_text() == "new" and (out / "notes.txt").read_text() == "mine"


def test_a_killed_renderings_staging_folder_is_removed_by_the_next(tmp_path: Path) -> None:
    out = tmp_path / "rep"
    left = tmp_path / f".rep.lockcompare-p{_dead_pid()}-staging-abc"
    left.mkdir()
    with staged_folder(out, ours=set()) as into:
        (into / "README.md").write_text("x")
    assert not left.exists() and (out / "README.md").read_text() == "x"


def test_no_command_needs_the_working_directory_unless_it_writes_there(tmp_path: Path) -> None:
    gone = tmp_path / "gone"
    gone.mkdir()
    script = (
        f"import os, subprocess, sys; os.chdir({str(gone)!r}); os.rmdir({str(gone)!r}); "
        f"sys.exit(subprocess.run({LC!r} + sys.argv[1:]).returncode)"
    )
    for args in (["table", str(TINY)], ["run", "--rounds", "2", "--time-scale", "0.1"]):
        gone.mkdir(exist_ok=True)
        done = subprocess.run(
            [sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=120, check=False
        )
        assert done.returncode == 0, done.stderr
    shutil.rmtree(gone, ignore_errors=True)


# --- durations bounded by their server --------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["--idle-session-timeout-ms", "3e9"],
        # within the bound, not after the scale: checked where pg-advisory is loaded (psycopg)
        pytest.param(
            ["--idle-session-timeout-ms", "2000000000", "--time-scale", "2"], marks=pytest.mark.needs("postgres")
        ),
        ["--client-timeout-ms", "1e308"],
    ],
)
def test_a_duration_past_what_its_server_takes_is_refused(args: list[str]) -> None:
    line = one_line_error(invoke("run", "--backend", "pg-advisory", "--rounds", "2", *args), secret="\x00")
    assert "at most" in line or "<=" in line


# --- --quick keeps its word ---------------------------------------------------------------------------


def test_quick_scales_the_search_and_the_rounds_of_a_moved_experiment() -> None:
    assert DEFAULT_SEARCH_BUDGET_S * QUICK_TIME_SCALE == 12
    assert quick_rounds(rounds=20, asked=0.1, scale=5.0, floor=5) == 5  # whole-second short-ttl at x5
    assert quick_rounds(rounds=20, asked=0.1, scale=0.1, floor=5) == 20
    assert quick_rounds(rounds=3, asked=0.1, scale=1.0, floor=5) == 3  # never more than asked
    help_text = invoke("evaluate", "--help").output
    assert "search of 12 s" in " ".join(help_text.split())


def test_the_card_cost_estimate_errs_long_against_measured_trials() -> None:
    # Measured (reproduction.csv, the lesson's scale, 40 rounds): baseline 24.9 s, client-pause 63.8 s.
    assert 24.9 <= trial_seconds(rounds=40, scale=1.0, work_ms=300, pause_ms=0) <= 24.9 * 1.2
    assert 63.8 <= trial_seconds(rounds=40, scale=1.0, work_ms=300, pause_ms=1200) <= 63.8 * 1.3
    assert card_seconds([[10.0, 10.0, 10.0, 10.0]], search_s=12) > card_seconds([[10.0]], search_s=12)
