"""How many timing-marked trials stay marked when they run again, alone or K at once (issue 55).

    python scripts/rerun_jobs_study.py OUT_DIR K [K ...] [--runs N] > results/derived/rerun-jobs.txt

Runs, one at a time, the leader-freeze/failover matrix that marks trials at ``--jobs 16``
(docs/sentinel.md, "What marks the reproduction's trials") with ``--rerun-marked 60 --rerun-jobs K``
for each K given, ``--runs`` times each, and prints per run: the trials the first pass marked, how
many of them the reruns left marked, and the wall the reruns took (the run's own floor line). Run it
alone on the machine: it is a measurement.
"""

from __future__ import annotations

import argparse
import csv
import re
import subprocess
import sys
from pathlib import Path

BACKENDS = (
    "fenced,node-redlock,pottery,redis-py,redlock,single,single-renew,sentinel-single,zk-lock,curator-mutex,"
    "etcd-go-mutex,etcd"
)
EXPERIMENTS = "leader-freeze,failover"
JOBS = 16
TRIALS = 3
#: The run's floor line names the reruns' step (local_executor.py): "... run again[ alone] 51.0 s".
RERUN_STEP = re.compile(r"timing-marked trials run again(?: alone)? ([\d.]+) s")
WALL = re.compile(r"(\d+) trials in ([\d.]+) s wall")


def _rows(path: Path) -> list[dict[str, str]]:
    if not path.exists():
        return []
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def _marked(path: Path) -> list[dict[str, str]]:
    return [row for row in _rows(path) if row["timing_marked"] == "true"]


def one_run(out_dir: Path, *, k: int, index: int) -> str:
    out = out_dir / f"k{k}-{index}.csv"
    log = out.with_suffix(".log")
    command = [
        sys.executable, "-m", "lockcompare", "matrix", "--backends", BACKENDS, "--experiments", EXPERIMENTS,
        "--trials", str(TRIALS), "--jobs", str(JOBS), "--rerun-marked", "60", "--rerun-jobs", str(k),
        "--out", str(out),
    ]  # fmt: skip
    with log.open("w") as sink:
        code = subprocess.run(command, stdout=sink, stderr=subprocess.STDOUT, check=False).returncode
    text = log.read_text()
    first = _marked(out.with_name(out.stem + ".superseded.csv"))
    still = _marked(out)
    step = RERUN_STEP.search(text)
    wall = WALL.search(text)
    rerun_s = float(step.group(1)) if step else 0.0
    per = f"{rerun_s / len(first):5.1f} s" if first else "    -"
    return (
        f"--rerun-jobs {k}  run {index}   {wall.group(2) if wall else '?':>7} s wall   first pass marked "
        f"{len(first):2d} of {len(_rows(out))}   marked again {len(still):2d}   "
        f"reruns took {rerun_s:5.1f} s ({per} a rerun)" + (f"   exit {code}" if code else "")
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("k", type=int, nargs="+")
    parser.add_argument("--runs", type=int, default=2)
    options = parser.parse_args(argv)
    options.out_dir.mkdir(parents=True, exist_ok=True)
    git = ["git", "rev-parse", "--short=8", "HEAD"]
    revision = subprocess.run(git, check=False, capture_output=True, text=True).stdout.strip()
    print(f"# scripts/rerun_jobs_study.py at {revision}, alone on the 2-core machine, one run at a time:")
    print(f"#   lockcompare matrix --backends {BACKENDS}")
    print(f"#     --experiments {EXPERIMENTS} --trials {TRIALS} --jobs {JOBS} --rerun-marked 60 --rerun-jobs K")
    for index in range(1, options.runs + 1):
        for k in options.k:
            print(one_run(options.out_dir, k=k, index=index), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
