"""Rebuilding a trial from its results row (``run --from``): pure logic, no Redis."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from lockcompare.analysis.reproduce import find_row, spec_from_row
from lockcompare.analysis.results import read_results
from lockcompare.errors import InvalidValueError

RESULTS = Path(__file__).resolve().parent.parent / "results"


@functools.cache  # read once for the module's tests (2 s a read): none of them changes a row in place
def committed_rows() -> tuple[dict, ...]:
    return tuple(
        row
        for path in sorted(
            [*RESULTS.glob("*.csv"), *RESULTS.glob("archive/*.csv"), *RESULTS.glob("archive/reproduction-*/*.csv")]
        )
        for row in read_results(path)
    )


def test_every_committed_row_rebuilds_to_its_own_trial_id() -> None:
    rows = committed_rows()
    assert rows, "no committed results to check against"
    for row in rows:
        spec = spec_from_row(row)
        assert spec.trial_id == row["trial_id"]
        assert spec.seed == row["seed"] and spec.ttl_ms == row["ttl_ms"]


def test_a_paused_trial_gets_its_pause_step_back() -> None:
    row = next(r for r in committed_rows() if r["pause_ms"] > 0 and r["experiment"] == "client-pause")
    spec = spec_from_row(row)
    assert spec.trial_id == row["trial_id"] and "pause worker=0" in spec.faults


def test_a_row_whose_settings_do_not_match_its_id_is_refused() -> None:
    row = dict(committed_rows()[0])
    row["ttl_ms"] = row["ttl_ms"] + 1  # the id no longer describes these settings
    with pytest.raises(InvalidValueError, match="cannot rebuild trial"):
        spec_from_row(row)


def test_rows_are_found_by_number_or_trial_id() -> None:
    rows = [{"trial_id": "a"}, {"trial_id": "b"}, {"trial_id": "b"}]
    assert find_row(rows, "1") is rows[0]
    assert find_row(rows, "b") is rows[2]  # the latest run of a trial
    for selector in ("0", "4", "c"):
        with pytest.raises(InvalidValueError):
            find_row(rows, selector)
