"""Print what a matrix would run, without running it: its trials, their schedules, the cells the plan
leaves out with the reason, and an estimate of its wall time.

    python scripts/plan_cells.py --backends etcd --experiments renewal-pause,renewal-cut --trials 2
    python scripts/plan_cells.py ... --measured results/catalogue-51.csv --jobs 4

The estimate is each trial's span at its cell's mean ``wall_s`` in the ``--measured`` files (a cell
they do not hold: the mean of its experiment there, else its span from the plan: every
worker's rounds of work, one at a time, plus its pauses), summed, divided by ``--jobs`` trials at
once, and never less than the longest trial. A first look, not a promise: a loaded machine runs
slower, and the timing-marked trials a matrix reruns come on top.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from lockcompare.analysis.results import read_results
from lockcompare.errors import LockcompareError
from lockcompare.runner.matrix import plan_matrix
from lockcompare.scenario.trialspec import Overrides, TrialSpec


def planned_span_s(spec: TrialSpec) -> float:
    """Every worker's planned rounds of work one after another, with the pauses: a trial's least span."""
    rounds = spec.rounds * spec.workers
    return (rounds * spec.work_ms + spec.rounds * spec.pause_ms) / 1000


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", required=True)
    parser.add_argument("--experiments", required=True)
    parser.add_argument("--trials", type=int, default=2)
    parser.add_argument("--time-scale", type=float, default=1.0)
    parser.add_argument("--fence", default=None)
    parser.add_argument("--work-ms", type=float, default=None)
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--jobs", type=int, default=4)
    parser.add_argument("--measured", type=Path, action="append", default=[])
    args = parser.parse_args(argv)
    logging.basicConfig(format="lockcompare: warning: %(message)s", level=logging.WARNING)
    settings = {"time_scale": args.time_scale, "fence": args.fence, "work_ms": args.work_ms, "rounds": args.rounds}
    try:
        specs = plan_matrix(
            backends=args.backends.split(","),
            experiments=args.experiments.split(","),
            trials=args.trials,
            overrides=Overrides(**{k: v for k, v in settings.items() if v is not None}),
            node_count=None,
        )
    except LockcompareError as exc:
        print(f"plan_cells: {exc}", file=sys.stderr)
        return 1
    walls: dict[tuple[str, str], list[float]] = defaultdict(list)
    by_experiment: dict[str, list[float]] = defaultdict(list)
    for path in args.measured:
        for row in read_results(path):
            if abs(float(row["time_scale"]) - args.time_scale) < 1e-9:
                walls[(row["backend"], row["experiment"])].append(row["wall_s"])
                by_experiment[row["experiment"]].append(row["wall_s"])
    total = longest = 0.0
    cells: dict[tuple[str, str], list[TrialSpec]] = defaultdict(list)
    for spec in specs:
        cells[(spec.backend, spec.experiment)].append(spec)
    for (backend, experiment), planned in cells.items():
        spec = planned[0]
        seen = walls.get((backend, experiment)) or by_experiment.get(experiment)
        span = statistics.mean(seen) if seen else planned_span_s(spec)
        source = "measured" if walls.get((backend, experiment)) else ("its experiment's" if seen else "planned")
        total += span * len(planned)
        longest = max(longest, span)
        timings = f"ttl {spec.ttl_ms} ms, work {spec.work_ms:g} ms, rounds {spec.rounds}"
        print(f"{backend} x {experiment}: {len(planned)} trial(s), ~{span:.0f} s each ({source}); {timings}; "
              f"faults: {spec.faults or '(none)'}")  # fmt: skip
    wall = max(total / max(args.jobs, 1), longest)
    print(f"{len(specs)} trials in {len(cells)} cells; sum of spans ~{total / 60:.0f} min; "
          f"at {args.jobs} at once ~{wall / 60:.0f} min wall")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
