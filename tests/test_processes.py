"""process_alive (lockcompare/processes.py): the one answer to "does this pid still run", which
decides whether a dead run's temporary directories and a killed rendering's staging folder go."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from lockcompare.processes import process_alive


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]


def test_a_running_child_is_alive_its_zombie_and_its_reaped_pid_are_not() -> None:
    child = subprocess.Popen(["sleep", "30"])
    try:
        assert process_alive(child.pid)
        child.kill()
        deadline = time.monotonic() + 10
        while _state(child.pid) != "Z" and time.monotonic() < deadline:  # exited, not yet reaped
            time.sleep(0.01)
        assert _state(child.pid) == "Z"
        assert not process_alive(child.pid)
    finally:
        child.kill()
        child.wait()
    assert not process_alive(child.pid)


def test_this_process_is_alive() -> None:
    assert process_alive(os.getpid())
