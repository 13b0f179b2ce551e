"""Tables a reader can scan: fixed order, narrow by default, timing-marked cells marked everywhere."""

from __future__ import annotations

import tomllib
from pathlib import Path

from lockcompare.analysis.order import BACKEND_ORDER
from lockcompare.render.table import marked_cells, render, summarize
from test_results import row

ROOT = Path(__file__).resolve().parents[1]


def test_backend_order_is_the_registration_order_of_pyproject() -> None:
    # A backend registered in pyproject.toml without a place in BACKEND_ORDER would sort after the
    # built-ins by name: this says where to add it.
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]["lockcompare.backends"]
    assert list(declared) == list(BACKEND_ORDER)


def test_cells_are_sorted_by_backend_then_experiment_whatever_order_trials_finished_in() -> None:
    finished = [
        ("fenced", "short-ttl"), ("my.plugin:Lock", "baseline"), ("fenced", "baseline"), ("none", "client-pause"),
        ("single", "client-pause"), ("none", "baseline"), ("single", "baseline"), ("fenced", "client-pause"),
    ]  # fmt: skip
    rows = [row(backend=b, experiment=e) for b, e in finished]
    _, lines = summarize(rows)
    assert [tuple(line[:2]) for line in lines] == [
        ("none", "baseline"), ("none", "client-pause"), ("single", "baseline"), ("single", "client-pause"),
        ("fenced", "baseline"), ("fenced", "short-ttl"), ("fenced", "client-pause"), ("my.plugin:Lock", "baseline"),
    ]  # fmt: skip


def test_the_default_table_is_narrow_and_wide_has_the_rest() -> None:
    rows = [row(backend="single", experiment="client-pause", refusals="held:3;no-quorum:1", acquire_timeouts=1,
                grants_while_held=2, stall_ms=3.0, margin_ms=20.0)]  # fmt: skip
    narrow, _ = summarize(rows)
    wide, _ = summarize(rows, wide=True)
    assert len(narrow) <= 8
    assert narrow == ["backend", "experiment", "trials", "violation rate (95% CI)",
                      "conflicts / entries (mean ±95% CI)", "rejected writes", "lost updates (range)",
                      "verdicts"]  # fmt: skip
    assert {"entries / planned", "max inside", "granted while held", "acquires given up (refusals)",
            "worst stall / margin ms"} <= set(wide)  # fmt: skip


def test_a_cell_with_a_timing_marked_trial_says_so_in_every_format_and_width() -> None:
    rows = [
        row(backend="fenced", experiment="client-pause", stall_ms=14.0, margin_ms=20.0, timing_marked=True),
        row(backend="fenced", experiment="client-pause", stall_ms=0.4, margin_ms=20.0, timing_marked=False),
        row(backend="single", experiment="client-pause", stall_ms=0.5, margin_ms=20.0, timing_marked=False),
    ]
    for wide in (False, True):
        headers, lines = summarize(rows, wide=wide)
        trials = {line[0]: line[headers.index("trials")] for line in lines}
        assert trials == {"single": "1", "fenced": "2 (1 timing-marked)"}
    _, lines = summarize(rows, wide=True)
    assert lines[1][-2] == "14 / 20"  # fenced: the worst stall against its margin
    for fmt in ("github", "simple", "latex", "csv"):
        assert "2 (1 timing-marked)" in render(rows, fmt=fmt)
    assert "timing-marked: the machine stalled" in render(rows)  # the legend under the table
    assert "timing-marked: the machine stalled" not in render(rows[1:])
    assert marked_cells(rows) == [("fenced × client-pause", 1, 2)]
