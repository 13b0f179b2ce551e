"""One picture that answers "who survives what", from a results CSV alone.

Backends are the rows (registration order), experiments the columns (catalogue order:
analysis/order.py). Each cell is coloured by the worst verdict among its trials (safety first: a
lost update outweighs a conflict without damage, which outweighs a refusal to make progress) and
shows the lost updates summed over its trials and how many trials it holds (when their verdicts
differ: how many had the worst one), and its violation rate: the trials with a safety violation
out of those that observed the lock, with the exact 95% interval (analysis/rates.py). A cell
holding a trial the timing sentinel marked (analysis/sentinel.py) gets a thick violet frame and
says how many: its number is the machine's as much as the lock's.

A backend run with a resource check of its own beside its default one (``--fence all`` beside
``writes``) is a row of its own (``fenced, fence-all``): it is another design. Any other setting
that varies inside a cell (a pause sweep) makes more columns (``client-pause, pause_ms 850``).

The grid is computed by a pure function (:func:`glance_grid`, tested on hand-built rows) and drawn
with matplotlib (the ``plot`` extra) into ``glance.png`` at a fixed size.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lockcompare.analysis.cells import group_cells
from lockcompare.analysis.order import backend_rank, experiment_rank
from lockcompare.analysis.rates import ViolationRate, violation_rate
from lockcompare.analysis.sentinel import is_marked
from lockcompare.analysis.verdicts import VERDICTS, severity
from lockcompare.errors import RenderError

GLANCE_PNG = "glance.png"
GLANCE_TITLE = "Who survives what: worst verdict, violations / observed trials [exact 95% CI], lost updates"

#: The colour and the short word a cell shows, per verdict.
_STYLE = {
    "lost-updates": ("#d7301f", "lost updates"),
    "double-applied": ("#a50026", "applied twice"),
    "lease-violated": ("#f46d43", "lease violated"),
    "conflicts-no-damage": ("#fdae61", "no damage"),
    "starved": ("#fee08b", "starved"),
    "unknown": ("#bdbdbd", "unknown"),
    "unavailable": ("#8c96c6", "unavailable"),
    "degraded": ("#c6dbef", "degraded"),
    "exclusive": ("#66bd63", "exclusive"),
}
#: Verdicts from worst to best (analysis/verdicts.py: one order for every reader), with their style.
VERDICT_STYLE: dict[str, tuple[str, str]] = {v.name: _STYLE[v.name] for v in VERDICTS}
#: A verdict this module does not know (a newer checker's word) ranks just below lost updates.
OTHER_STYLE = ("#e7298a", "")
MARKED_EDGE = "#54278f"
EMPTY = "#ffffff"

DPI = 100
#: Cell size, the least room left of the grid (backend names), above it (title, experiment names),
#: right of it (the last experiment name's tail), in pixels; a backend name's characters at most
#: LABEL_CHAR_PX wide each (the row labels' font), so the room left grows with the longest name.
ROW_PX, COLUMN_PX, LABEL_PX, TOP_PX, RIGHT_PX = 76, 104, 170, 100, 90
LABEL_CHAR_PX = 8
LEGEND_ENTRY_PX, LEGEND_ROW_PX = 115, 18


@dataclass(frozen=True, kw_only=True)
class GlanceCell:
    verdict: str  # the worst verdict among the trials
    verdicts: dict[str, int]
    trials: int
    lost_updates: int  # summed over the trials that could be judged
    marked: int  # timing-marked trials
    #: The share of observed trials with a safety violation and its exact interval (analysis/rates.py).
    rate: ViolationRate

    @property
    def colour(self) -> str:
        return VERDICT_STYLE.get(self.verdict, OTHER_STYLE)[0]

    @property
    def rate_line(self) -> str:
        """``3/5 [14–95%]``: violations of observed trials and the 95% interval in whole percents (a
        cell is narrow), rounded outwards (never narrower than computed); "0/0 observed" when no
        trial observed the lock."""
        rate = self.rate
        if not rate.observed:
            return "0/0 observed"
        low, high = math.floor(rate.low * 100 + 1e-9), math.ceil(rate.high * 100 - 1e-9)
        return f"{rate.violations}/{rate.observed} [{low}–{high}%]"

    @property
    def label(self) -> str:
        word = VERDICT_STYLE.get(self.verdict, (None, self.verdict))[1] or self.verdict
        # The colour is the worst verdict; when the trials differ, how many of them had it.
        mix = (
            f"{self.verdicts[self.verdict]} of {self.trials} trials"
            if len(self.verdicts) > 1
            else f"{self.trials} trial{'s' * (self.trials != 1)}"
        )
        lines = [word, self.rate_line, f"{self.lost_updates} lost", mix]
        if self.marked:
            lines.append(f"timing-marked {self.marked}")
        return "\n".join(lines)


@dataclass(frozen=True, kw_only=True)
class GlanceGrid:
    rows: tuple[str, ...]  # row labels, top to bottom
    columns: tuple[str, ...]  # column labels, left to right
    cells: dict[tuple[str, str], GlanceCell]  # (row, column) -> cell; absent: not run


def _severity(verdict: str) -> float:
    return severity(verdict)


def _worst_first(verdicts: dict[str, int]) -> list[tuple[str, int]]:
    return sorted(verdicts.items(), key=lambda item: _severity(item[0]))


def glance_grid(rows: Sequence[dict[str, Any]]) -> GlanceGrid:
    """Rows (backend [, resource check]) × columns (experiment [, other varying settings]) → cells."""
    cells: dict[tuple[str, str], GlanceCell] = {}
    row_keys: dict[str, tuple[Any, ...]] = {}
    column_keys: dict[str, tuple[Any, ...]] = {}
    for cell in group_cells(rows):
        checks = [f"{v}" for c, v in cell.conditions if c == "resource_check"]
        others = [f"{c} {v}" for c, v in cell.conditions if c != "resource_check"]
        row = ", ".join([cell.backend, *checks])
        column = ", ".join([cell.experiment, *others])
        # within one backend (experiment) the variants keep the order they first appear in
        row_keys.setdefault(row, (backend_rank(cell.backend), len(row_keys)))
        column_keys.setdefault(column, (experiment_rank(cell.experiment), len(column_keys)))
        judged = [r for r in cell.rows if r["verdict"] != "unknown"]
        verdicts = dict(Counter(str(r["verdict"]) for r in cell.rows))
        cells[(row, column)] = GlanceCell(
            verdict=_worst_first(verdicts)[0][0],
            verdicts=verdicts,
            trials=len(cell.rows),
            lost_updates=sum(max(0, int(r["lost_updates"])) for r in judged),
            marked=sum(1 for r in cell.rows if is_marked(r)),
            rate=violation_rate(cell.rows),
        )
    return GlanceGrid(
        rows=tuple(sorted(row_keys, key=lambda k: row_keys[k])),
        columns=tuple(sorted(column_keys, key=lambda k: column_keys[k])),
        cells=cells,
    )


LEGEND_ENTRIES = len(VERDICT_STYLE) + 1  # the verdicts and "timing-marked"


def _legend_layout(width: int) -> tuple[int, int]:
    """(entries per legend row, legend rows) for a figure ``width`` px wide."""
    per_row = max(1, min(LEGEND_ENTRIES, (width - 20) // LEGEND_ENTRY_PX))
    return per_row, math.ceil(LEGEND_ENTRIES / per_row)


def _footer_px(width: int) -> int:
    return 14 + LEGEND_ROW_PX * _legend_layout(width)[1]


def label_px(grid: GlanceGrid) -> int:
    """Room left of the grid: enough for the longest backend name (a plug-in's can be long)."""
    return max(LABEL_PX, LABEL_CHAR_PX * max((len(row) for row in grid.rows), default=0) + 16)


def size_px(grid: GlanceGrid) -> tuple[int, int]:
    width = label_px(grid) + COLUMN_PX * len(grid.columns) + RIGHT_PX
    return width, TOP_PX + ROW_PX * len(grid.rows) + _footer_px(width)


def grid_origin_px(grid: GlanceGrid) -> tuple[int, int]:
    """Where the first cell's top-left corner is in the image (x from the left, y from the top)."""
    return label_px(grid), TOP_PX


def plot_glance(rows: Sequence[dict[str, Any]], *, out: Path) -> Path:
    """Draw the grid of ``rows`` into the PNG ``out`` (see the module docstring)."""
    from lockcompare.render.plots import _save, require_matplotlib

    grid = glance_grid(rows)
    if not grid.cells:
        raise RenderError("no trials to draw")
    mpl = require_matplotlib()
    width, height = size_px(grid)
    fig = mpl.Figure(figsize=(width / DPI, height / DPI), dpi=DPI)
    mpl.FigureCanvasAgg(fig)
    # The grid fills a fixed box in pixels: every cell is COLUMN_PX x ROW_PX whatever the labels.
    bottom = _footer_px(width)
    ax = fig.add_axes((label_px(grid) / width, bottom / height, COLUMN_PX * len(grid.columns) / width,
                       ROW_PX * len(grid.rows) / height))  # fmt: skip
    from matplotlib.patches import Rectangle

    for y, row in enumerate(grid.rows):
        for x, column in enumerate(grid.columns):
            cell = grid.cells.get((row, column))
            if cell is None:
                ax.add_patch(Rectangle((x, y), 1, 1, facecolor=EMPTY, edgecolor="#d9d9d9", lw=0.5))
                ax.text(x + 0.5, y + 0.5, "not run", ha="center", va="center", fontsize=7, color="#969696")
                continue
            ax.add_patch(Rectangle((x, y), 1, 1, facecolor=cell.colour, edgecolor="white", lw=1.5))
            if cell.marked:
                ax.add_patch(Rectangle((x + 0.04, y + 0.07), 0.92, 0.86, fill=False, edgecolor=MARKED_EDGE, lw=3.5))
            ax.text(x + 0.5, y + 0.5, cell.label, ha="center", va="center", fontsize=7, linespacing=1.15)
    ax.set_xlim(0, len(grid.columns))
    ax.set_ylim(len(grid.rows), 0)  # the first backend on top
    ax.set_xticks([x + 0.5 for x in range(len(grid.columns))], list(grid.columns), rotation=30, ha="left",
                  fontsize=8)  # fmt: skip
    ax.xaxis.tick_top()
    ax.set_yticks([y + 0.5 for y in range(len(grid.rows))], list(grid.rows), fontsize=9)
    ax.tick_params(length=0)
    for spine in ax.spines.values():
        spine.set_visible(False)
    handles = [mpl.Patch(facecolor=colour, label=word) for colour, word in VERDICT_STYLE.values()]
    handles.append(mpl.Patch(facecolor="white", edgecolor=MARKED_EDGE, lw=2.5, label="timing-marked"))
    per_row, _ = _legend_layout(width)
    fig.legend(handles=handles, loc="lower center", ncol=per_row, fontsize=7, frameon=False)
    fig.text(0.01, 1 - 8 / height, GLANCE_TITLE, ha="left", va="top", fontsize=9)
    return _save(fig, out)
