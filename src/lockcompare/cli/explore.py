"""``lockcompare explore BACKEND``: search fault schedules for one that breaks a property, shrink it, show it."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Annotated

import typer

from lockcompare.cli.core import app
from lockcompare.cli.options import (
    SEARCH_SETTINGS,
    LockServersOption,
    Nodes,
    NodesFile,
    PostgresUrl,
    RedisServer,
    RedlockNodes,
    ResourceUrl,
    _cluster_options,
    one_value_each,
    server_args,
    with_trial_settings,
)
from lockcompare.errors import InvalidValueError
from lockcompare.evaluation.defaults import DEFAULT_TIME_SCALE
from lockcompare.evaluation.explore import DEFAULT_PROPERTY, PROPERTIES, TrialOutcome, TrialRequest
from lockcompare.evaluation.schedules import DEFAULT_KINDS, KINDS, MAX_STEPS, parse_kinds
from lockcompare.scenario.choices import FENCE_MODES
from lockcompare.scenario.limits import check_count
from lockcompare.scenario.numbers import parse_number
from lockcompare.scenario.schedule import MAX_SCHEDULE_STEPS

_UNITS = {"s": 1, "m": 60, "h": 3600}
#: A week: a search longer than that is a typo (or 400 nines), not a plan.
MAX_BUDGET_S = 7 * 24 * 3600


def parse_budget(text: str, *, flag: str = "--budget", zero_ok: bool = False) -> float:
    """``15m``, ``90s``, ``1h``, ``1h30m`` or plain seconds → seconds (0 only with ``zero_ok``).

    >>> parse_budget("15m"), parse_budget("90"), parse_budget("1h30m"), parse_budget("0", zero_ok=True)
    (900.0, 90.0, 5400.0, 0.0)
    """
    text = text.strip().lower()
    shown = text if len(text) <= 40 else f"{text[:12]}... ({len(text)} characters)"
    if len(text) > 40:
        raise InvalidValueError(f"{flag} takes a duration like 15m, 90s, 1h30m or seconds, got {shown!r}")
    if re.fullmatch(r"\d+(\.\d+)?", text):
        seconds = parse_number(text, what=flag)
    elif re.fullmatch(r"(\d+(\.\d+)?[hms])+", text):
        seconds = sum(parse_number(n, what=flag) * _UNITS[u] for n, _, u in re.findall(r"(\d+(\.\d+)?)([hms])", text))
    else:
        raise InvalidValueError(f"{flag} takes a duration like 15m, 90s, 1h30m or seconds, got {shown!r}")
    if seconds < 0 or (seconds == 0 and not zero_ok):
        raise InvalidValueError(f"{flag} must be > 0, got {shown!r}")
    if seconds > MAX_BUDGET_S:
        raise InvalidValueError(f"{flag} must be at most {MAX_BUDGET_S // 3600} h, got {shown!r}")
    return seconds


def print_trial(phase: str, request: TrialRequest, outcome: TrialOutcome, result: str) -> None:
    """One line per trial on stderr: the search is long, and its course is the evidence."""
    problem = f" ({outcome.problem})" if outcome.problem else ""
    print(
        f"explore: {phase:<6} {result:<8} {outcome.verdict:<19} {outcome.trial_seconds:5.1f} s  "
        f"r{request.rounds} s{request.seed}  {request.schedule}{problem}",
        file=sys.stderr,
        flush=True,
    )


@app.command("explore")
@with_trial_settings(only=SEARCH_SETTINGS)
def explore_command(
    backend: Annotated[str, typer.Argument(help="A backend name or package.module:Class.")],
    budget: Annotated[str, typer.Option("--budget", help="Wall time to search for: 15m, 90s, 1h30m.")] = "15m",
    faults: Annotated[
        str, typer.Option("--faults", help=f"Fault kinds to draw steps from, comma-separated (of {', '.join(KINDS)}).")
    ] = ",".join(DEFAULT_KINDS),
    prop: Annotated[
        str, typer.Option("--property", help=f"The property to break: {' | '.join(PROPERTIES)}.")
    ] = DEFAULT_PROPERTY,
    out_dir: Annotated[
        Path | None,
        typer.Option("--out", help="Directory for everything tried (default: results/explore-BACKEND-PROPERTY)."),
    ] = None,
    resume: Annotated[
        bool, typer.Option("--resume", help="Continue the search in --out: trials already there are not run again.")
    ] = False,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the draws; each trial's seed derives from it.")] = 1,
    rounds: Annotated[int, typer.Option("--rounds", help="Rounds per worker in each searched trial.")] = 8,
    time_scale: Annotated[
        float | None,
        typer.Option(
            "--time-scale",
            help=f"Multiply every time (the trial's and the schedule's) by this (default {DEFAULT_TIME_SCALE:g}, or "
            "the next of 1, 2 at which the backend can express the TTL).",
        ),
    ] = None,
    fence: Annotated[
        str, typer.Option("--fence", help=f"What a fenced resource checks: {', '.join(FENCE_MODES)}.")
    ] = "writes",
    reruns: Annotated[
        int, typer.Option("--reruns", help="Reruns of each shrinking candidate: it still fails when one of them does.")
    ] = 5,
    rate_runs: Annotated[int, typer.Option("--rate-runs", help="Reruns of the minimal schedule for its rate.")] = 10,
    max_steps: Annotated[int, typer.Option("--max-steps", help="Most steps in a drawn schedule.")] = MAX_STEPS,
    max_nodes: Annotated[
        int | None,
        typer.Option(
            "--max-nodes",
            help="Most lock nodes one step may hit (default: all); e.g. 2 on a five-node quorum: minority faults only.",
        ),
    ] = None,
    jobs: Annotated[int, typer.Option("--jobs", help="Trials at once at most (fewer when the CPUs are busy).")] = 2,
    redlock_nodes: RedlockNodes = None,
    nodes: Nodes = None,
    nodes_file: NodesFile = None,
    resource: ResourceUrl = None,
    redis_server: RedisServer = None,
    postgres: PostgresUrl = None,
    lock_servers: LockServersOption = None,
    trial_settings: dict[str, str | None] | None = None,
) -> None:
    """Search random fault schedules for one that breaks a property, shrink it to the smallest that
    still fails, and show it: the --faults text, the `lockcompare run` command, its reproduction
    rate, a timeline picture, and a CSV of everything tried. The output always says what was
    searched: "no counterexample" means none within this budget. Exit 1 when a counterexample was
    found, 0 when none was. The trial settings below and the server options are matrix's; the
    printed command carries every one that differs from a default (and --plugin-path for a plug-in)."""
    from lockcompare.evaluation.explore_run import run_explore  # the runner, when a search runs
    from lockcompare.evaluation.explore_trials import RealTrials, fitting_scale

    if fence not in FENCE_MODES:
        raise InvalidValueError(f"--fence takes {', '.join(FENCE_MODES)}, got {fence!r}")
    if prop not in PROPERTIES:
        raise InvalidValueError(f"--property takes {', '.join(PROPERTIES)}, got {prop!r}")
    check_count("jobs", jobs)
    if not 1 <= max_steps <= MAX_SCHEDULE_STEPS:
        raise InvalidValueError(
            f"--max-steps must be in 1..{MAX_SCHEDULE_STEPS} (a schedule's most steps), got {max_steps}"
        )
    # --time-scale's bounds are the settings table's, checked where every trial's spec is made.
    kinds = parse_kinds(faults)
    seconds = parse_budget(budget)
    settings = one_value_each(trial_settings or {})
    options = _cluster_options(nodes=nodes, resource=resource, redis_server=redis_server, redlock_nodes=redlock_nodes,
                               nodes_file=nodes_file, postgres=postgres, lock_servers=lock_servers)  # fmt: skip
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in backend)
    target = out_dir or Path("results") / f"explore-{safe}-{prop}"
    if resume and not target.is_dir():
        raise InvalidValueError(f"--resume: {target} is not a directory of an earlier search (nothing to continue)")
    scale = time_scale if time_scale is not None else fitting_scale(backend, ttl_ms=settings.given("ttl_ms"))
    trials = RealTrials(
        backend=backend, out_dir=target, time_scale=scale, fence=fence, jobs=jobs, redlock_nodes=redlock_nodes,
        cluster_options=options, settings=settings,
        server_args=server_args(nodes=nodes, nodes_file=nodes_file, resource=resource, postgres=postgres,
                                redis_server=redis_server, lock_servers=lock_servers),
    )  # fmt: skip
    result = run_explore(
        trials=trials, prop=prop, kinds=kinds, budget_s=seconds, rounds=rounds, seed=seed, reruns=reruns,
        rate_runs=rate_runs, max_steps=max_steps, max_nodes=max_nodes, resume=resume, progress=print_trial,
    )  # fmt: skip
    typer.echo(result.text)
    raise typer.Exit(result.exit_code)
