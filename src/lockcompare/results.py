"""The results CSV: one row per trial, appended whole the moment the trial ends.

Column names are stable and carry their units (``ttl_ms``, ``wall_s``). ``schema_version`` is in
every row; files from older versions stay readable (missing columns get their defaults). A row is
written with a single ``write`` on an ``O_APPEND`` descriptor and fsynced, so an interrupted run
leaves only complete rows, and the file is created only when its first row is ready.
"""

from __future__ import annotations

import csv
import io
import math
import os
from dataclasses import fields
from pathlib import Path
from typing import Any

from lockcompare.checker import TrialMetrics
from lockcompare.errors import ResultsFileError
from lockcompare.trial import TrialResult

SCHEMA_VERSION = 3

#: Columns added since schema 1, with what an older row meant: the pause was an in-process sleep
#: (until schema 3), it landed right after acquiring, no think time, fenced backends checked the
#: token on the write only (schema 1).
_SINCE_V2 = {"pause_how": "sleep"}
_SINCE_V1 = _SINCE_V2 | {"pause_point": "after-acquire", "think_ms": "0", "reads_rejected": "0", "cs_retries": "0"}

#: The trial's coordinates and settings, then every metric, then bookkeeping.
SETTING_COLUMNS = (
    "backend", "experiment", "trial", "seed", "workers", "rounds", "ttl_ms", "work_ms", "pause_ms",
    "time_scale", "acquire_timeout_ms", "retry_delay_ms", "think_ms", "node_count", "pause_point", "pause_how",
    "resource_check",
)  # fmt: skip
METRIC_COLUMNS = tuple(f.name for f in fields(TrialMetrics))
COLUMNS = (
    "schema_version", "run_id", "trial_id", "started_at", *SETTING_COLUMNS,
    "cluster", "redis_version", *METRIC_COLUMNS, "wall_s", "history",
)  # fmt: skip

_INT_COLUMNS = {
    "schema_version", "trial", "seed", "workers", "rounds", "ttl_ms", "entries", "conflicts",
    "conflicts_overlap", "max_concurrency", "writes_accepted", "writes_rejected",
    "stale_writes_accepted", "stale_writes_rejected", "lost_updates", "final_balance", "acquires",
    "acquire_timeouts", "refused_validity", "releases_failed", "reads_rejected", "cs_retries",
}  # fmt: skip
_FLOAT_COLUMNS = {
    "work_ms", "pause_ms", "time_scale", "acquire_timeout_ms", "retry_delay_ms", "think_ms", "overlap_ms",
    "acquire_p50_ms", "acquire_p99_ms", "wall_s",
}  # fmt: skip
_BOOL_COLUMNS = {"conflict_measures_agree"}


def make_row(
    result: TrialResult, *, run_id: str, cluster_kind: str, redis_version: str, history_path: str
) -> dict[str, Any]:
    spec = result.spec
    row: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "run_id": run_id,
        "trial_id": spec.trial_id,
        "started_at": result.started_at,
        **{name: getattr(spec, name) for name in SETTING_COLUMNS},
        "cluster": cluster_kind,
        "redis_version": redis_version,
        **result.metrics.as_row(),
        "wall_s": round(result.wall_s, 3),
        "history": history_path,
    }
    if row["node_count"] is None:
        row["node_count"] = ""
    return row


def _format(value: Any) -> str:
    if isinstance(value, float):
        return "" if math.isnan(value) else f"{value:.6g}"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def format_row(row: dict[str, Any], *, header: bool = False) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    if header:
        writer.writerow(COLUMNS)
    writer.writerow([_format(row.get(col, "")) for col in COLUMNS])
    return buf.getvalue()


class ResultsWriter:
    """Appends whole rows to a CSV; creates it (with its header) only with the first row."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def append(self, row: dict[str, Any]) -> None:
        new = not self.path.exists() or self.path.stat().st_size == 0
        data = format_row(row, header=new).encode()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, data)  # one write: a row is on disk whole, or not at all
            os.fsync(fd)
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


def read_results(path: Path) -> list[dict[str, Any]]:
    """Rows of a results CSV, typed. Raises :class:`ResultsFileError` for a file that is not ours."""
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            if not reader.fieldnames or "schema_version" not in reader.fieldnames:
                raise ResultsFileError(f"{path}: not a lockcompare results file (no schema_version column)")
            rows = list(reader)
    except OSError as exc:
        raise ResultsFileError(f"cannot read {path}: {exc.strerror or exc}") from None
    except (csv.Error, UnicodeDecodeError) as exc:
        raise ResultsFileError(f"{path}: not a readable CSV: {exc}") from None
    typed = []
    for number, raw in enumerate(rows, start=2):
        try:
            version = int(raw["schema_version"])
        except (TypeError, ValueError):
            raise ResultsFileError(f"{path}:{number}: bad schema_version {raw['schema_version']!r}") from None
        if version > SCHEMA_VERSION:
            raise ResultsFileError(f"{path}: schema_version {version} is newer than this lockcompare ({SCHEMA_VERSION})")
        if version == 1:
            raw = _upgrade_v1(raw)
        elif version == 2:
            raw = _SINCE_V2 | raw
        try:
            typed.append({col: _parse(col, raw.get(col) or "") for col in COLUMNS} | _extra(raw))
        except ValueError as exc:
            raise ResultsFileError(f"{path}:{number}: malformed value: {exc}") from None
    return typed


def _upgrade_v1(raw: dict[str, str]) -> dict[str, str]:
    check = "fence-writes" if raw.get("backend") == "fenced" else "plain"
    return _SINCE_V1 | {"resource_check": check} | raw


def _extra(raw: dict[str, str]) -> dict[str, str]:
    """Columns we do not know (e.g. from a newer minor version) are kept as text."""
    return {k: v for k, v in raw.items() if k is not None and k not in COLUMNS}


def finished_trials(path: Path) -> set[str]:
    """trial_ids already in a results file (for ``--resume``)."""
    if not path.exists():
        return set()
    return {row["trial_id"] for row in read_results(path)}
