"""A lease is permission to write only until its deadline (issue 17, item 7), with real servers
and a real stop-the-world pause: the renewing lock's frozen holder skips its write when the pause
lands before its lease check, and writes on an expired lease when the pause lands after it."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from lockcompare.analysis.results import read_results
from lockcompare.cli import app

ROUNDS = 3


def _trial(tmp_path: Path, point: str) -> dict:
    out = tmp_path / f"{point}.csv"
    result = CliRunner().invoke(app, [
        "run", "--backend", "single-renew", "--experiment", "client-pause", "--pause-point", point,
        "--pause-how", "sigstop", "--rounds", str(ROUNDS), "--time-scale", "0.5", "--out", str(out),
    ])  # fmt: skip
    assert result.exit_code == 0, result.output
    (row,) = read_results(out)
    return row


def test_a_frozen_renewing_holder_skips_its_write_when_it_wakes_before_the_check(tmp_path: Path) -> None:
    # Worker 0 freezes (SIGSTOP, watchdog included) 600 ms > TTL 500 ms in every round, after its
    # read and work and before its lease check: the check finds the lease over, the write is skipped.
    row = _trial(tmp_path, "before-write")
    assert row["writes_skipped"] == ROUNDS
    assert (row["stale_writes_accepted"], row["lost_updates"]) == (0, 0)
    assert row["progress_by_worker"].startswith("w0:0/")


def test_a_pause_between_the_check_and_the_write_is_what_check_then_act_allows(tmp_path: Path) -> None:
    # The same pause one step later: the check passed, then the world stopped; the write lands on
    # an expired lease, which no check can prevent (only fencing at the resource could).
    row = _trial(tmp_path, "after-check")
    assert row["writes_skipped"] == 0
    assert row["stale_writes_accepted"] == ROUNDS
    assert row["verdict"] != "exclusive"
