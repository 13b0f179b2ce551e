#!/usr/bin/env python3
"""The Dask executor shown end to end on this machine (issue 30): the same small matrix on the local
executor and on a Dask ``LocalCluster`` of two worker processes, cell by cell; then a Dask worker
SIGKILLed mid-matrix, and what the CSV holds afterwards.

A benchmark, not a test (tests/test_dask.py checks the same things at a smaller size): run it alone
on the machine, from a venv with ``lockcompare[dask]``::

    .venv/bin/python scripts/dask_demo.py --out-dir /tmp/dask-demo

Steps, each printed as it goes:

1. ``matrix`` with the local executor, then with ``--dask`` (the same options and seed), each timed;
   ``lockcompare compare`` of the two files and the verdicts per cell side by side; the Dask path's
   overhead per trial (wall time difference divided by the trials).
2. A matrix on the cluster with one worker SIGKILLed while it runs a batch: Dask's nanny restarts
   the worker and the scheduler runs the batch again; the CSV has one row per trial, each noted as a
   rerun.
3. The same with the scheduler told to give up on a task at its first failure
   (``distributed.scheduler.allowed-failures`` 0): the killed batch's trials have no row (one warning
   names them), no other row is lost or doubled, and ``--resume`` runs exactly the missing ones.
"""

from __future__ import annotations

import argparse
import collections
import csv
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from lockcompare.infra.procgroup import command_line, process_table

CELLS = ["--backends", "single,fenced,redlock", "--experiments", "baseline,client-pause", "--trials", "3",
         "--time-scale", "0.2"]  # fmt: skip


# Two cells, so two batches on the two workers: one is killed, the other's rows must arrive untouched.
KILLED_CELLS = ("matrix", "--backends", "single", "--experiments", "baseline,client-pause", "--trials", "3",
                "--time-scale", "0.5", "--jobs", "1")  # fmt: skip


def lockcompare(*args: str) -> subprocess.CompletedProcess[str]:
    """The CLI of the interpreter running this script (its venv), output shown and kept."""
    command = [sys.executable, "-m", "lockcompare", *args]
    print("$ lockcompare " + " ".join(args), flush=True)
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    print(done.stdout + done.stderr, flush=True)
    return done


def rows(path: Path) -> list[dict[str, str]]:
    """A results file's rows; none when the run wrote no file (every batch of it failed)."""
    if not path.exists():
        return []
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def verdicts(path: Path) -> dict[tuple[str, str], collections.Counter[str]]:
    cells: dict[tuple[str, str], collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for row in rows(path):
        cells[(row["backend"], row["experiment"])][row["verdict"]] += 1
    return cells


def timed_matrix(*args: str) -> float:
    started = time.monotonic()
    done = lockcompare("matrix", *args)
    if done.returncode != 0:
        sys.exit(f"dask_demo: matrix exited {done.returncode}")
    return time.monotonic() - started


def batch_worker(pids: set[int]) -> int | None:
    """The Dask worker (of ``pids``) whose child runs a host batch right now, if any."""
    for proc in process_table().values():
        if proc.ppid in pids and "lockcompare.runner.host_child" in command_line(proc.pid):
            return proc.ppid
    return None


def kill_a_busy_worker(pids: set[int], killed: list[int], *, after_s: float) -> None:
    """SIGKILL the first worker seen running a batch, ``after_s`` into it (its trials under way)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        victim = batch_worker(pids)
        if victim is not None:
            time.sleep(after_s)
            os.kill(victim, signal.SIGKILL)
            killed.append(victim)
            print(f"dask_demo: SIGKILLed Dask worker pid {victim} while it ran a batch", flush=True)
            return
        time.sleep(0.02)


def show_rows(path: Path) -> None:
    found = rows(path)
    per_trial = collections.Counter(r["trial_id"] for r in found)
    print(f"{path.name}: {len(found)} rows, {len(per_trial)} distinct trial ids, "
          f"most rows for one trial id: {max(per_trial.values(), default=0)}")  # fmt: skip
    for r in found:
        print(f"  {r['trial_id']}  {r['verdict']:<20} note: {r['note'] or '-'}")


def killed_matrix(address: str, out: Path, pids: set[int]) -> list[int]:
    killed: list[int] = []
    killer = threading.Thread(target=kill_a_busy_worker, args=(pids, killed), kwargs={"after_s": 1.0})
    killer.start()
    lockcompare(*KILLED_CELLS, "--dask", address, "--out", str(out))
    killer.join()
    return killed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out-dir", type=Path, required=True)
    parser.add_argument("--steps", default="1,2,3", help="which steps to run (default 1,2,3)")
    args = parser.parse_args()
    steps = set(args.steps.split(","))
    import dask
    import distributed

    out = args.out_dir
    out.mkdir(parents=True, exist_ok=True)
    if steps == {"1", "2", "3"} and any(out.iterdir()):
        sys.exit(f"dask_demo: {out} is not empty")

    def local_cluster() -> distributed.LocalCluster:
        return distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                        host="127.0.0.1")  # fmt: skip

    differ = 0
    if "1" in steps:
        differ = same_matrix(out, local_cluster)
    if "2" in steps:
        print("\n== 2. a Dask worker SIGKILLed mid-matrix (the scheduler reruns its batch)", flush=True)
        with local_cluster() as cluster, distributed.Client(cluster.scheduler_address) as client:
            pids = set(client.run(os.getpid).values())
            killed_matrix(cluster.scheduler_address, out / "killed.csv", pids)
        show_rows(out / "killed.csv")
    if "3" in steps:
        print("\n== 3. the same with allowed-failures 0 (the killed batch is given up), then --resume", flush=True)
        with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
            with local_cluster() as cluster, distributed.Client(cluster.scheduler_address) as client:
                pids = set(client.run(os.getpid).values())
                killed_matrix(cluster.scheduler_address, out / "given-up.csv", pids)
                show_rows(out / "given-up.csv")
                lockcompare(*KILLED_CELLS, "--dask", cluster.scheduler_address, "--out", str(out / "given-up.csv"),
                            "--resume")  # fmt: skip
        show_rows(out / "given-up.csv")
    return 1 if differ else 0


def same_matrix(out: Path, local_cluster) -> int:  # type: ignore[no-untyped-def]
    print("== 1. the same matrix, local executor and a LocalCluster of two worker processes", flush=True)
    with local_cluster() as cluster:
        local_s = timed_matrix(*CELLS, "--out", str(out / "local.csv"))
        dask_s = timed_matrix(*CELLS, "--dask", cluster.scheduler_address, "--out", str(out / "dask.csv"))
    lockcompare("compare", str(out / "local.csv"), str(out / "dask.csv"))
    local_v, dask_v = verdicts(out / "local.csv"), verdicts(out / "dask.csv")
    differ = 0
    print("| backend | experiment | local | dask | same |\n|---|---|---|---|---|")
    for cell in sorted(set(local_v) | set(dask_v)):
        same = set(local_v[cell]) == set(dask_v[cell])
        differ += not same
        say = lambda c: ", ".join(f"{n}× {v}" for v, n in sorted(c.items()))  # noqa: E731
        print(f"| {cell[0]} | {cell[1]} | {say(local_v[cell])} | {say(dask_v[cell])} | {'yes' if same else 'no'} |")
    trials = len(rows(out / "local.csv"))
    print(f"cells whose verdicts differ: {differ}; wall: local {local_s:.1f} s, dask {dask_s:.1f} s for {trials} "
          f"trials each: the Dask path's overhead {(dask_s - local_s) / trials:+.2f} s per trial")  # fmt: skip

    return differ


if __name__ == "__main__":
    sys.exit(main())
