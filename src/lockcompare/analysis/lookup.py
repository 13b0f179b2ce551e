"""A trial found by its id: which results file holds its row, and where its history is.

``matrix`` prints trial ids (the violating ones at its end) and a reader pastes one into
``lockcompare history``; this finds the row among the results CSVs it is given.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lockcompare.analysis.results import history_file, inspect_results
from lockcompare.errors import InvalidValueError, LockcompareError

#: Where a bare trial id is looked for when no results file is named: the usual places.
DEFAULT_PLACES = (Path("."), Path("results"))


@dataclass(frozen=True)
class FoundTrial:
    row: dict[str, Any]
    results: Path
    history: Path


def results_files(places: Iterable[Path]) -> list[Path]:
    """Every ``*.csv`` directly in ``places`` (superseded files included: a rerun's old row is a
    trial a reader may ask about), sorted for a stable search."""
    found: list[Path] = []
    for place in places:
        if place.is_file():
            found.append(place)
        elif place.is_dir():
            found.extend(sorted(place.glob("*.csv")))
    return found


def find_trial(trial_id: str, *, files: Iterable[Path]) -> FoundTrial:
    """The row whose ``trial_id`` is ``trial_id`` (or the one row it is a unique prefix of) in
    ``files``; a file that is not a results CSV is passed over. Raises InvalidValueError naming
    what was searched when none or several match."""
    searched: list[Path] = []
    matches: list[tuple[dict[str, Any], Path]] = []
    for path in files:
        try:
            rows = inspect_results(path).kept_rows()
        except (LockcompareError, OSError):
            continue
        searched.append(path)
        exact = [r for r in rows if r.get("trial_id") == trial_id]
        matches += [(r, path) for r in (exact or [r for r in rows if str(r.get("trial_id", "")).startswith(trial_id)])]
    if not searched:
        raise InvalidValueError(f"no results CSV to look trial {trial_id!r} up in (name one with --results)")
    names = ", ".join(str(p) for p in searched)
    if not matches:
        raise InvalidValueError(f"no trial {trial_id!r} in {names}")
    ids = sorted({str(r["trial_id"]) for r, _ in matches})
    if len(ids) > 1:
        shown = ", ".join(ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")
        raise InvalidValueError(f"{trial_id!r} names {len(ids)} trials ({shown}): give more of the id")
    row, path = matches[-1]  # the same trial in several files: the last file searched (sorted) holds it too
    history = history_file(row, results=path)
    if history is None or not history.is_file():
        raise InvalidValueError(f"trial {ids[0]} in {path} has no history file ({row.get('history') or 'none kept'})")
    return FoundTrial(row=row, results=path, history=history)
