"""The matrix: every selected backend under every selected experiment, for K trials each.

Trials are interleaved (trial 0 of every cell, then trial 1, ...) so that slow drifts of the
machine spread over all cells instead of biasing one. Every trial appends its CSV row the moment it
ends; with ``resume`` the trials already in the file are skipped, so a crash costs one trial.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from lockcompare.backends import BackendConfig, load_backend
from lockcompare.cluster import open_cluster
from lockcompare.errors import BackendLoadError, ConfigError, InvalidValueError, ResultsFileError
from lockcompare.faults.node import ClusterNeeds
from lockcompare.experiments import Overrides, PauseHow, PausePoint, TrialSpec, get_experiment, make_spec
from lockcompare.sections import check_for
from lockcompare.provenance import registered_run
from lockcompare.results import SCHEMA_VERSION, ResultsWriter, inspect_results, make_row, rewrite
from lockcompare.trial import TrialResult, construct_in_child, new_run_id, run_trial, save_history

log = logging.getLogger("lockcompare")


@dataclass(frozen=True, kw_only=True)
class ClusterOptions:
    """Where the servers come from: spawned (default) or the user's URLs."""

    nodes: tuple[str, ...] | None = None
    resource: str | None = None
    redis_server: str | None = None
    node_count: int = 5


@dataclass(frozen=True, kw_only=True)
class Sweep:
    """Settings swept inside one matrix, each value a cell of its own (``None``: the experiment's)."""

    pause_ms: tuple[float | None, ...] = (None,)
    pause_points: tuple[PausePoint, ...] = (PausePoint.AFTER_ACQUIRE,)
    fences: tuple[str, ...] = ("writes",)
    pause_hows: tuple[PauseHow, ...] = (PauseHow.SLEEP,)
    fault_nodes: tuple[int, ...] = (1,)
    restart_delays_ms: tuple[float, ...] = (0.0,)
    persistences: tuple[str, ...] = ("none",)

    def cells_per_trial(self) -> int:
        """How many values the sweep has in all (more than 1: ``run`` cannot take it)."""
        return max(len(getattr(self, f.name)) for f in fields(self))


@dataclass(frozen=True, kw_only=True)
class MatrixReport:
    out: Path
    trials_run: int
    trials_skipped: int
    #: Every planned trial, run now or before.
    trial_ids: tuple[str, ...] = ()
    #: (trial_id, problem) of every trial judged ``unknown`` in this run.
    unknown: tuple[tuple[str, str], ...] = ()
    #: How many trials of this run were ``unavailable`` or ``degraded``.
    no_progress: dict[str, int] = field(default_factory=dict)


ProgressCallback = Callable[[TrialSpec, TrialResult | None, int, int], None]


def history_dir(out: Path) -> Path:
    """Histories live beside the CSV: ``results/x.csv`` → ``results/x.histories/``."""
    return out.with_name(out.stem + ".histories")


def plan_matrix(
    *,
    backends: Sequence[str],
    experiments: Sequence[str],
    trials: int,
    overrides: Overrides,
    node_count: int | None,
    sweep: Sweep = Sweep(),
    skip_unfit: bool = False,
) -> list[TrialSpec]:
    """Every trial's spec, validated before anything starts (bad names fail before any server does).

    Combinations that would run the same trial (a fence mode for a backend with nothing to fence,
    a pause point without a pause) are planned once.
    """
    if trials < 1:
        raise InvalidValueError(f"--trials must be >= 1, got {trials}")
    if not backends or not experiments:
        raise InvalidValueError("select at least one backend and one experiment")
    classes = {backend: load_backend(backend) for backend in backends}
    exps = [get_experiment(name) for name in experiments]
    specs: dict[str, TrialSpec] = {}
    for k, backend, experiment, pause_ms, point, fence, how, fault_nodes, delay, persistence in itertools.product(
        range(trials), backends, exps, sweep.pause_ms, sweep.pause_points, sweep.fences, sweep.pause_hows,
        sweep.fault_nodes, sweep.restart_delays_ms, sweep.persistences,
    ):  # fmt: skip
        cell = replace(
            overrides,
            pause_ms=overrides.pause_ms if pause_ms is None else pause_ms,
            pause_point=point,
            fence=fence,
            pause_how=how,
            fault_nodes=fault_nodes,
            restart_delay_ms=delay,
            persistence=persistence,
        )
        spec = make_spec(
            backend=backend,
            experiment=experiment,
            trial=k,
            overrides=cell,
            node_count=node_count,
            resource_check=check_for(classes[backend], fence=fence),
        )
        specs.setdefault(spec.trial_id, spec)
    return [spec for spec in specs.values() if _fits(classes[spec.backend], spec, skip_unfit=skip_unfit)]


def _fits(cls: type, spec: TrialSpec, *, skip_unfit: bool) -> bool:
    """A backend that cannot express the trial's TTL (its optional ``check_ttl``) is refused up
    front — or, among the default backends, left out of those cells with a note."""
    check_ttl = getattr(cls, "check_ttl", None)
    if check_ttl is None:
        return True
    try:
        check_ttl(ttl_ms=spec.ttl_ms)
    except InvalidValueError as exc:
        if not skip_unfit:
            raise InvalidValueError(f"backend {spec.backend!r}, {spec.experiment}: {exc}") from None
        log.warning("skipping %s x %s: %s", spec.backend, spec.experiment, exc)
        return False
    return True


def prepare_out(out: Path, *, resume: bool) -> set[str]:
    """Check ``out`` before anything runs; with ``resume``, bring it to the current schema.

    Returns the trial_ids already judged there. An existing file without ``resume`` is refused; a
    file of an older schema or with a truncated row is rewritten once, atomically, in the current
    schema (truncated rows dropped, which is said); a file from a newer lockcompare is refused.
    """
    if out.exists() and out.is_dir():
        raise ResultsFileError(f"{out} is a directory: --out takes a CSV file name")
    parent = next((p for p in out.parents if p.exists()), None)
    if parent is not None and not parent.is_dir():
        raise ResultsFileError(f"cannot write {out}: {parent} is not a directory")
    if not out.exists():
        return set()
    if not resume:
        raise ResultsFileError(f"{out} exists: pass --resume to continue it, or choose another --out")
    found = inspect_results(out)
    if found.needs_rewrite:
        rewrite(out, found.rows)
        what = []
        if found.oldest_schema < SCHEMA_VERSION:
            what.append(f"upgraded from schema {found.oldest_schema} to {SCHEMA_VERSION}")
        if found.truncated_lines:
            what.append(f"dropped truncated row(s) at line {', '.join(map(str, found.truncated_lines))}")
        log.warning("%s: %s (%d rows kept)", out, "; ".join(what) or "rewritten with the current header", len(found.rows))
    return {row["trial_id"] for row in found.rows if row["verdict"] != "unknown"}


def cluster_needs(spec: TrialSpec) -> ClusterNeeds:
    """How the embedded cluster must be built for ``spec`` (its fault's needs)."""
    return ClusterNeeds(persistence=spec.persistence, fake_clocks=spec.fault == "clock-jump")


def group_by_needs(specs: Sequence[TrialSpec]) -> list[tuple[ClusterNeeds, list[TrialSpec]]]:
    """Trials grouped by the cluster they need, in the order each need first appears."""
    groups: dict[ClusterNeeds, list[TrialSpec]] = {}
    for spec in specs:
        groups.setdefault(cluster_needs(spec), []).append(spec)
    return list(groups.items())


def check_faults(specs: Sequence[TrialSpec], *, cluster_options: ClusterOptions) -> None:
    """Refuse, before any server starts, fault trials that cannot run as asked."""
    faulty = [s for s in specs if s.fault]
    if not faulty:
        return
    if cluster_options.nodes is not None:
        raise ConfigError(
            f"{faulty[0].experiment} kills, restarts or re-clocks lock nodes: it needs the embedded cluster, "
            "not --nodes/--resource"
        )
    for spec in faulty:
        used = spec.node_count or cluster_options.node_count
        if spec.fault_nodes > used:
            raise InvalidValueError(f"--fault-nodes {spec.fault_nodes} but {spec.backend} uses {used} lock nodes")


def probe_backends(names: Sequence[str], *, config: BackendConfig, timeout_s: float) -> None:
    """Construct and close each backend once, in a child process with a deadline, before any trial:
    a plug-in that cannot be constructed is one load error, not a matrix of ``unknown`` rows."""
    for name in dict.fromkeys(names):
        problem = construct_in_child(name, config=config, timeout_s=timeout_s)
        if problem:
            raise BackendLoadError(f"backend {name!r} cannot be constructed: {problem}")


def run_matrix(
    *,
    backends: Sequence[str],
    experiments: Sequence[str],
    trials: int,
    overrides: Overrides,
    out: Path,
    cluster_options: ClusterOptions = ClusterOptions(),
    redlock_nodes: int | None = None,
    sweep: Sweep = Sweep(),
    resume: bool = False,
    progress: ProgressCallback | None = None,
    skip_unfit: bool = False,
) -> MatrixReport:
    """Run the matrix, appending one row per trial to ``out``; see the module docstring.

    ``skip_unfit`` leaves out (with a warning) the cells a backend cannot run, e.g. a TTL it cannot
    express; without it such a cell is an error before anything starts.
    """
    specs = plan_matrix(
        backends=backends,
        experiments=experiments,
        trials=trials,
        overrides=overrides,
        node_count=redlock_nodes,
        sweep=sweep,
        skip_unfit=skip_unfit,
    )
    done = prepare_out(out, resume=resume)
    todo = [s for s in specs if s.trial_id not in done]
    writer = ResultsWriter(out)
    histories = history_dir(out)
    run_id = new_run_id()
    unknown: list[tuple[str, str]] = []
    no_progress: dict[str, int] = {}
    if not todo:
        return MatrixReport(out=out, trials_run=0, trials_skipped=len(specs), trial_ids=tuple(s.trial_id for s in specs))
    check_faults(todo, cluster_options=cluster_options)
    index = 0
    with registered_run("matrix"):
        for needs, group in group_by_needs(todo):
            with open_cluster(
                nodes=cluster_options.nodes,
                resource=cluster_options.resource,
                node_count=cluster_options.node_count,
                redis_server=cluster_options.redis_server,
                persistence=needs.persistence,
                fake_clocks=needs.fake_clocks,
            ) as cluster:
                probe_backends(
                    [s.backend for s in group],
                    config=BackendConfig(node_urls=cluster.node_urls, node_count=redlock_nodes),
                    timeout_s=overrides.call_timeout_ms / 1000,
                )
                for spec in group:
                    if progress:
                        progress(spec, None, index, len(todo))
                    result = run_trial(spec=spec, cluster=cluster, run_id=run_id)
                    path = save_history(result, histories)
                    writer.append(
                        make_row(
                            result,
                            run_id=run_id,
                            cluster_kind="embedded" if cluster.embedded else "external",
                            redis_version=cluster.redis_version,
                            history_path=str(path.relative_to(out.parent)),  # the CSV and its histories move together
                        )
                    )
                    if result.metrics.verdict == "unknown":
                        unknown.append((spec.trial_id, result.metrics.problem))
                    elif result.metrics.verdict in ("unavailable", "degraded"):
                        no_progress[result.metrics.verdict] = no_progress.get(result.metrics.verdict, 0) + 1
                    index += 1
                    if progress:
                        progress(spec, result, index, len(todo))
    return MatrixReport(
        out=out,
        trials_run=len(todo),
        trials_skipped=len(specs) - len(todo),
        trial_ids=tuple(s.trial_id for s in specs),
        unknown=tuple(unknown),
        no_progress=no_progress,
    )
