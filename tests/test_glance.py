"""The at-a-glance picture: its grid from hand-built rows, and the colours in the PNG it draws."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

from lockcompare.render.glance import (
    COLUMN_PX,
    EMPTY,
    MARKED_EDGE,
    ROW_PX,
    VERDICT_STYLE,
    glance_grid,
    grid_origin_px,
    plot_glance,
    size_px,
)
from png_header import png_size

needs_matplotlib = pytest.mark.skipif(
    importlib.util.find_spec("matplotlib") is None, reason="matplotlib is not installed: pip install -e '.[test]'"
)


def row(backend: str, experiment: str, verdict: str, *, lost: int = 0, marked: bool = False, **kw: Any) -> dict:
    return {"backend": backend, "experiment": experiment, "verdict": verdict, "lost_updates": lost,
            "timing_marked": marked, "trial_id": f"{backend}.{experiment}.{len(kw)}", **kw}  # fmt: skip


ROWS = [
    # in the order a parallel run might finish them
    row("fenced", "client-pause", "conflicts-no-damage"),
    row("single", "client-pause", "lost-updates", lost=38),
    row("single", "client-pause", "lost-updates", lost=40, marked=True),
    row("single", "baseline", "exclusive"),
    row("fenced", "client-pause", "lost-updates", lost=1, marked=True),
    row("fenced", "baseline", "exclusive"),
    row("single", "node-crash", "unavailable"),
    row("none", "baseline", "lost-updates", lost=20),
]


def test_the_grid_is_in_fixed_order_and_each_cell_takes_its_worst_verdict() -> None:
    grid = glance_grid(ROWS)
    assert grid.rows == ("none", "single", "fenced")  # registration order, not finishing order
    assert grid.columns == ("baseline", "client-pause", "node-crash")  # catalogue order
    pause = grid.cells[("fenced", "client-pause")]
    assert (pause.verdict, pause.lost_updates, pause.trials, pause.marked) == ("lost-updates", 1, 2, 1)
    assert pause.label == "lost updates\n1/2 [1–99%]\n1 lost\n1 of 2 trials\ntiming-marked 1"
    single = grid.cells[("single", "client-pause")]
    assert (single.verdict, single.lost_updates, single.marked) == ("lost-updates", 78, 1)
    assert grid.cells[("single", "node-crash")].colour == VERDICT_STYLE["unavailable"][0]
    assert grid.cells[("fenced", "baseline")].label == "exclusive\n0/1 [0–98%]\n0 lost\n1 trial"
    assert ("none", "client-pause") not in grid.cells  # not run: drawn empty


def test_every_verdict_the_checker_gives_has_a_colour_and_a_rank() -> None:
    from lockcompare.analysis.checker import VERDICT_MEANINGS

    assert set(VERDICT_MEANINGS) == set(VERDICT_STYLE)
    ranked = list(VERDICT_STYLE)
    assert (ranked[0], ranked[-1]) == ("lost-updates", "exclusive")


def test_a_second_resource_check_is_a_row_and_a_pause_sweep_makes_columns() -> None:
    rows = [
        row("fenced", "client-pause", "lost-updates", lost=1, resource_check="fence-writes", pause_ms=120.0),
        row("fenced", "client-pause", "conflicts-no-damage", resource_check="fence-all", pause_ms=120.0),
        row("fenced", "client-pause", "exclusive", resource_check="fence-writes", pause_ms=60.0),
        row("fenced", "client-pause", "exclusive", resource_check="fence-all", pause_ms=60.0),
    ]
    grid = glance_grid(rows)
    assert grid.rows == ("fenced, fence-writes", "fenced, fence-all")
    assert grid.columns == ("client-pause, pause_ms 120", "client-pause, pause_ms 60")  # as first seen
    assert grid.cells[("fenced, fence-all", "client-pause, pause_ms 120")].verdict == "conflicts-no-damage"


def _rgb(colour: str) -> tuple[float, float, float]:
    return tuple(int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5))  # type: ignore[return-value]


@needs_matplotlib
def test_the_png_has_each_cell_in_its_verdict_colour_and_marked_cells_framed(tmp_path: Path) -> None:
    from matplotlib.image import imread

    path = plot_glance(ROWS, out=tmp_path / "glance.png")
    grid = glance_grid(ROWS)
    width, height = size_px(grid)
    assert png_size(path) == (width, height)
    pixels = imread(path)
    left, top = grid_origin_px(grid)

    def pixel(r: int, c: int, dx: int, dy: int) -> tuple[float, float, float]:
        y, x = top + ROW_PX * r + dy, left + COLUMN_PX * c + dx
        return tuple(float(v) for v in pixels[y, x, :3])  # type: ignore[return-value]

    for r, name in enumerate(grid.rows):
        for c, column in enumerate(grid.columns):
            cell = grid.cells.get((name, column))
            fill = cell.colour if cell is not None else EMPTY
            assert pixel(r, c, 12, 12) == pytest.approx(_rgb(fill), abs=0.02), (name, column)
            framed = cell is not None and cell.marked > 0
            edge = pixel(r, c, 4, ROW_PX // 2)
            assert (edge == pytest.approx(_rgb(MARKED_EDGE), abs=0.06)) is framed, (name, column, edge)


@needs_matplotlib
def test_a_long_backend_name_is_not_cut_at_the_left_edge(tmp_path: Path) -> None:
    from matplotlib.image import imread

    # The reproduction's glance once cut "redis-lock-renew-checked" and "node-sesame-using-checked".
    long = [{**row, "backend": "node-sesame-using-checked-and-then-some"} for row in ROWS]
    pixels = imread(plot_glance(long, out=tmp_path / "glance.png"))
    edge = pixels[:, :3, :3]  # the image's first columns: background only, no glyph reaching them
    assert float(edge.min()) > 0.9
