"""``lockcompare evaluate BACKEND``: a report card for one lock backend, with the evidence.

Two sources, one line per property:

1. the conformance battery (:mod:`lockcompare.evaluation.conformance`, the same checks as the pytest classes
   in :mod:`lockcompare.testing`), run in-process as plain functions — so pytest is *not* a
   runtime dependency of lockcompare;
2. the experiments baseline, client-pause and short-ttl (and session-kill for a lock whose servers
   can end a client's session: a :class:`~lockcompare.infra.kinds.SessionKind`, PostgreSQL's and
   ZooKeeper's), for the backend and the built-ins that
   bracket it (``single``, ``redlock``, ``fenced`` by default): each matrix planned as ``matrix`` plans it
   (:func:`lockcompare.runner.matrix.plan_matrix`) and all their trials run together
   (:func:`lockcompare.runner.matrix.run_planned`): one CSV on disk, from which the experiment lines and the
   comparison table are computed (card_lines.py's ``judge_experiments`` is pure, testable on hand-built rows).
   The experiments run the ``contend`` workload (contend.py): no worker ever runs alone, so a lock
   cannot look better than ``single`` by letting one worker finish early (a plain-DEL release did,
   18/80 conflicts against 39/80 under client-pause, in the lesson's workload).

A property the backend does not claim is ``NOT CLAIMED``, never ``FAIL``: a lease lock without
fencing tokens that lets a paused holder back in is "not claimed — needs fencing". One that claims
fencing tokens is judged under client pauses by fencing's own guarantee (analysis/fencing.py): no
write accepted below an earlier accepted token (checked on the histories), and no update lost when
the resource checks the token on every access (client-pause runs again with ``--fence all`` for it).
Lost updates with the token checked on the write only are shown, not failed: write-only fencing
does not promise none (a zombie that writes before its successor's first write is accepted).
The card passes (exit code 0) only when every claimed property holds.

Example::

    >>> card = evaluate(backend="redlock", against=("single",), out=Path("results/ev.csv"),
    ...                 time_scale=0.1, rounds=20)                                 # doctest: +SKIP
    >>> print(card_text.render_card(card, fmt="text")); card.exit_code               # doctest: +SKIP
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lockcompare.analysis.results import read_results
from lockcompare.backends import backend_name, load_backend, require_declarations, traits_of
from lockcompare.errors import InvalidValueError, ResultsFileError
from lockcompare.evaluation.backend_host import claims_of
from lockcompare.evaluation.battery_run import run_battery
from lockcompare.evaluation.card_lines import (
    EXPERIMENTS,
    SESSION_EXPERIMENT,
    CardLine,
    judge_experiments,
    token_order_violations,
)
from lockcompare.evaluation.conformance import (
    CALL_TIMEOUT_S,
    PropertyResult,
    Status,
)
from lockcompare.evaluation.defaults import DEFAULT_AGAINST, QUICK_MIN_ROUNDS
from lockcompare.evaluation.explore import ProgressFn
from lockcompare.evaluation.explore_card import TITLE as SEARCH_TITLE
from lockcompare.evaluation.explore_card import search_line
from lockcompare.evaluation.scales import expressible_scale, moved_note, quick_rounds
from lockcompare.files import check_output_file, results_lock
from lockcompare.infra.kinds import Capability, SessionKind, kind_speaking, lacks
from lockcompare.runner.matrix import ProgressCallback, plan_matrix, run_planned
from lockcompare.runner.plan import ClusterOptions
from lockcompare.scenario.experiments import get_experiment
from lockcompare.scenario.limits import DEFAULT_JOBS, check_count
from lockcompare.scenario.parsing import Sweep, cli_text
from lockcompare.scenario.settings import CLI_SETTINGS
from lockcompare.scenario.trialspec import DEFAULT_ROUNDS, Overrides, TrialSpec

#: The workload of the card's experiments: every worker keeps contending until all are done.
WORKLOAD = "contend"


#: Scales tried, in order, for an experiment whose TTL the backend cannot express at the one asked
#: for (its optional ``check_ttl``; e.g. etcd's whole-second leases at --time-scale 0.1).
FALLBACK_SCALES = (0.1, 0.2, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0)

log = logging.getLogger("lockcompare")


@dataclass(frozen=True, kw_only=True)
class ReportCard:
    backend: str
    summary: str
    lines: tuple[CardLine, ...]
    results_csv: Path
    rows: tuple[dict[str, Any], ...]
    time_scale: float
    rounds: int
    trials: int
    #: Experiments the backend ran at another scale than asked (it could not express the TTL), said once.
    notes: tuple[str, ...] = ()
    #: The trial settings the user chose, as flags (``--retry-delay-ms 1``).
    settings: tuple[str, ...] = ()
    #: Where the battery's checks wrote their histories (``<property>.jsonl.gz``, ``lockcompare history``).
    battery_histories: Path | None = None

    @property
    def failed(self) -> tuple[CardLine, ...]:
        return tuple(line for line in self.lines if line.status is Status.FAIL)

    @property
    def exit_code(self) -> int:
        """0 only when every property the backend claims holds."""
        return 1 if self.failed else 0


def evaluate(
    *,
    backend: str,
    out: Path,
    against: Sequence[str] = DEFAULT_AGAINST,
    time_scale: float = 1.0,
    rounds: int = DEFAULT_ROUNDS,
    trials: int = 1,
    call_timeout_s: float = CALL_TIMEOUT_S,
    cluster_options: ClusterOptions = ClusterOptions(),
    on_property: Callable[[PropertyResult], None] | None = None,
    progress: ProgressCallback | None = None,
    search_budget_s: float = 0.0,
    search_progress: ProgressFn | None = None,
    settings: Overrides | None = None,
    server_args: tuple[str, ...] = (),
    quick: bool = False,
) -> ReportCard:
    """Run the battery, then the experiments, and judge them; see the module docstring.

    ``quick``: an experiment the backend must run at a larger scale than ``time_scale`` runs fewer
    rounds there (scales.quick_rounds), so the card costs about what its scale promises.

    With ``search_budget_s`` > 0 a budgeted search of fault schedules follows (explore_card.py),
    written under ``<out stem>.explore/`` beside the CSV.

    ``settings``: the trial settings the user chose (lesson-scale; see :func:`overrides_for`);
    ``server_args``: the server options as given, for the search's reproduce command.

    Every name is checked before anything starts (a bad one raises the usual one-line error).
    """
    cls = load_backend(backend)
    # The experiments would refuse it (run_planned) after the battery's minute of work: say so now.
    require_declarations(cls, name=backend)
    for name in against:
        load_backend(name)
    check_count("trials", trials)
    settings = settings if settings is not None else Overrides()
    settings.replace(time_scale=time_scale, rounds=rounds, workload=WORKLOAD)  # every bound, before any server
    check_output_file(out, flag="--out")
    if out.exists():  # checked again by run_planned, but only after the battery's work
        raise ResultsFileError(f"{out} exists: choose another --out")
    search_dir = out.with_name(out.stem + ".explore")
    if search_budget_s > 0 and search_dir.exists():
        raise ResultsFileError(f"{search_dir} exists: choose another --out")
    battery_dir = battery_histories_dir(out)
    if battery_dir.exists():
        raise ResultsFileError(f"{battery_dir} exists: choose another --out")
    with results_lock(out):  # the battery and every matrix below, one writer throughout
        return _evaluate_locked(
            backend=backend, cls=cls, out=out, against=against, time_scale=time_scale, rounds=rounds, trials=trials,
            call_timeout_s=call_timeout_s, cluster_options=cluster_options, on_property=on_property, progress=progress,
            search_budget_s=search_budget_s, search_dir=search_dir, search_progress=search_progress,
            settings=settings, server_args=server_args, quick=quick, battery_dir=battery_dir,
        )  # fmt: skip


def _evaluate_locked(
    *,
    backend: str,
    cls: type,
    out: Path,
    against: Sequence[str],
    time_scale: float,
    rounds: int,
    trials: int,
    call_timeout_s: float,
    cluster_options: ClusterOptions,
    on_property: Callable[[PropertyResult], None] | None,
    progress: ProgressCallback | None,
    search_budget_s: float,
    search_dir: Path,
    search_progress: ProgressFn | None,
    settings: Overrides,
    server_args: tuple[str, ...],
    quick: bool,
    battery_dir: Path,
) -> ReportCard:
    sessions = ends_sessions(cls)
    card_experiments = (*EXPERIMENTS, SESSION_EXPERIMENT) if sessions else EXPERIMENTS
    chosen = {name: overrides_for(name, settings=settings) for name in (*EXPERIMENTS, SESSION_EXPERIMENT)}
    ttls = {name: float(chosen[name].given("ttl_ms") or get_experiment(name).ttl_ms) for name in card_experiments}
    scales = scales_for(cls, time_scale=time_scale, ttl_ms=ttls, experiments=card_experiments)
    moved = {name: scale for name, scale in scales.items() if scale != time_scale}
    backends = list(dict.fromkeys([backend, *against]))  # the backend first, no duplicates
    # One matrix per (scale, settings, backends): the backend runs each experiment at a scale it can
    # express, the built-ins beside it at the one asked for; short-ttl may have settings of its own.
    groups: dict[tuple[float, Overrides, tuple[str, ...]], list[str]] = {}
    for name in EXPERIMENTS:
        at_asked = tuple(b for b in backends if b != backend or name not in moved)
        if at_asked:
            groups.setdefault((time_scale, chosen[name], at_asked), []).append(name)
        if name in moved:
            groups.setdefault((moved[name], chosen[name], (backend,)), []).append(name)
    runs = [
        (list(names), experiments, scale, over, ("writes",)) for (scale, over, names), experiments in groups.items()
    ]
    claims = claims_of(cls)
    if claims.issues_fencing_tokens is True:  # fencing's promise with the token checked on every access
        runs.append(([backend], ["client-pause"], scales["client-pause"], chosen["client-pause"], ("all",)))
    if sessions:  # its servers can end the holder's session (a SessionKind): session-kill
        scale = scales[SESSION_EXPERIMENT]
        runs.append(([backend], [SESSION_EXPERIMENT], scale, chosen[SESSION_EXPERIMENT], ("writes",)))
    # --quick keeps its word: an experiment moved to a larger scale runs fewer rounds there (scales.py).
    rounds_at = {
        scale: quick_rounds(rounds=rounds, asked=time_scale, scale=scale, floor=QUICK_MIN_ROUNDS) if quick else rounds
        for _, _, scale, _, _ in runs
    }
    notes = []
    if moved:  # said before the battery starts: what the card will cost (issue 38)
        plan = [
            (names, experiments, scale, float(over.given("work_ms") or 0))
            for names, experiments, scale, over, _ in runs
        ]
        notes.append(moved_note(backend=backend, time_scale=time_scale, moved=moved, rounds=rounds, rounds_at=rounds_at,
                                runs=plan, trials=trials, search_s=search_budget_s))  # fmt: skip
        log.warning("%s", notes[0])
    battery = []
    for result in run_battery(spec=backend, call_timeout_s=call_timeout_s, redis_server=cluster_options.redis_server,
                              lock_servers=cluster_options.lock_servers, history_dir=battery_dir):  # fmt: skip
        battery.append(result)
        if on_property:
            on_property(result)
    # Every matrix's trials in one run (issue 54): one cluster pool, one crew of warm workers, and the
    # longest trials (a whole-second lease's short-ttl at x5) beside the short ones instead of after
    # them; each trial is the one its own matrix plans (its id, settings and scale), run side by side
    # within the CPU budget as `matrix` runs them (scales.CELLS_AT_ONCE).
    specs: dict[str, TrialSpec] = {}
    for names, experiments, scale, over, fence in runs:
        planned = plan_matrix(
            backends=names,
            experiments=experiments,
            trials=trials,
            overrides=over.replace(time_scale=scale, rounds=rounds_at[scale], workload=WORKLOAD),
            node_count=None,
            sweep=Sweep(fence=fence),
            redis_server=cluster_options.redis_server,
        )
        for spec in planned:  # a trial two matrices would both plan runs once, as in one matrix
            specs.setdefault(spec.trial_id, spec)
    # A trial the timing sentinel marks runs again alone at the end, taking its row's place (the
    # matrix's --rerun-marked): a card judged on a stalled trial would judge the machine.
    run_planned(list(specs.values()), out=out, cluster_options=cluster_options, progress=progress, jobs=DEFAULT_JOBS,
                rerun_marked=len(specs))  # fmt: skip
    rows = tuple(read_results(out))
    lines = [CardLine(title=r.prop.title, status=r.status, evidence=r.evidence, history=r.history) for r in battery]
    # Its rows carry the name it is shown by (a manifest given by its path: the manifest's name).
    shown, _ = backend_name(backend)
    order = token_order_violations(rows, backend=shown, results=out)
    lines += judge_experiments(rows=rows, backend=shown, claims=claims, token_order=order)
    if search_budget_s > 0:
        found = search_line(backend=backend, claims=claims, budget_s=search_budget_s, out_dir=search_dir,
                            cluster_options=cluster_options, progress=search_progress, settings=settings,
                            server_args=server_args)  # fmt: skip
        lines.append(CardLine(title=SEARCH_TITLE, status=found.status, evidence=found.evidence))
    return ReportCard(
        backend=backend,
        summary=str(claims.summary),
        lines=tuple(lines),
        results_csv=out,
        rows=rows,
        time_scale=time_scale,
        rounds=rounds,
        trials=trials,
        notes=tuple(notes),
        settings=tuple(
            f"{s.flag} {cli_text(settings.given(s.name))}" for s in CLI_SETTINGS if settings.given(s.name) is not None
        ),
        battery_histories=battery_dir if battery_dir.exists() else None,
    )


def battery_histories_dir(out: Path) -> Path:
    """Where a card whose results are ``out`` keeps its battery's histories: ``<out stem>.battery/``."""
    return out.with_name(out.stem + ".battery")


def ends_sessions(cls: type) -> bool:
    """The backend's lock nodes can end a client's session under it (their kind is a
    :class:`~lockcompare.infra.kinds.SessionKind` offering session control): its card runs session-kill."""
    servers = traits_of(cls).servers
    kind = kind_speaking(servers) if isinstance(servers, str) else None
    return isinstance(kind, SessionKind) and not lacks(kind, Capability.SESSION_CONTROL)


def overrides_for(experiment: str, *, settings: Overrides) -> Overrides:
    """The user's trial settings as one experiment of the card takes them: all of them, except that
    short-ttl keeps its TTL below the work (the catalogue's 200 of 300: 2/3 of the work as chosen)."""
    if experiment != "short-ttl" or (settings.given("ttl_ms") is None and settings.given("work_ms") is None):
        return settings
    short = get_experiment(experiment)
    values = {s.name: settings.given(s.name) for s in CLI_SETTINGS if settings.given(s.name) is not None}
    work = float(values.get("work_ms") or short.work_ms)
    return Overrides(**(values | {"ttl_ms": max(1, round(work * short.ttl_ms / short.work_ms))}))


def scales_for(
    cls: type, *, time_scale: float, ttl_ms: Mapping[str, float] | None = None, experiments: Sequence[str] = EXPERIMENTS
) -> dict[str, float]:
    """Per experiment, ``time_scale`` if the backend can express its TTL there, else the smallest
    larger scale of :data:`FALLBACK_SCALES` it can (evaluation/scales.py; a backend without
    ``check_ttl`` takes any). ``ttl_ms``: the TTLs the user chose, per experiment (lesson-scale)."""
    scales = {}
    for name in experiments:
        ttl = (ttl_ms or {}).get(name, get_experiment(name).ttl_ms)
        found = expressible_scale(cls, ttl_ms=ttl, scales=(time_scale, *(s for s in FALLBACK_SCALES if s > time_scale)))
        if found is None:
            raise InvalidValueError(
                f"{getattr(cls, '__name__', cls)} cannot express the {name} TTL ({ttl:g} ms) at any scale up to "
                f"{FALLBACK_SCALES[-1]:g}"
            )
        scales[name] = found
    return scales
