"""The local executor: the planned trials on this host, several at once within its CPU budget.

Each running trial has a cluster of its own from a pool (infra/warm_pool.py), warm worker processes
(crew.py) and the scheduler's CPU governor (scheduler.py); every trial appends its row the moment it
ends, and the timing-marked ones may run again at the end, by themselves (``rerun_marked``, at most
``rerun_jobs`` at once: 1, alone). One run goes
through named steps: probe the backends (while workers warm), run the trials, run the marked ones
again, report.
"""

from __future__ import annotations

import contextlib
import logging
import math
from pathlib import Path
from typing import Any

from lockcompare.analysis.results import ResultsWriter, make_row, supersede
from lockcompare.analysis.sentinel import is_marked
from lockcompare.analysis.verdicts import NOTED
from lockcompare.backends import load_backend, traits_of
from lockcompare.backends.versions import client_versions, python_version
from lockcompare.infra.cluster import Cluster
from lockcompare.infra.lifecycle import sigterm_unwinds
from lockcompare.infra.pool import WithPostgres
from lockcompare.infra.provenance import host_facts, registered_run
from lockcompare.runner.cluster_source import cluster_source
from lockcompare.runner.cost_order import CostOrder
from lockcompare.runner.crew import WorkerPool, spawn_crew
from lockcompare.runner.executor import Execution
from lockcompare.runner.floor import RunMeter
from lockcompare.runner.outfile import claim_history_dir, history_dir, history_ids, remove_unpointed
from lockcompare.runner.plan import cluster_shape, lock_servers_of
from lockcompare.runner.probes import probe_concurrently
from lockcompare.runner.run_report import MatrixReport
from lockcompare.runner.scheduler import CpuBudget, Finished, StallGovernor, prior_busy_fraction, run_scheduled
from lockcompare.runner.trial import TrialResult, new_run_id, run_trial, save_history
from lockcompare.scenario.limits import usable_cpus
from lockcompare.scenario.trialspec import TrialSpec

log = logging.getLogger("lockcompare")

#: The note of a row that replaced a timing-marked one (``rerun_marked``); the marked row is in the
#: .superseded file with its history. Up to ``rerun_jobs`` reruns run at once: beside one another,
#: never beside the run's other trials (rows written before issue 54 said "none of the run's other
#: trials beside it", also of reruns made five at once).
RERUN_NOTE = (
    "run again after a timing-marked run, beside no trial of the run but other reruns (its row is in the "
    ".superseded file)"
)

#: Verdicts a run explains on stderr when it gives them: they are results, not failures, but a
#: reader may not expect them (little or no progress; exclusion that held only by luck).
NOTED_VERDICTS = NOTED  # analysis/verdicts.py: the vocabulary says which

Outcome = tuple[TrialResult, dict[str, Any]]


class LocalExecutor:
    """Runs an :class:`Execution` on this host (see the module docstring)."""

    def run(self, execution: Execution) -> MatrixReport:
        # External servers are one shared set: trials beside each other would share the lock nodes'
        # CPU and timing (their keys never collide: every trial has its own prefix). So trials
        # there run one at a time, as --jobs's help says.
        jobs = 1 if execution.cluster_options.external else execution.jobs
        run = _LocalRun(execution, jobs=jobs)
        with (
            registered_run("matrix", out=execution.out),
            sigterm_unwinds(),
            cluster_source(execution.cluster_options, jobs=jobs, specs=execution.todo) as clusters,
        ):
            try:
                claim_history_dir(execution.out)
                # Clusters for the first trials start on the pool's threads while the backends are probed.
                clusters.expect([run.shape_for(spec) for spec in run.costs(execution.todo)])
                run.probe(clusters)
                waited_before = getattr(clusters.inner, "waited_s", 0.0)
                run.run_trials(clusters)
                run.run_marked_again(clusters)
            finally:
                run.close()
        return run.report(clusters, waited_before_trials_s=waited_before)


class _LocalRun:
    """One local run's state: what it wrote, what it saw, and the steps that fill them in."""

    def __init__(self, execution: Execution, *, jobs: int) -> None:
        self.execution = execution
        self.todo = execution.todo
        self.out = execution.out
        self.jobs = jobs
        self.meter = RunMeter(jobs=jobs, cores=usable_cpus())
        self.meter.start()
        self.costs = CostOrder()  # expensive trials first within each round (cost_order.py)
        self.held: dict[str, float] = {}  # free job-slot seconds by what held the waiting trials (scheduler.py)
        self.writer = ResultsWriter(self.out)
        self.histories = history_dir(self.out)  # never another results file's (issue 38)
        self.pointed = history_ids(self.out)  # histories rows of the file already point to (an unknown one rerun)
        self.run_id = new_run_id()
        time_scale = min(spec.time_scale for spec in execution.planned)
        self.budget = CpuBudget(cpus=usable_cpus(), share=execution.cpu_share, prior=prior_busy_fraction(time_scale))
        self.governor = StallGovernor(jobs=jobs)
        self.floor = jobs
        self.jobs_used = 0
        self.unknown: list[tuple[str, str]] = []
        self.no_progress: dict[str, int] = {}
        self.unstartable: list[tuple[str, str, int, str]] = []
        self.saved: dict[str, Path] = {}  # trial_id -> history written in this run
        self.rowed: set[str] = set()  # trial_ids whose row this run appended
        self.marked: list[TrialSpec] = []  # trials the timing sentinel marked, in the order they ended
        self.reruns: dict[str, bool] = {}  # trial_id -> still marked, for the marked trials run again
        self.workers = WorkerPool()
        self.crews = spawn_crew if execution.fresh_workers else self.workers.start

    def shape_for(self, spec: TrialSpec) -> Any:
        return cluster_shape(spec, cluster_options=self.execution.cluster_options)

    # --- the steps ----------------------------------------------------------------------------------

    def probe(self, clusters: WithPostgres) -> None:
        """Construct each backend once on the kind of nodes it uses, while every worker the run can
        use starts (see WorkerPool.prestart) in this thread (probes.py)."""
        by_servers: dict[str, TrialSpec] = {}
        for spec in self.todo:
            by_servers.setdefault(lock_servers_of(spec.backend), spec)
        # Workers for as many trials as the CPU budget admits at first, and one more: more than that
        # rarely ran at once on 2 cores (--jobs 8, ~3 trials at once), and each warm worker costs
        # ~0.35 CPU-s to start (its imports); a run that admits more later spawns them on demand.
        at_once = min(self.jobs, len(self.todo), self.budget.admitted_at_first() + 1)
        count = at_once * max(spec.workers for spec in self.todo)
        planned = self.execution.planned
        probe_concurrently(
            [
                (self.shape_for(first), [s.backend for s in self.todo if lock_servers_of(s.backend) == servers])
                for servers, first in by_servers.items()
            ],
            clusters=clusters,
            node_count=planned[0].node_count,
            timeout_s=max(spec.call_timeout_ms for spec in planned) / 1000,
            meanwhile=(lambda: None) if self.execution.fresh_workers else (lambda: self.workers.prestart(count)),
        )
        self.meter.mark("probes and warm workers")

    def run_trials(self, clusters: WithPostgres) -> None:
        run_scheduled(
            self.todo,
            jobs=self.jobs,
            run_one=self.run_one,
            clusters=clusters,
            shape_for=self.shape_for,
            kind_of=_cell_of,
            budget=self.budget,
            solo=_runs_alone,
            stall_of=_stall_share,
            governor=self.governor,
            on_start=self.on_start,
            on_done=self.on_done,
            on_cancel=self.workers.kill_all,
            order=self.costs,
            held=self.held,
            on_unstartable=self.on_unstartable,
            cell_of=_cell_of,
        )
        self.meter.mark("trials")

    def run_marked_again(self, clusters: WithPostgres) -> None:
        """The first ``rerun_marked`` timing-marked trials, again, at the end: at most ``rerun_jobs``
        at once (1: alone), no other trial of this run beside them. Each takes its marked row's place;
        that row keeps its own history."""
        again = self.marked[: self.execution.rerun_marked]
        if not again:
            return
        self.reruns.update(dict.fromkeys((s.trial_id for s in again), True))
        self.pointed.update(self.reruns)
        self.rowed.difference_update(self.reruns)  # an interrupted rerun leaves no history without its row
        run_scheduled(
            again, jobs=self.execution.rerun_jobs, run_one=self.run_one, clusters=clusters, shape_for=self.shape_for,
            kind_of=_cell_of, budget=self.budget, on_start=self.on_start, on_done=self.on_done,
            on_cancel=self.workers.kill_all, held=self.held,
        )  # fmt: skip
        self.meter.mark("timing-marked trials run again" + (" alone" if self.execution.rerun_jobs == 1 else ""))

    def close(self) -> None:
        self.workers.close()
        remove_unpointed(self.saved, rowed=self.rowed, kept=set())  # a rerun's history has a name of its own
        with contextlib.suppress(OSError):
            self.histories.rmdir()  # only when empty: a run stopped before its first history leaves no folder

    def report(self, clusters: WithPostgres, *, waited_before_trials_s: float) -> MatrixReport:
        floor_now = self.meter.finish(  # after the servers stopped: their CPU is in RUSAGE_CHILDREN
            waited_for_clusters_s=getattr(clusters.inner, "waited_s", 0.0),
            waited_before_trials_s=waited_before_trials_s,
            held_slots=self.held,
            clusters_started=getattr(clusters.inner, "built", 0),
        )
        return MatrixReport(
            out=self.out,
            trials_run=len(self.todo) - sum(count for _, _, count, _ in self.unstartable),
            trials_skipped=self.execution.skipped,
            trial_ids=self.execution.trial_ids,
            unknown=tuple(self.unknown),
            unstartable=tuple(self.unstartable),
            no_progress=self.no_progress,
            jobs=self.jobs,
            jobs_used=self.jobs_used,
            busy_cpu=self.budget.estimates(),  # type: ignore[arg-type]  # kinds are (backend, experiment)
            jobs_floor=self.floor,
            backed_off=self.governor.backed_off,
            floor=floor_now,
            reruns=tuple(self.reruns.items()),
        )

    # --- what the scheduler calls -------------------------------------------------------------------

    def run_one(self, spec: TrialSpec, cluster: Cluster) -> Outcome:
        """One trial on ``cluster``, its history saved and its row made (written by on_done)."""
        result = run_trial(spec=spec, cluster=cluster, run_id=self.run_id, crews=self.crews)
        # A rerun (the file holds the trial's unknown row) keeps that row's history: a name of its own.
        path = save_history(result, self.histories, attempt=self.run_id if spec.trial_id in self.pointed else "")
        self.saved[spec.trial_id] = path
        traits = traits_of(load_backend(spec.backend, check_viable=False))
        allowed = self.execution.allow_mixed_revisions
        row = make_row(
            result,
            host=host_facts(),
            run_id=self.run_id,
            cluster_kind="embedded" if cluster.embedded else "external",
            server_version=cluster.server_version,
            history_path=str(path.relative_to(self.out.parent)),  # the CSV and its histories move together
            note=f"resumed over another revision: {allowed}" if allowed else "",
            python_version=python_version(),
            client_versions=client_versions(
                libraries=traits.libraries, external=traits.external, history=result.history
            ),
        )
        return result, row

    def on_done(self, done: Finished[TrialSpec, Outcome]) -> None:
        self.floor = min(self.floor, self.governor.limit)
        result, row = done.result
        self.meter.trial(result.wall_s)
        self.costs.record(done.spec, wall_s=result.wall_s)
        row["jobs_concurrent"] = done.jobs_concurrent
        self.execution.versions.check_row(row)  # before it is written: a refusal leaves no row (and no history)
        self.jobs_used = max(self.jobs_used, done.jobs_concurrent)
        # on_done runs in the main thread only: rows never interleave. A rerun takes its old row's
        # place (the old row moves to the .superseded file): one row per trial in the file.
        trial_id = done.spec.trial_id
        if trial_id in self.reruns:  # a marked trial run again: its first row is superseded
            self.reruns[trial_id] = is_marked(row)
            row["note"] = "; ".join(filter(None, [row.get("note"), RERUN_NOTE]))
        elif is_marked(row):
            self.marked.append(done.spec)
        if trial_id in self.pointed:
            supersede(self.out, row)
        else:
            self.writer.append(row)
        self.rowed.add(trial_id)
        verdict = result.metrics.verdict
        if verdict == "unknown":
            self.unknown.append((trial_id, result.metrics.problem))
        elif verdict in NOTED_VERDICTS:
            self.no_progress[verdict] = self.no_progress.get(verdict, 0) + 1
        if self.execution.progress:
            self.execution.progress(done.spec, result, done.finished, len(self.todo))

    def on_unstartable(self, skipped: list[TrialSpec], reason: str) -> None:
        # One line, as a cell the servers cannot serve is skipped while planning; no rows (--resume runs them).
        first = skipped[0]
        self.unstartable.append((first.backend, first.experiment, len(skipped), reason))
        log.warning("skipping %s x %s (%d trial(s) not run): %s", first.backend, first.experiment, len(skipped), reason)

    def on_start(self, spec: TrialSpec, finished: int) -> None:
        self.meter.mark("until the first trial")  # its start (before its cluster is handed over)
        if self.execution.progress:
            self.execution.progress(spec, None, finished, len(self.todo))


def _cell_of(spec: TrialSpec) -> tuple[str, str]:
    return (spec.backend, spec.experiment)


def _stall_share(outcome: Outcome) -> float:
    """The share of its margin a finished trial's worst stall ate (NaN: not measured)."""
    timing = outcome[0].timing
    return timing.eaten if timing is not None else math.nan


def _runs_alone(spec: TrialSpec) -> bool:
    """Without a lock, without pauses and without jitter, conflicts measure the phase of two
    free-running workers in lockstep, which a neighbour trial's CPU use shifts (scheduler.py): such
    a trial runs with no neighbour. Jitter (the default) draws every retry and think time afresh,
    so the phase is random in every round whatever a neighbour does, and a pause in every round
    sets the rhythm itself; those trials run in parallel like the rest (the fidelity check in the
    README compares such a run with a serial one cell by cell)."""
    return spec.pause_ms == 0 and spec.jitter == 0 and not traits_of(load_backend(spec.backend)).exclusive
