"""Options shared by `run` and `matrix`, declared once, and the parsing behind them."""

from __future__ import annotations

import math
import sys
from dataclasses import replace
from typing import Annotated, Any

import typer
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)

from lockcompare.backends import describe_backends
from lockcompare.cli.core import err
from lockcompare.errors import InvalidValueError
from lockcompare.infra.cluster import DEFAULT_NODES
from lockcompare.infra.redisconn import parse_url_list, validate_url
from lockcompare.runner.matrix import (
    ClusterOptions,
    MatrixReport,
    Sweep,
)
from lockcompare.runner.scheduler import DEFAULT_CPU_SHARE, usable_cpus
from lockcompare.runner.trial import TrialResult
from lockcompare.spec.choices import FENCE_MODES, WORKLOADS, PauseHow, PausePoint
from lockcompare.spec.trialspec import Overrides, TrialSpec

#: Measured on 2 cores: a trial keeps 0.03-0.7 CPU busy at --time-scale 0.1 (mean ~0.2, pottery
#: the most) and far less at the lesson's scale, where trials mostly sleep. With 8 the lesson-scale
#: headline matrix took 4 min 6 s (serial: 26 min 51 s) with every cell matching the serial run,
#: and the README's main command 91.5 s (serial: 325.6 s); with 4 it took 83 s before pause-free
#: no-lock trials ran alone. Past 8 the runs are bounded by the solo trials and the longest
#: client-pause trials, not by slots; the CPU guard trims costly mixes (pottery) at small scales.
DEFAULT_JOBS = 4 * usable_cpus()


# Options shared by `run` and `matrix` (typer has no option groups, so they are declared once here).
TtlMs = Annotated[float | None, typer.Option("--ttl-ms", help="Lease TTL (default: the experiment's).")]
WorkMs = Annotated[float | None, typer.Option("--work-ms", help="Work inside the critical section.")]
PauseMs = Annotated[
    str | None,
    typer.Option("--pause-ms", help="Client pause length (0: none); a comma list sweeps it, e.g. 600,850,1200,1500."),
]
PausePoints = Annotated[
    str,
    typer.Option(
        "--pause-point",
        help="Where the pause lands: after-acquire (the lesson's) or before-write; a comma list sweeps.",
    ),
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
    int | None,
    typer.Option("--rounds", help="Critical sections per worker (default: 40, the lesson's; renewal-pause: 5)."),
]
Workers = Annotated[int, typer.Option("--workers", help="Worker processes.")]
TimeScale = Annotated[
    float, typer.Option("--time-scale", help="Multiply every time by this (0.1: ten times faster, same ratios).")
]
AcquireTimeoutMs = Annotated[
    float | None,
    typer.Option(
        "--acquire-timeout-ms",
        help="Give up a round's acquire after this (default 60000; node-fault experiments 2000).",
    ),
]
RetryDelayMs = Annotated[float, typer.Option("--retry-delay-ms", help="Wait between acquire attempts.")]
ThinkMs = Annotated[
    float, typer.Option("--think-ms", help="Pause between a release and the next acquire (a rival's turn).")
]
Seed = Annotated[int, typer.Option("--seed", help="Seed for the pause schedule and the retry/think jitter.")]
FaultNodes = Annotated[
    str,
    typer.Option(
        "--fault-nodes",
        help="Node faults and partition: how many lock nodes they hit (nodes 0..K-1); a comma list sweeps.",
    ),
]
RestartDelayMs = Annotated[
    str,
    typer.Option(
        "--restart-delay-ms",
        help="node-restart: how long the nodes stay down (0: restart at once); a comma list sweeps.",
    ),
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
        pause_ms=params["pause_ms"],
        pause_point=params["pause_point"],
        fence=params["fence"],
        pause_how=params["pause_how"],
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
