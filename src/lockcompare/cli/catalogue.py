"""The commands that describe what can be run and judge one backend: backends, experiments, evaluate."""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from lockcompare.analysis.checker import VERDICT_MEANINGS
from lockcompare.cli.core import app
from lockcompare.cli.explore import parse_budget, print_trial
from lockcompare.cli.options import (
    SEARCH_SETTINGS,
    LockServersOption,
    Nodes,
    NodesFile,
    PostgresUrl,
    RedisServer,
    ResourceUrl,
    _cluster_options,
    _progress_bar,
    _split,
    one_value_each,
    server_args,
    with_trial_settings,
)
from lockcompare.errors import InvalidValueError
from lockcompare.evaluation.defaults import (
    CARD_FORMATS,
    DEFAULT_AGAINST,
    DEFAULT_SEARCH_BUDGET_S,
    QUICK_MEASURED,
    QUICK_ROUNDS,
    QUICK_TIME_SCALE,
)
from lockcompare.scenario.experiments import EXPERIMENTS
from lockcompare.scenario.trialspec import DEFAULT_ROUNDS, Overrides, make_spec


@app.command()
def backends() -> None:
    """List the registered backends (built-ins and plug-ins) and whether each is usable here."""
    from lockcompare.backends import describe_backends

    for info in describe_backends():
        status = info.summary if not info.problem else f"NOT VIABLE: {info.problem}"
        typer.echo(f"{info.name:<12} {status}")
    typer.echo("\nAny other class: --backend package.module:Class")


@app.command()
def experiments(
    check: Annotated[
        Path | None,
        typer.Option(
            "--check",
            metavar="RESULTS.csv",
            help="Instead of listing: test each experiment's claim (scenario/claims.py) against the trials of this "
            "results file; exit 1 when the run contradicts one.",
        ),
    ] = None,
) -> None:
    """List the experiments and the claim each one tests, and what each verdict means."""
    if check is not None:
        _check_claims(check)
        return
    width = max(len(name) for name in EXPERIMENTS)
    for exp in EXPERIMENTS.values():
        times = f"ttl {exp.ttl_ms:g} ms, work {exp.work_ms:g} ms, pause {exp.pause_ms:g} ms"
        typer.echo(f"{exp.name:<{width}} {times:<40} {exp.claim}")
        schedule = make_spec(backend="single", experiment=exp, trial=0, overrides=Overrides()).faults
        typer.echo(f"{'':<{width}} faults: {schedule or '(none)'}")
        if exp.fence is not None:
            typer.echo(f"{'':<{width}} fence: {exp.fence} (unless --fence is given)")
        if exp.rests_on_renewal:
            typer.echo(f"{'':<{width}} for renewing locks (and locks without a TTL): a lease lock that does not "
                       "renew is left out")  # fmt: skip
    typer.echo(
        "\nFaults are lesson-scale ms (times --time-scale); holders:K / worker=holder are read from the lease "
        "at injection. A pause is stop-the-world (SIGSTOP of the whole worker) unless --pause-how sleep. "
        "--faults replaces an experiment's schedule (docs/faults.md)."
    )
    typer.echo("\nVerdicts (one per trial):")
    for verdict, meaning in VERDICT_MEANINGS.items():
        typer.echo(f"  {verdict:<20} {meaning}")


def _check_claims(path: Path) -> None:
    """Print every claim with what the file's trials show; exit 1 when one is contradicted."""
    from lockcompare.analysis.claims_check import CONTRADICTED, check_claims, summary
    from lockcompare.analysis.rates import RATE_NOTE
    from lockcompare.analysis.results import read_results

    outcomes = check_claims(read_results(path))
    for o in outcomes:
        if o.status == "not in file":
            continue
        mark = "ok  " if o.status != CONTRADICTED else "FAIL"
        typer.echo(f"{mark} {o.expect.experiment:<21} {o.backend:<26} {o.expect.says} [{o.expect.rule}: {o.seen}]")
        typer.echo(f"{'':<5}{'':<22}{'':<27}violation rate {o.rate}")
    typer.echo(summary(outcomes))
    typer.echo(f"violation rate: {RATE_NOTE.removeprefix('violation rate: ')}")
    if any(o.status == CONTRADICTED for o in outcomes):
        raise typer.Exit(1)


#: A deadline past this is no deadline: a hung plug-in would hold the battery for ten minutes per call.
MAX_CALL_TIMEOUT_S = 600


@app.command(name="evaluate")
@with_trial_settings(only=SEARCH_SETTINGS)
def evaluate_command(
    backend: Annotated[str, typer.Argument(help="A backend name or package.module:Class.")],
    against: Annotated[
        str, typer.Option("--against", help="Built-ins run beside it under the same experiments, comma-separated.")
    ] = ",".join(DEFAULT_AGAINST),
    quick: Annotated[
        bool,
        typer.Option(
            "--quick",
            help=f"--time-scale {QUICK_TIME_SCALE:g}, {QUICK_ROUNDS} rounds and a search of "
            f"{DEFAULT_SEARCH_BUDGET_S * QUICK_TIME_SCALE:g} s: {QUICK_MEASURED}. A backend that cannot express the "
            "TTLs there runs fewer rounds at the scale it can, and says up front what the card will cost.",
        ),
    ] = False,
    time_scale: Annotated[
        float | None, typer.Option("--time-scale", help="Multiply every time by this (default 1: the lesson's times).")
    ] = None,
    rounds: Annotated[
        int | None, typer.Option("--rounds", help=f"Rounds per worker (default {DEFAULT_ROUNDS}).")
    ] = None,
    trials: Annotated[int, typer.Option("--trials", help="Trials per backend x experiment.")] = 1,
    fmt: Annotated[str, typer.Option("--format", help="markdown or text.")] = "text",
    out_path: Annotated[
        Path | None, typer.Option("--out", help="Results CSV (default: a new file under results/).")
    ] = None,
    call_timeout_s: Annotated[
        float, typer.Option("--call-timeout-s", help="Deadline of every backend call in the battery.")
    ] = 5.0,
    nodes: Nodes = None,
    nodes_file: NodesFile = None,
    resource: ResourceUrl = None,
    redis_server: RedisServer = None,
    postgres: PostgresUrl = None,
    lock_servers: LockServersOption = None,
    search_budget: Annotated[
        str | None,
        typer.Option(
            "--search-budget",
            help="Then search fault schedules (client pauses) this long for a counterexample to what the backend "
            f"claims, like `explore`: 2m, 90s; 0 skips the search. Default {DEFAULT_SEARCH_BUDGET_S:g} s, "
            f"with --quick {DEFAULT_SEARCH_BUDGET_S * QUICK_TIME_SCALE:g} s.",
        ),
    ] = None,
    trial_settings: dict[str, str | None] | None = None,
) -> None:
    """A report card for one backend: the conformance battery, then baseline, client-pause and short-ttl
    beside the built-ins that bracket it, then a budgeted search of fault schedules. Exit 0 only when
    every property it claims holds. The server options and the trial settings are matrix's (short-ttl
    keeps its TTL below the work: 2/3 of --work-ms); a backend that cannot express a TTL at the
    asked --time-scale runs at one it can, said in one line."""
    if fmt not in CARD_FORMATS:
        raise typer.BadParameter(f"{fmt!r} is not one of {', '.join(CARD_FORMATS)}", param_hint="--format")
    if not (math.isfinite(call_timeout_s) and 0 < call_timeout_s <= MAX_CALL_TIMEOUT_S):
        raise InvalidValueError(
            f"--call-timeout-s takes a number above 0 and up to {MAX_CALL_TIMEOUT_S}, got {call_timeout_s:g}"
        )
    settings = one_value_each(trial_settings or {})
    options = _cluster_options(nodes=nodes, resource=resource, redis_server=redis_server, redlock_nodes=None,
                               nodes_file=nodes_file, postgres=postgres, lock_servers=lock_servers)  # fmt: skip
    scale = time_scale if time_scale is not None else (QUICK_TIME_SCALE if quick else 1.0)
    if search_budget is not None:
        search_s = parse_budget(search_budget, flag="--search-budget", zero_ok=True)
    else:  # the search's budget scales with --quick like every other time of the card (issue 38)
        search_s = DEFAULT_SEARCH_BUDGET_S * (QUICK_TIME_SCALE if quick else 1.0)
    from lockcompare.evaluation.card_text import render_card
    from lockcompare.evaluation.evaluate import evaluate

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
            cluster_options=options,
            settings=settings,
            server_args=server_args(
                nodes=nodes,
                nodes_file=nodes_file,
                resource=resource,
                postgres=postgres,
                redis_server=redis_server,
                lock_servers=lock_servers,
            ),
            on_property=lambda r: print(f"battery: {r.status:<11} {r.prop.title}", file=sys.stderr, flush=True),
            progress=update,
            search_budget_s=search_s,
            search_progress=print_trial,
            quick=quick and time_scale is None and rounds is None,
        )
    finally:
        bar.stop()
    typer.echo(render_card(card, fmt=fmt))
    raise typer.Exit(card.exit_code)


@app.command(name="docs")
def docs_command(
    page: Annotated[
        str | None,
        typer.Argument(help="A page (e.g. verdicts, or docs/verdicts.md as the help texts name it) to print."),
    ] = None,
) -> None:
    """List the documentation pages (where they are installed), or print one: the pages the help
    texts point at, from the checkout or the wheel."""
    from lockcompare import docs_pages

    if page is not None:
        typer.echo(docs_pages.page(page).read_text(encoding="utf-8"), nl=False)
        return
    found = docs_pages.pages()
    if not found:
        raise InvalidValueError("this installation carries no documentation pages")
    width = max(map(len, found))
    for name, path in found.items():
        typer.echo(f"{name:<{width}}  {path}")
