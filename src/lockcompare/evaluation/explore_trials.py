"""Real trials for ``explore``: each request is one ``lockcompare run`` trial with ``--faults``.

:class:`RealTrials` is the :class:`~lockcompare.evaluation.explore.TrialRunner` the command uses.
A request becomes the trial spec ``lockcompare run`` would build from the same options
(:func:`~lockcompare.runner.plan.plan_matrix`, one trial, the request's seed as ``--seed``), and
a batch runs through :func:`~lockcompare.runner.matrix.run_planned` — the path of
``run`` and ``matrix``: the same cluster pool, CPU budget, checker, CSV row and saved history. So
the command printed for a counterexample reruns exactly the trial that failed.

Every trial's row goes to ``DIR/trials.csv`` (histories in ``DIR/trials.histories/``), beside
``explored.csv``: the full results file of the search, readable by ``table``, ``report`` and
``run --from``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lockcompare.analysis.reproduce import run_command
from lockcompare.analysis.results import read_results
from lockcompare.backends import load_backend, traits_of
from lockcompare.errors import ClusterError, ConfigError, InvalidValueError
from lockcompare.evaluation.defaults import DEFAULT_TIME_SCALE
from lockcompare.evaluation.explore import METRICS, TrialOutcome, TrialRequest
from lockcompare.evaluation.scales import expressible_scale
from lockcompare.evaluation.schedules import Shape
from lockcompare.infra.kinds import kind_speaking
from lockcompare.runner.matrix import run_planned
from lockcompare.runner.plan import ClusterOptions, plan_matrix
from lockcompare.scenario.experiments import get_experiment
from lockcompare.scenario.settings import CLI_SETTINGS
from lockcompare.scenario.trialspec import Overrides, TrialSpec

log = logging.getLogger("lockcompare")

TRIALS_CSV = "trials.csv"
#: The experiment whose timings the searched trials use (TTL 1000, work 300; its own faults: none).
BASE_EXPERIMENT = "baseline"
#: The workload: no worker ever runs alone, so a lock cannot pass by letting one finish early.
WORKLOAD = "contend"
#: How long a round waits for the lock (lesson-scale ms): two TTLs, as the catalogue's node-fault
#: experiments do. The baseline's minute would let one schedule that makes the lock unavailable on
#: purpose (every node crashed) spend the whole budget waiting.
ACQUIRE_TIMEOUT_MS = 2000.0


#: Scales tried in order when --time-scale is not given and the backend cannot express the TTL at
#: the first (etcd's whole-second leases).
FALLBACK_SCALES = (DEFAULT_TIME_SCALE, 1.0, 2.0)


def fitting_scale(backend: str, *, scales: Sequence[float] = FALLBACK_SCALES, ttl_ms: float | None = None) -> float:
    """The first of ``scales`` at which the backend can express the baseline's TTL, or ``ttl_ms``
    (lesson-scale) when the user chose one (evaluation/scales.py)."""
    ttl = ttl_ms if ttl_ms is not None else get_experiment(BASE_EXPERIMENT).ttl_ms
    found = expressible_scale(load_backend(backend), ttl_ms=ttl, scales=scales)
    if found is None:
        raise InvalidValueError(
            f"{backend} cannot express a {ttl:g} ms TTL at --time-scale {' or '.join(map(str, scales))}"
        )
    return found


def lock_nodes_of(backend: str, *, cluster_options: ClusterOptions, redlock_nodes: int | None) -> int:
    """How many lock nodes the backend's faults can hit: a quorum design's all (``--redlock-nodes``
    or the cluster's), an ensemble's members under faults (etcd, ZooKeeper: its kind says), a
    single-node lock's one."""
    cls = load_backend(backend)
    kind = kind_speaking(traits_of(cls).servers)
    under_faults = kind.capabilities.lock_nodes.under_faults if kind is not None else None
    if under_faults is not None:  # an ensemble under faults
        return redlock_nodes or under_faults
    if traits_of(cls).survives_minority_loss:
        return redlock_nodes or cluster_options.node_count
    return 1


def _spec(backend: str, *, overrides: Overrides, experiment: str, redlock_nodes: int | None) -> TrialSpec | None:
    """The trial ``lockcompare run`` plans from the same options (None: the backend cannot run it
    here, e.g. a fault its servers cannot take; plan_matrix warned why)."""
    try:
        specs = plan_matrix(backends=[backend], experiments=[experiment], trials=1, overrides=overrides,
                            node_count=redlock_nodes)  # fmt: skip
    except InvalidValueError as exc:
        log.warning("explore: %s", exc)
        return None
    return specs[0] if specs else None


@dataclass(kw_only=True)
class RealTrials:
    """Trials of ``backend`` at the baseline's timings under each request's schedule."""

    backend: str
    out_dir: Path
    time_scale: float = DEFAULT_TIME_SCALE
    fence: str = "writes"
    jobs: int = 2
    cluster_options: ClusterOptions = field(default_factory=ClusterOptions)
    redlock_nodes: int | None = None
    experiment: str = BASE_EXPERIMENT
    workload: str = WORKLOAD
    #: The trial settings the user chose (--ttl-ms, --work-ms, --retry-delay-ms, --workers, ...).
    settings: Overrides = field(default_factory=Overrides)
    #: The server options as given (--nodes URL, --postgres URL, ...), for the reproduce command.
    server_args: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        load_backend(self.backend)
        self._base = Overrides(acquire_timeout_ms=ACQUIRE_TIMEOUT_MS).replace(
            **_chosen(self.settings), time_scale=self.time_scale, workload=self.workload, fence=self.fence
        )
        base = _spec(self.backend, overrides=self._base, experiment=self.experiment, redlock_nodes=self.redlock_nodes)
        if base is None:
            raise InvalidValueError(
                f"{self.backend} cannot run the {self.experiment} trial at --time-scale {self.time_scale:g}"
            )
        self._base_spec = base

    @property
    def parallel(self) -> int:
        """Two trials per allowed job in one call: the pool and the warm workers are set up once
        per call, and the scheduler still runs at most ``jobs`` at once."""
        return 2 * self.jobs

    @property
    def description(self) -> str:
        s = self._base_spec
        fence = f", --fence {self.fence}" if s.resource_check.value.startswith(("fence", "token")) else ""
        return (
            f"backend {self.backend}{fence}, --time-scale {self.time_scale:g} (TTL {s.ttl_ms} ms, work "
            f"{s.work_ms:g} ms, retry delay {s.retry_delay_ms:g} ms as run), --workload {self.workload}, "
            f"{s.workers} workers"
        )

    def shape(self) -> Shape:
        """Lesson-scale timings (schedules are written at the lesson's scale) and the cast."""
        s = self._base_spec
        nodes = lock_nodes_of(self.backend, cluster_options=self.cluster_options, redlock_nodes=self.redlock_nodes)
        return Shape(ttl_ms=s.ttl_ms / s.time_scale, work_ms=s.work_ms / s.time_scale, nodes=nodes, workers=s.workers)

    def spec_ttl_ms(self) -> float:
        """The TTL as the trials run it (scaled): the timeline marks the nodes' expiry with it."""
        return float(self._base_spec.ttl_ms)

    def spec(self, request: TrialRequest) -> TrialSpec | None:
        overrides = self._base.replace(rounds=request.rounds, seed=request.seed, faults=request.schedule)
        return _spec(self.backend, overrides=overrides, experiment=self.experiment, redlock_nodes=self.redlock_nodes)

    def run(self, requests: Sequence[TrialRequest]) -> list[TrialOutcome]:
        out = self.out_dir / TRIALS_CSV
        specs = [self.spec(r) for r in requests]
        runnable = list({s.trial_id: s for s in specs if s is not None}.values())
        refused = self._run_planned(runnable, out=out)
        rows = {row["trial_id"]: row for row in read_results(out)} if out.exists() else {}  # the latest row wins
        outcomes = []
        for spec in specs:
            if spec is not None and spec.trial_id in rows:
                outcomes.append(_outcome(rows[spec.trial_id], base=out.parent))
            else:
                verdict, why = refused.get(spec.trial_id, ("invalid", "")) if spec is not None else ("invalid", "")
                outcomes.append(_left_out(verdict, why))
        return outcomes

    def _run_planned(self, specs: list[TrialSpec], *, out: Path) -> dict[str, tuple[str, str]]:
        """Run ``specs``; a batch the matrix refuses as a whole (a combination of steps the cluster
        cannot build, e.g. failover with fake clocks) is retried one trial at a time, so only the
        refused schedules are left out (``invalid``). Servers that would not start make the batch's
        trials ``unknown``: the search goes on and counts them. Returns (verdict, why) of each."""
        if not specs:
            return {}
        try:
            run_planned(specs, out=out, cluster_options=self.cluster_options, resume=out.exists(), jobs=self.jobs)
        except ConfigError as exc:
            if len(specs) == 1:
                return {specs[0].trial_id: ("invalid", str(exc))}
            refused: dict[str, tuple[str, str]] = {}
            for spec in specs:  # trials that finished before the refusal are in the file: resume skips them
                refused |= self._run_planned([spec], out=out)
            return refused
        except ClusterError as exc:
            log.warning("explore: %s; the batch's trials count as unknown", exc)
            return {spec.trial_id: ("unknown", f"servers: {exc}") for spec in specs}
        return {}

    def command(self, request: TrialRequest) -> str:
        """``lockcompare run`` for ``request``: every setting its trial was given that differs from a
        default, ``--plugin-path`` for a plug-in, the server options (analysis/reproduce.py)."""
        chosen = _chosen(self._base.replace(rounds=request.rounds, seed=request.seed, faults=request.schedule))
        if self.fence == "writes":
            chosen.pop("fence", None)  # the default; said only where the backend has something to fence
        if self.redlock_nodes is not None:
            chosen["node_count"] = self.redlock_nodes
        return run_command(backend=self.backend, experiment=self.experiment, settings=chosen, extra=self.server_args)


def _chosen(overrides: Overrides) -> dict[str, Any]:
    """The settings ``overrides`` was given, by name."""
    return {s.name: overrides.given(s.name) for s in CLI_SETTINGS if overrides.given(s.name) is not None}


def _left_out(verdict: str, why: str) -> TrialOutcome:
    """A trial the matrix did not plan or refused to run (``invalid``), or could not run (``unknown``)."""
    why = why or "the backend cannot take this schedule here (see the warning)"
    return TrialOutcome(verdict=verdict, metrics={}, trial_seconds=0.0, problem=f"not run: {why}")


def _outcome(row: dict[str, Any], *, base: Path) -> TrialOutcome:
    def count(name: str) -> int:
        try:
            return max(0, int(row.get(name) or 0))
        except (TypeError, ValueError):
            return 0

    return TrialOutcome(
        verdict=str(row["verdict"]),
        metrics={m: count(m) for m in METRICS},
        trial_seconds=float(row["wall_s"]),
        history=str(base / row["history"]) if row.get("history") else "",
        trial_id=str(row["trial_id"]),
        problem=str(row.get("problem") or ""),
        timing_marked=row.get("timing_marked") in (True, "true"),
    )
