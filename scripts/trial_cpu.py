#!/usr/bin/env python3
"""CPU-seconds per trial of a matrix run, split into runner, workers and servers, beside another revision's.

What a trial costs the machine decides how many can run side by side without stalling the timings
they measure (issue 30). This script runs the same ``lockcompare matrix`` command with two
installations, alternately (A B, B A, A B, ...: load from elsewhere hits both alike), and prints,
per run and as the median per side:

- ``runner``: the ``lockcompare`` process itself, all its threads (``getrusage(RUSAGE_SELF)`` taken
  at interpreter exit, after the run stopped its servers and workers);
- ``workers``: its Python children (trial workers, probe processes, link proxies), sampled from
  /proc while they live;
- ``servers``: its other children (redis-server, etcd, postgres), sampled the same way;
- ``other``: what the kernel charged to children that the sampling missed (processes shorter than
  one sampling interval, each process's last interval): ``RUSAGE_CHILDREN`` at exit minus the two
  sampled columns;
- ``total``: runner + every child, exact (``RUSAGE_SELF`` + ``RUSAGE_CHILDREN``);
- ``trials/min``: trials run divided by the run's wall time.

The two sides are two Python interpreters with lockcompare installed: ``--python`` (default: the
one running this script, i.e. the current checkout's venv) and either ``--python-b`` or
``--against REV``, which checks REV out into a temporary git worktree and installs it into a venv of
its own (exported with ``git archive``, kept under ``--cache`` for the next run, keyed by the commit).

Both sides run the same command. The default is the README's main command
(``--time-scale 0.1 --trials 2``), with ``--backends`` set to the backends BOTH sides can run here
(their default set differs when one has an extra installed that the other lacks).

Examples::

    # the lead, on a quiet machine: this checkout against main's previous state, 3 runs each
    .venv/bin/python scripts/trial_cpu.py --against HEAD~5 --runs 3

    # this checkout alone: its shares per trial, 3 runs
    .venv/bin/python scripts/trial_cpu.py --runs 3

    # a tiny check (two venvs given, one small matrix)
    .venv/bin/python scripts/trial_cpu.py --python-b /tmp/old/.venv/bin/python --runs 1 -- \\
        --time-scale 0.1 --trials 1 --backends single,redlock --experiments baseline
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_MATRIX_ARGS = ("--time-scale", "0.1", "--trials", "2")
SAMPLE_S = 0.1
_TICKS = os.sysconf("SC_CLK_TCK")
_SERVER_NAMES = ("redis-server", "etcd", "postgres", "postmaster")

#: Runs the installation's own ``lockcompare`` console script as the main module, exactly as the
#: command does (what a spawned child re-runs depends on it), and, at interpreter exit, writes this
#: process's and its reaped children's CPU seconds to argv[1]. The handler is registered before
#: lockcompare is imported, so it runs after lockcompare's own exit handlers.
_WRAPPER = """
import atexit, json, os, resource, runpy, sys
out = sys.argv[1]
def _dump():
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(out, "w") as fh:
        json.dump({"self": me.ru_utime + me.ru_stime, "children": kids.ru_utime + kids.ru_stime}, fh)
atexit.register(_dump)
script = os.path.join(os.path.dirname(sys.executable), "lockcompare")
sys.argv = [script, *sys.argv[2:]]
runpy.run_path(script, run_name="__main__")
"""

#: The backends of the default selection (what the README's main command runs: trait
#: ``in_default_matrix``) an installation can run here (no problem reported), one per line. Not every
#: usable backend: the opt-in ones (Sentinel, ZooKeeper, etcd...) would make the run ten times longer.
_USABLE = """
from lockcompare.backends import describe_backends, load_backend, traits_of
print("\\n".join(
    i.name for i in describe_backends()
    if not i.problem and traits_of(load_backend(i.name, check_viable=False)).in_default_matrix
))
"""


@dataclass
class _Sampler:
    """Polls /proc for the descendants of ``root`` and keeps each one's last CPU seconds (own only)."""

    root: int
    seen: dict[tuple[int, int], tuple[str, float]] = field(default_factory=dict)  # (pid, start) -> (class, s)
    _stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            self.sample()

    def stop(self) -> None:
        self._stop.set()

    def sample(self) -> None:
        stats: dict[int, list[bytes]] = {}
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/stat", "rb") as fh:
                    stats[int(name)] = fh.read().rsplit(b")", 1)[1].split()
            except OSError:
                continue
        family = {self.root}
        grew = True
        while grew:  # descendants: parent pid (field 4) in the family, until no more join
            grew = False
            for pid, fields in stats.items():
                if pid not in family and int(fields[1]) in family:
                    family.add(pid)
                    grew = True
        for pid in family - {self.root}:
            fields = stats[pid]
            key = (pid, int(fields[19]))  # starttime: a reused pid is another process
            cpu = (int(fields[11]) + int(fields[12])) / _TICKS
            kind = self.seen[key][0] if key in self.seen else _classify(pid)
            self.seen[key] = (kind, cpu)

    def totals(self) -> dict[str, float]:
        sums = {"workers": 0.0, "servers": 0.0, "other": 0.0}
        for kind, cpu in self.seen.values():
            sums[kind] += cpu
        return sums


def _classify(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            argv = fh.read().split(b"\0")
    except OSError:
        return "other"
    program = os.path.basename(argv[0].decode(errors="replace")) if argv and argv[0] else ""
    joined = b" ".join(argv)
    if any(program.startswith(name) for name in _SERVER_NAMES) or b"postgres:" in joined:
        return "servers"
    if b"resource_tracker" in joined:
        return "other"
    if program.startswith("python"):
        return "workers"
    return "other"


@dataclass(frozen=True)
class RunResult:
    side: str
    trials: int
    wall_s: float
    runner_s: float
    workers_s: float
    servers_s: float
    other_s: float
    total_s: float

    def per_trial(self, seconds: float) -> float:
        return seconds / self.trials if self.trials else float("nan")


def run_once(*, side: str, python: str, matrix_args: list[str], workdir: Path) -> RunResult:
    out = workdir / f"{side}-{time.monotonic_ns()}.csv"
    cpu_file = out.with_suffix(".cpu.json")
    command = [python, "-c", _WRAPPER, str(cpu_file), "matrix", *matrix_args, "--out", str(out)]
    started = time.monotonic()
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=workdir)
    sampler = _Sampler(root=proc.pid)
    thread = threading.Thread(target=sampler.run, daemon=True)
    thread.start()
    _, stderr = proc.communicate()
    wall = time.monotonic() - started
    sampler.stop()
    thread.join()
    if proc.returncode != 0 or not cpu_file.exists():
        sys.exit(f"trial_cpu: side {side} failed (exit {proc.returncode}): {stderr.decode(errors='replace')[-2000:]}")
    cpu = json.loads(cpu_file.read_text())
    with out.open(newline="") as fh:
        trials = sum(1 for _ in csv.DictReader(fh))
    sampled = sampler.totals()
    other = cpu["children"] - sampled["workers"] - sampled["servers"]
    return RunResult(
        side=side,
        trials=trials,
        wall_s=wall,
        runner_s=cpu["self"],
        workers_s=sampled["workers"],
        servers_s=sampled["servers"],
        other_s=other,
        total_s=cpu["self"] + cpu["children"],
    )


def usable_backends(python: str) -> list[str]:
    done = subprocess.run([python, "-c", _USABLE], capture_output=True, text=True, check=True)
    return [line for line in done.stdout.split() if line]


def venv_for(rev: str, *, cache: Path) -> str:
    """A Python with ``rev`` of this repository installed (built once per commit under ``cache``)."""
    sha = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--verify", f"{rev}^{{commit}}"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    home = cache / sha[:12]
    python = home / "venv" / "bin" / "python"
    if python.exists():
        return str(python)
    cache.mkdir(parents=True, exist_ok=True)
    tree = home / "src"
    if not tree.exists():  # an exported tree, not a git worktree: the repository is left as it was
        tree.mkdir(parents=True)
        archive = subprocess.run(["git", "-C", str(REPO), "archive", sha], capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    print(f"trial_cpu: installing {rev} ({sha[:12]}) into {home / 'venv'} (once)", file=sys.stderr)
    subprocess.run([sys.executable, "-m", "venv", str(home / "venv")], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", "-e", str(tree)], check=True)
    return str(python)


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def render(results: list[RunResult], *, sides: dict[str, str]) -> str:
    headers = ("side", "run", "trials", "wall s", "trials/min", "runner", "workers", "servers", "other", "total")
    rows: list[tuple[str, ...]] = []
    for side in sides:
        mine = [r for r in results if r.side == side]
        for n, r in enumerate(mine, 1):
            rows.append(
                (side, str(n), str(r.trials), f"{r.wall_s:.0f}", f"{r.trials / r.wall_s * 60:.1f}",
                 *(f"{r.per_trial(s):.3f}" for s in (r.runner_s, r.workers_s, r.servers_s, r.other_s, r.total_s)))
            )  # fmt: skip
        if len(mine) > 1:
            rows.append(
                (side, "median", "", f"{_median([r.wall_s for r in mine]):.0f}",
                 f"{_median([r.trials / r.wall_s * 60 for r in mine]):.1f}",
                 *(f"{_median([r.per_trial(getattr(r, k)) for r in mine]):.3f}"
                   for k in ("runner_s", "workers_s", "servers_s", "other_s", "total_s")))
            )  # fmt: skip
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(headers)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(headers, widths, strict=True))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    lines.append("CPU columns: CPU-seconds per trial (user + sys).")
    lines += [f"side {name}: {what}" for name, what in sides.items()]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--python", default=sys.executable, help="side A's interpreter (default: this one)")
    other = parser.add_mutually_exclusive_group()  # neither: side A alone (its own shares, no comparison)
    other.add_argument("--python-b", help="side B's interpreter (a venv with another lockcompare installed)")
    other.add_argument("--against", metavar="REV", help="side B: this git revision, installed into a venv of its own")
    parser.add_argument("--runs", type=int, default=3, help="runs per side, alternating (default 3)")
    parser.add_argument(
        "--cache",
        type=Path,
        default=Path.home() / ".cache" / "lockcompare-trial-cpu",
        help="where --against venvs live",
    )
    parser.add_argument(
        "--csv",
        type=Path,
        help="also write one row per run (side, revision, trials, wall, trials/min, CPU-s per trial per column) "
        "here, for docs to render (results/derived/)",
    )
    parser.add_argument("matrix_args", nargs="*", help="after --: the matrix options (default: the README's command)")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    python_b = args.python_b or (venv_for(args.against, cache=args.cache) if args.against else None)
    sides = {"A": args.python} | ({"B": python_b} if python_b else {})
    matrix_args = list(args.matrix_args or DEFAULT_MATRIX_ARGS)
    if "--backends" not in matrix_args:
        common = [
            name
            for name in usable_backends(args.python)
            if all(name in set(usable_backends(python)) for python in sides.values())
        ]
        matrix_args += ["--backends", ",".join(common)]
    descriptions = {"A": f"{args.python}"} | (
        {"B": f"{python_b}" + (f" ({args.against})" if args.against else "")} if python_b else {}
    )
    print(f"trial_cpu: lockcompare matrix {' '.join(matrix_args)}", file=sys.stderr)
    results: list[RunResult] = []
    with tempfile.TemporaryDirectory(prefix="trial-cpu-") as tmp:
        for n in range(args.runs):
            order = ("A", "B") if n % 2 == 0 else ("B", "A")
            for side in (side for side in order if side in sides):
                result = run_once(side=side, python=sides[side], matrix_args=matrix_args, workdir=Path(tmp))
                print(
                    f"trial_cpu: run {n + 1} side {side}: {result.total_s / result.trials:.3f} CPU-s/trial",
                    file=sys.stderr,
                )
                results.append(result)
    print(render(results, sides=descriptions))
    if args.csv is not None:
        write_csv(
            args.csv,
            results,
            revisions={"A": _revision_of(args.python)}
            | ({"B": args.against or _revision_of(python_b)} if python_b else {}),
        )


def _revision_of(python: str) -> str:
    """The source revision an installation reports (what its rows' source_revision say)."""
    code = "from lockcompare.infra.provenance import source_revision; print(source_revision())"
    done = subprocess.run([python, "-c", code], capture_output=True, text=True, check=False)
    return done.stdout.strip() or "unknown"


def write_csv(path: Path, results: list[RunResult], *, revisions: dict[str, str]) -> None:
    columns = (
        *("side", "revision", "run", "trials", "wall_s", "trials_per_min"),
        *(f"{part}cpu_s_per_trial" for part in ("runner_", "workers_", "servers_", "other_", "")),
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with tmp.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(columns)
        runs: dict[str, int] = {}
        for r in results:
            runs[r.side] = runs.get(r.side, 0) + 1
            writer.writerow([r.side, revisions[r.side], runs[r.side], r.trials, f"{r.wall_s:.1f}",
                             f"{r.trials / r.wall_s * 60:.2f}",
                             *(f"{r.per_trial(s):.3f}" for s in (r.runner_s, r.workers_s, r.servers_s, r.other_s,
                                                                 r.total_s))])  # fmt: skip
    tmp.replace(path)


if __name__ == "__main__":
    main()
