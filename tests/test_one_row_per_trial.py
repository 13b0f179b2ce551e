"""One row per trial in every results file (issue 42): a rerun takes its old row's place, the old
row moves to FILE.superseded.csv with the history it was judged from, and `upgrade` does the same
to files written before."""

from __future__ import annotations

import csv
from pathlib import Path

from typer.testing import CliRunner

from lockcompare.analysis.results import (
    SCHEMA_VERSION,
    format_row,
    history_file,
    read_results,
    rewrite,
    split_superseded,
    superseded_path,
)
from lockcompare.cli import app
from lockcompare.evaluation.explore_log import COLUMNS as EXPLORE_COLUMNS
from lockcompare.evaluation.explore_log import NO_TRIAL_PREFIX, upgrade_log


def _plain_rows(path: Path) -> list[dict[str, str]]:
    """The file as a plain CSV reader (a user's pandas) sees it: no deduplication."""
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def test_split_superseded_keeps_the_latest_row_in_the_place_of_the_first() -> None:
    rows = [
        {"trial_id": "a", "verdict": "exclusive"},
        {"trial_id": "b", "verdict": "unknown"},
        {"trial_id": "c", "verdict": "exclusive"},
        {"trial_id": "b", "verdict": "unknown", "n": 2},
        {"trial_id": "b", "verdict": "lost-updates"},
    ]
    kept, superseded = split_superseded(rows)
    assert [(r["trial_id"], r["verdict"]) for r in kept] == [
        ("a", "exclusive"),
        ("b", "lost-updates"),
        ("c", "exclusive"),
    ]
    assert superseded == [rows[1], rows[3]]


def test_a_rerun_replaces_its_unknown_row_and_the_old_row_keeps_its_history(tmp_path: Path) -> None:
    out = tmp_path / "x.csv"
    args = ["matrix", "--backends", "single", "--experiments", "baseline", "--trials", "1", "--rounds", "2"]
    args += ["--time-scale", "0.1", "--out", str(out)]
    first = CliRunner().invoke(app, args)
    assert first.exit_code == 0, first.output
    [row] = read_results(out)
    old_history = history_file(row, results=out)
    assert old_history is not None and old_history.exists()
    # The trial as if the checker could not judge it: --resume runs it again.
    row["verdict"], row["problem"] = "unknown", "made unknown by the test"
    rewrite(out, [row])
    again = CliRunner().invoke(app, [*args, "--resume"])
    assert again.exit_code == 0, again.output
    plain = _plain_rows(out)
    assert len(plain) == 1 and plain[0]["trial_id"] == row["trial_id"] and plain[0]["verdict"] != "unknown"
    [side] = _plain_rows(superseded_path(out))
    assert side["trial_id"] == row["trial_id"] and side["verdict"] == "unknown"
    # each row points at its own history, and both are there
    assert side["history"] != plain[0]["history"]
    assert (tmp_path / side["history"]).exists() and (tmp_path / plain[0]["history"]).exists()
    assert (tmp_path / side["history"]) == old_history


def test_upgrade_moves_rows_replaced_by_their_rerun_and_names_a_lost_history(tmp_path: Path) -> None:
    out = tmp_path / "y.csv"
    base = {"schema_version": SCHEMA_VERSION, "backend": "single", "experiment": "baseline"}
    base["history"] = "y.histories/t1.jsonl.gz"
    rows = [
        {**base, "trial_id": "t1", "verdict": "unknown", "problem": "stalled"},
        {**base, "trial_id": "t2", "verdict": "exclusive", "history": "y.histories/t2.jsonl.gz"},
        {**base, "trial_id": "t1", "verdict": "exclusive"},
    ]
    out.write_text(format_row(rows[0], header=True) + format_row(rows[1]) + format_row(rows[2]))
    result = CliRunner().invoke(app, ["upgrade", str(out)])
    assert result.exit_code == 0, result.output
    assert "moved 1 row(s) replaced by their rerun" in result.stderr
    plain = _plain_rows(out)
    assert [(r["trial_id"], r["verdict"]) for r in plain] == [("t1", "exclusive"), ("t2", "exclusive")]
    [side] = _plain_rows(superseded_path(out))
    # both rows named the same file, which now holds the rerun: the old row says so instead
    assert side["verdict"] == "unknown" and side["history"] == "" and "overwritten by its rerun" in side["note"]


def test_an_explore_log_gives_each_request_without_a_trial_its_own_id(tmp_path: Path) -> None:
    log = tmp_path / "explored.csv"
    base = dict.fromkeys(EXPLORE_COLUMNS, "0")
    rows = [
        {**base, "schedule": "crash nodes=0", "seed": "1", "trial_id": "", "result": "invalid"},
        {**base, "schedule": "crash nodes=1", "seed": "1", "trial_id": "", "result": "invalid"},
        {**base, "schedule": "pause worker=0", "seed": "2", "trial_id": "single.x.t0.abc"},
    ]
    with log.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=EXPLORE_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    assert upgrade_log(log) == 2
    ids = [r["trial_id"] for r in _plain_rows(log)]
    assert len(set(ids)) == 3 and ids[2] == "single.x.t0.abc"
    assert all(i.startswith(NO_TRIAL_PREFIX) for i in ids[:2])
    assert upgrade_log(log) == 0  # nothing left to give an id
