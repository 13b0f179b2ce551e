"""The settled reproduction's plan (issue 55): which cells run, how many trials, in which part, which
cells are left out and why, and how long it should take — printed in seconds, nothing started.

    python scripts/reproduction_plan.py                  # the listing (what `reproduction.sh --dry-run` prints)
    python scripts/reproduction_plan.py --parts          # the parts' names, in the order they run
    python scripts/reproduction_plan.py --args PART      # that part's `lockcompare matrix` options, one a line
    python scripts/reproduction_plan.py --rerun-args     # the marked trials' reruns, for the run's other matrices

Every registered backend x every catalogue experiment, planned by the matrix's own planner
(runner/plan.py): the cells a backend cannot take, or whose fault can never be aimed at its lock
(etcd's Go client x holder-minority: its client is connected to every member, the trait
``connects_to_every_node``), are left out there, each with its reason — printed here as the run
will print them. The cells that decide the argument run ``--until-settled``: every role experiment
(a fault aimed by role: leader-crash, leader-freeze, leader-isolated, holder-minority and their
renewing variants), failover and renewal-cut x every backend that takes them; client-pause,
node-restart, clock-jump and bare-majority x the Redis headline locks. Every other cell: 5 trials.
A matrix run is one set of backends x one set of experiments, so the cells go in four parts (two
settled, two fixed), all into the one results file, one after another.

The estimate reads a previous reproduction (``--previous``; the committed one by default, else the
newest under results/archive/): each cell's mean trial wall time there (an unseen cell: its
experiment's mean, else the mean of all), the trials a settled cell should take (a cell that was
unsafe there: its first round; else as many as a clean cell needs at the settle target), its share
of timing-marked trials (run again at the end of each part or round, :data:`RERUN_JOBS` at once), and the
ratio of CPU to trial wall time from its floor line (results/derived/reproduction-floor.txt). The
floor is runner/floor.py's: max(Σ trial wall / jobs, CPU / cores); the run's target is 1.25 x it.

For a check of the script on a tiny scale (never for the committed run, and the listing says so):
``REPRODUCTION_BACKENDS`` / ``REPRODUCTION_EXPERIMENTS`` (comma lists) keep only those of the plan,
``REPRODUCTION_TRIALS`` / ``REPRODUCTION_MAX_TRIALS`` change the trials, and reproduction.sh adds
``REPRODUCTION_MATRIX_OPTIONS`` (e.g. ``--time-scale 0.1``) to every matrix it runs.
"""

from __future__ import annotations

import argparse
import csv
import functools
import logging
import os
import re
import statistics
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from lockcompare.analysis.settle import DEFAULT_TARGET, UNSAFE, cell_state, trials_to_settle
from lockcompare.backends import registered_names
from lockcompare.cli.settle import DEFAULT_MAX_TRIALS
from lockcompare.errors import LockcompareError
from lockcompare.runner.plan import plan_matrix
from lockcompare.scenario.experiments import EXPERIMENTS
from lockcompare.scenario.parsing import Overrides

#: Trials per cell: a fixed cell's, and a settled cell's first round; a settled cell's most.
TRIALS = int(os.environ.get("REPRODUCTION_TRIALS", "5"))
MAX_TRIALS = int(os.environ.get("REPRODUCTION_MAX_TRIALS", str(DEFAULT_MAX_TRIALS)))
#: A tiny check's restriction of the plan (the module docstring); empty: everything.
ONLY_BACKENDS = tuple(filter(None, os.environ.get("REPRODUCTION_BACKENDS", "").split(",")))
ONLY_EXPERIMENTS = tuple(filter(None, os.environ.get("REPRODUCTION_EXPERIMENTS", "").split(",")))
#: Trials run at once (the matrix's --jobs): the committed reproduction's.
JOBS = 16
#: Every part runs all its timing-marked trials again at its end (a settled part: after each round),
#: up to the matrix's bound on --rerun-marked: at most 1% of the committed trials may stay marked,
#: and a --jobs 16 round marks a tenth or more of its role and failover trials.
RERUN_MARKED = 1000
#: ...this many at once, none of the part's other trials beside them: a rerun among a few is rarely
#: marked again, and alone they would cost the whole sum of their walls (docs/sentinel.md,
#: results/derived/rerun-jobs.txt).
RERUN_JOBS = 5
#: Beside the role experiments: the other experiments whose cells decide the argument for every backend.
DECIDING_FOR_ALL = ("failover", "renewal-cut")
#: The Redis headline: these experiments decide the argument for these backends.
HEADLINE_EXPERIMENTS = ("client-pause", "node-restart", "clock-jump", "bare-majority")
HEADLINE_BACKENDS = ("redlock", "single", "fenced", "pottery", "node-redlock")
#: How far above its floor the run may go (issue 55).
FLOOR_TARGET = 1.25


@dataclass(frozen=True)
class Part:
    name: str
    backends: tuple[str, ...]
    experiments: tuple[str, ...]
    settled: bool

    def args(self) -> list[str]:
        """Its `lockcompare matrix` options (besides --out, --resume and --jobs, which the script gives)."""
        args = ["--backends", ",".join(self.backends), "--experiments", ",".join(self.experiments)]
        args += ["--trials", str(TRIALS)]
        args += rerun_args()
        return [*args, "--until-settled", "--max-trials", str(MAX_TRIALS)] if self.settled else args


def rerun_args() -> list[str]:
    """Every timing-marked trial of a matrix run again at its end, :data:`RERUN_JOBS` at once."""
    return ["--rerun-marked", str(RERUN_MARKED), "--rerun-jobs", str(RERUN_JOBS)]


@functools.cache
def role_experiments() -> tuple[str, ...]:
    """The catalogue's experiments with a step aimed by role (nodes=leader, followers:K, holder-member)."""
    roles = []
    for name in EXPERIMENTS:
        specs = plan_quietly(backends=("etcd",), experiments=(name,), trials=1)
        if any(s.nodes is not None and s.nodes.by_role for spec in specs for s in spec.schedule.written.steps):
            roles.append(name)
    return tuple(roles)


def plan_quietly(*, backends: tuple[str, ...], experiments: tuple[str, ...], trials: int) -> list:
    """plan_matrix's specs, its warnings (the cells left out) kept from the terminal; [] if nothing is left."""
    logger = logging.getLogger("lockcompare")
    level, logger.level = logger.level, logging.ERROR
    try:
        return plan_matrix(
            backends=list(backends), experiments=list(experiments), trials=trials, overrides=Overrides(),
            node_count=None,
        )  # fmt: skip
    except LockcompareError:
        return []
    finally:
        logger.level = level


@functools.cache
def parts() -> list[Part]:
    """The four parts, in the order they run (a part left empty by a tiny check's restriction: none)."""
    backends = tuple(b for b in registered_names() if not ONLY_BACKENDS or b in ONLY_BACKENDS)
    experiments = tuple(e for e in EXPERIMENTS if not ONLY_EXPERIMENTS or e in ONLY_EXPERIMENTS)
    deciding = tuple(e for e in (*role_experiments(), *DECIDING_FOR_ALL) if e in experiments)
    headline = tuple(e for e in HEADLINE_EXPERIMENTS if e not in deciding and e in experiments)
    headline_backends = tuple(b for b in HEADLINE_BACKENDS if b in backends)
    rest = tuple(e for e in experiments if e not in deciding and e not in headline)
    others = tuple(b for b in backends if b not in HEADLINE_BACKENDS)
    every = [
        Part("settled-roles", backends, deciding, settled=True),
        Part("settled-headline", headline_backends, headline, settled=True),
        Part("fixed", backends, rest, settled=False),
        Part("fixed-headline-others", others, headline, settled=False),
    ]
    return [part for part in every if part.backends and part.experiments and planned(part)[0]]


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@functools.cache
def planned(part: Part) -> tuple[list, list[str]]:
    """The part's kept trials (its first round for a settled part) and the planner's left-out lines
    ([] and the reason when the planner leaves nothing)."""
    handler, logger = _Lines(), logging.getLogger("lockcompare")
    logger.addHandler(handler)
    propagate, logger.propagate = logger.propagate, False
    try:
        specs = plan_matrix(
            backends=list(part.backends), experiments=list(part.experiments), trials=TRIALS, overrides=Overrides(),
            node_count=None,
        )  # fmt: skip
    except LockcompareError as exc:
        return [], [*handler.lines, str(exc)]
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate
    return specs, handler.lines


@dataclass(frozen=True)
class Previous:
    """What a previous reproduction says of each cell (the module docstring)."""

    path: Path
    rows: dict[tuple[str, str], list[dict[str, str]]]
    cpu_per_wall: float | None

    @classmethod
    def read(cls, path: Path, floor_file: Path) -> Previous:
        rows: dict[tuple[str, str], list[dict[str, str]]] = defaultdict(list)
        with path.open(newline="") as f:
            for row in csv.DictReader(f):
                rows[(row["backend"], row["experiment"])].append(row)
        ratio = None
        text = floor_file.read_text() if floor_file.exists() else ""
        found = re.search(r"Σ trial wall ([\d.]+) s .*?CPU used ([\d.]+) s", text)
        if found:
            ratio = float(found[2]) / float(found[1])
        return cls(path=path, rows=dict(rows), cpu_per_wall=ratio)

    def mean_wall(self, cell: tuple[str, str]) -> float:
        walls = [float(r["wall_s"]) for r in self.rows.get(cell, ())]
        if not walls:
            walls = [float(r["wall_s"]) for key, rows in self.rows.items() if key[1] == cell[1] for r in rows]
        if not walls:
            walls = [float(r["wall_s"]) for rows in self.rows.values() for r in rows]
        return statistics.fmean(walls) if walls else 0.0

    def settled_trials(self, cell: tuple[str, str]) -> int:
        rows = self.rows.get(cell, [])
        if rows and cell_state(" × ".join(cell), rows, target=DEFAULT_TARGET).status == UNSAFE:
            return TRIALS
        return max(TRIALS, min(MAX_TRIALS, trials_to_settle(DEFAULT_TARGET)))

    def marked_share(self, cell: tuple[str, str]) -> float:
        rows = self.rows.get(cell, [])
        return sum(r["timing_marked"] == "true" for r in rows) / len(rows) if rows else 0.0


def previous_run(given: str | None) -> Previous | None:
    if given is not None:
        path = Path(given)
    elif Path("results/reproduction.csv").exists():
        path = Path("results/reproduction.csv")
    else:
        found = sorted(Path("results/archive").glob("*/reproduction.csv"), key=lambda p: p.stat().st_mtime)
        if not found:
            return None
        path = found[-1]
    floor = Path("results/derived/reproduction-floor.txt")
    if path.parent.name != "results":  # an archived run keeps its derived files beside it, if any
        floor = next(iter(path.parent.glob("**/reproduction-floor.txt")), floor)
    return Previous.read(path, floor)


def _duration(seconds: float) -> str:
    minutes = round(seconds / 60)
    return f"{minutes // 60} h {minutes % 60:02d} min" if minutes >= 60 else f"{minutes} min"


def listing(previous: Previous | None) -> list[str]:
    cores = os.cpu_count() or 1
    lines, left_out = [], []
    total_trials, total_floor, total_reruns, cells_kept = 0, 0.0, 0.0, 0
    for part in parts():
        specs, skipped = planned(part)
        left_out += skipped
        cells = sorted({(s.backend, s.experiment) for s in specs})
        cells_kept += len(cells)
        how = (
            f"--until-settled: {TRIALS} trial(s) a cell first, at most {MAX_TRIALS} (a clean cell needs "
            f"{trials_to_settle(DEFAULT_TARGET)} observed at the {DEFAULT_TARGET:.0%} target)"
            if part.settled
            else f"{TRIALS} trial(s) a cell, its marked ones run again at its end, {RERUN_JOBS} at once"
        )
        lines.append(f"part {part.name}: {len(cells)} cells, {how}")
        by_experiment: dict[str, list[str]] = defaultdict(list)
        for backend, experiment in cells:
            by_experiment[experiment].append(backend)
        lines += [f"    {experiment}: {', '.join(names)}" for experiment, names in by_experiment.items()]
        if previous is None:
            low = len(cells) * TRIALS
            high = len(cells) * (MAX_TRIALS if part.settled else TRIALS)
            lines.append(
                f"  trials: {low}" + (f" to {high}" if high != low else "") + " (no previous run to estimate from)"
            )
            total_trials += low
            continue
        counts = {c: previous.settled_trials(c) if part.settled else TRIALS for c in cells}
        wall = sum(n * previous.mean_wall(c) for c, n in counts.items())
        cpu = wall * previous.cpu_per_wall / cores if previous.cpu_per_wall is not None else 0.0
        longest = max((previous.mean_wall(c) for c in cells), default=0.0)
        floor = max(wall / JOBS, cpu, longest)
        reruns = sum(n * previous.marked_share(c) for c, n in counts.items())
        rerun_s = sum(n * previous.marked_share(c) * previous.mean_wall(c) for c, n in counts.items()) / RERUN_JOBS
        expected = sum(counts.values())
        lines.append(
            f"  trials expected {expected} (at most {len(cells) * (MAX_TRIALS if part.settled else TRIALS)});"
            f" Σ trial wall ~{_duration(wall)}; floor ~{_duration(floor)} = max(Σ / {JOBS} jobs, CPU ~"
            f"{_duration(cpu)} on {cores} cores, longest ~{longest:.0f} s); marked trials run again "
            f"{RERUN_JOBS} at once: ~{reruns:.0f}, ~{_duration(rerun_s)}"
        )
        total_trials += expected
        total_floor += floor
        total_reruns += rerun_s
    lines.append(f"left out by the planner ({len(left_out)} line(s), as the run prints them):")
    lines += [f"    {line}" for line in left_out]
    summary = f"in all: {cells_kept} cells, ~{total_trials} trials"
    if ONLY_BACKENDS or ONLY_EXPERIMENTS or TRIALS != 5 or MAX_TRIALS != DEFAULT_MAX_TRIALS:
        summary = "A TINY CHECK, NOT THE REPRODUCTION (REPRODUCTION_* set); " + summary
    if previous is not None:
        summary += (
            f"; floor ~{_duration(total_floor)}, within {FLOOR_TARGET}x: ~{_duration(FLOOR_TARGET * total_floor)}, "
            f"plus ~{_duration(total_reruns)} of marked trials run again (estimated from {previous.path}: "
            f"its cells' mean trial wall, unsafe cells settling in their first round, its marked share"
            + (
                ", its CPU per trial-wall second"
                if previous.cpu_per_wall is not None
                else ", no floor line: CPU not estimated"
            )
            + ")"
        )
    return [*lines, summary]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", action="store_true", help="the parts' names, in order")
    parser.add_argument("--args", metavar="PART", help="that part's matrix options, one a line")
    parser.add_argument("--rerun-args", action="store_true", help="the reruns' matrix options, one a line")
    parser.add_argument("--previous", metavar="CSV", help="the run to estimate from (default: the committed one)")
    options = parser.parse_args(argv)
    if options.parts:
        print("\n".join(part.name for part in parts()))
        return 0
    if options.rerun_args:
        print("\n".join(rerun_args()))
        return 0
    if options.args is not None:
        chosen = [part for part in parts() if part.name == options.args]
        if not chosen:
            print(
                f"reproduction_plan.py: no part {options.args!r} ({', '.join(p.name for p in parts())})",
                file=sys.stderr,
            )
            return 2
        print("\n".join(chosen[0].args()))
        return 0
    try:
        previous = previous_run(options.previous)
    except (OSError, KeyError, ValueError) as exc:
        print(f"reproduction_plan.py: --previous: cannot read it: {exc}", file=sys.stderr)
        return 2
    print("\n".join(listing(previous)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
