"""The results CSV: one row per trial, appended whole the moment the trial ends.

Column names are stable and carry their units (``ttl_ms``, ``wall_s``). ``schema_version`` is in
every row; files from older versions stay readable (missing columns get their defaults). A row is
written with a single ``write`` on an ``O_APPEND`` descriptor and fsynced, so an interrupted run
leaves only complete rows, and the file is created only when its first row is ready.
"""

from __future__ import annotations

import contextlib
import csv
import io
import logging
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Protocol

from lockcompare.analysis import sentinel
from lockcompare.analysis.checker import TrialMetrics
from lockcompare.errors import ResultsFileError
from lockcompare.files import read_capped, replace_atomically, write_error
from lockcompare.scenario.settings import LEGACY_VALUES, SETTING_COLUMNS, SETTINGS
from lockcompare.scenario.trialspec import TrialSpec, canonical, legacy_client_timeout_ms, legacy_faults, trial_id_for


class FinishedTrial(Protocol):
    """What a row is made of: the runner's TrialResult (runner/trial.py) has it. A protocol, not an
    import: reading and writing rows must not load the runner (no redis offline)."""

    @property
    def spec(self) -> TrialSpec: ...
    @property
    def metrics(self) -> TrialMetrics: ...
    @property
    def timing(self) -> sentinel.TimingVerdict | None: ...
    @property
    def started_at(self) -> str: ...
    @property
    def wall_s(self) -> float: ...
    @property
    def lock_nodes_reachable(self) -> int: ...
    @property
    def load_avg_1m(self) -> float: ...
    @property
    def concurrent_runs(self) -> int: ...
    @property
    def isolation(self) -> str: ...


log = logging.getLogger("lockcompare")

#: 5: call_timeout_ms recorded; 6: the fault schedule (faults) and the client timeout of link trials
#: (client_timeout_ms); 7: a row's ``note``: what was out of the ordinary in how it was produced
#: (resumed over another code revision, and why; rerun after its host was lost); 8: the server
#: setting (redis, valkey) and ``server_version`` (was ``redis_version``: it held "postgresql 18.6"
#: for a PostgreSQL resource, and "7.2.4" for Valkey); 9: ``isolation``, what held each client
#: (cgroup-v1, cgroup-v2 or process-group: infra/cgroup.py; empty in older rows, which had process
#: groups or less); 10: ``python_version`` and ``client_versions``, the versions of Python and of the
#: lock's libraries and clients the trial ran (backends/versions.py; empty in older rows: unknown).
#: The settings' legacy values come from scenario/settings.py.
SCHEMA_VERSION = 10

#: What a row of an older schema meant for the columns it lacks: each setting's legacy value
#: (scenario/settings.py: until schema 3 the pause was an in-process sleep; schema 1: it landed right
#: after acquiring, no think time; until schema 4: no jitter), and these metrics. Provenance columns
#: a row lacks stay empty: unknown, never guessed.
_LEGACY_METRICS = {"extra_entries": "0", "reads_rejected": "0", "cs_retries": "0", "double_applications": "0"}
_LEGACY = {name: value for name, (_, value) in LEGACY_VALUES.items()} | _LEGACY_METRICS

#: Where and by what the row was produced; "" in rows migrated from before schema 4.
PROVENANCE_COLUMNS = (
    "lockcompare_version", "source_revision", "host", "cpu_count", "load_avg_1m", "concurrent_runs",
    "jobs_concurrent", "cluster", "server_version", "lock_nodes_reachable", "isolation", "note",
    "python_version", "client_versions",
)  # fmt: skip
METRIC_COLUMNS = tuple(f.name for f in fields(TrialMetrics))
#: How late the machine ran the trial against its experiment's margin (analysis/sentinel.py); empty
#: in rows from before the sentinel (their timing is unknown, never assumed good).
TIMING_COLUMNS = sentinel.COLUMNS
COLUMNS = (
    "schema_version", "run_id", "trial_id", "started_at", *SETTING_COLUMNS, *PROVENANCE_COLUMNS,
    *METRIC_COLUMNS, *TIMING_COLUMNS, "wall_s", "history",
)  # fmt: skip


def _columns_of(kind: type, metrics: bool = True) -> set[str]:
    settings = {s.name for s in SETTINGS.values() if s.kind is kind and s.csv_column and not s.optional}
    measured = {f.name for f in fields(TrialMetrics) if f.type in (kind.__name__, kind)} if metrics else set()
    return settings | measured


_INT_COLUMNS = _columns_of(int) | {"schema_version", "entries_planned"}
_FLOAT_COLUMNS = _columns_of(float) | {"wall_s", "load_avg_1m", "stall_ms", "margin_ms"}
_BOOL_COLUMNS = {"conflict_measures_agree", "timing_marked"}


def make_row(
    result: FinishedTrial,
    *,
    host: Mapping[str, object],
    run_id: str,
    cluster_kind: str,
    server_version: str,
    history_path: str,
    jobs_concurrent: int = 1,
    note: str = "",
    python_version: str = "",
    client_versions: str = "",
) -> dict[str, Any]:
    """One trial's row. ``python_version`` and ``client_versions`` are what the trial ran
    (backends/versions.py); "" records them as unknown."""
    spec = result.spec
    row: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "run_id": run_id,
        "trial_id": spec.trial_id,
        "started_at": result.started_at,
        **spec.recorded_settings(),
        **host,  # infra/provenance.py's host_facts(): the runner passes them in
        "load_avg_1m": round(result.load_avg_1m, 2),
        "concurrent_runs": result.concurrent_runs,
        "jobs_concurrent": jobs_concurrent,
        "cluster": cluster_kind,
        "server_version": server_version,
        "lock_nodes_reachable": result.lock_nodes_reachable,
        "isolation": result.isolation,
        "note": note,
        "python_version": python_version,
        "client_versions": client_versions,
        **result.metrics.as_row(),
        **(result.timing.as_row() if result.timing is not None else {}),
        "wall_s": round(result.wall_s, 3),
        "history": history_path,
    }
    for setting in SETTINGS.values():  # an optional setting left at None (node_count: all) is an empty cell
        if setting.optional and setting.csv_column and row.get(setting.csv_column) is None:
            row[setting.csv_column] = ""
    return row


def _format(value: Any) -> str:
    if isinstance(value, float):
        return "" if math.isnan(value) else f"{value:.6g}"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int) and value == -1:
        return ""  # an int column's "unknown" (see _parse) stays empty, never a number to average
    return str(value)


def format_header() -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow(COLUMNS)
    return buf.getvalue()


def format_row(row: dict[str, Any], *, header: bool = False) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow([_format(row.get(col, "")) for col in COLUMNS])
    return (format_header() if header else "") + buf.getvalue()


class ResultsWriter:
    """Appends whole rows to a CSV; creates it (with its header) only with the first row."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def append(self, row: dict[str, Any]) -> None:
        """Append one row; an OS error (disk full, /dev/full) is a :class:`WriteError` and the
        file is cut back to its rows before (a short write never leaves half a row)."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as exc:
            raise write_error(self.path, exc) from None
        size = -1
        try:
            size = os.fstat(fd).st_size
            data = format_row(row, header=size == 0).encode()
            written = os.write(fd, data)  # one write: a row is on disk whole, or not at all
            if written != len(data):
                raise OSError(28, "No space left on device (short write)")
            os.fsync(fd)
        except OSError as exc:
            if size >= 0:
                try:
                    os.ftruncate(fd, size)
                except OSError:
                    pass
            if size == 0:
                with contextlib.suppress(OSError):
                    self.path.unlink()  # the file is created only with its first whole row
            raise write_error(self.path, exc) from None
        finally:
            os.close(fd)


def _parse(column: str, text: str) -> Any:
    if column in _INT_COLUMNS:
        return int(text) if text not in ("", None) else -1
    if column in _FLOAT_COLUMNS:
        return float(text) if text not in ("", None) else math.nan
    if column in _BOOL_COLUMNS:
        return text == "true"
    return text


@dataclass(frozen=True, kw_only=True)
class ResultsFile:
    """A results CSV as read: its rows (typed, in the current schema) and what is wrong with it."""

    path: Path
    rows: list[dict[str, Any]]
    oldest_schema: int  # the oldest schema_version among its rows (SCHEMA_VERSION when empty)
    truncated_lines: list[int]  # line numbers of rows cut short (e.g. by a full disk or a crash)
    header_current: bool  # the header is exactly today's columns
    #: trial_ids with more than one judged row (two runs wrote the file at once, before the lock)
    duplicate_ids: list[str] = field(default_factory=list)

    @property
    def needs_rewrite(self) -> bool:
        """True when appending today's rows would not give a consistent file."""
        return (
            bool(self.truncated_lines)
            or bool(self.duplicate_ids)
            or not self.header_current
            or self.oldest_schema < SCHEMA_VERSION
        )

    def kept_rows(self) -> list[dict[str, Any]]:
        """The rows, each duplicated trial's judged rows reduced to its latest one."""
        return without_duplicates(self.rows)

    def warn(self) -> None:
        """Say (as warnings) what a reader of this file leaves out."""
        if self.truncated_lines:
            lines = ", ".join(map(str, self.truncated_lines))
            log.warning("%s: left out truncated row(s) at line %s", self.path, lines)
        if self.duplicate_ids:
            log.warning(
                "%s: %d trial id(s) have more than one judged row (e.g. %s; two runs wrote this file at once): "
                "each counted once, its latest row; `lockcompare upgrade %s` keeps only those",
                self.path, len(self.duplicate_ids), self.duplicate_ids[0], self.path,
            )  # fmt: skip


def history_file(row: dict[str, Any], *, results: Path) -> Path | None:
    """A row's history file: the ``history`` column is relative to the CSV's folder and must stay in
    it (resolved): a CSV is data, and ``../../etc/passwd`` in it is not a path to open. None when it
    leaves the folder."""
    folder = results.resolve().parent
    path = (folder / str(row["history"])).resolve()
    return path if path.is_relative_to(folder) else None


def allow_fields_of(size: int) -> None:
    """Let the csv module read any field of a file of ``size`` bytes.

    Its default field limit (131 072 characters) is below what a long schedule writes in one cell:
    one such row would make every row of the file unreadable. A field is never longer than the
    file, and the file's size is capped where it is read (:func:`~lockcompare.files.read_capped`).
    """
    if size > csv.field_size_limit():
        csv.field_size_limit(size)


def inspect_results(path: Path) -> ResultsFile:
    """Read a results CSV of any schema; raises :class:`ResultsFileError` for one that is not ours."""
    data = read_capped(path)
    try:
        text = data.decode("utf-8-sig")  # a byte-order mark (a file saved by Excel) is not part of the header
    except UnicodeDecodeError as exc:
        raise ResultsFileError(f"{path}: not a readable CSV: {exc}") from None
    lines = text.splitlines(keepends=True)
    allow_fields_of(len(data))
    try:
        reader = csv.reader(lines)
        header = next(reader, None)
        if not header or "schema_version" not in header:
            raise ResultsFileError(f"{path}: not a lockcompare results file (no schema_version column)")
        records = list(reader)
    except csv.Error as exc:
        raise ResultsFileError(f"{path}: not a readable CSV: {exc}") from None
    truncated, typed, oldest = [], [], SCHEMA_VERSION
    for number, values in enumerate(records, start=2):
        last = number == len(records) + 1
        if len(values) != len(header) or (last and not text.endswith("\n")):
            truncated.append(number)  # our writer ends every whole row with a newline
            continue
        raw = dict(zip(header, values, strict=True))
        try:
            version = int(raw["schema_version"])
        except ValueError:
            raise ResultsFileError(f"{path}:{number}: bad schema_version {raw['schema_version']!r}") from None
        if version > SCHEMA_VERSION:
            raise ResultsFileError(
                f"{path}: schema_version {version} is newer than this lockcompare ({SCHEMA_VERSION}): "
                "upgrade lockcompare"
            )
        oldest = min(oldest, version)
        try:
            typed.append(_typed(_upgrade(raw, version)))
        except ValueError as exc:
            raise ResultsFileError(f"{path}:{number}: malformed value: {exc}") from None
    return ResultsFile(
        path=path,
        rows=typed,
        oldest_schema=oldest,
        truncated_lines=truncated,
        header_current=tuple(header) == COLUMNS,
        duplicate_ids=duplicate_ids(typed),
    )


def read_results(path: Path) -> list[dict[str, Any]]:
    """Rows of a results CSV, typed, in the current schema. Truncated rows are left out and a
    trial judged twice counts once (its latest row), each said as a warning."""
    found = inspect_results(path)
    found.warn()
    return found.kept_rows()


def duplicate_ids(rows: list[dict[str, Any]]) -> list[str]:
    """trial_ids with more than one judged (not ``unknown``) row, in file order."""
    seen: dict[str, int] = {}
    for row in rows:
        if row.get("verdict") != "unknown":
            seen[row["trial_id"]] = seen.get(row["trial_id"], 0) + 1
    return [trial_id for trial_id, count in seen.items() if count > 1]


def without_duplicates(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` without the earlier judged rows of a trial judged again later (an ``unknown``
    row followed by its rerun is kept as it is: see :func:`latest_rows`)."""
    last: dict[str, int] = {}
    for index, row in enumerate(rows):
        if row.get("verdict") != "unknown":
            last[row["trial_id"]] = index
    return [row for index, row in enumerate(rows) if row.get("verdict") == "unknown" or last[row["trial_id"]] == index]


def _upgrade(raw: dict[str, str], version: int) -> dict[str, str]:
    """A row of an older schema in today's terms; its trial_id recomputed from its settings."""
    if version == 1:  # schema 1 had no resource_check: fenced checked the token on the write only
        raw = {"resource_check": "fence-writes" if raw.get("backend") == "fenced" else "plain"} | raw
    if "faults" not in raw:  # before schedules: what the experiment did then, as a schedule
        raw = raw | {"faults": legacy_faults(raw)}
    if "redis_version" in raw and "server_version" not in raw:  # before schema 8, and what it meant
        raw = {k: v for k, v in raw.items() if k != "redis_version"} | {"server_version": legacy_server_version(raw)}
    if "client_timeout_ms" not in raw:  # before backends stated theirs: the harness's pick
        raw = raw | {"client_timeout_ms": canonical(legacy_client_timeout_ms(raw))}
    raw = _LEGACY | raw  # a column a row lacks was added after it was written
    if version == SCHEMA_VERSION:
        return raw
    try:
        planned = str(int(raw["workers"]) * int(raw["rounds"]))
    except (KeyError, ValueError):
        planned = ""
    upgraded = {"entries_planned": planned} | raw | {"schema_version": str(SCHEMA_VERSION)}
    upgraded["trial_id"] = trial_id_for(_typed(upgraded))
    if upgraded.get("verdict") == "exclusive" and planned and upgraded.get("entries") != planned:
        # Before schema 4 a trial that skipped rounds could be called exclusive; today it is not.
        upgraded["verdict"] = "degraded" if upgraded.get("entries") not in ("0", "") else "unavailable"
    return upgraded


def legacy_server_version(raw: dict[str, str]) -> str:
    """A ``redis_version`` cell (schema < 8) as a ``server_version``: a bare number was what a
    Redis-protocol server reported ("6.2.14" -> "redis 6.2.14"; a Valkey server then said "7.2.4"
    too, which cannot be told apart now); "postgresql 18.6" and "" stay as they were."""
    text = raw.get("redis_version") or ""
    return f"redis {text}" if text[:1].isdigit() else text


def _typed(raw: dict[str, str]) -> dict[str, Any]:
    return {col: _parse(col, raw.get(col) or "") for col in COLUMNS} | _extra(raw)


def _extra(raw: dict[str, str]) -> dict[str, str]:
    """Columns we do not know (e.g. from a newer minor version) are kept as text."""
    return {k: v for k, v in raw.items() if k is not None and k not in COLUMNS}


def rewrite(path: Path, rows: list[dict[str, Any]]) -> None:
    """Replace ``path`` by ``rows`` in the current schema, atomically (a temporary file, then rename)."""

    def write(tmp: Path) -> None:
        with tmp.open("w", encoding="utf-8", newline="") as fh:
            fh.write(format_header())
            for row in rows:
                fh.write(format_row(row))
            fh.flush()
            os.fsync(fh.fileno())

    replace_atomically(path, write)


def superseded_path(path: Path) -> Path:
    """Where the rows a rerun replaced are kept: ``x.csv`` -> ``x.superseded.csv``, beside it (the
    same histories folder: each superseded row keeps the history it was judged from)."""
    return path.with_name(f"{path.stem}.superseded{path.suffix}")


def split_superseded(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(one row per trial, the rows a later row of the same trial replaced), each in file order: a
    trial run again (after an ``unknown`` verdict) is its latest row, in the place of its first."""
    last: dict[str, int] = {}
    for index, row in enumerate(rows):
        last[row["trial_id"]] = index
    kept: list[dict[str, Any]] = []
    superseded: list[dict[str, Any]] = []
    placed: set[str] = set()
    for index, row in enumerate(rows):
        trial_id = row["trial_id"]
        if last[trial_id] != index:
            superseded.append(row)
            if trial_id not in placed:
                kept.append(rows[last[trial_id]])
                placed.add(trial_id)
        elif trial_id not in placed:
            kept.append(row)
            placed.add(trial_id)
    return kept, superseded


def supersede(path: Path, row: dict[str, Any]) -> int:
    """Put ``row`` in the place of the rows of its trial already in ``path`` (a rerun after an
    ``unknown`` verdict), so every reader, a plain CSV reader included, sees one row per trial. The
    replaced rows are appended to :func:`superseded_path` first, then ``path`` is rewritten
    atomically (a crash between the two leaves the old row in both: the trial reruns). Returns how
    many rows were replaced (0: the trial had none, and ``row`` is appended)."""
    rows = inspect_results(path).rows if path.exists() else []
    old = [r for r in rows if r["trial_id"] == row["trial_id"]]
    if not old:
        ResultsWriter(path).append(row)
        return 0
    side = ResultsWriter(superseded_path(path))
    for r in old:
        side.append(r)
    kept, _ = split_superseded([*rows, row])
    rewrite(path, kept)
    return len(old)


def finished_trials(rows: list[dict[str, Any]]) -> set[str]:
    """trial_ids with a judged verdict (for ``--resume``): an ``unknown`` trial is not finished
    and runs again."""
    return {row["trial_id"] for row in rows if row["verdict"] != "unknown"}


def latest_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per trial: a trial run again (after an ``unknown`` verdict) supersedes its older rows."""
    latest: dict[str, dict[str, Any]] = {}
    for row in rows:
        latest.pop(row["trial_id"], None)
        latest[row["trial_id"]] = row
    return list(latest.values())
