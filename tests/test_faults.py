"""Real freezes: SIGSTOP stops the whole process, a timer continues it, and every freeze heals."""

from __future__ import annotations

import multiprocessing
import subprocess
import time
from pathlib import Path

from typer.testing import CliRunner

from lockcompare.analysis.history import load
from lockcompare.cli import app
from lockcompare.faults.freeze import Freezer


def state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]


def wait_for_state(pid: int, wanted: str, *, timeout_s: float = 2.0) -> str:
    """A signal is delivered asynchronously: poll until the process shows ``wanted`` (or time out)."""
    deadline = time.monotonic() + timeout_s
    while (current := state(pid)) != wanted and time.monotonic() < deadline:
        time.sleep(0.005)
    return current


def test_freeze_stops_the_process_and_thaws_it_after_the_pause() -> None:
    proc = subprocess.Popen(["sleep", "30"])
    ours, theirs = multiprocessing.Pipe()
    freezer = Freezer()
    try:
        freezer.freeze(pid=proc.pid, conn=ours, pause_s=0.3)
        assert wait_for_state(proc.pid, "T") == "T"
        assert theirs.poll(2.0), "no thaw message"
        assert theirs.recv()[0] == "thawed"
        assert wait_for_state(proc.pid, "S") == "S"
    finally:
        freezer.thaw_all()
        proc.kill()
        proc.wait()


def test_thaw_all_heals_a_freeze_that_is_still_running() -> None:
    proc = subprocess.Popen(["sleep", "30"])
    ours, _ = multiprocessing.Pipe()
    freezer = Freezer()
    try:
        freezer.freeze(pid=proc.pid, conn=ours, pause_s=60)
        assert wait_for_state(proc.pid, "T") == "T"
        freezer.thaw_all()
        assert wait_for_state(proc.pid, "S") == "S"
    finally:
        proc.kill()
        proc.wait()


def test_a_trial_with_real_freezes(tmp_path: Path) -> None:
    out = tmp_path / "freeze.csv"
    result = CliRunner().invoke(
        app,
        ["run", "--backend", "fenced", "--experiment", "client-pause", "--pause-how", "sigstop",
         "--rounds", "3", "--time-scale", "0.1", "--out", str(out)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    history = load(next(tmp_path.glob("freeze.histories/*.jsonl.gz")))
    pauses = [e for e in history if e["kind"] == "pause"]
    assert len(pauses) == 3 and {e["how"] for e in pauses} == {"sigstop"}
    assert all(e["t1"] - e["t0"] >= 120e6 for e in pauses)  # frozen at least the 120 ms asked for
