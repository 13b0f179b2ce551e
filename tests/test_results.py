"""The results CSV: rows written whole, typed on the way back, older schemas still readable."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pytest

from lockcompare.analysis.results import (
    COLUMNS,
    SCHEMA_VERSION,
    ResultsWriter,
    inspect_results,
    read_results,
)
from lockcompare.errors import ResultsFileError, UnknownNameError
from lockcompare.render.table import render, summarize

DATA = Path(__file__).parent / "data"


def test_schema_1_file_is_still_readable() -> None:
    # tests/data/schema1.csv: real rows written by the first version (before pause points).
    found = inspect_results(DATA / "schema1.csv")
    rows = found.rows
    assert found.oldest_schema == 1 and found.needs_rewrite
    assert [r["schema_version"] for r in rows] == [SCHEMA_VERSION] * 6  # read in today's terms
    assert all(r["entries_planned"] == r["workers"] * r["rounds"] for r in rows)
    assert {r["jitter"] for r in rows} == {0.0}  # before schema 4 nothing was jittered
    assert {r["pause_point"] for r in rows} == {"after-acquire"}
    assert {r["pause_how"] for r in rows} == {"sleep"}
    assert {r["resource_check"] for r in rows} == {"plain"}  # none and single: nothing to fence
    assert all(r["think_ms"] == 0 and r["cs_retries"] == 0 for r in rows)
    assert render(rows).startswith("| backend")


_ids = itertools.count()


def row(**kw: object) -> dict[str, object]:
    base: dict[str, object] = {c: "" for c in COLUMNS}
    base.update(schema_version=SCHEMA_VERSION, backend="single", experiment="baseline", trial_id=f"t{next(_ids)}",
                entries=80, entries_planned=80, conflicts=0, max_concurrency=1, writes_rejected=0, reads_rejected=0,
                cs_retries=0, lost_updates=0, overlap_ms=0.0, acquire_timeouts=0, refusals="", tokens_backwards=0,
                verdict="exclusive")  # fmt: skip
    base.update(kw)
    return base


def test_rows_round_trip_with_types(tmp_path: Path) -> None:
    path = tmp_path / "r.csv"
    writer = ResultsWriter(path)
    writer.append(row(trial_id="a", conflicts=3, overlap_ms=12.5, conflict_measures_agree=True))
    writer.append(row(trial_id="b", acquire_p50_ms=math.nan))
    assert path.read_text().count("schema_version") == 1  # one header, written with the first row
    first, second = read_results(path)
    assert (first["trial_id"], first["conflicts"], first["overlap_ms"]) == ("a", 3, 12.5)
    assert first["conflict_measures_agree"] is True
    assert math.isnan(second["acquire_p50_ms"])


def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "new.csv"
    ResultsWriter(path).append(row(schema_version=SCHEMA_VERSION + 1))
    with pytest.raises(ResultsFileError, match="newer than this lockcompare"):
        read_results(path)


def test_summary_groups_trials_and_gives_a_confidence_interval() -> None:
    rows = [row(conflicts=c, lost_updates=lost, verdict="lost-updates", backend="none")
            for c, lost in ((40, 40), (42, 38), (44, 40))]  # fmt: skip
    headers, lines = summarize(rows, wide=True)
    assert headers[:4] == ["backend", "experiment", "trials", "violation rate (95% CI)"]
    (line,) = lines
    assert line[:4] == ["none", "baseline", "3", "3/3 100% [29.2–100%]"]
    assert line[4] == "42 ±5 / 80"  # mean 42, t(2) 4.303 * sd 2 / sqrt(3) = 4.97
    assert line[5] == "80 / 80" and line[6] == "1"  # entries out of planned, most workers inside at once
    assert line[9] == "39.3 (38–40)" and line[10] == "3× lost-updates"


def test_a_setting_that_varies_within_a_cell_becomes_a_column() -> None:
    rows = [row(backend="fenced", experiment="client-pause", pause_ms=p, resource_check=c, verdict="exclusive")
            for p in (600.0, 850.0) for c in ("fence-writes", "fence-all")]  # fmt: skip
    headers, lines = summarize(rows)
    assert headers[2:4] == ["pause_ms", "resource_check"]
    assert [line[2:4] for line in lines] == [
        ["600", "fence-writes"], ["600", "fence-all"], ["850", "fence-writes"], ["850", "fence-all"]
    ]  # fmt: skip


def test_unknown_format() -> None:
    with pytest.raises(UnknownNameError):
        render([row()], fmt="html")


def test_progress_shows_when_a_holder_got_little_done() -> None:
    # Fencing after a token rollback: worker 1 held the lock 20 times and wrote once.
    rows = [row(backend="fenced", experiment="node-restart", progress_by_worker="w0:39/40 w1:1/20",
                workers_starved=0, writes_accepted_min_worker=1, verdict="conflicts-no-damage"),
            row(backend="fenced", experiment="node-restart", progress_by_worker="w0:40/40 w1:0/18",
                workers_starved=1, writes_accepted_min_worker=0, verdict="starved")]  # fmt: skip
    headers, (line,) = summarize(rows, wide=True)
    assert line[headers.index("least progress (rounds, one worker)")] == "0.5 / 19"
    assert line[headers.index("workers starved")] == "0.5 ±6.4"
    narrow, (short,) = summarize(rows)  # the narrow table keeps the least progress, not the optional counts
    assert short[narrow.index("least progress (rounds, one worker)")] == "0.5 / 19"
    # ~8 columns, 9 with the violation rate (issue 52) and the least progress beside it
    assert "workers starved" not in narrow and len(narrow) <= 9
    assert line[-1] == "1× conflicts-no-damage, 1× starved"
    healthy = [row(progress_by_worker="w0:40/40 w1:40/40", workers_starved=0)]
    assert "least progress (rounds, one worker)" not in summarize(healthy)[0]


def test_a_resent_request_applied_twice_shows_in_the_wide_table_only_where_one_was() -> None:
    rows = [row(backend="atomic", experiment="lost-reply", double_applications=n, verdict="double-applied")
            for n in (20, 18)]  # fmt: skip
    headers, (line,) = summarize(rows, wide=True)
    assert line[headers.index("applied twice")] == "19 ±12.7"  # mean 19, t(1) 12.706 * sd 1.414 / sqrt(2)
    idempotent = [row(backend="idempotent", experiment="lost-reply", double_applications=0)]
    assert "applied twice" not in summarize(idempotent, wide=True)[0]
