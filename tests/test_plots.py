"""Plots: the arithmetic behind each bar, the incidents a timeline is centred on (hand-built
histories), and real PNGs drawn from the golden runs in tests/data/golden (skipped, saying why,
where matplotlib is not installed)."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from lockcompare.analysis import incidents
from lockcompare.analysis.cells import group_cells, varying_conditions
from lockcompare.analysis.history import load
from lockcompare.analysis.results import read_results
from lockcompare.analysis.stats import mean_ci
from lockcompare.cli import app
from lockcompare.errors import PlotDependencyError
from lockcompare.render.plots import (
    BACKEND_COLOURS,
    DPI,
    INSTALL_HINT,
    MATRIX_HEIGHT_PX,
    WIDTH_PX,
    backend_colour,
    backend_order,
    bar_stats,
    plot_matrix,
    plot_timeline,
    timeline_height_px,
)
from png_header import png_size

GOLDEN = Path(__file__).parent / "data" / "golden"
needs_matplotlib = pytest.mark.skipif(
    importlib.util.find_spec("matplotlib") is None,
    reason="matplotlib is not installed: pip install -e '.[test]' (or '.[plot]') to run the plot tests",
)


# --- the interval arithmetic every bar uses -----------------------------------------------------


def test_mean_ci_of_three_values_uses_t_with_two_degrees_of_freedom() -> None:
    ci = mean_ci([10, 12, 14])
    # sd 2, standard error 2/sqrt(3), t(0.975, 2) = 4.303
    assert ci.mean == 12
    assert ci.half_width == pytest.approx(4.303 * 2 / math.sqrt(3))
    assert round(ci.half_width, 4) == 4.9687
    assert (ci.n, ci.low, ci.high) == (3, 10, 14)


def test_mean_ci_of_one_value_has_no_interval() -> None:
    ci = mean_ci([7])
    assert (ci.mean, ci.n) == (7, 1)
    assert math.isnan(ci.half_width)


def test_mean_ci_of_nothing_is_all_nan() -> None:
    ci = mean_ci([])
    assert ci.n == 0
    assert all(math.isnan(v) for v in (ci.mean, ci.half_width, ci.low, ci.high))


def row(backend: str = "single", *, conflicts: int = 0, entries: int = 80, lost: int = 0, verdict: str = "exclusive",
        experiment: str = "client-pause", **settings: Any) -> dict[str, Any]:  # fmt: skip
    return {"backend": backend, "experiment": experiment, "conflicts": conflicts, "entries": entries,
            "lost_updates": lost, "verdict": verdict, **settings}  # fmt: skip


def test_bar_stats_leave_unknown_and_empty_trials_out_and_count_them() -> None:
    rows = [
        row(conflicts=20, lost=2, verdict="lost-updates"),
        row(conflicts=40, lost=4, verdict="lost-updates"),
        row(conflicts=80, lost=80, verdict="unknown"),  # not trusted: not averaged
        row(conflicts=0, entries=0, verdict="unavailable"),  # no entry, so no rate
    ]
    stats = bar_stats(rows)
    assert stats.conflict_rate.mean == pytest.approx(37.5)  # (25% + 50%) / 2
    assert stats.conflict_rate.n == 2
    assert stats.lost_updates.mean == 3
    assert (stats.unknown, stats.no_entries) == (1, 1)


# --- colours and cells --------------------------------------------------------------------------


def test_backends_keep_a_fixed_order_and_colour() -> None:
    names = ["fenced", "zeta:Lock", "none", "alpha", "single"]
    assert backend_order(names) == ["none", "single", "fenced", "alpha", "zeta:Lock"]
    assert len(set(BACKEND_COLOURS.values())) == len(BACKEND_COLOURS)
    assert backend_colour("single") == BACKEND_COLOURS["single"]
    plugin = backend_colour("mypkg.locks:ZkLock")
    assert plugin == backend_colour("mypkg.locks:ZkLock")
    assert plugin not in BACKEND_COLOURS.values()


def test_cells_split_by_a_setting_that_varies_within_a_backend_and_experiment() -> None:
    rows = [row("single", pause_ms=p, resource_check="plain") for p in (600.0, 850.0, 600.0)]
    rows.append(row("fenced", pause_ms=600.0, resource_check="fence-writes"))
    assert varying_conditions(rows) == ["pause_ms"]  # resource_check differs only between backends
    cells = group_cells(rows)
    assert [(c.name, len(c.rows)) for c in cells] == [
        ("single.client-pause.pause_ms-600", 2),
        ("single.client-pause.pause_ms-850", 1),
        ("fenced.client-pause.pause_ms-600", 1),
    ]
    assert cells[0].title == "single × client-pause (pause_ms 600)"


# --- incidents on hand-built histories (times in ms, as ns) --------------------------------------


def ev(worker: int, rnd: int, kind: str, t0_ms: float, t1_ms: float | None = None, **fields: Any) -> dict[str, Any]:
    t1 = t0_ms if t1_ms is None else t1_ms
    return {"worker": worker, "round": rnd, "kind": kind, "t0": int(t0_ms * 1e6), "t1": int(t1 * 1e6), **fields}


def zombie_history() -> list[dict[str, Any]]:
    """Kleppmann's story at 0.1 scale: worker 0 pauses past its 100 ms lease, worker 1 acquires at
    101, both read 0, worker 1 writes 1, worker 0 wakes and writes 1 over it (an update is lost).
    A quiet round of worker 1 follows much later; the runner restarts node 2 from 500 to 510 ms."""
    return [
        ev(0, 0, "acquire", 0, 1, ok=True, t_attempt=int(0.5e6), valid_until=int(99e6), fence=None),
        ev(1, 0, "acquire", 0.2, 101, ok=True, t_attempt=int(100.5e6), valid_until=int(200e6), fence=None),
        ev(0, 0, "pause", 1, 121, how="sleep"),
        ev(1, 0, "enter", 102, 102.2, inside=1),
        ev(1, 0, "read", 103, 103.2, balance=0),
        ev(0, 0, "enter", 122, 122.2, inside=2),
        ev(0, 0, "read", 123, 123.2, balance=0),
        ev(1, 0, "write", 133, 133.4, value=1, accepted=True),
        ev(1, 0, "exit", 134, 134.2),
        ev(1, 0, "release", 134.3, 134.5, released=True),
        ev(0, 0, "write", 153, 153.4, value=1, accepted=True),
        ev(0, 0, "exit", 154, 154.2),
        ev(0, 0, "release", 154.3, 154.5, released=False),
        ev(-1, 0, "fault", 500, 501, fault="restart", action="inject", nodes=[2], detail="kill -9"),
        ev(-1, 0, "fault", 509, 510, fault="restart", action="heal", nodes=[2], detail=""),
        ev(1, 1, "acquire", 600, 601, ok=True, t_attempt=int(600.5e6), valid_until=int(700e6), fence=None),
        ev(1, 1, "enter", 602, 602.2, inside=1),
        ev(1, 1, "read", 603, 603.2, balance=1),
        ev(1, 1, "write", 633, 633.4, value=2, accepted=True),
        ev(1, 1, "exit", 634, 634.2),
        ev(1, 1, "release", 634.3, 634.5, released=True),
    ]


def test_the_write_that_overwrote_an_increment_is_found() -> None:
    lost = incidents.overwriting_writes(zombie_history())
    assert [(e["worker"], e["value"]) for e in lost] == [(0, 1)]


def test_a_rejected_write_loses_nothing() -> None:
    history = zombie_history()
    history[10] = ev(0, 0, "write", 153, 153.4, value=1, accepted=False)
    assert incidents.overwriting_writes(history) == []
    incident = incidents.first_incident(history)
    assert incident is not None and incident.what == "conflict"
    assert incident.at_ms == pytest.approx(122.1)


def test_default_window_covers_every_round_under_way_at_the_first_lost_update() -> None:
    window = incidents.default_window(zombie_history())
    assert "first lost update at 153.2 ms" in window.why
    # live rounds at 153.2: worker 0 round 0 (from its attempt at 0.5 to 154.5); worker 1's round 0
    # ended at 134.5 and is not live. A margin of 8% of the width is added on each side.
    assert window.from_ms == 0.0
    assert window.to_ms == pytest.approx(154.5 + (154.5 - 0.5) * incidents.MARGIN)


def test_default_window_of_a_quiet_trial_is_its_first_seconds() -> None:
    quiet = [e for e in zombie_history() if e["round"] == 1 or e["worker"] == -1]
    window = incidents.default_window(quiet)
    assert (window.from_ms, window.to_ms) == (0.0, pytest.approx(634.5 - 500))
    long_quiet = [*quiet, ev(1, 2, "release", 9000, 9000.5, released=True)]
    assert incidents.default_window(long_quiet).to_ms == incidents.QUIET_WINDOW_MS


def test_sections_and_the_stretch_with_two_inside() -> None:
    found = incidents.sections(zombie_history())
    assert [(s.worker, s.round, s.open) for s in found] == [(1, 0, False), (0, 0, False), (1, 1, False)]
    (crowded,) = incidents.crowded_spans(found)
    assert crowded == (pytest.approx(122.1), pytest.approx(134.1))


def test_an_unfinished_section_runs_to_the_end_of_the_history() -> None:
    history = [ev(0, 0, "enter", 10, 11, inside=1), ev(1, 0, "acquire", 0, 50, ok=False)]
    (section,) = incidents.sections(history)
    assert section.open and section.end_ms == 50


def test_fault_events_pair_inject_with_heal() -> None:
    (span,) = incidents.fault_spans(zombie_history())
    assert (span.fault, span.start_ms, span.end_ms, span.label) == ("restart", 500, 510, "restart n2")
    inject = ev(-1, 0, "fault", 5, 6, fault="clock-jump", action="inject")
    unhealed = incidents.fault_spans([ev(0, 0, "enter", 0), inject])
    assert [(s.label, s.start_ms, s.end_ms) for s in unhealed] == [("clock-jump", 5, None)]


def test_a_preparation_lasts_until_its_injection_which_lasts_until_the_heal_and_a_skipped_step_draws_nothing() -> None:
    # failover: the replication link is held back (prepare), the master crashed (inject), then healed;
    # the heal once closed the preparation and left the crash "never healed" on the trial page.
    step = {"fault": "failover", "nodes": [0]}
    history = [
        ev(0, 0, "enter", 0),
        ev(-1, -1, "fault", 0, 30, action="prepare", detail="replication link held back", **step),
        ev(-1, 0, "fault", 270, 2200, action="inject", detail="master crashed", **step),
        ev(-1, 0, "fault", 2210, 3260, action="heal", detail="fresh replica in sync", **step),
        ev(-1, 1, "fault", 4000, 4000, action="skipped", fault="restart", nodes=[]),
    ]
    spans = [(s.detail, s.start_ms, s.end_ms, s.ended) for s in incidents.fault_spans(history)]
    assert spans == [
        ("replication link held back", 0, 270, "ended by the step it prepared"),
        ("master crashed", 270, 3260, "healed"),
    ]


# --- real pictures --------------------------------------------------------------------------------


@needs_matplotlib
def test_matrix_plots_one_png_per_experiment_at_a_fixed_size(tmp_path: Path) -> None:
    paths = plot_matrix(read_results(GOLDEN / "matrix.csv"), out=tmp_path)
    assert [p.name for p in paths] == ["matrix-baseline.png", "matrix-client-pause.png"]
    for path in paths:
        assert png_size(path) == (WIDTH_PX, MATRIX_HEIGHT_PX)


@needs_matplotlib
def test_timeline_of_a_real_trial_and_of_one_with_faults(tmp_path: Path) -> None:
    (single,) = [r for r in read_results(GOLDEN / "tiny.csv") if r["backend"] == "single"]
    real = plot_timeline(load(GOLDEN / single["history"]), out=tmp_path / "real.png", title="t", ttl_ms=100)
    assert png_size(real) == (WIDTH_PX, timeline_height_px(2))
    faulty = plot_timeline(zombie_history(), out=tmp_path / "f.png", title="faults", from_ms=0, to_ms=700)
    assert png_size(faulty) == (WIDTH_PX, timeline_height_px(2))
    assert DPI * 8 == WIDTH_PX  # 8 inches at the DPI the figures are made with


def block_matplotlib(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every ``import matplotlib...`` fail, as on a machine without it."""
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "matplotlib", None)


def test_without_matplotlib_a_plot_says_what_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    block_matplotlib(monkeypatch)
    with pytest.raises(PlotDependencyError, match=r"^plots need matplotlib: pip install 'lockcompare\[plot\]'$"):
        plot_timeline(zombie_history(), out=tmp_path / "x.png", title="x")
    assert not (tmp_path / "x.png").exists()
    # the report needs no extra: its Markdown and HTML are written, the PNGs skipped with one line that says so
    result = CliRunner().invoke(app, ["report", str(GOLDEN / "tiny.csv"), "--out", str(tmp_path / "r")])
    assert result.exit_code == 0, result.output
    assert f"PNGs skipped ({INSTALL_HINT})" in result.stderr
    assert (tmp_path / "r" / "README.md").is_file() and (tmp_path / "r" / "html" / "index.html").is_file()
    assert not list((tmp_path / "r").glob("*.png"))


@needs_matplotlib
def test_cli_history_plot_and_its_window_checks(tmp_path: Path) -> None:
    (single,) = [r for r in read_results(GOLDEN / "tiny.csv") if r["backend"] == "single"]
    history = str(GOLDEN / single["history"])
    target = tmp_path / "t.png"
    result = CliRunner().invoke(app, ["history", history, "--plot", str(target)])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == str(target)
    assert png_size(target) == (WIDTH_PX, timeline_height_px(2))
    bad = CliRunner().invoke(app, ["history", history, "--plot", str(target), "--from-ms", "100", "--to-ms", "50"])
    assert bad.exit_code == 2
    assert bad.stderr.strip() == "lockcompare: error: --to-ms (50) must be after --from-ms (100)"
