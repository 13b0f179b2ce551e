"""Cells of a results file: the trials that belong together in one table line, bar or report section.

A cell is a backend × an experiment, split further by every setting of
:data:`CONDITION_COLUMNS` (the identity settings of scenario/settings.py) that varies inside one backend × experiment (a
pause-length sweep makes one cell per pause length). This is the same grouping as the summary
table's, so a bar in a plot and a line in the table always cover the same trials.

>>> rows = [{"backend": "single", "experiment": "client-pause", "pause_ms": p} for p in (600.0, 850.0)]
>>> [cell.name for cell in group_cells(rows)]
['single.client-pause.pause_ms-600', 'single.client-pause.pause_ms-850']
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from lockcompare.analysis.order import cell_rank
from lockcompare.scenario.settings import CONDITION_SETTINGS
from lockcompare.scenario.trialspec import custom_faults

#: Settings that split cells when they vary within one experiment (backend and experiment always do).
CONDITION_COLUMNS = CONDITION_SETTINGS

Row = dict[str, Any]


def setting_text(value: Any) -> str:
    """A setting as text, the way the summary table shows it: 850.0 reads 850."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def slug(text: str) -> str:
    """A file-name-safe form of ``text`` (a backend may be ``package.module:Class``)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "_"


@dataclass(frozen=True, kw_only=True)
class Cell:
    backend: str
    experiment: str
    #: (column, value as text) for each condition that varies in the file, in CONDITION_COLUMNS order.
    conditions: tuple[tuple[str, str], ...]
    rows: tuple[Row, ...]

    @property
    def name(self) -> str:
        """Stable and file-name safe: ``single.client-pause.pause_ms-850``."""
        parts = [self.backend, self.experiment, *(f"{column}-{value}" for column, value in self.conditions)]
        return slug(".".join(parts))

    @property
    def condition_label(self) -> str:
        """The varying settings in words, e.g. ``pause_ms 850`` ('' when nothing varies)."""
        return ", ".join(f"{column} {value}" for column, value in self.conditions)

    @property
    def title(self) -> str:
        label = self.condition_label
        return f"{self.backend} × {self.experiment}" + (f" ({label})" if label else "")


def varying_conditions(rows: Sequence[Row], columns: Sequence[str] = CONDITION_COLUMNS) -> list[str]:
    """Condition columns whose value differs between rows of one backend × experiment.

    Differences between backends or experiments are already said by their names, so they do not
    split cells (fenced checks ``fence-writes`` where single checks ``plain``: still one bar each);
    a ``--faults`` schedule replacing an experiment's is shown even where it does not vary.
    """
    seen: dict[tuple[str, str], dict[str, set[str]]] = {}
    for row in rows:
        per_column = seen.setdefault((row["backend"], row["experiment"]), {})
        for column in columns:
            per_column.setdefault(column, set()).add(setting_text(row.get(column)))
    # A schedule of the user's own is named even where it is the only one: the experiment's name
    # alone would claim the experiment's faults (client-pause with another schedule is not client-pause).
    custom = "faults" in columns and any(custom_faults(row) for row in rows)
    return [
        c for c in columns if any(len(per_column[c]) > 1 for per_column in seen.values()) or (c == "faults" and custom)
    ]


def group_cells(rows: Sequence[Row]) -> list[Cell]:
    """The cells of ``rows``: backends in registration order, experiments in catalogue order
    (analysis/order.py), cells of one backend × experiment in the order they first appear."""
    varying = varying_conditions(rows)
    groups: dict[tuple[str, ...], list[Row]] = {}
    for row in sorted(rows, key=cell_rank):
        key = (row["backend"], row["experiment"], *(setting_text(row.get(c)) for c in varying))
        groups.setdefault(key, []).append(row)
    return [
        Cell(backend=key[0], experiment=key[1], conditions=tuple(zip(varying, key[2:], strict=True)), rows=tuple(group))
        for key, group in groups.items()
    ]
