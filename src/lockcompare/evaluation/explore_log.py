"""Everything ``explore`` tried, on disk: ``DIR/explored.csv`` (one row per trial, appended the moment
it ends) and ``DIR/explore.json`` (the search's settings), so a search can be audited and resumed.

A resumed search must be the same search (same property, kinds, rounds, seed, backend and trial
settings): otherwise the trials in the file would answer other questions. So the settings are
written once, and a resume with different ones is refused with the first difference named.
"""

from __future__ import annotations

import csv
import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lockcompare.analysis.results import allow_fields_of
from lockcompare.errors import ResultsFileError
from lockcompare.evaluation.explore_request import TrialOutcome, TrialRequest
from lockcompare.files import writing

CSV_NAME = "explored.csv"
SETTINGS_NAME = "explore.json"
METRIC_COLUMNS = ("lost_updates", "conflicts", "conflicts_overlap", "grants_while_held", "foreign_releases")
COLUMNS = (
    "phase", "schedule", "rounds", "seed", "result", "verdict", *METRIC_COLUMNS, "trial_seconds", "trial_id",
    "history", "problem",
)  # fmt: skip
#: The ``trial_id`` of a request that ran no trial (a schedule the matrix refused, servers that
#: would not start): unique per request, so a plain CSV reader sees one row per trial id, and no
#: such row is mistaken for a trial (issue 42: 84 requests without a trial shared the id "").
NO_TRIAL_PREFIX = "no-trial."


def no_trial_id(*, schedule: str, rounds: int, seed: int) -> str:
    """The id of the one request ``(schedule, rounds, seed)`` that ran no trial (the log's key)."""
    digest = hashlib.sha1(f"{schedule}|{rounds}|{seed}".encode()).hexdigest()[:12]
    return f"{NO_TRIAL_PREFIX}{digest}"


class ExploreLog:
    """The CSV of trials tried, opened for appending; ``outcomes`` holds what an earlier run found."""

    def __init__(self, out_dir: Path, *, settings: Mapping[str, Any], resume: bool) -> None:
        self.dir = out_dir
        self.path = out_dir / CSV_NAME
        self.outcomes: dict[tuple[str, int, int], TrialOutcome] = {}
        settings_path = out_dir / SETTINGS_NAME
        wanted = {k: str(v) for k, v in settings.items()}
        if out_dir.exists() and not out_dir.is_dir():
            raise ResultsFileError(f"{out_dir} is not a directory: --out takes a directory")
        if self.path.exists() or settings_path.exists():
            if not resume:
                raise ResultsFileError(
                    f"{out_dir} holds an earlier search: pass --resume to continue it, or another --out"
                )
            try:
                found = json.loads(settings_path.read_text())
            except (OSError, ValueError) as exc:
                raise ResultsFileError(f"{settings_path}: cannot read the earlier search's settings ({exc})") from exc
            differ = [k for k in dict.fromkeys([*wanted, *found]) if found.get(k) != wanted.get(k)]
            if differ:
                k = differ[0]
                raise ResultsFileError(
                    f"{out_dir} holds a search with {k}={found.get(k)!r}, not {wanted.get(k)!r}: resume it with the "
                    "same settings, or choose another --out"
                )
            self.outcomes = read_outcomes(self.path) if self.path.exists() else {}
        else:
            with writing(out_dir):
                out_dir.mkdir(parents=True, exist_ok=True)
                settings_path.write_text(json.dumps(wanted, indent=1, sort_keys=True) + "\n")
        if not self.path.exists():
            with writing(self.path), self.path.open("w", newline="") as f:
                csv.writer(f).writerow(COLUMNS)

    def append(self, *, phase: str, request: TrialRequest, outcome: TrialOutcome, result: str) -> None:
        row = {
            "phase": phase, "schedule": request.schedule, "rounds": request.rounds, "seed": request.seed,
            "result": result, "verdict": outcome.verdict,
            **{m: int(outcome.metrics.get(m, 0)) for m in METRIC_COLUMNS},
            "trial_seconds": f"{outcome.trial_seconds:.3f}",
            "trial_id": outcome.trial_id
            or no_trial_id(schedule=request.schedule, rounds=request.rounds, seed=request.seed),
            "history": _relative(outcome.history, self.path.parent), "problem": outcome.problem,
        }  # fmt: skip
        with writing(self.path), self.path.open("a", newline="") as f:
            csv.writer(f).writerow([row[c] for c in COLUMNS])
            f.flush()


def _relative(history: str, base: Path) -> str:
    """A history's path as the CSV keeps it: relative to the search's directory when inside it, so
    the directory can be moved or committed whole (read back against the CSV's own directory)."""
    if not history:
        return ""
    try:
        return str(Path(history).resolve().relative_to(base.resolve()))
    except ValueError:
        return history


def read_outcomes(path: Path) -> dict[tuple[str, int, int], TrialOutcome]:
    """Every whole row of an explore CSV, as outcomes keyed by (schedule, rounds, seed); a row cut
    short by a crash is left out (its trial runs again)."""
    outcomes = {}
    try:
        with path.open(newline="", encoding="utf-8-sig") as f:
            allow_fields_of(path.stat().st_size)
            reader = csv.DictReader(f)
            if reader.fieldnames is None or list(reader.fieldnames) != list(COLUMNS):
                raise ResultsFileError(f"{path} is not an explore CSV of this version (columns differ)")
            for row in reader:
                if any(row.get(c) is None for c in COLUMNS):
                    continue  # truncated
                try:
                    key = (row["schedule"], int(row["rounds"]), int(row["seed"]))
                    outcomes[key] = TrialOutcome(
                        verdict=row["verdict"],
                        metrics={m: int(row[m]) for m in METRIC_COLUMNS},
                        trial_seconds=float(row["trial_seconds"]),
                        history=str(path.parent / row["history"]) if row["history"] else "",
                        trial_id="" if row["trial_id"].startswith(NO_TRIAL_PREFIX) else row["trial_id"],
                        problem=row["problem"],
                    )
                except ValueError:
                    continue  # a damaged row: its trial runs again
    except OSError as exc:
        raise ResultsFileError(f"cannot read {path}: {exc}") from exc
    return outcomes


def is_explore_log(path: Path) -> bool:
    """True when ``path`` is an explore log (its header is :data:`COLUMNS`)."""
    try:
        with path.open(newline="", encoding="utf-8-sig") as f:
            return next(csv.reader(f), None) == list(COLUMNS)
    except (OSError, UnicodeDecodeError, csv.Error):
        return False


def upgrade_log(path: Path) -> int:
    """Give every row of an explore log that ran no trial its own :func:`no_trial_id` (logs written
    before it shared the id ""), atomically; returns how many rows changed."""
    from lockcompare.files import replace_atomically

    with path.open(newline="", encoding="utf-8-sig") as f:
        allow_fields_of(path.stat().st_size)
        rows = list(csv.DictReader(f))
    changed = 0
    for row in rows:
        if not row["trial_id"]:
            row["trial_id"] = no_trial_id(schedule=row["schedule"], rounds=int(row["rounds"]), seed=int(row["seed"]))
            changed += 1
    if changed:

        def write(tmp: Path) -> None:
            with tmp.open("w", newline="", encoding="utf-8") as f:
                writer = csv.writer(f)
                writer.writerow(COLUMNS)
                writer.writerows([row[c] for c in COLUMNS] for row in rows)

        replace_atomically(path, write)
    return changed
