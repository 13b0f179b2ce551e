"""A plug-in that brings a protocol of its own (issue 50): a server kind, a backend and an external
client for "tinylock", which no built-in kind speaks, run by ``matrix``, ``evaluate`` and an
external-client manifest with no edit outside its own package.

The distribution is tests/plugins/tinylock_dist: the package lockcompare_tinylock (the kind, its
server lifecycle, the backend, server.py, the external client and its manifest) and a dist-info
whose entry_points.txt declares the kind and the backend. Putting that directory on PYTHONPATH is
what installing it does for importlib.metadata; each run is a subprocess, so this session's
registries never see it.
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

from expect import error_lines
from lockcompare.infra.lifecycle import process_alive
from lockcompare.runner.local_executor import RERUN_NOTE

DIST = Path(__file__).parent / "plugins" / "tinylock_dist"
PACKAGE = DIST / "lockcompare_tinylock"
MANIFEST = PACKAGE / "tinylock.toml"
TRACE_ENV = "LOCKCOMPARE_TINYLOCK_TRACE"
#: The kind's reasons (lockcompare_tinylock/__init__.py), as the matrix must print them.
NO_CLOCK = "tinylock servers run on their own monotonic clock, which nobody may move: no clock jumps"
NO_SESSIONS = "tinylock has no client sessions to end: no session-kill"


def _lockcompare(tmp_path: Path, *args: str, timeout_s: float = 300) -> subprocess.CompletedProcess[str]:
    """``lockcompare ARGS`` with the tinylock distribution installed and its servers traced."""
    tmp = tmp_path / "tmp"
    tmp.mkdir(exist_ok=True)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(DIST), *filter(None, [os.environ.get("PYTHONPATH")])]),
        TRACE_ENV: str(tmp_path / "trace"),
        "TMPDIR": str(tmp),
    }
    return subprocess.run(
        [sys.executable, "-m", "lockcompare", *args],
        capture_output=True, text=True, timeout=timeout_s, env=env, cwd=tmp_path, check=False,
    )  # fmt: skip


def _traced(tmp_path: Path) -> list[tuple[int, str]]:
    """(pid, name) of every tinylock server the run started."""
    path = tmp_path / "trace"
    lines = path.read_text().splitlines() if path.exists() else []
    return [(int(pid), name) for pid, _, name in (line.split() for line in lines)]


def test_without_the_plugin_a_manifest_on_its_protocol_is_refused_in_one_line(tmp_path: Path) -> None:
    """The manifest's servers are checked against the installed kinds: the same file that runs with
    the plug-in installed names what is installed when it is not."""
    done = subprocess.run(
        [sys.executable, "-m", "lockcompare", "matrix", "--backends", str(MANIFEST), "--experiments", "baseline",
         "--out", str(tmp_path / "no.csv")],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, check=False,
    )  # fmt: skip
    assert done.returncode != 0
    [line] = error_lines(done.stderr)
    assert "servers 'tinylock' is not one of" in line and "redis" in line, line
    assert not (tmp_path / "no.csv").exists()


@pytest.mark.full
def test_the_plugin_protocol_runs_the_matrix_for_its_backend_and_its_external_client(tmp_path: Path) -> None:
    out = tmp_path / "tinylock.csv"
    done = _lockcompare(tmp_path, "matrix", "--backends", f"tinylock,{MANIFEST}",
                        "--experiments", "baseline,clock-jump,session-kill", "--trials", "1", "--time-scale", "0.1",
                        "--out", str(out))  # fmt: skip
    print(done.stdout, done.stderr, sep="\n")  # the run as a reader sees it (pytest -s)
    assert done.returncode == 0, done.stderr
    # The cells its servers cannot take are left out with the kind's own reasons.
    skipped = [line for line in done.stderr.splitlines() if "skipping tinylock" in line]
    assert sorted(skipped) == sorted([
        f"lockcompare: warning: skipping tinylock, tinylock-client x clock-jump: {NO_CLOCK}",
        f"lockcompare: warning: skipping tinylock, tinylock-client x session-kill: {NO_SESSIONS}",
    ])  # fmt: skip
    with out.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert sorted((row["backend"], row["experiment"]) for row in rows) == [
        ("tinylock", "baseline"), ("tinylock-client", "baseline"),
    ]  # fmt: skip
    for row in rows:
        assert row["lock_servers"] == "tinylock", row["lock_servers"]
        assert row["server_version"].startswith("tinylock 1.0 + "), row["server_version"]  # asked of its kind
        # Judged (a verdict about the lock, whichever: on a loaded machine a 100 ms lease may lapse).
        assert row["verdict"] != "unknown" and not row["problem"], (row["verdict"], row["problem"])
    # Its own servers were the lock nodes (one per trial run side by side: the kind's LockNodes default;
    # a timing-marked trial that matrix ran again at its end took a cluster from the pool, a new one or
    # one a trial had left healthy), and none is left.
    traced = _traced(tmp_path)
    reruns = sum(RERUN_NOTE in row["note"] for row in rows)
    assert {name for _, name in traced} == {"tinylock-node0"}, traced
    assert len(rows) <= len(traced) <= len(rows) + reruns, (traced, reruns)
    assert [pid for pid, _ in traced if process_alive(pid)] == []


@pytest.mark.full
def test_evaluate_gives_the_plugin_protocols_external_client_a_report_card(tmp_path: Path) -> None:
    """The external client's manifest, given by its path, on the plug-in kind's servers: the battery
    and the experiments run, and the card judges the experiments' rows, which carry the manifest's
    name (not the path it was given by). The card's search (12 s under --quick, and the client's own
    start per trial) is left out: what is checked here is the protocol's way through battery and rows;
    the card's search is test_explore_real's (test_the_cards_search_catches_the_careless_lock_under_pauses)."""
    done = _lockcompare(tmp_path, "evaluate", str(MANIFEST), "--quick", "--against", "single", "--search-budget", "0",
                        "--out", str(tmp_path / "card.csv"), timeout_s=540)  # fmt: skip
    print(done.stdout, done.stderr, sep="\n")
    assert done.returncode == 0, done.stderr
    assert f"Report card: {MANIFEST}" in done.stdout
    assert "PASS         refuses a second client while held" in done.stdout  # the battery, on its servers
    assert "PASS         mutual exclusion with a correct TTL (baseline)" in done.stdout  # its rows, judged
    assert "no baseline trial in the results" not in done.stdout
    assert "Verdict: every claimed property holds" in done.stdout
    with (tmp_path / "card.csv").open(newline="") as fh:
        rows = [row for row in csv.DictReader(fh) if row["backend"] == "tinylock-client"]
    assert rows and {row["lock_servers"] for row in rows} == {"tinylock"}
    assert {row["backend_source"] for row in rows} == {str(MANIFEST)}
    traced = _traced(tmp_path)
    assert {name for _, name in traced} >= {"tinylock-node0"}
    assert [pid for pid, _ in traced if process_alive(pid)] == []
