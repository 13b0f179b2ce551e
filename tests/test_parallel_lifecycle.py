"""Ctrl-C and SIGTERM with several trials in flight: every worker and server stops, rows stay whole."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from test_lifecycle import descendants, interrupt_and_check, wait_for_rows


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
        cmdlines = {pid: Path(f"/proc/{pid}/cmdline").read_bytes() for pid in children}
        servers = [pid for pid, cmd in cmdlines.items() if b"redis-server" in cmd or b"valkey-server" in cmd]
        assert len(servers) >= 2 * 6, "expected two clusters (5 nodes + resource each) or more at once"
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    rows = interrupt_and_check(proc, out, how, children=children)
    assert len(rows) >= 3
    assert len({row[2] for row in rows[1:]}) == len(rows) - 1, "each trial once"
