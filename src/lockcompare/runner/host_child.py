"""The child process of a Dask task (runner/host_batch.py): the batch's trials as a local run.

``python -m lockcompare.runner.host_child OUT.csv`` reads the pickled :class:`HostBatch` on stdin
and runs its planned trials with :func:`~lockcompare.runner.matrix.run_planned` into ``OUT.csv``
(the task returns the rows and histories to the coordinator). A module of its own, so that the
Dask executor, which the matrix chooses, never imports the matrix back.
"""

from __future__ import annotations

import pickle
import sys
from pathlib import Path

from lockcompare.errors import LockcompareError
from lockcompare.runner.host_batch import HostBatch
from lockcompare.runner.matrix import run_planned
from lockcompare.scenario.limits import LIMITS, usable_cpus


def main() -> int:
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
