#!/usr/bin/env python3
"""Run the README's main command N times and say, per run, whether it showed the lesson's pattern.

A benchmark, not a test: run it on a quiet machine (no other lockcompare run, no test suite), from
an installed virtual environment, e.g. from a clean clone::

    python3 -m venv .venv && .venv/bin/pip install -e .
    .venv/bin/python scripts/main_pattern.py --runs 10 --lockcompare .venv/bin/lockcompare

Each run is ``lockcompare matrix --time-scale 0.1 --trials 2`` (plus anything given after ``--``, e.g.
``-- --jobs 4`` to try another concurrency) with its own ``--out`` CSV. Per run it prints the wall
time, the pattern verdict and the cells holding a timing-marked trial (docs/sentinel.md); at the end,
how many runs held the pattern and how many took longer than the README's budget (90 s).

The pattern (issue 21): under client-pause, single, redlock, pottery and redis-py lose updates;
fenced loses none and rejects stale writes; under baseline every lock (every backend but the
no-lock and lock-free rows: none, atomic, optimistic) has 0 conflicts in every trial; single under
short-ttl has at least as many conflicts per trial as no lock under baseline ("worse than none" in
the lesson, whose lockstep no-lock workers conflicted 41/80; here the jittered no-lock workers reach
50-79 of 80 and single under short-ttl sits at the ceiling, 79 of 80: every entry but the first, so
"no better than no lock" is what a run can show every time). A backend the run left out
(not installed, or unable to run at this scale) is named, not counted against the pattern.

It needs only the standard library: the CSV is read with the csv module (column names are stable).
"""

from __future__ import annotations

import argparse
import csv
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

MAIN_COMMAND = ("matrix", "--time-scale", "0.1", "--trials", "2")
BUDGET_S = 90.0
LOSE_UNDER_PAUSE = ("single", "redlock", "pottery", "redis-py")
FENCED = "fenced"
NOT_LOCKS = ("none", "atomic", "optimistic")


@dataclass(frozen=True)
class Check:
    ok: bool
    claim: str
    evidence: str


def _cell(rows: Sequence[dict[str, str]], backend: str, experiment: str) -> list[dict[str, str]]:
    return [r for r in rows if r["backend"] == backend and r["experiment"] == experiment]


def _total(rows: Sequence[dict[str, str]], column: str) -> int:
    return sum(int(r[column] or 0) for r in rows)


def _mean(rows: Sequence[dict[str, str]], column: str) -> float:
    return _total(rows, column) / len(rows) if rows else float("nan")


def judge_pattern(rows: Sequence[dict[str, str]]) -> list[Check]:
    """The four claims of the pattern on one run's rows (see the module docstring)."""
    rows = [r for r in rows if r.get("verdict") != "unknown"]
    checks = []
    present = [b for b in LOSE_UNDER_PAUSE if _cell(rows, b, "client-pause")]
    lost = {b: _total(_cell(rows, b, "client-pause"), "lost_updates") for b in present}
    missing = [b for b in LOSE_UNDER_PAUSE if b not in present]
    checks.append(
        Check(
            ok=bool(present) and all(n > 0 for n in lost.values()),
            claim=f"{'/'.join(LOSE_UNDER_PAUSE)} lose updates under client-pause",
            evidence=", ".join(f"{b} {n} lost" for b, n in lost.items())
            + (f"; not in the run: {', '.join(missing)}" if missing else ""),
        )
    )
    fenced = _cell(rows, FENCED, "client-pause")
    checks.append(
        Check(
            ok=bool(fenced) and _total(fenced, "lost_updates") == 0 and _total(fenced, "writes_rejected") > 0,
            claim="fenced loses none under client-pause and rejects writes",
            evidence=f"{_total(fenced, 'lost_updates')} lost, {_total(fenced, 'writes_rejected')} writes rejected "
            f"in {len(fenced)} trials",
        )
    )
    locks = sorted({r["backend"] for r in rows if r["experiment"] == "baseline" and r["backend"] not in NOT_LOCKS})
    conflicted = {b: _total(_cell(rows, b, "baseline"), "conflicts") for b in locks}
    checks.append(
        Check(
            ok=bool(locks) and not any(conflicted.values()),
            claim="baseline: 0 conflicts for every lock",
            evidence=", ".join(f"{b} {n}" for b, n in conflicted.items() if n) or f"0 in each of {len(locks)} locks",
        )
    )
    short, none = _cell(rows, "single", "short-ttl"), _cell(rows, "none", "baseline")
    checks.append(
        Check(
            ok=bool(short) and bool(none) and _mean(short, "conflicts") >= _mean(none, "conflicts"),
            claim="short-ttl no better than no lock for single",
            evidence=f"single short-ttl {_mean(short, 'conflicts'):.1f} vs none baseline "
            f"{_mean(none, 'conflicts'):.1f} conflicts per trial",
        )
    )
    return checks


def marked_cells(rows: Sequence[dict[str, str]]) -> list[str]:
    """``backend × experiment (k of n)`` for each cell holding a timing-marked trial."""
    cells: dict[tuple[str, str], list[bool]] = {}
    for r in rows:
        cells.setdefault((r["backend"], r["experiment"]), []).append(r.get("timing_marked") == "true")
    return [f"{b} × {e} ({sum(m)} of {len(m)})" for (b, e), m in cells.items() if any(m)]


def run_once(command: Sequence[str], out: Path) -> tuple[float, int, list[dict[str, str]]]:
    start = time.monotonic()
    proc = subprocess.run([*command, "--out", str(out)], capture_output=True, text=True, check=False)
    wall = time.monotonic() - start
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-2000:])
    rows = list(csv.DictReader(out.open(encoding="utf-8"))) if out.exists() else []
    return wall, proc.returncode, rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="how many times to run the main command")
    parser.add_argument(
        "--lockcompare", default="lockcompare", help="the installed command, e.g. .venv/bin/lockcompare"
    )
    parser.add_argument("--keep", type=Path, help="keep each run's CSV and histories in this directory")
    parser.add_argument("extra", nargs="*", help="after --: more matrix options (e.g. --jobs 4)")
    args = parser.parse_args(argv)
    command = [*shlex.split(args.lockcompare), *MAIN_COMMAND, *args.extra]
    print(f"main command: {shlex.join(command)}  ({args.runs} runs)", flush=True)
    held, over, marked_runs, walls = 0, 0, 0, []
    with tempfile.TemporaryDirectory(prefix="main-pattern-") as scratch:
        folder = args.keep or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(1, args.runs + 1):
            wall, code, rows = run_once(command, folder / f"run-{i:02d}.csv")
            walls.append(wall)
            checks = judge_pattern(rows)
            holds = code == 0 and all(c.ok for c in checks)
            marked = marked_cells(rows)
            held += holds
            over += wall > BUDGET_S
            marked_runs += bool(marked)
            print(
                f"run {i}/{args.runs}: {wall:.1f} s{' (over ' + str(BUDGET_S) + ' s)' if wall > BUDGET_S else ''}, "
                f"{len(rows)} trials, exit {code}, pattern {'HOLDS' if holds else 'BROKEN'}, "
                f"timing-marked: {'; '.join(marked) or 'none'}",
                flush=True,
            )
            for c in checks:
                print(f"    {'ok  ' if c.ok else 'FAIL'} {c.claim}: {c.evidence}", flush=True)
    print(
        f"pattern held in {held} of {args.runs} runs; wall {min(walls):.1f}–{max(walls):.1f} s "
        f"({over} over {BUDGET_S:g} s); runs with a timing-marked cell: {marked_runs}"
    )
    return 0 if held == args.runs and not over else 1


if __name__ == "__main__":
    sys.exit(main())
