"""A batch of trials run whole on one host: the task the Dask executor sends (runner/dask_executor.py).

The batch runs as ``python -m lockcompare.runner.host_batch OUT.csv`` in a child process of the
Dask worker, so on that host it is an ordinary lockcompare run: its own servers, warm worker
processes and faults, this host's timing sentinel and CPU governor, its own main thread for
signals. The child asks the kernel for SIGTERM when its parent dies, so a Dask worker killed
mid-trial takes the run with it and the run still stops its servers and workers in order; its rows
never reach the coordinator, which sees the task fail (or rerun) instead. The coordinator stays the
one writer of the results file and the histories.
"""

from __future__ import annotations

import functools
import os
import pickle
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lockcompare.errors import LockcompareError, TrialError

if TYPE_CHECKING:
    from lockcompare.runner.plan import ClusterOptions
    from lockcompare.scenario.trialspec import TrialSpec


@dataclass(frozen=True, kw_only=True)
class HostBatch:
    """What one task runs: trials (already planned by the coordinator) and how."""

    specs: tuple[TrialSpec, ...]
    cluster_options: ClusterOptions
    #: Trials at once on the host; None: that host's default (four per usable CPU).
    jobs: int | None = None
    fresh_workers: bool = False


@dataclass(frozen=True, kw_only=True)
class HostRow:
    """One finished trial as the host wrote it: its results row and its gzipped history."""

    row: dict[str, Any]
    history: bytes


#: How much of the child's stderr a failed batch reports (its last lines say what went wrong).
_STDERR_TAIL = 2000


def run_batch(batch: HostBatch) -> list[HostRow]:
    """The Dask task: run ``batch`` in a child lockcompare process on this host, return its rows.

    Rows the child wrote before it failed are returned too; a child that wrote none raises
    :class:`TrialError` with the end of what it said."""
    from lockcompare.analysis.results import read_results
    from lockcompare.infra.lifecycle import die_with_parent

    # Named as lifecycle names what a process owns: a worker killed mid-batch (its scheduler gone,
    # issue 49) leaves it behind, and the next lockcompare command on this host removes it.
    with tempfile.TemporaryDirectory(prefix=f"lockcompare-p{os.getpid()}-batch-") as scratch:
        out = Path(scratch) / "batch.csv"
        child = subprocess.run(
            [sys.executable, "-m", "lockcompare.runner.host_batch", str(out)],
            input=pickle.dumps(batch),
            capture_output=True,
            preexec_fn=functools.partial(die_with_parent, signal.SIGTERM),
            check=False,
        )
        rows = read_results(out) if out.exists() else []
        if not rows and child.returncode != 0:
            said = child.stderr.decode(errors="replace").strip()[-_STDERR_TAIL:]
            raise TrialError(f"the batch failed on its host (exit {child.returncode}): {said}")
        return [HostRow(row=row, history=(out.parent / str(row["history"])).read_bytes()) for row in rows]


def main() -> int:
    from lockcompare.runner.matrix import run_planned
    from lockcompare.runner.scheduler import usable_cpus
    from lockcompare.scenario.limits import LIMITS

    out = Path(sys.argv[1])
    batch: HostBatch = pickle.loads(sys.stdin.buffer.read())  # the coordinator pickled it (as Dask does)
    jobs = batch.jobs if batch.jobs is not None else min(4 * usable_cpus(), LIMITS["jobs"][1])
    try:
        run_planned(
            list(batch.specs), out=out, cluster_options=batch.cluster_options, jobs=jobs,
            fresh_workers=batch.fresh_workers,
        )  # fmt: skip
    except LockcompareError as exc:
        print(f"lockcompare: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
