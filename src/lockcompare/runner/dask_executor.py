"""The matrix on a Dask cluster: each batch of trials runs whole on one host, rows come home.

``lockcompare matrix … --dask tcp://scheduler:8786`` plans the trials here (the same plan, the
same trial ids, so ``--resume`` works across executors), sends each cell's trials as one task to
a Dask worker (runner/host_batch.py runs them there as an ordinary local run: servers, worker
processes, faults, timing sentinel and CPU governor all on that host), and writes each returned
row and history here: the coordinator is the one writer of the CSV and the histories.

Rows record where they ran: the host, its CPUs and load, how many trials ran there at once
(``jobs_concurrent``) and how many other lockcompare runs it had (``concurrent_runs``). Run one
Dask thread per host (``dask worker --nthreads 1``): the host's own run already runs several
trials at once within its CPU budget; two batches side by side on one host would each see the
other as a neighbour (and say so in ``concurrent_runs``).

A host lost mid-batch loses nothing written: its rows never arrived. Dask's scheduler runs the
task again on another worker (its ``allowed-failures``, 3 by default); each row of a batch that
ran more than once says so in ``note``. A batch that fails for good leaves its trials without a
row, named in one warning line: ``--resume`` runs them.
"""

from __future__ import annotations

import contextlib
import gzip
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from dataclasses import fields as dataclass_fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lockcompare.errors import ConfigError, SchedulerLostError, WriteError
from lockcompare.redaction import redact
from lockcompare.runner.host_batch import HostBatch, HostRow, run_batch

if TYPE_CHECKING:
    from lockcompare.runner.matrix import MatrixReport, ProgressCallback
    from lockcompare.runner.plan import ClusterOptions
    from lockcompare.runner.trial import TrialResult
    from lockcompare.scenario.trialspec import TrialSpec

log = logging.getLogger("lockcompare")

#: How long to wait for the scheduler to answer before saying it cannot be reached.
CONNECT_TIMEOUT_S = 5


@dataclass(frozen=True, kw_only=True)
class DaskOutcome:
    rows: int
    #: trial_ids whose batch failed for good (no row written: --resume runs them)
    failed: tuple[str, ...]
    #: trial_ids whose batch Dask ran more than once (a host was lost under it)
    rerun: tuple[str, ...]
    hosts: tuple[str, ...]


def batches_of(specs: Sequence[TrialSpec], *, cluster_options: ClusterOptions, jobs: int | None,
               fresh_workers: bool) -> list[HostBatch]:  # fmt: skip
    """One batch per cell (backend × experiment × settings): its trials share a host, warm
    workers and a cluster pool, and one cell's trials are judged by one machine."""
    cells: dict[tuple[str, ...], list[TrialSpec]] = {}
    for spec in specs:
        settings = {k: v for k, v in spec.settings().items() if k not in ("trial", "seed")}
        cells.setdefault(tuple(f"{k}={v}" for k, v in sorted(settings.items())), []).append(spec)
    return [
        HostBatch(specs=tuple(group), cluster_options=cluster_options, jobs=jobs, fresh_workers=fresh_workers)
        for group in cells.values()
    ]


def _times_suspected(dask_scheduler: Any, key: str) -> int:
    """On the scheduler: how many workers died while running the task ``key`` (0 when it is gone)."""
    task = dask_scheduler.tasks.get(key)
    return int(getattr(task, "suspicious", 0)) if task is not None else 0


def connect(address: str) -> Any:
    """A Dask client of the scheduler at ``address``, or one line saying why there is none."""
    try:
        from distributed import Client
    except ImportError:
        raise ConfigError("--dask needs Dask's distributed package: pip install 'lockcompare[dask]'") from None
    shown = redact(address, passwords_of=(address,))
    if any(c in address for c in "@\uff20\ufe6b"):  # Dask takes no userinfo; its error quoted the password (issue 38)
        raise ConfigError(f"--dask {shown}: a scheduler address has no user or password")
    try:
        return Client(address, timeout=CONNECT_TIMEOUT_S)
    except (OSError, TimeoutError, ValueError) as exc:
        raise ConfigError(
            f"--dask {shown}: cannot reach a Dask scheduler there ({redact(str(exc), passwords_of=(address,))})"
        ) from None


def run_on_dask(
    batches: Sequence[HostBatch],
    *,
    client: Any,
    histories: Path,
    out_parent: Path,
    run_id: str,
    append: Callable[[dict[str, Any]], None],
    on_row: Callable[[TrialSpec, dict[str, Any], int], None] | None = None,
    rerun_ids: frozenset[str] = frozenset(),
) -> DaskOutcome:
    """Run ``batches`` on ``client``'s cluster; ``append`` each row (histories written first). A
    trial of ``rerun_ids`` (its unknown row is in the file) gets a history name of its own, so the
    row it replaces keeps its history."""
    from distributed import as_completed

    by_id = {spec.trial_id: spec for batch in batches for spec in batch.specs}
    futures = {client.submit(run_batch, batch, pure=False): batch for batch in batches}
    written = 0
    failed: list[str] = []
    rerun: list[str] = []
    hosts: set[str] = set()
    for future in as_completed(list(futures)):
        batch = futures[future]
        try:
            host_rows: list[HostRow] = future.result()
        except Exception as exc:  # noqa: BLE001  (KilledWorker, a lost connection, the batch's own failure)
            if _scheduler_lost(client, exc):  # no host's fault, and every other batch is lost with it
                raise SchedulerLost(written) from None
            ids = [spec.trial_id for spec in batch.specs]
            log.warning("a batch of %d trial(s) failed on its host (%s): no row written; --resume runs them",
                        len(ids), str(exc).splitlines()[0] if str(exc) else type(exc).__name__)  # fmt: skip
            failed.extend(ids)
            continue
        suspected = client.run_on_scheduler(_times_suspected, key=future.key)
        future.release()
        missing = {spec.trial_id for spec in batch.specs} - {str(hr.row["trial_id"]) for hr in host_rows}
        if missing:
            log.warning("%d trial(s) of a batch came back without a row: --resume runs them", len(missing))
            failed.extend(sorted(missing))
        for host_row in host_rows:
            row = dict(host_row.row)
            trial_id = str(row["trial_id"])
            path = histories / (f"{trial_id}.{run_id}.jsonl.gz" if trial_id in rerun_ids else f"{trial_id}.jsonl.gz")
            _write_history(path, host_row.history)
            row["history"] = str(path.relative_to(out_parent))
            row["run_id"] = run_id
            if suspected:
                lost = f"rerun: a host was lost under its batch ({suspected}×)"
                row["note"] = "; ".join(filter(None, [str(row.get("note") or ""), lost]))
                rerun.append(trial_id)
            append(row)
            written += 1
            hosts.add(str(row.get("host") or "?"))
            if on_row is not None:
                on_row(by_id[trial_id], row, written)
    return DaskOutcome(rows=written, failed=tuple(failed), rerun=tuple(rerun), hosts=tuple(sorted(hosts)))


class SchedulerLost(Exception):
    """The scheduler went away after ``written`` rows came back (turned into one line by
    :func:`run_matrix_on_dask`, which knows the address and the file)."""

    def __init__(self, written: int) -> None:
        super().__init__(f"{written} row(s) written")
        self.written = written


def _scheduler_lost(client: Any, exc: BaseException) -> bool:
    """Whether a batch failed because the client lost its scheduler (Dask cancels every pending
    future "for reason: scheduler-connection-lost"), not because of its host or itself."""
    return "scheduler-connection-lost" in str(exc) or getattr(client, "status", "running") not in (
        "running",
        "newly-created",
    )


@contextlib.contextmanager
def _dask_says_nothing() -> Iterator[None]:
    """Dask's own log records off for the run: a lost scheduler printed a 25-line traceback of the
    client's reconnection (issue 49); what matters is said in lockcompare's lines. Dask's loggers
    carry levels of their own and propagate to handlers whatever their parents' levels: the
    records are dropped at every handler they could reach."""
    with contextlib.suppress(ImportError):  # Dask sets up its loggers and handlers when imported
        import distributed  # noqa: F401
    loggers = [
        logging.getLogger(),
        *(
            logger
            for name, logger in logging.root.manager.loggerDict.items()
            if name.startswith("distributed") and isinstance(logger, logging.Logger)
        ),
    ]
    handlers = {id(h): h for logger in loggers for h in logger.handlers}.values()  # fmt: skip
    for handler in handlers:
        handler.addFilter(_not_dask)
    try:
        yield
    finally:
        for handler in handlers:
            handler.removeFilter(_not_dask)


def _not_dask(record: logging.LogRecord) -> bool:
    return not record.name.startswith("distributed")


def _write_history(path: Path, data: bytes) -> None:
    """The host's gzipped history, checked to be gzip before it is kept (a row points to it)."""
    try:
        gzip.decompress(data)
    except (OSError, EOFError) as exc:
        raise WriteError(f"{path.name}: the history that came back is not gzip ({exc})") from None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_bytes(data)
        tmp.replace(path)
    except OSError as exc:
        raise WriteError(f"cannot write {path}: {exc.strerror or exc}") from None


def run_matrix_on_dask(
    todo: Sequence[TrialSpec],
    *,
    address: str,
    out: Path,
    cluster_options: ClusterOptions,
    jobs: int,
    fresh_workers: bool,
    progress: ProgressCallback | None,
    skipped: int,
    trial_ids: tuple[str, ...],
) -> MatrixReport:
    """The matrix's trials ``todo`` on the Dask cluster at ``address``: ``jobs`` trials at once per
    host; this process writes every row and history."""
    from lockcompare.analysis.results import ResultsWriter, supersede
    from lockcompare.runner.matrix import MatrixReport
    from lockcompare.runner.outfile import claim_history_dir, history_ids
    from lockcompare.runner.trial import new_run_id

    writer = ResultsWriter(out)
    reruns = frozenset(history_ids(out))  # trials whose unknown row is in the file: a rerun replaces it

    def append(row: dict[str, Any]) -> None:
        if str(row["trial_id"]) in reruns:
            supersede(out, row)
        else:
            writer.append(row)

    with _dask_says_nothing():
        client = connect(address)
        try:

            def shown(spec: TrialSpec, row: dict[str, Any], done: int) -> None:
                if progress is not None:
                    progress(spec, result_of_row(spec, row), done, len(todo))

            outcome = run_on_dask(
                batches_of(todo, cluster_options=cluster_options, jobs=jobs, fresh_workers=fresh_workers),
                client=client, histories=claim_history_dir(out), out_parent=out.parent, run_id=new_run_id(),
                append=append, on_row=shown, rerun_ids=reruns,
            )  # fmt: skip
        except SchedulerLost as lost:
            left = len(todo) - lost.written
            raise SchedulerLostError(
                f"--dask {redact(address)}: the Dask scheduler went away; {lost.written} of {len(todo)} trial(s) "
                f"came back and are in {out}, the other {left} never ran here. Start a scheduler and its workers, "
                f"then run the same command with --resume (and --dask at the new scheduler's address): "
                f"`lockcompare matrix ... --out {out} --resume`"
            ) from None
        finally:
            client.close()
    return MatrixReport(
        out=out, trials_run=outcome.rows, trials_skipped=skipped, trial_ids=trial_ids, jobs=jobs, jobs_used=jobs,
        unknown=tuple((t, "its batch failed on its host: no row (--resume runs it)") for t in outcome.failed),
    )  # fmt: skip


def result_of_row(spec: TrialSpec, row: dict[str, Any]) -> TrialResult:
    """A finished trial as its row tells it (for the progress line; the history stays on disk)."""
    from lockcompare.analysis.checker import TrialMetrics
    from lockcompare.runner.trial import TrialResult

    metrics = TrialMetrics(**{f.name: row[f.name] for f in dataclass_fields(TrialMetrics)})
    return TrialResult(
        spec=spec, metrics=metrics, history=[], wall_s=float(row["wall_s"]), started_at=str(row["started_at"]),
        lock_nodes_reachable=int(row["lock_nodes_reachable"]), load_avg_1m=float(row["load_avg_1m"] or 0),
        concurrent_runs=int(row["concurrent_runs"] or 0), isolation=str(row.get("isolation") or ""),
    )  # fmt: skip
