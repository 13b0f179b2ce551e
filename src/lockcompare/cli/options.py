"""Options shared by `run` and `matrix`, declared once, and the parsing behind them."""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.progress import Progress

from lockcompare.cli.core import err
from lockcompare.cli.progress_bar import progress_bar
from lockcompare.errors import InvalidValueError
from lockcompare.files import read_capped
from lockcompare.infra.redis.client import PASSWORD_ENV, redact  # (no redis-py: it is imported when a client connects)
from lockcompare.scenario.limits import DEFAULT_CPU_SHARE, DEFAULT_JOBS, LIMITS, usable_cpus  # noqa: F401  (DEFAULT_JOBS: the CLI reads it here)
from lockcompare.scenario.parsing import Overrides, Sweep, check_value, cli_text, from_cli
from lockcompare.scenario.schedule import read_schedule_file
from lockcompare.scenario.setting import Setting
from lockcompare.scenario.settings import CLI_SETTINGS, SETTINGS

if TYPE_CHECKING:  # the runner is imported by the commands that run trials, when they run
    from lockcompare.runner.matrix import MatrixReport
    from lockcompare.runner.plan import ClusterOptions


# Where the servers come from (run, matrix, bench); the trial settings come from the settings table.
Nodes = Annotated[
    str | None,
    typer.Option(
        "--nodes",
        help="External lock nodes: redis URLs, comma-separated (with --resource; at most 16). A password need "
        f"not be on the command line: set {PASSWORD_ENV}, or use --nodes-file.",
    ),
]
NodesFile = Annotated[
    Path | None,
    typer.Option(
        "--nodes-file",
        help="Instead of --nodes (and --resource): a file of redis URLs, one lock node per line, and the resource "
        "as 'resource=URL'; '#' starts a comment. Keeps passwords off the command line.",
    ),
]
ResourceUrl = Annotated[
    str | None,
    typer.Option("--resource", help=f"External resource server: a redis URL (password: see {PASSWORD_ENV})."),
]
RedisServer = Annotated[
    str | None,
    typer.Option("--redis-server", envvar="LOCKCOMPARE_REDIS_SERVER", help="redis-server binary for embedded nodes."),
]
PostgresUrl = Annotated[
    str | None,
    typer.Option(
        "--postgres",
        help="An external PostgreSQL server (postgresql://user@host:port/db) for the PostgreSQL backends' lock "
        "and resource instead of the embedded one; lockcompare creates its own two tables there and touches "
        "only its per-trial rows and sessions.",
    ),
]
ZooKeeperHosts = Annotated[
    str | None,
    typer.Option(
        "--zookeeper",
        metavar="HOST:PORT,...",
        help="An external ZooKeeper ensemble for the zk backends' locks instead of the embedded servers; "
        "lockcompare touches only its own znodes under /lockcompare there (never another run's), and takes "
        "no fault that crashes, restarts or cuts off its servers.",
    ),
]
LockServersOption = Annotated[
    list[str] | None,
    typer.Option(
        "--lock-servers",
        metavar="KIND=URL,...",
        help="External lock servers of any kind: KIND is a server kind (e.g. redis or valkey, with --resource; "
        "postgres, which also keeps the resource; zookeeper), each URL one of its servers; repeat the option "
        "for a second kind. --nodes, --postgres and --zookeeper are its aliases (the same servers, the "
        "same runs). lockcompare touches only its own keys, rows and znodes there.",
    ),
]
FaultsFile = Annotated[
    Path | None,
    typer.Option(
        "--faults-file",
        help='A fault schedule from a file (instead of --faults): TOML, steps = ["...", ...], or for a .json '
        'name JSON, {"steps": [...]}; the steps are --faults steps (docs/faults.md).',
    ),
]
AllowMixedRevisions = Annotated[
    str | None,
    typer.Option(
        "--allow-mixed-revisions",
        metavar="REASON",
        help="With --resume: continue a file whose trials another code revision, another Python or other "
        "versions of a backend's libraries or client measured (refused otherwise: its cells would average two "
        "instruments). The reason is recorded in every new row; tables mark the mixed-revision cells.",
    ),
]
DaskAddress = Annotated[
    str | None,
    typer.Option(
        "--dask",
        metavar="ADDRESS",
        help="Run the trials on a Dask cluster (tcp://scheduler:8786; pip install 'lockcompare[dask]'): each "
        "cell's trials run whole on one worker host, --jobs at once there, and come back as rows written "
        "here. Start workers with --nthreads 1 (docs/distributed.md).",
    ),
]
RedlockNodes = Annotated[
    int | None, typer.Option("--redlock-nodes", help="Nodes a multi-node lock uses (3, 5, 7; default: all).")
]


#: A nodes file is a few lines of URLs; anything larger is not one.
NODES_FILE_MAX_BYTES = 64 * 1024


def read_nodes_file(path: Path) -> tuple[str, str | None]:
    """(the lock nodes as a comma list, the resource URL or None) from a ``--nodes-file``."""
    text = read_capped(path, limit=NODES_FILE_MAX_BYTES, error=InvalidValueError).decode("utf-8", errors="replace")
    nodes: list[str] = []
    resource = None
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if line.startswith("resource="):
            resource = line.removeprefix("resource=").strip()
        elif line:
            nodes.append(line)
    if not nodes:
        raise InvalidValueError(f"--nodes-file {path}: no lock node URL in it (one per line)")
    return ",".join(nodes), resource


def _cluster_options(
    *,
    nodes: str | None,
    resource: str | None,
    redis_server: str | None,
    redlock_nodes: int | None,
    nodes_file: Path | None = None,
    postgres: str | None = None,
    zookeeper: str | None = None,
    lock_servers: list[str] | None = None,
) -> ClusterOptions:
    """Where the servers come from; the embedded cluster spawns enough nodes for --redlock-nodes.

    ``--lock-servers`` and its aliases (--nodes / --nodes-file, --postgres, --zookeeper) make one
    value (runner/lock_servers.py): the same servers given either way are the same options."""
    from lockcompare.infra.cluster import DEFAULT_NODES
    from lockcompare.infra.redis.client import validate_url, with_env_password
    from lockcompare.runner.lock_servers import lock_servers_from
    from lockcompare.runner.plan import ClusterOptions

    if nodes_file is not None:
        if nodes is not None:
            raise InvalidValueError("--nodes-file replaces --nodes: give one of them")
        nodes, from_file = read_nodes_file(nodes_file)
        if from_file is not None and resource is not None:
            raise InvalidValueError("the resource is given twice: in --nodes-file and with --resource")
        resource = resource or from_file
    servers = lock_servers_from(texts=lock_servers or (), nodes=nodes, postgres=postgres, zookeeper=zookeeper)
    node_urls = servers.shared()  # every trial's lock nodes: what --redlock-nodes counts against
    resource_url = with_env_password(validate_url(resource)) if resource is not None else None
    if redlock_nodes is not None:
        check_value(SETTINGS["node_count"], redlock_nodes)
        if str(redlock_nodes) not in (SETTINGS["node_count"].choices or ()):
            raise InvalidValueError(
                f"--redlock-nodes takes {', '.join(SETTINGS['node_count'].choices or ())}, got {redlock_nodes}"
            )
    if node_urls is not None and redlock_nodes is not None and redlock_nodes > len(node_urls):
        raise InvalidValueError(f"--redlock-nodes {redlock_nodes} but only {len(node_urls)} --nodes given")
    count = max(redlock_nodes or DEFAULT_NODES, DEFAULT_NODES)
    return ClusterOptions(
        lock_servers=servers, resource=resource_url, redis_server=redis_server, node_count=count
    )  # fmt: skip


def _option_help(setting: Setting) -> str:
    text = setting.help
    if setting.maximum is not None and setting.maximum_hint:  # a bound a user may need to raise
        text += f" At most {setting.maximum:g} ({setting.maximum_hint})."
    default = setting.default
    if default is None or setting.name == "node_count":
        return text
    shown = cli_text(default)
    return f"{text} [default: {shown}{' ' + setting.unit if setting.unit else ''}]"


#: The trial settings ``explore`` and ``evaluate`` take from the table (the others they set themselves).
SEARCH_SETTINGS = ("workers", "ttl_ms", "work_ms", "retry_delay_ms", "think_ms", "jitter")


def with_trial_settings(
    command: Callable[..., Any] | None = None, *, only: tuple[str, ...] | None = None
) -> Callable[..., Any]:
    """Give ``command`` one option per CLI setting of the settings table (scenario/settings.py), or per
    setting named in ``only``.

    Every option is taken as text (None: not given) and parsed by the table: comma lists where a
    setting sweeps, bounds and choices checked, one line per bad value. ``command`` receives them as
    ``trial_settings`` (a dict of the given texts by setting name).
    """
    if command is None:
        return functools.partial(with_trial_settings, only=only)
    settings = [s for s in CLI_SETTINGS if only is None or s.name in only]
    signature = inspect.signature(command, eval_str=True)
    own = [p for p in signature.parameters.values() if p.name != "trial_settings"]
    added = [
        inspect.Parameter(
            setting.name,
            inspect.Parameter.KEYWORD_ONLY,
            default=None,
            annotation=Annotated[
                str | None,
                typer.Option(setting.flag, help=_option_help(setting), metavar="LIST" if setting.sweeps else "VALUE"),
            ],
        )
        for setting in settings
    ]

    @functools.wraps(command)
    def wrapper(**params: Any) -> Any:
        given = {setting.name: params.pop(setting.name, None) for setting in settings}
        return command(**params, trial_settings=given)

    wrapper.__signature__ = signature.replace(parameters=[*own, *added])  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in (*own, *added)}
    return wrapper


def one_value_each(trial_settings: dict[str, str | None]) -> Overrides:
    """The settings of a command that runs no sweep (explore, evaluate), parsed by the table."""
    overrides, sweep = from_cli(trial_settings)
    if sweep.cells_per_trial() > 1:
        raise InvalidValueError("this command takes one value per setting; use matrix to sweep a list")
    return overrides


def server_args(
    *,
    nodes: str | None,
    nodes_file: Path | None,
    resource: str | None,
    postgres: str | None,
    redis_server: str | None,
    lock_servers: list[str] | None = None,
) -> tuple[str, ...]:
    """The server options as given, for a printed command that reruns on the same servers (a password
    the user kept off the command line stays off it: the URLs are the ones typed, not completed)."""
    given = (("--nodes", nodes), ("--nodes-file", nodes_file and nodes_file.resolve()), ("--resource", resource),
             ("--postgres", postgres), ("--redis-server", redis_server),
             *(("--lock-servers", text) for text in lock_servers or ()))  # fmt: skip
    # A password typed into a URL is not written into summaries: "***" (give it by environment instead).
    return tuple(
        a for flag, value in given if value is not None
        for a in (flag, redact(str(value)))
    )  # fmt: skip


def given_flags(trial_settings: dict[str, str | None]) -> list[str]:
    """The flags of the settings the user gave (run --from takes none of them)."""
    return [SETTINGS[name].flag or name for name, text in trial_settings.items() if text is not None]


def _trial_settings(
    trial_settings: dict[str, str | None],
    *,
    nodes: str | None,
    resource: str | None,
    redis_server: str | None,
    nodes_file: Path | None = None,
    postgres: str | None = None,
    zookeeper: str | None = None,
    faults_file: Path | None = None,
    lock_servers: list[str] | None = None,
) -> tuple[Overrides, Sweep, ClusterOptions, int | None]:
    """The settings of ``run`` and ``matrix`` parsed by the table, and where the servers come from."""
    if faults_file is not None:
        if trial_settings.get("faults") is not None:
            raise InvalidValueError("give --faults or --faults-file, not both")
        trial_settings = trial_settings | {"faults": read_schedule_file(faults_file)}
    overrides, sweep = from_cli(trial_settings)
    redlock_nodes = overrides.given("node_count")
    options = _cluster_options(
        nodes=nodes,
        resource=resource,
        redis_server=redis_server,
        redlock_nodes=redlock_nodes,
        nodes_file=nodes_file,
        postgres=postgres,
        zookeeper=zookeeper,
        lock_servers=lock_servers,
    )
    return overrides, sweep, options, redlock_nodes


def _split(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _progress_bar() -> tuple[Progress, Any]:
    """A progress bar that appears with the first trial, with done / left / failed and the time
    left (cli/progress_bar.py); plain lines when stderr is not a terminal."""
    return progress_bar(console=err)


def _parallelism_note(report: MatrixReport) -> str:
    """How many trials ran at once, and why not more (the CPU guard), in one line."""
    note = f"up to {report.jobs_used} of --jobs {report.jobs} trials ran at once"
    if report.jobs_used < report.jobs and report.busy_cpu:
        (backend, experiment), busy = max(report.busy_cpu.items(), key=lambda item: item[1])
        note += (
            f"; more would keep over {DEFAULT_CPU_SHARE:.0%} of {usable_cpus()} CPUs busy "
            f"(busiest: {backend} × {experiment}, {busy:.2f} CPU per trial)"
        )
    if report.backed_off:
        note += (
            f"; trials stalled, so the scheduler admitted fewer at once ({report.backed_off}× backed off, "
            f"down to {report.jobs_floor})"
        )
    return note


def _default_backends() -> list[str]:
    """Every registered backend that can run here and is in the default selection (its trait
    ``in_default_matrix``); the others that cannot run are named on stderr, one line per reason
    (etcd and etcd-fenced share theirs: one missing binary)."""
    from lockcompare.backends import describe_backends, load_backend
    from lockcompare.backends.base import traits_of

    usable: list[str] = []
    skipped: dict[str, list[str]] = {}
    for info in describe_backends():
        if info.problem:
            skipped.setdefault(info.problem, []).append(info.name)
        elif traits_of(load_backend(info.name, check_viable=False)).in_default_matrix:
            usable.append(info.name)
    for problem, names in skipped.items():
        print(f"lockcompare: skipping {', '.join(names)}: {problem}", file=sys.stderr)
    return usable
