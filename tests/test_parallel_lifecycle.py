"""Ctrl-C and SIGTERM with several trials in flight: every worker and server stops, rows stay whole."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lockcompare.results import COLUMNS
from test_lifecycle import alive, descendants, wait_for_rows


def start_parallel_matrix(out: Path) -> subprocess.Popen[str]:
    cmd = [
        sys.executable, "-m", "lockcompare", "matrix", "--backends", "none,single,redlock", "--experiments",
        "baseline,client-pause", "--trials", "10", "--rounds", "10", "--time-scale", "0.1", "--jobs", "3",
        "--out", str(out),
    ]  # fmt: skip
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


@pytest.mark.parametrize("how", ["ctrl-c", "sigterm"])
def test_interrupting_parallel_trials_leaves_no_process_and_only_whole_rows(tmp_path: Path, how: str) -> None:
    out = tmp_path / "interrupted.csv"
    proc = start_parallel_matrix(out)
    try:
        wait_for_rows(out, proc, rows=2)
        time.sleep(0.15)  # land in the middle of the next trials
        children = descendants(proc.pid)
        servers = [pid for pid in children if b"redis-server" in Path(f"/proc/{pid}/cmdline").read_bytes()]
        assert len(servers) >= 2 * 6, "expected two clusters (5 nodes + resource each) or more at once"
        if how == "ctrl-c":
            os.killpg(proc.pid, signal.SIGINT)
        else:
            proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == (130 if how == "ctrl-c" else 143), stderr
    assert "Traceback" not in stderr
    assert stderr.strip().splitlines()[-1].startswith("lockcompare: ")
    deadline = time.monotonic() + 5
    while any(alive(pid) for pid in children) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [pid for pid in children if alive(pid)]
    with out.open(newline="") as fh:
        rows = list(csv.reader(fh))
    assert rows[0] == list(COLUMNS)
    assert len(rows) >= 3 and all(len(row) == len(COLUMNS) for row in rows[1:])
    assert len({row[2] for row in rows[1:]}) == len(rows) - 1, "each trial once"
