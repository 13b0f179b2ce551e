"""Who a helper process belongs to, and its end (infra/procgroup.py, issue 48.5): a view made for a
trial names only processes started since that trial began, and ending a trial's helpers never
reaches a process that merely reuses a pid. Pure tables built by hand, and one real ``sleep``."""

from __future__ import annotations

import subprocess
import time

from lockcompare.infra.procgroup import Proc, boot_ticks, end_processes, escaped_helpers, read_stat

TRIAL_BEGAN = 5_000  # ticks since boot


def _table() -> dict[int, Proc]:
    return {
        10: Proc(pid=10, ppid=1, pgid=10, state="S", comm="worker", start_ticks=100),
        11: Proc(pid=11, ppid=10, pgid=11, state="S", comm="last-trials-helper", start_ticks=TRIAL_BEGAN - 300),
        12: Proc(pid=12, ppid=10, pgid=12, state="S", comm="this-trials-helper", start_ticks=TRIAL_BEGAN + 40),
        13: Proc(pid=13, ppid=10, pgid=10, state="S", comm="in-group", start_ticks=TRIAL_BEGAN + 50),
    }


def test_a_helper_started_before_the_trial_is_not_named_in_it() -> None:
    table = _table()
    assert [p.comm for p in escaped_helpers(10, table)] == ["last-trials-helper", "this-trials-helper"]
    assert [p.comm for p in escaped_helpers(10, table, since_ticks=TRIAL_BEGAN)] == ["this-trials-helper"]


def test_a_helper_started_in_the_trials_first_tick_is_the_trials() -> None:
    table = {**_table(), 12: Proc(pid=12, ppid=10, pgid=12, state="S", comm="at-once", start_ticks=TRIAL_BEGAN)}
    assert [p.comm for p in escaped_helpers(10, table, since_ticks=TRIAL_BEGAN)] == ["at-once"]


def test_boot_ticks_is_the_clock_of_a_processes_start_time() -> None:
    before = boot_ticks()
    child = subprocess.Popen(["sleep", "30"])
    try:
        started = read_stat(child.pid)
        assert started is not None
        assert before - 1 <= started.start_ticks <= boot_ticks() + 1  # ticks: 10 ms apart
    finally:
        child.kill()
        child.wait()


def test_ending_a_helper_spares_a_process_that_reuses_its_pid() -> None:
    child = subprocess.Popen(["sleep", "30"])
    try:
        seen = read_stat(child.pid)
        assert seen is not None
        impostor = Proc(
            pid=seen.pid, ppid=seen.ppid, pgid=seen.pgid, state="S", comm="x", start_ticks=seen.start_ticks - 1
        )
        assert end_processes([impostor]) == []  # same pid, another start: another process
        time.sleep(0.05)
        assert child.poll() is None
        assert end_processes([seen]) == [child.pid]
        assert child.wait(timeout=5) == -9
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
