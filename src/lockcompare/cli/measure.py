"""The commands that run trials: matrix, run (``run --from`` in rerun.py), bench; what they say at
their end is trial_output.py's. The runner, servers and backends are imported by each command as it runs."""

from __future__ import annotations

import contextlib
import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from lockcompare.analysis.results import METRIC_COLUMNS, TIMING_COLUMNS, read_results
from lockcompare.analysis.strikes import strikes_line
from lockcompare.analysis.thin_cells import thin_cell_lines
from lockcompare.cli.core import app, err
from lockcompare.cli.options import (
    DEFAULT_JOBS,
    AllowMixedRevisions,
    DaskAddress,
    FaultsFile,
    LockServersOption,
    Nodes,
    NodesFile,
    PostgresUrl,
    RedisServer,
    RedlockNodes,
    ResourceUrl,
    ZooKeeperHosts,
    _cluster_options,
    _default_backends,
    _parallelism_note,
    _progress_bar,
    _split,
    _trial_settings,
    given_flags,
    with_trial_settings,
)
from lockcompare.cli.rerun import RERUN_OPTIONS, run_from
from lockcompare.cli.settle import MaxTrials, SettleBelow, SettleBudget, UntilSettled, settle_plan
from lockcompare.cli.trial_output import fail_on_unknown, kept_results, rerun_line, say, timing_line, where_kept
from lockcompare.errors import InvalidValueError
from lockcompare.redaction import redact
from lockcompare.render import table
from lockcompare.scenario.experiments import DEFAULT_EXPERIMENTS
from lockcompare.scenario.limits import DEFAULT_CPU_SHARE, LIMITS, check_count, env_name
from lockcompare.scenario.settings import SETTING_COLUMNS

#: bench: a lease longer than this outlives any cycle many times over (a day).
BENCH_MAX_TTL_MS = 86_400_000


#: How many timing-marked trials ``matrix`` runs again at its end (under ``--until-settled``, after
#: each round: issue 52.3) unless told otherwise, and how many of them at once: a cell's answer must
#: not rest on a marked trial. Until issue 54 a plain matrix reran none, because reruns alone, ten of
#: them, doubled the README's main command (82 trials in 155 s from the wheel in CI). Its marks are
#: rarer now (0-3 trials of 54 a run, mean 1.2, in ten runs alone at a783e8a), and two reruns at once,
#: none of the run's other trials beside them, came out unmarked as one alone does (five runs of the
#: main command at c45b9e5: 35.1-41.6 s, no marked cell left; docs/sentinel.md for five at once).
RERUN_MARKED = 10
RERUN_JOBS = 2


@app.command()
@with_trial_settings
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
    trials: Annotated[
        int,
        typer.Option(
            "--trials",
            help=f"Trials per backend x experiment cell (at most {LIMITS['trials'][1]}; "
            f"{env_name('trials')} raises it).",
        ),
    ] = 3,
    out_path: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="Results CSV (default: a new file under results/). One run writes a file at a time: "
            "a second run on it is refused, naming the first one's pid.",
        ),
    ] = None,
    resume: Annotated[
        bool, typer.Option("--resume", help="Continue --out (required), skipping trials it already holds.")
    ] = False,
    allow_mixed_revisions: AllowMixedRevisions = None,
    dask: DaskAddress = None,
    fmt: Annotated[str, typer.Option("--format", help="Table format: github, simple, latex, csv.")] = "github",
    nodes: Nodes = None,
    nodes_file: NodesFile = None,
    resource: ResourceUrl = None,
    redis_server: RedisServer = None,
    postgres: PostgresUrl = None,
    zookeeper: ZooKeeperHosts = None,
    lock_servers: LockServersOption = None,
    faults_file: FaultsFile = None,
    jobs: Annotated[
        int,
        typer.Option(
            "--jobs",
            help=f"Trials run at once, each on its own embedded servers (default {DEFAULT_JOBS}: four per CPU; "
            f"at most {LIMITS['jobs'][1]}); "
            f"fewer while the running trials would keep more than {DEFAULT_CPU_SHARE:.0%} of the CPUs busy "
            "(measured per trial); pause-free no-lock trials (none, atomic, optimistic) run alone, "
            "their conflicts hang on millisecond timing. 1: one after another. With --lock-servers (or "
            "--nodes/--resource, --postgres, --zookeeper) trials run one at a time: external servers are "
            "shared, and neighbours would distort each other's timing.",
        ),
    ] = DEFAULT_JOBS,
    fresh_workers: Annotated[
        bool,
        typer.Option(
            "--fresh-workers", help="Spawn new worker processes for every trial instead of reusing warm ones."
        ),
    ] = False,
    rerun_marked: Annotated[
        int,
        typer.Option(
            "--rerun-marked",
            help="Run again, at the end of the run and by themselves (--rerun-jobs at once), up to this many of "
            "its trials the timing sentinel marked (docs/sentinel.md): the rerun's row takes the marked row's "
            f"place, which moves to FILE.superseded.csv with its history. 0: none. Default: {RERUN_MARKED}; under "
            "--until-settled, after each round (a cell's answer must not rest on a marked trial).",
        ),
    ] = RERUN_MARKED,
    rerun_jobs: Annotated[
        int,
        typer.Option(
            "--rerun-jobs",
            help="How many of the --rerun-marked trials run again at once, no other trial of the run beside them "
            f"(1: each alone). Default: {RERUN_JOBS} (a rerun of a trial marked among many is rarely marked again "
            "among a few: docs/sentinel.md).",
        ),
    ] = RERUN_JOBS,
    until_settled: UntilSettled = False,
    max_trials: MaxTrials = None,
    settle_below: SettleBelow = None,
    settle_budget: SettleBudget = None,
    trial_settings: dict[str, str | None] | None = None,
) -> None:
    """Run every selected backend under every selected experiment; one CSV row per trial.

    Every trial setting is an option below (from the settings table); a comma list sweeps the
    settings that say so, one cell per value. --until-settled adds trials to the cells whose answer
    is still open (docs/cli.md)."""
    from lockcompare.runner.matrix import run_matrix

    if fmt not in table.FORMATS:
        raise typer.BadParameter(f"{fmt!r} is not one of {', '.join(table.FORMATS)}", param_hint="--format")
    if resume and out_path is None:
        raise InvalidValueError("--resume continues the file --out names: give --out")
    if allow_mixed_revisions is not None and not allow_mixed_revisions.strip():
        raise InvalidValueError("--allow-mixed-revisions takes the reason, recorded in every new row")
    check_count("trials", trials)
    check_count("jobs", jobs)
    if rerun_marked:
        check_count("trials", rerun_marked, flag="--rerun-marked")
    check_count("jobs", rerun_jobs, flag="--rerun-jobs")
    settle = settle_plan(
        until_settled=until_settled, trials=trials, max_trials=max_trials, settle_below=settle_below,
        settle_budget=settle_budget,
    )  # fmt: skip
    overrides, sweep, options, redlock_nodes = _trial_settings(
        trial_settings or {},
        nodes=nodes,
        resource=resource,
        redis_server=redis_server,
        nodes_file=nodes_file,
        postgres=postgres,
        zookeeper=zookeeper,
        lock_servers=lock_servers,
        faults_file=faults_file,
    )
    target = out_path or Path("results") / time.strftime("matrix-%Y%m%d-%H%M%S.csv")
    bar, update = _progress_bar()
    backend_names = _split(backends) if backends is not None else _default_backends()
    experiment_names = _split(experiments) if experiments is not None else list(DEFAULT_EXPERIMENTS)
    try:
        run = run_matrix if settle is None else settle.runner(on_line=say)
        report = run(
            backends=backend_names,
            experiments=experiment_names,
            trials=trials,
            overrides=overrides,
            out=target,
            cluster_options=options,
            redlock_nodes=redlock_nodes,
            sweep=sweep,
            resume=resume,
            allow_mixed_revisions=allow_mixed_revisions,
            dask=dask,
            progress=update,
            jobs=jobs,
            fresh_workers=fresh_workers,
            rerun_marked=rerun_marked,
            rerun_jobs=rerun_jobs,
        )
    finally:
        bar.stop()
    err.print(f"{report.trials_run} trials run, {report.trials_skipped} already in {report.out}")
    if report.trials_run:
        err.print(_parallelism_note(report))
    rows = read_results(report.out) if report.out.exists() else []
    if rows:
        typer.echo(table.render(rows, fmt=fmt))
        err.print(timing_line(rows))
        if report.reruns:
            say(rerun_line(report.reruns))
        if faults := strikes_line(rows):
            err.print(faults)
        for line in thin_cell_lines(rows):  # cells hardly exercised, and why (analysis/thin_cells.py)
            err.print(redact(line), markup=False, highlight=False)  # a problem may quote a URL, or [brackets]
    for line in report.floor.lines() if report.floor is not None else ():  # the run's own floor (runner/floor.py)
        err.print(line)
    if settle is not None:
        for line in settle.closing_lines():
            say(line)
    for line in table.violation_lines(rows):  # last: the ids to look at next are where the run stops
        say(line)
    fail_on_unknown(report)


@app.command()
@with_trial_settings
def run(
    ctx: typer.Context,
    backend: Annotated[str, typer.Option("--backend", help="A backend name or package.module:Class.")] = "single",
    experiment: Annotated[str, typer.Option("--experiment", help="An experiment name.")] = "baseline",
    out_path: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="Append the row to this CSV, its history beside it (as matrix keeps them). Default: a folder "
            "of its own in the temporary directory, kept and printed, so `lockcompare history` reads the trial.",
        ),
    ] = None,
    nodes: Nodes = None,
    nodes_file: NodesFile = None,
    resource: ResourceUrl = None,
    redis_server: RedisServer = None,
    postgres: PostgresUrl = None,
    zookeeper: ZooKeeperHosts = None,
    lock_servers: LockServersOption = None,
    faults_file: FaultsFile = None,
    from_row: Annotated[
        str | None,
        typer.Option(
            "--from",
            metavar="RESULTS.csv:ROW",
            help="Rerun one trial of a results file with exactly its settings and seed: ROW is its trial id "
            "or its row number (1 = the first row). Takes no other trial option but --server: the row's kind of "
            "server where it runs here, else what auto takes (another kind is another trial, said in one line).",
        ),
    ] = None,
    trial_settings: dict[str, str | None] | None = None,
) -> None:
    """Run a single trial and print its metrics (or rerun a recorded one with --from)."""
    from lockcompare.runner.matrix import run_matrix

    trial_settings = trial_settings or {}
    if from_row is not None:
        # Which kind of server runs the rerun is where it runs, not what it is (runner/plan.py: rerun_server).
        server = trial_settings.get("server")
        trial_settings = {name: text for name, text in trial_settings.items() if name != "server"}
        given = [
            f"--{name.replace('_', '-')}" for name in ctx.params
            if name not in RERUN_OPTIONS and name not in trial_settings
            and getattr(ctx.get_parameter_source(name), "name", "DEFAULT") != "DEFAULT"
        ] + given_flags(trial_settings)  # fmt: skip
        if given:
            raise InvalidValueError(f"--from takes every setting from the row; drop {', '.join(given)}")
        options = _cluster_options(
            nodes=nodes,
            resource=resource,
            redis_server=redis_server,
            redlock_nodes=None,
            nodes_file=nodes_file,
            postgres=postgres,
            zookeeper=zookeeper,
            lock_servers=lock_servers,
        )
        run_from(from_row, out_path=out_path, options=options, server=server)
        return
    overrides, sweep, options, redlock_nodes = _trial_settings(
        trial_settings,
        nodes=nodes,
        resource=resource,
        redis_server=redis_server,
        nodes_file=nodes_file,
        postgres=postgres,
        zookeeper=zookeeper,
        lock_servers=lock_servers,
        faults_file=faults_file,
    )
    if sweep.cells_per_trial() > 1:
        raise InvalidValueError("run takes one value per option; use matrix to sweep a list")
    with kept_results(out_path) as target:
        report = run_matrix(
            backends=[backend], experiments=[experiment], trials=1, overrides=overrides, out=target,
            cluster_options=options, redlock_nodes=redlock_nodes, sweep=sweep, resume=out_path is not None,
        )  # fmt: skip
    (row,) = [r for r in read_results(target) if r["trial_id"] == report.trial_ids[0]][-1:]
    if report.trials_run == 0:
        err.print(f"this trial is already in {target} (run {row['run_id']}); its row:")
    for key in ("trial_id", *SETTING_COLUMNS[:3], *SETTING_COLUMNS[4:], *METRIC_COLUMNS, *TIMING_COLUMNS, "wall_s"):
        typer.echo(f"{key:>24}: {row[key]}")
    where_kept(target, row)
    fail_on_unknown(report)


@app.command()
def bench(
    backends_list: Annotated[
        str, typer.Option("--backends", help="Comma-separated backends to measure (the floor rows are always first).")
    ] = "single,redlock,pottery,redis-py",
    iterations: Annotated[
        int,
        typer.Option(
            "--iterations", help=f"Timed acquire+release cycles per backend (at most {LIMITS['iterations'][1]})."
        ),
    ] = 500,
    ttl_ms: Annotated[
        int, typer.Option("--ttl-ms", help=f"Lease TTL (long: nothing should expire; 1 to {BENCH_MAX_TTL_MS}).")
    ] = 10_000,
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
    nodes_file: NodesFile = None,
    resource: ResourceUrl = None,
    redis_server: RedisServer = None,
    lock_servers: LockServersOption = None,
) -> None:
    """Acquire+release latency per backend, beside the floors: a bare SET NX PX + release script on
    one lock node (floor) and on every lock node at once (floor-fanout: Redlock's requests alone),
    each timed right before every cycle of every backend, in its process.

    A benchmark, not a test: the ratios compare rows measured in this one run.
    """
    from lockcompare.backends import load_backend
    from lockcompare.infra.cluster import describe, open_cluster
    from lockcompare.runner.bench import lock_servers_needed, render_bench, run_bench

    table.check_format(fmt)
    check_count("iterations", iterations)
    if not 1 <= ttl_ms <= BENCH_MAX_TTL_MS:
        raise InvalidValueError(f"--ttl-ms takes 1 to {BENCH_MAX_TTL_MS}, got {ttl_ms}")
    options = _cluster_options(
        nodes=nodes, resource=resource, redis_server=redis_server, redlock_nodes=redlock_nodes, nodes_file=nodes_file,
        lock_servers=lock_servers,
    )  # fmt: skip
    shared = options.lock_servers.shared()
    if len(options.lock_servers.protocols()) > (0 if shared is None else 1):  # the others: embedded servers
        raise InvalidValueError("bench measures the user's Redis-protocol lock servers only (with --resource)")
    names = _split(backends_list)
    proxied = _split(via_proxy)
    if not names:
        raise InvalidValueError("--backends: name at least one backend")
    for name in (*names, *proxied):
        load_backend(name)  # a bad name fails before any server starts
    if proxied and shared is not None:
        print(
            f"lockcompare: note: no {', '.join(f'{n}-via-proxy' for n in proxied)} row: --via-proxy measures "
            "the embedded cluster's links, not --nodes servers",
            file=sys.stderr,
        )
        proxied = []
    with contextlib.ExitStack() as stack:
        cluster = stack.enter_context(
            open_cluster(
                nodes=shared,
                resource=options.resource,
                node_count=options.node_count,
                redis_server=options.redis_server,
            )
        )
        print(f"bench: {describe(cluster)}, {iterations} cycles per backend", file=sys.stderr)
        # Backends on other lock servers (etcd members…) get one embedded server of their kind.
        others = {
            kind: stack.enter_context(open_cluster(node_count=1, lock_servers=kind, redis_server=options.redis_server))
            for kind in lock_servers_needed(names, cluster=cluster)
        }
        for other in others.values():
            print(f"bench: and {describe(other)}", file=sys.stderr)
        rows = run_bench(
            cluster=cluster, backends=names, iterations=iterations, ttl_ms=ttl_ms, proxied=proxied, lock_clusters=others
        )
    typer.echo(render_bench(rows, fmt=fmt))
