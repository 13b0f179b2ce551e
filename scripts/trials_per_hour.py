#!/usr/bin/env python3
"""Trials per hour against hosts, on paper (issue 30): the model with this machine's measured numbers.

A trial keeps a host's CPUs busy for part of its wall time; the scheduler runs trials side by side
until they would keep more than ``cpu_share`` (0.75) of the CPUs busy, and never more than
``--jobs``. So, per host::

    at once      = min(jobs, cores × cpu_share × trial_s / cpu_s_per_trial)
    trials/hour  = at once × 3600 / trial_s

and hosts add up (the coordinator only writes rows: the Dask path's cost per trial is measured by
scripts/dask_demo.py). The inputs come from committed files, each named in the output:

- ``trial_s``: the mean ``wall_s`` of a run's rows (one kind of trial); ``jobs``: its largest
  ``jobs_concurrent``; ``cores``: its rows' ``cpu_count``; ``measured``: its rows divided by its
  span (first start to last end), the rate this host reached;
- ``cpu_s_per_trial``: the same run's CPU time, user + sys of the matrix process and every process
  it waited for (its workers, servers, proxies), as ``/usr/bin/time -f "%e s wall, %U user %S sys"``
  printed it, divided by its rows.

Writes results/derived/trials-per-hour.csv (hosts 1, 4, 16), which docs/distributed.md renders::

    python scripts/trials_per_hour.py --run results/fencing.csv results/derived/fencing.time \\
        --run results/archive/node-clients-44abcca/node-clients.csv results/derived/node-clients.time \\
        --run results/archive/zookeeper-44abcca/zookeeper.csv results/derived/zookeeper.time
"""

from __future__ import annotations

import argparse
import csv
import re
import statistics
import sys
from pathlib import Path

from lockcompare.scenario.limits import DEFAULT_CPU_SHARE as CPU_SHARE  # the scheduler's budget

HOSTS = (1, 4, 16)


def span_s(rows: list[dict[str, str]]) -> float:
    """First trial's start to last trial's end: each row ends at started_at + wall_s."""
    from datetime import datetime

    starts = [datetime.fromisoformat(r["started_at"]).timestamp() for r in rows]
    ends = [s + float(r["wall_s"]) for s, r in zip(starts, rows, strict=True)]
    return max(ends) - min(starts)


def model(results: Path, time_file: Path) -> list[list[object]]:
    """The model's rows (one per host count) for one run: its CSV and its /usr/bin/time line."""
    with results.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    timed = re.search(r"([\d.]+) s wall, ([\d.]+) user ([\d.]+) sys", time_file.read_text())
    if not rows or timed is None:
        sys.exit(f"trials_per_hour: no rows in {results}, or no '/usr/bin/time' line in {time_file}")
    trial_s = statistics.mean(float(r["wall_s"]) for r in rows)
    jobs = max(int(r["jobs_concurrent"]) for r in rows)
    cores = int(statistics.median(int(r["cpu_count"]) for r in rows))
    cpu_s = (float(timed[2]) + float(timed[3])) / len(rows)
    at_once = min(jobs, cores * CPU_SHARE * trial_s / cpu_s)
    per_host = at_once * 3600 / trial_s
    measured = len(rows) * 3600 / span_s(rows)
    return [
        [results.name, hosts, cores, f"{trial_s:.1f}", f"{cpu_s:.2f}", jobs, f"{at_once:.1f}",
         f"{hosts * per_host:.0f}", f"{measured:.0f}"]
        for hosts in HOSTS
    ]  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--run", nargs=2, action="append", required=True, metavar=("CSV", "TIME"),
        help="a results CSV and the file holding /usr/bin/time's line for that run "
        "('W s wall, U user S sys'); repeat for several kinds of trial",
    )  # fmt: skip
    parser.add_argument("--out", type=Path, default=Path("results/derived/trials-per-hour.csv"))
    args = parser.parse_args()
    table = [row for results, time_file in args.run for row in model(Path(results), Path(time_file))]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["run", "hosts", "cores_per_host", "trial_s", "cpu_s_per_trial", "jobs", "at_once",
                         "trials_per_hour", "measured_one_host_per_hour"])  # fmt: skip
        writer.writerows(table)
    print(args.out.read_text(), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
