"""Nothing outlives a run: Ctrl-C and SIGTERM stop servers and workers and leave only whole CSV rows."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lockcompare.analysis.results import COLUMNS


def descendants(pid: int) -> set[int]:
    """Every process below ``pid``, from /proc (children of children included)."""
    found: set[int] = set()
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        try:
            tasks = Path(f"/proc/{parent}/task").iterdir()
            children = {int(c) for t in tasks for c in (t / "children").read_text().split()}
        except OSError:
            continue
        frontier.extend(children - found)
        found |= children
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


def start_matrix(out: Path) -> subprocess.Popen[str]:
    cmd = [
        sys.executable, "-m", "lockcompare", "matrix", "--backends", "none,single", "--experiments", "baseline",
        "--trials", "20", "--rounds", "10", "--time-scale", "0.1", "--out", str(out),
    ]  # fmt: skip
    # A session of its own, so that "Ctrl-C" can go to its whole process group as a terminal's would.
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def wait_for_rows(out: Path, proc: subprocess.Popen[str], rows: int, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if out.exists() and len(out.read_text().splitlines()) > rows:
            return
        if proc.poll() is not None:
            pytest.fail(f"matrix ended early: {proc.stderr.read() if proc.stderr else ''}")
        time.sleep(0.05)
    pytest.fail("no rows appeared")


def interrupt_and_check(proc: subprocess.Popen[str], out: Path, how: str, *, children: set[int]) -> list[list[str]]:
    """Ctrl-C (to the whole process group, as a terminal sends it) or SIGTERM; then the run must
    end with its exit code and one line, no process below it may survive, and every row written
    must be whole. Returns the CSV's rows, header first."""
    try:
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
    assert all(len(row) == len(COLUMNS) for row in rows[1:])
    return rows


@pytest.mark.parametrize("how", ["ctrl-c", "sigterm"])
def test_interrupted_run_leaves_no_process_and_only_whole_rows(tmp_path: Path, how: str) -> None:
    out = tmp_path / "interrupted.csv"
    proc = start_matrix(out)
    try:
        wait_for_rows(out, proc, rows=1)
        time.sleep(0.15)  # land in the middle of a trial
        children = descendants(proc.pid)
        assert len(children) >= 6, "expected 6 redis-servers and worker processes"
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    rows = interrupt_and_check(proc, out, how, children=children)
    assert len(rows) >= 2


def test_a_port_handed_out_is_not_handed_out_again_until_released() -> None:
    # A crashed node keeps its port while nothing listens on it: a cluster started meanwhile by a
    # parallel trial must not be given that port, or the node cannot come back.
    from lockcompare.infra.spawned import _reserved_ports, free_port, release_port

    ports = [free_port() for _ in range(50)]
    try:
        assert len(set(ports)) == 50 and set(ports) <= _reserved_ports
    finally:
        for port in ports:
            release_port(port)
    assert not set(ports) & _reserved_ports
