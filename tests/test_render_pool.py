"""A report's pieces of work on several processes (render/pool.py), and the timeline drawn only where
it shows (render/plots.py): the same files, sooner."""

from __future__ import annotations

import importlib.util
import math
import multiprocessing
from pathlib import Path

import pytest

from lockcompare.analysis.history import load
from lockcompare.analysis.results import read_results
from lockcompare.render import plots
from lockcompare.render.pool import MIN_PIECES, run_pieces
from lockcompare.render.report import _draw_timeline

GOLDEN = Path(__file__).parent / "data" / "golden"
needs_matplotlib = pytest.mark.skipif(
    importlib.util.find_spec("matplotlib") is None,
    reason="matplotlib is not installed: pip install -e '.[test]' (or '.[plot]') to run the plot tests",
)


def test_pieces_come_back_in_order_and_a_failing_piece_raises_with_no_process_left() -> None:
    pieces = [(float(i), 2.0) for i in range(MIN_PIECES + 4)]
    assert run_pieces(math.pow, pieces, jobs=2) == [i * i for i in range(MIN_PIECES + 4)]
    with pytest.raises(ValueError, match="math domain error"):
        run_pieces(math.sqrt, [(4.0,), (-1.0,), *[(1.0,)] * MIN_PIECES], jobs=2)
    assert multiprocessing.active_children() == []


def _golden_history() -> list[dict[str, object]]:
    (single,) = [r for r in read_results(GOLDEN / "tiny.csv") if r["backend"] == "single"]
    return load(GOLDEN / single["history"])


@needs_matplotlib
def test_a_timeline_drawn_in_another_process_is_the_same_bytes(tmp_path: Path) -> None:
    history = _golden_history()
    here = _draw_timeline(history, tmp_path / "here.png", "t", 100.0)
    drawn = run_pieces(
        _draw_timeline, [(history, tmp_path / f"{i}.png", "t", 100.0) for i in range(MIN_PIECES)], jobs=2
    )
    assert {path.read_bytes() for path in drawn} == {here.read_bytes()}


@needs_matplotlib
def test_drawing_only_what_the_window_shows_leaves_the_picture_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    history = _golden_history()
    span = plots.incidents.ms(max(e["t1"] for e in history), plots.incidents.origin_ns(history))
    window = {"from_ms": span / 3, "to_ms": span / 2}  # artists on both sides of it, and across its edges
    trimmed = plots.plot_timeline(history, out=tmp_path / "trimmed.png", title="t", ttl_ms=100, **window)
    monkeypatch.setattr(plots, "EDGE_SHARE", math.inf)  # every artist drawn, as before the trim
    whole = plots.plot_timeline(history, out=tmp_path / "whole.png", title="t", ttl_ms=100, **window)
    assert trimmed.read_bytes() == whole.read_bytes()
