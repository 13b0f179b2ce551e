"""The command line: a thin typer layer over plain functions (run_trial, run_matrix, render, ...).

Every error a user can cause ends as one line on stderr and a non-zero exit code: lockcompare's
own errors (see errors.py), click's usage errors, and Ctrl-C (exit 130, servers stopped).
"""

from __future__ import annotations

import logging
import math
from dataclasses import replace
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from typer.core import TyperGroup

from lockcompare import table
from lockcompare.backends import add_plugin_paths, describe_backends, load_backend
from lockcompare.bench import render_bench, run_bench
from lockcompare.cluster import DEFAULT_NODES, describe, open_cluster
from lockcompare.errors import InvalidValueError, LockcompareError
from lockcompare.checker import VERDICT_MEANINGS
from lockcompare.evaluate import CARD_FORMATS, DEFAULT_AGAINST, QUICK_ROUNDS, QUICK_TIME_SCALE, evaluate, render_card
from lockcompare.experiments import (
    DEFAULT_CALL_TIMEOUT_MS,
    DEFAULT_EXPERIMENTS,
    DEFAULT_ROUNDS,
    DEFAULT_JITTER,
    DEFAULT_RETRY_DELAY_MS,
    DEFAULT_THINK_MS,
    DEFAULT_WORKERS,
    EXPERIMENTS,
    Overrides,
    PauseHow,
    PausePoint,
    TrialSpec,
)
from lockcompare.compare import compare_rows, comparison_table, differs
from lockcompare.contend import DEFAULT_WORKLOAD, WORKLOADS
from lockcompare.matrix import ClusterOptions, MatrixReport, Sweep, run_matrix, run_planned
from lockcompare.reproduce import find_row, spec_from_row
from lockcompare.scheduler import DEFAULT_CPU_SHARE, usable_cpus
from lockcompare.redisconn import parse_url_list, validate_url
from lockcompare.results import METRIC_COLUMNS, inspect_results, read_results, rewrite
from lockcompare.timeline import STEP_KINDS, load_history, render_timeline
from lockcompare.sections import FENCE_MODES
from lockcompare.trial import TrialResult

err = Console(stderr=True)

#: Measured on 2 cores: a trial keeps 0.03-0.7 CPU busy at --time-scale 0.1 (mean ~0.2, pottery
#: the most) and far less at the lesson's scale, where trials mostly sleep. With 8 the lesson-scale
#: headline matrix took 4 min 6 s (serial: 26 min 51 s) with every cell matching the serial run,
#: and the README's main command 91.5 s (serial: 325.6 s); with 4 it took 83 s before pause-free
#: no-lock trials ran alone. Past 8 the runs are bounded by the solo trials and the longest
#: client-pause trials, not by slots; the CPU guard trims costly mixes (pottery) at small scales.
DEFAULT_JOBS = 4 * usable_cpus()


class _OneLineLog(logging.Handler):
    """lockcompare's warnings (a node restarted, another run active, a file upgraded) as one
    ``lockcompare: warning: ...`` line each on stderr."""

    def emit(self, record: logging.LogRecord) -> None:
        print(f"lockcompare: {record.levelname.lower()}: {record.getMessage()}", file=sys.stderr, flush=True)


def _setup_logging() -> None:
    logger = logging.getLogger("lockcompare")
    if not any(isinstance(h, _OneLineLog) for h in logger.handlers):
        logger.addHandler(_OneLineLog(level=logging.WARNING))
    logger.setLevel(logging.WARNING)
    logger.propagate = False


class UnknownTrialsError(LockcompareError):
    """Some trials could not be judged (their problems were printed above)."""


class OneLineErrors(TyperGroup):
    """Run the group in non-standalone mode and turn every failure into one line + exit code."""

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:  # noqa: ARG002
        _setup_logging()
        try:
            result = super().main(*args, standalone_mode=False, **kwargs)
        except typer.TyperException as exc:  # typer's (vendored click's) usage and parameter errors
            ctx = getattr(exc, "ctx", None)
            hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
            print(f"lockcompare: error: {exc.format_message()}{hint}", file=sys.stderr)
            sys.exit(exc.exit_code)
        except (typer.Abort, KeyboardInterrupt):
            print("lockcompare: interrupted; servers and workers stopped", file=sys.stderr)
            sys.exit(130)
        except LockcompareError as exc:
            print(f"lockcompare: error: {exc}", file=sys.stderr)
            sys.exit(exc.exit_code)
        if result == 130:  # typer turns KeyboardInterrupt into Exit(130), returned in this mode
            print("lockcompare: interrupted; servers and workers stopped", file=sys.stderr)
        sys.exit(result if isinstance(result, int) else 0)


app = typer.Typer(
    cls=OneLineErrors,
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    help="Measure what distributed locks really guarantee, with real redis-server nodes and real worker processes.",
)

@app.callback()
def _everywhere(
    plugin_path: Annotated[
        str | None,
        typer.Option(
            "--plugin-path",
            envvar="LOCKCOMPARE_PLUGIN_PATH",
            help=f"Directories ('{os.pathsep}'-separated) to import package.module:Class backends from, before "
            "the installed packages; the current directory is searched after them.",
        ),
    ] = None,
) -> None:
    """Where module:Class plug-ins are found, for every command (spawned workers inherit it)."""
    add_plugin_paths(first=[d for d in (plugin_path or "").split(os.pathsep) if d], last=[os.getcwd()])


# Options shared by `run` and `matrix` (typer has no option groups, so they are declared once here).
TtlMs = Annotated[float | None, typer.Option("--ttl-ms", help="Lease TTL (default: the experiment's).")]
WorkMs = Annotated[float | None, typer.Option("--work-ms", help="Work inside the critical section.")]
PauseMs = Annotated[
    str | None,
    typer.Option("--pause-ms", help="Client pause length (0: none); a comma list sweeps it, e.g. 600,850,1200,1500."),
]
PausePoints = Annotated[
    str,
    typer.Option("--pause-point", help="Where the pause lands: after-acquire (the lesson's) or before-write; a comma list sweeps."),
]
PauseHowOption = Annotated[
    str,
    typer.Option(
        "--pause-how",
        help="sleep (in-process, the lesson's) or sigstop (a real freeze of the whole process); a comma list sweeps.",
    ),
]
Fences = Annotated[
    str,
    typer.Option(
        "--fence",
        help="What the resource checks: writes (fencing token on the write), all (on every access), "
        "token (check-and-set on the lease's random token); a comma list sweeps.",
    ),
]
Rounds = Annotated[
    int | None, typer.Option("--rounds", help="Critical sections per worker (default: 40, the lesson's; renewal-pause: 5).")
]
Workers = Annotated[int, typer.Option("--workers", help="Worker processes.")]
TimeScale = Annotated[
    float, typer.Option("--time-scale", help="Multiply every time by this (0.1: ten times faster, same ratios).")
]
AcquireTimeoutMs = Annotated[
    float | None,
    typer.Option(
        "--acquire-timeout-ms", help="Give up a round's acquire after this (default 60000; node-fault experiments 2000)."
    ),
]
RetryDelayMs = Annotated[float, typer.Option("--retry-delay-ms", help="Wait between acquire attempts.")]
ThinkMs = Annotated[
    float, typer.Option("--think-ms", help="Pause between a release and the next acquire (a rival's turn).")
]
Seed = Annotated[int, typer.Option("--seed", help="Seed for the pause schedule and the retry/think jitter.")]
FaultNodes = Annotated[
    str, typer.Option("--fault-nodes", help="Node faults and partition: how many lock nodes they hit (nodes 0..K-1); a comma list sweeps.")
]
RestartDelayMs = Annotated[
    str,
    typer.Option("--restart-delay-ms", help="node-restart: how long the nodes stay down (0: restart at once); a comma list sweeps."),
]
Persistence = Annotated[
    str,
    typer.Option(
        "--persistence",
        help="node-restart: none (restart empty) or aof-always (AOF with appendfsync always, kept across the restart); "
        "a comma list sweeps.",
    ),
]
WorkloadOption = Annotated[
    str,
    typer.Option(
        "--workload",
        help="lesson (each worker runs its rounds and stops, the lesson's) or contend (a worker that has run "
        "its rounds keeps contending with extra rounds, marked as such and not counted, until every worker "
        "is done: no worker ever runs alone, so a lock cannot look better by letting one finish early); "
        "a comma list sweeps.",
    ),
]
WaitReplicas = Annotated[
    str,
    typer.Option(
        "--wait-replicas",
        help="failover: replicas that must acknowledge the lock key (WAIT N after SET, on single and fenced; "
        "a lease not acknowledged in TTL/10 is released and refused); 0: no WAIT; a comma list sweeps.",
    ),
]
Jitter = Annotated[
    float,
    typer.Option(
        "--jitter",
        help="Random spread of the retry delay (±J) and think time (±J/2), seeded; 0 turns it off.",
    ),
]
CallTimeoutMs = Annotated[
    float,
    typer.Option(
        "--call-timeout-ms",
        help="Deadline on each backend call (construct, acquire, release, close); a call past it makes "
        "the trial unknown and the matrix goes on. Not scaled by --time-scale.",
    ),
]
Nodes = Annotated[
    str | None, typer.Option("--nodes", help="External lock nodes: redis URLs, comma-separated (with --resource).")
]
ResourceUrl = Annotated[str | None, typer.Option("--resource", help="External resource server: a redis URL.")]
RedisServer = Annotated[
    str | None,
    typer.Option("--redis-server", envvar="LOCKCOMPARE_REDIS_SERVER", help="redis-server binary for embedded nodes."),
]
RedlockNodes = Annotated[
    int | None, typer.Option("--redlock-nodes", help="Nodes a multi-node lock uses (3, 5, 7; default: all).")
]


def _cluster_options(
    *, nodes: str | None, resource: str | None, redis_server: str | None, redlock_nodes: int | None
) -> ClusterOptions:
    """Where the servers come from; the embedded cluster spawns enough nodes for --redlock-nodes."""
    node_urls = tuple(parse_url_list(nodes)) if nodes is not None else None
    resource_url = validate_url(resource) if resource is not None else None
    if redlock_nodes is not None and redlock_nodes < 1:
        raise InvalidValueError(f"--redlock-nodes must be >= 1, got {redlock_nodes}")
    if node_urls is not None and redlock_nodes is not None and redlock_nodes > len(node_urls):
        raise InvalidValueError(f"--redlock-nodes {redlock_nodes} but only {len(node_urls)} --nodes given")
    count = max(redlock_nodes or DEFAULT_NODES, DEFAULT_NODES)
    return ClusterOptions(nodes=node_urls, resource=resource_url, redis_server=redis_server, node_count=count)


_OVERRIDE_FIELDS = (
    "ttl_ms", "work_ms", "rounds", "workers", "time_scale", "acquire_timeout_ms", "retry_delay_ms", "think_ms",
    "seed", "jitter", "call_timeout_ms",
)  # fmt: skip


def _trial_settings(params: dict[str, Any]) -> tuple[Overrides, Sweep, ClusterOptions]:
    """The settings shared by ``run`` and ``matrix``, from their (identically named) parameters."""
    overrides = Overrides(**{name: params[name] for name in _OVERRIDE_FIELDS})
    sweep = _sweep(
        pause_ms=params["pause_ms"], pause_point=params["pause_point"], fence=params["fence"], pause_how=params["pause_how"]
    )
    sweep = replace(
        sweep,
        fault_nodes=tuple(int(v) for v in _numbers("--fault-nodes", params["fault_nodes"], whole=True)),
        restart_delays_ms=tuple(_numbers("--restart-delay-ms", params["restart_delay_ms"])),
        persistences=tuple(_choices("--persistence", params["persistence"], ("none", "aof-always"))),
        workloads=tuple(_choices("--workload", params["workload"], WORKLOADS)),
        wait_replicas=_counts("--wait-replicas", params["wait_replicas"]),
    )
    options = _cluster_options(
        nodes=params["nodes"],
        resource=params["resource"],
        redis_server=params["redis_server"],
        redlock_nodes=params["redlock_nodes"],
    )
    return overrides, sweep, options


def _sweep(*, pause_ms: str | None, pause_point: str, fence: str, pause_how: str = "sleep") -> Sweep:
    """The swept settings from their comma lists, each value checked."""
    pauses: list[float | None] = [None]
    if pause_ms is not None:
        try:
            pauses = [float(v) for v in _split(pause_ms)]
        except ValueError:
            raise InvalidValueError(f"--pause-ms takes numbers separated by commas, got {pause_ms!r}") from None
        if not pauses or any(not (math.isfinite(v) and v >= 0) for v in pauses):
            raise InvalidValueError(f"--pause-ms values must be finite numbers >= 0, got {pause_ms!r}")
    points = _split(pause_point)
    known_points = [p.value for p in PausePoint]
    if not points or any(p not in known_points for p in points):
        raise InvalidValueError(f"--pause-point takes {' or '.join(known_points)}, got {pause_point!r}")
    fences = _split(fence)
    if not fences or any(f not in FENCE_MODES for f in fences):
        raise InvalidValueError(f"--fence takes {', '.join(FENCE_MODES)}, got {fence!r}")
    hows = _split(pause_how)
    known_hows = [h.value for h in PauseHow]
    if not hows or any(h not in known_hows for h in hows):
        raise InvalidValueError(f"--pause-how takes {' or '.join(known_hows)}, got {pause_how!r}")
    return Sweep(
        pause_ms=tuple(pauses),
        pause_points=tuple(PausePoint(p) for p in points),
        fences=tuple(fences),
        pause_hows=tuple(PauseHow(h) for h in hows),
    )


def _numbers(flag: str, text: str, *, whole: bool = False) -> list[float]:
    """A comma list of finite numbers >= 0 (whole numbers >= 1 with ``whole``)."""
    try:
        values = [float(v) for v in _split(text)]
    except ValueError:
        raise InvalidValueError(f"{flag} takes numbers separated by commas, got {text!r}") from None
    if not values or any(not (math.isfinite(v) and v >= 0) for v in values):
        raise InvalidValueError(f"{flag} takes finite numbers >= 0, got {text!r}")
    if whole and any(v < 1 or not v.is_integer() for v in values):
        raise InvalidValueError(f"{flag} takes whole numbers >= 1, got {text!r}")
    return values


def _counts(flag: str, text: str) -> tuple[int, ...]:
    """A comma list of whole numbers >= 0."""
    values = _numbers(flag, text)
    if any(not v.is_integer() for v in values):
        raise InvalidValueError(f"{flag} takes whole numbers >= 0, got {text!r}")
    return tuple(int(v) for v in values)


def _choices(flag: str, text: str, known: tuple[str, ...]) -> list[str]:
    values = _split(text)
    if not values or any(v not in known for v in values):
        raise InvalidValueError(f"{flag} takes {' or '.join(known)}, got {text!r}")
    return values


def _split(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _progress_bar() -> tuple[Progress, Any]:
    """A progress bar that appears with the first trial (so a bad option prints no empty bar)."""
    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
    )
    task = bar.add_task("starting", total=None)

    def update(spec: TrialSpec, result: TrialResult | None, done: int, total: int) -> None:
        label = f"{spec.backend} × {spec.experiment} #{spec.trial}"
        if result is not None:
            m = result.metrics
            label = f"{label}: {m.conflicts}/{m.entries} conflicts, {m.lost_updates} lost, {result.wall_s:.1f} s"
        if not err.is_terminal:  # a log file or CI: one plain line per finished trial
            if result is not None:
                print(f"[{done}/{total}] {label}", file=sys.stderr, flush=True)
            return
        if not bar.live.is_started:
            bar.start()
        bar.update(task, description=label, completed=done, total=total)

    return bar, update


def _parallelism_note(report: MatrixReport) -> str:
    """How many trials ran at once, and why not more (the CPU guard), in one line."""
    note = f"up to {report.jobs_used} of --jobs {report.jobs} trials ran at once"
    if report.jobs_used < report.jobs and report.busy_cpu:
        (backend, experiment), busy = max(report.busy_cpu.items(), key=lambda item: item[1])
        note += (
            f"; more would keep over {DEFAULT_CPU_SHARE:.0%} of {usable_cpus()} CPUs busy "
            f"(busiest: {backend} × {experiment}, {busy:.2f} CPU per trial)"
        )
    return note


def _default_backends() -> list[str]:
    """Every registered backend that can run here; the others are named on stderr, one line per
    reason (etcd and etcd-fenced share theirs: one missing binary)."""
    usable: list[str] = []
    skipped: dict[str, list[str]] = {}
    for info in describe_backends():
        if info.problem:
            skipped.setdefault(info.problem, []).append(info.name)
        else:
            usable.append(info.name)
    for problem, names in skipped.items():
        print(f"lockcompare: skipping {', '.join(names)}: {problem}", file=sys.stderr)
    return usable


@app.command()
def matrix(
    backends: Annotated[
        str | None, typer.Option("--backends", help="Comma-separated backends (default: every registered one).")
    ] = None,
    experiments: Annotated[
        str | None,
        typer.Option(
            "--experiments",
            help="Comma-separated experiments (default: baseline,short-ttl,client-pause, the lesson's; "
            "see 'lockcompare experiments' for the node-fault and renewal ones).",
        ),
    ] = None,
    trials: Annotated[int, typer.Option("--trials", help="Trials per backend x experiment cell.")] = 3,
    out_path: Annotated[
        Path | None, typer.Option("--out", help="Results CSV (default: a new file under results/).")
    ] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue --out, skipping trials it already holds.")] = False,
    fmt: Annotated[str, typer.Option("--format", help="Table format: github, simple, latex, csv.")] = "github",
    ttl_ms: TtlMs = None,
    work_ms: WorkMs = None,
    pause_ms: PauseMs = None,
    pause_point: PausePoints = "after-acquire",
    pause_how: PauseHowOption = "sleep",
    fence: Fences = "writes",
    rounds: Rounds = None,
    workers: Workers = DEFAULT_WORKERS,
    time_scale: TimeScale = 1.0,
    acquire_timeout_ms: AcquireTimeoutMs = None,
    retry_delay_ms: RetryDelayMs = DEFAULT_RETRY_DELAY_MS,
    think_ms: ThinkMs = DEFAULT_THINK_MS,
    seed: Seed = 1,
    jitter: Jitter = DEFAULT_JITTER,
    call_timeout_ms: CallTimeoutMs = DEFAULT_CALL_TIMEOUT_MS,
    fault_nodes: FaultNodes = "1",
    restart_delay_ms: RestartDelayMs = "0",
    persistence: Persistence = "none",
    workload: WorkloadOption = DEFAULT_WORKLOAD,
    wait_replicas: WaitReplicas = "0",
    redlock_nodes: RedlockNodes = None,
    nodes: Nodes = None,
    resource: ResourceUrl = None,
    redis_server: RedisServer = None,
    jobs: Annotated[
        int,
        typer.Option(
            "--jobs",
            help=f"Trials run at once, each on its own embedded servers (default {DEFAULT_JOBS}: four per CPU); "
            f"fewer while the running trials would keep more than {DEFAULT_CPU_SHARE:.0%} of the CPUs busy "
            "(measured per trial); pause-free no-lock trials (none, atomic, optimistic) run alone, "
            "their conflicts hang on millisecond timing. 1: one after another. With --nodes/--resource "
            "trials run one at a time: external servers are shared, and neighbours would distort each "
            "other's timing.",
        ),
    ] = DEFAULT_JOBS,
    fresh_workers: Annotated[
        bool,
        typer.Option(
            "--fresh-workers", help="Spawn new worker processes for every trial instead of reusing warm ones."
        ),
    ] = False,
) -> None:
    """Run every selected backend under every selected experiment; one CSV row per trial."""
    if fmt not in table.FORMATS:
        raise typer.BadParameter(f"{fmt!r} is not one of {', '.join(table.FORMATS)}", param_hint="--format")
    overrides, sweep, options = _trial_settings(locals())
    target = out_path or Path("results") / time.strftime("matrix-%Y%m%d-%H%M%S.csv")
    bar, update = _progress_bar()
    backend_names = _split(backends) if backends is not None else _default_backends()
    experiment_names = _split(experiments) if experiments is not None else list(DEFAULT_EXPERIMENTS)
    try:
        report = run_matrix(
            backends=backend_names,
            experiments=experiment_names,
            trials=trials,
            overrides=overrides,
            out=target,
            cluster_options=options,
            redlock_nodes=redlock_nodes,
            sweep=sweep,
            resume=resume,
            progress=update,
            jobs=jobs,
            fresh_workers=fresh_workers,
        )
    finally:
        bar.stop()
    err.print(f"{report.trials_run} trials run, {report.trials_skipped} already in {report.out}")
    if report.trials_run:
        err.print(_parallelism_note(report))
    if report.out.exists():
        rows = _in_plan_order(read_results(report.out), backends=backend_names, experiments=experiment_names)
        typer.echo(table.render(rows, fmt=fmt))
    _fail_on_unknown(report)


def _fail_on_unknown(report: MatrixReport) -> None:
    """Exit non-zero when a trial could not be judged, after saying why on stderr. A trial that
    made no progress is a result (a lock may rightly refuse), said on stderr but exit code 0."""
    for verdict, count in sorted(report.no_progress.items()):
        print(f"lockcompare: note: {count} trial(s) {verdict}: {VERDICT_MEANINGS[verdict]}", file=sys.stderr)
    for trial_id, problem in report.unknown:
        print(f"lockcompare: unknown verdict for {trial_id}: {problem}", file=sys.stderr)
    if report.unknown:
        raise UnknownTrialsError(f"{len(report.unknown)} trial(s) could not be judged (verdict unknown); see above")


def _in_plan_order(
    rows: list[dict[str, Any]], *, backends: list[str], experiments: list[str]
) -> list[dict[str, Any]]:
    """Rows are appended as trials finish; the table lists cells in the order they were asked for
    (each backend in turn, its experiments in turn), whatever order parallel trials finished in.
    Rows of other cells (from an earlier run in a resumed file) follow, in file order."""
    b_rank = {name: i for i, name in enumerate(backends)}
    e_rank = {name: i for i, name in enumerate(experiments)}
    return sorted(rows, key=lambda r: (b_rank.get(r["backend"], len(b_rank)), e_rank.get(r["experiment"], len(e_rank))))


@app.command()
def run(
    ctx: typer.Context,
    backend: Annotated[str, typer.Option("--backend", help="A backend name or package.module:Class.")] = "single",
    experiment: Annotated[str, typer.Option("--experiment", help="An experiment name.")] = "baseline",
    out_path: Annotated[Path | None, typer.Option("--out", help="Also append the row to this CSV.")] = None,
    ttl_ms: TtlMs = None,
    work_ms: WorkMs = None,
    pause_ms: PauseMs = None,
    pause_point: PausePoints = "after-acquire",
    pause_how: PauseHowOption = "sleep",
    fence: Fences = "writes",
    rounds: Rounds = None,
    workers: Workers = DEFAULT_WORKERS,
    time_scale: TimeScale = 1.0,
    acquire_timeout_ms: AcquireTimeoutMs = None,
    retry_delay_ms: RetryDelayMs = DEFAULT_RETRY_DELAY_MS,
    think_ms: ThinkMs = DEFAULT_THINK_MS,
    seed: Seed = 1,
    jitter: Jitter = DEFAULT_JITTER,
    call_timeout_ms: CallTimeoutMs = DEFAULT_CALL_TIMEOUT_MS,
    fault_nodes: FaultNodes = "1",
    restart_delay_ms: RestartDelayMs = "0",
    persistence: Persistence = "none",
    workload: WorkloadOption = DEFAULT_WORKLOAD,
    wait_replicas: WaitReplicas = "0",
    redlock_nodes: RedlockNodes = None,
    nodes: Nodes = None,
    resource: ResourceUrl = None,
    redis_server: RedisServer = None,
    from_row: Annotated[
        str | None,
        typer.Option(
            "--from",
            metavar="RESULTS.csv:ROW",
            help="Rerun one trial of a results file with exactly its settings and seed: ROW is its trial id "
            "or its row number (1 = the first row). Takes no other trial option.",
        ),
    ] = None,
) -> None:
    """Run a single trial and print its metrics (or rerun a recorded one with --from)."""
    if from_row is not None:
        given = [
            f"--{name.replace('_', '-')}" for name in ctx.params
            if name not in _RERUN_OPTIONS and getattr(ctx.get_parameter_source(name), "name", "DEFAULT") != "DEFAULT"
        ]  # fmt: skip
        if given:
            raise InvalidValueError(f"--from takes every setting from the row; drop {', '.join(given)}")
        options = _cluster_options(nodes=nodes, resource=resource, redis_server=redis_server, redlock_nodes=None)
        _run_from(from_row, out_path=out_path, options=options)
        return
    overrides, sweep, options = _trial_settings({k: v for k, v in locals().items() if k != "ctx"})
    if sweep.cells_per_trial() > 1:
        raise InvalidValueError("run takes one value per option; use matrix to sweep a list")
    with tempfile.TemporaryDirectory(prefix="lockcompare-run-") as scratch:
        target = out_path or Path(scratch) / "run.csv"
        report = run_matrix(
            backends=[backend], experiments=[experiment], trials=1, overrides=overrides, out=target,
            cluster_options=options, redlock_nodes=redlock_nodes, sweep=sweep, resume=out_path is not None,
        )  # fmt: skip
        (row,) = [r for r in read_results(target) if r["trial_id"] == report.trial_ids[0]][-1:]
        if report.trials_run == 0:
            err.print(f"this trial is already in {target} (run {row['run_id']}); its row:")
        for key in ("trial_id", "backend", "experiment", "ttl_ms", "work_ms", "pause_ms", "pause_point", "pause_how",
                    "resource_check", *METRIC_COLUMNS, "wall_s"):  # fmt: skip
            typer.echo(f"{key:>24}: {row[key]}")
        if out_path is not None:
            typer.echo(f"{'history':>24}: {target.parent / row['history']}")
        _fail_on_unknown(report)


#: Options ``run --from`` accepts beside the row: where to write, and where the servers are.
_RERUN_OPTIONS = {"from_row", "out_path", "nodes", "resource", "redis_server"}


def _run_from(source: str, *, out_path: Path | None, options: ClusterOptions) -> None:
    """Rerun the trial ``FILE:ROW`` names and print its verdict beside the recorded one."""
    path_text, sep, selector = source.rpartition(":")
    if not sep or not path_text or not selector:
        raise InvalidValueError(f"--from takes RESULTS.csv:ROW (a trial id or a row number), got {source!r}")
    original = find_row(read_results(Path(path_text)), selector)
    spec = spec_from_row(original)
    if original.get("cluster") == "external" and options.nodes is None:
        err.print("note: the row ran against external servers; this rerun uses the embedded cluster")
    with tempfile.TemporaryDirectory(prefix="lockcompare-run-") as scratch:
        target = out_path or Path(scratch) / "run.csv"
        report = run_planned([spec], out=target, cluster_options=options, resume=out_path is not None)
        (row,) = [r for r in read_results(target) if r["trial_id"] == spec.trial_id][-1:]
        typer.echo(f"{'trial_id':>24}: {spec.trial_id}")
        for key in ("verdict", "conflicts", "lost_updates", "entries", "writes_rejected"):
            same = "" if str(row[key]) == str(original[key]) else "   (differs)"
            typer.echo(f"{key:>24}: {row[key]}   recorded: {original[key]}{same}")
        typer.echo(f"{'recorded by':>24}: run {original['run_id']}, lockcompare {original['lockcompare_version']}, "
                   f"revision {original['source_revision'] or '?'}")  # fmt: skip
        if out_path is not None:
            typer.echo(f"{'history':>24}: {target.parent / row['history']}")
        _fail_on_unknown(report)


@app.command()
def bench(
    backends_list: Annotated[
        str, typer.Option("--backends", help="Comma-separated backends to measure (the floor row is always first).")
    ] = "single,redlock,pottery,redis-py",
    iterations: Annotated[int, typer.Option("--iterations", help="Timed acquire+release cycles per backend.")] = 500,
    ttl_ms: Annotated[int, typer.Option("--ttl-ms", help="Lease TTL (long: nothing should expire).")] = 10_000,
    fmt: Annotated[str, typer.Option("--format", help="github, simple, latex or csv.")] = "github",
    via_proxy: Annotated[
        str,
        typer.Option(
            "--via-proxy",
            help="Comma-separated backends also measured through link proxies (rows NAME-via-proxy; "
            "embedded cluster only; '' for none).",
        ),
    ] = "single",
    redlock_nodes: RedlockNodes = None,
    nodes: Nodes = None,
    resource: ResourceUrl = None,
    redis_server: RedisServer = None,
) -> None:
    """Acquire+release latency per backend, beside the floor (bare SET NX PX + release script).

    A benchmark, not a test: the ratios compare rows measured in this one run.
    """
    table.check_format(fmt)
    options = _cluster_options(nodes=nodes, resource=resource, redis_server=redis_server, redlock_nodes=redlock_nodes)
    names = _split(backends_list)
    proxied = _split(via_proxy)
    for name in (*names, *proxied):
        load_backend(name)  # a bad name fails before any server starts
    with open_cluster(
        nodes=options.nodes, resource=options.resource, node_count=options.node_count, redis_server=options.redis_server
    ) as cluster:
        print(f"bench: {describe(cluster)}, {iterations} cycles per backend", file=sys.stderr)
        if not cluster.embedded:
            proxied = []  # the proxies forward to loopback ports: external nodes are measured directly
        rows = run_bench(cluster=cluster, backends=names, iterations=iterations, ttl_ms=ttl_ms, proxied=proxied)
    typer.echo(render_bench(rows, fmt=fmt))


@app.command()
def compare(
    path_a: Annotated[Path, typer.Argument(help="Results CSV A (e.g. a serial run).")],
    path_b: Annotated[Path, typer.Argument(help="Results CSV B (e.g. the same matrix with --jobs 4).")],
    fmt: Annotated[str, typer.Option("--format", help="github, simple, latex or csv.")] = "github",
    ignore: Annotated[
        str, typer.Option("--ignore", help="Settings that do not split cells here, comma-separated (e.g. jitter).")
    ] = "",
) -> None:
    """Compare two results files cell by cell: conflict rate and lost updates with 95% intervals.

    A cell is flagged when either file's mean lies outside the other's interval; exit code 1 if
    any cell differs or is in one file only (as diff does), 0 otherwise.
    """
    table.check_format(fmt)
    lines = compare_rows(read_results(path_a), read_results(path_b), ignore=_split(ignore))
    headers, cells = comparison_table(lines)
    typer.echo(table.format_table(headers, cells, fmt=fmt))
    moved = [line for line in lines if differs(line)]
    err.print(f"{len(moved)} of {len(lines)} cells differ between {path_a} and {path_b}")
    if moved:
        raise typer.Exit(1)


@app.command(name="table")
def table_command(
    path: Annotated[Path, typer.Argument(help="A results CSV written by `lockcompare matrix`.")],
    fmt: Annotated[str, typer.Option("--format", help="github, simple, latex or csv.")] = "github",
) -> None:
    """Print the summary table of a results CSV (computed from the CSV alone)."""
    found = inspect_results(path)
    if found.truncated_lines:
        lines = ", ".join(map(str, found.truncated_lines))
        print(f"lockcompare: warning: {path}: left out truncated row(s) at line {lines}", file=sys.stderr)
    typer.echo(table.render(found.rows, fmt=fmt))


@app.command()
def history(
    path: Annotated[Path, typer.Argument(help="A trial's history (results/<name>.histories/<trial>.jsonl.gz).")],
    from_ms: Annotated[
        float | None, typer.Option("--from-ms", help="Show events from this time (ms after the first).")
    ] = None,
    to_ms: Annotated[float | None, typer.Option("--to-ms", help="...up to this time.")] = None,
    kinds: Annotated[
        str | None,
        typer.Option(
            "--kinds",
            help=f"Show only these steps, comma-separated (of {', '.join(STEP_KINDS)}); e.g. 'fault' lists "
            "the runner's injections, with who held the lock on each node when a node fault struck.",
        ),
    ] = None,
    plot: Annotated[
        Path | None,
        typer.Option(
            "--plot",
            help="Draw the timeline into this PNG instead (needs matplotlib). Default window: around the "
            "first lost update, else the first conflict, else the first 3 s.",
        ),
    ] = None,
    ttl_ms: Annotated[
        float | None,
        typer.Option("--ttl-ms", help="With --plot: the lease TTL as run (default: the CSV beside the histories)."),
    ] = None,
) -> None:
    """Print a trial's history as a timeline: who acquired, read, paused and wrote, and when."""
    shown = None
    if kinds is not None:
        shown = {k.strip() for k in kinds.split(",") if k.strip()}
        if not shown or not shown <= set(STEP_KINDS):
            raise InvalidValueError(f"--kinds takes step kinds among {', '.join(STEP_KINDS)}, got {kinds!r}")
        if plot is not None:
            raise InvalidValueError("--kinds selects lines of the text timeline; --plot draws every step")
    events = load_history(path)
    if plot is None:
        typer.echo(render_timeline(events, from_ms=from_ms or 0, to_ms=to_ms, kinds=shown))
        return
    from lockcompare.plots import plot_timeline  # matplotlib is imported only when a picture is drawn
    from lockcompare.report import row_for_history

    row = row_for_history(path)
    if ttl_ms is None and row is not None:
        ttl_ms = row["ttl_ms"]
    title = row["trial_id"] if row is not None else path.name
    typer.echo(plot_timeline(events, out=plot, title=title, ttl_ms=ttl_ms, from_ms=from_ms, to_ms=to_ms))


@app.command()
def report(
    path: Annotated[Path, typer.Argument(help="A results CSV written by `lockcompare matrix` or `run --out`.")],
    out_dir: Annotated[
        Path | None,
        typer.Option("--out", help="Directory for README.md and its PNGs (default: <csv>.report/ beside it)."),
    ] = None,
) -> None:
    """Write a Markdown report (table, plots, first lost update per cell, commands, provenance)."""
    from lockcompare.report import write_report  # imports matplotlib

    target = out_dir if out_dir is not None else path.with_name(path.stem + ".report")
    for written in write_report(results=path, out=target):
        typer.echo(written)


@app.command()
def backends() -> None:
    """List the registered backends (built-ins and plug-ins) and whether each is usable here."""
    for info in describe_backends():
        status = info.summary if not info.problem else f"NOT VIABLE: {info.problem}"
        typer.echo(f"{info.name:<12} {status}")
    typer.echo("\nAny other class: --backend package.module:Class")


@app.command()
def experiments() -> None:
    """List the experiments and the claim each one tests, and what each verdict means."""
    for exp in EXPERIMENTS.values():
        times = f"ttl {exp.ttl_ms:g} ms, work {exp.work_ms:g} ms, pause {exp.pause_ms:g} ms"
        typer.echo(f"{exp.name:<13} {times:<40} {exp.claim}")
    typer.echo("\nVerdicts (one per trial):")
    for verdict, meaning in VERDICT_MEANINGS.items():
        typer.echo(f"  {verdict:<20} {meaning}")


@app.command()
def upgrade(
    paths: Annotated[list[Path], typer.Argument(help="Results CSVs to bring to the current schema.")],
) -> None:
    """Rewrite results CSVs in the current schema, atomically (truncated rows are dropped and named)."""
    found = [inspect_results(path) for path in paths]  # every file readable before any is rewritten
    for f in found:
        if not f.needs_rewrite:
            err.print(f"{f.path}: already current ({len(f.rows)} rows)")
            continue
        rewrite(f.path, f.rows)
        dropped = f"; dropped truncated row(s) at line {', '.join(map(str, f.truncated_lines))}" if f.truncated_lines else ""
        err.print(f"{f.path}: rewritten from schema {f.oldest_schema} ({len(f.rows)} rows){dropped}")


@app.command(name="evaluate")
def evaluate_command(
    backend: Annotated[str, typer.Argument(help="A backend name or package.module:Class.")],
    against: Annotated[
        str, typer.Option("--against", help="Built-ins run beside it under the same experiments, comma-separated.")
    ] = ",".join(DEFAULT_AGAINST),
    quick: Annotated[
        bool, typer.Option("--quick", help=f"--time-scale {QUICK_TIME_SCALE:g} and {QUICK_ROUNDS} rounds: about a minute.")
    ] = False,
    time_scale: Annotated[
        float | None, typer.Option("--time-scale", help="Multiply every time by this (default 1: the lesson's times).")
    ] = None,
    rounds: Annotated[int | None, typer.Option("--rounds", help=f"Rounds per worker (default {DEFAULT_ROUNDS}).")] = None,
    trials: Annotated[int, typer.Option("--trials", help="Trials per backend x experiment.")] = 1,
    fmt: Annotated[str, typer.Option("--format", help="markdown or text.")] = "text",
    out_path: Annotated[
        Path | None, typer.Option("--out", help="Results CSV (default: a new file under results/).")
    ] = None,
    call_timeout_s: Annotated[
        float, typer.Option("--call-timeout-s", help="Deadline of every backend call in the battery.")
    ] = 5.0,
    redis_server: RedisServer = None,
) -> None:
    """A report card for one backend: the conformance battery, then baseline, client-pause and short-ttl
    beside the built-ins that bracket it. Exit 0 only when every property it claims holds."""
    if fmt not in CARD_FORMATS:
        raise typer.BadParameter(f"{fmt!r} is not one of {', '.join(CARD_FORMATS)}", param_hint="--format")
    if call_timeout_s <= 0:
        raise InvalidValueError(f"--call-timeout-s must be > 0, got {call_timeout_s:g}")
    scale = time_scale if time_scale is not None else (QUICK_TIME_SCALE if quick else 1.0)
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in backend)
    target = out_path or Path("results") / time.strftime(f"evaluate-{safe}-%Y%m%d-%H%M%S.csv")
    bar, update = _progress_bar()
    try:
        card = evaluate(
            backend=backend,
            against=_split(against),
            out=target,
            time_scale=scale,
            rounds=rounds if rounds is not None else (QUICK_ROUNDS if quick else DEFAULT_ROUNDS),
            trials=trials,
            call_timeout_s=call_timeout_s,
            cluster_options=ClusterOptions(redis_server=redis_server),
            on_property=lambda r: print(f"battery: {r.status:<11} {r.prop.title}", file=sys.stderr, flush=True),
            progress=update,
        )
    finally:
        bar.stop()
    typer.echo(render_card(card, fmt=fmt))
    raise typer.Exit(card.exit_code)


def main() -> None:
    app()
