"""Verdicts that see liveness, results files that never mix or corrupt, bounded backend calls,
node health and provenance (real servers where a server is involved)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

from typer.testing import CliRunner

from expect import assert_lock_held_up
from lockcompare.analysis.checker import check
from lockcompare.analysis.results import SCHEMA_VERSION, inspect_results, read_results
from lockcompare.cli import app
from lockcompare.infra.cluster import open_cluster
from lockcompare.infra.redis.client import connect
from lockcompare.runner.matrix import run_matrix
from lockcompare.runner.resource import ResourceCounters
from lockcompare.runner.resource_redis import RedisResource
from lockcompare.runner.trial import new_run_id, run_trial
from lockcompare.scenario.experiments import get_experiment
from lockcompare.scenario.trialspec import Overrides, make_spec

DATA = Path(__file__).parent / "data"
QUICK = Overrides(time_scale=0.1, rounds=3, call_timeout_ms=1500)


def invoke(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(app, list(args), env=env)


# --- verdicts (pure) -------------------------------------------------------------------------


def _counters(entries: int) -> ResourceCounters:
    return ResourceCounters(
        entries=entries, conflicts=0, writes_accepted=entries, writes_rejected=0, final_balance=entries, occupancy=0
    )


def _rounds(n: int, *, refused: int = 0) -> list[dict]:
    events, t = [], 0
    for r in range(n):
        events.append({"worker": 0, "round": r, "kind": "acquire", "t0": t, "t1": t + 1, "ok": True, "attempts": 1,
                       "refusals": {}, "t_attempt": t, "owner": "o", "fence": None,
                       "valid_until": t + 10**9})  # fmt: skip
        events.append({"worker": 0, "round": r, "kind": "enter", "t0": t + 2, "t1": t + 3, "inside": 1})
        events.append({"worker": 0, "round": r, "kind": "exit", "t0": t + 5, "t1": t + 6})
        t += 10
    for r in range(n, n + refused):
        events.append({"worker": 0, "round": r, "kind": "acquire", "t0": t, "t1": t + 1, "ok": False, "attempts": 7,
                       "refusals": {"no-quorum": 7}})  # fmt: skip
        t += 10
    return events


def test_a_lock_never_granted_is_unavailable_not_exclusive() -> None:
    m = check(_rounds(0, refused=4), _counters(0), entries_planned=4)
    assert (m.verdict, m.acquire_timeouts, m.refusals) == ("unavailable", 4, "no-quorum:28")


def test_a_trial_with_rounds_missing_is_degraded() -> None:
    m = check(_rounds(2, refused=2), _counters(2), entries_planned=4)
    assert (m.verdict, m.entries, m.entries_planned) == ("degraded", 2, 4)


def test_every_round_entered_without_conflict_is_exclusive() -> None:
    assert check(_rounds(4), _counters(4), entries_planned=4).verdict == "exclusive"


# --- results files -------------------------------------------------------------------------


def _run_quick(out: Path, **kw) -> None:
    run_matrix(
        backends=["single"], experiments=["baseline"], trials=1, overrides=kw.pop("overrides", QUICK), out=out, **kw
    )


def test_a_truncated_last_row_is_reported_and_repaired_on_resume(tmp_path: Path) -> None:
    out = tmp_path / "r.csv"
    _run_quick(out)
    text = out.read_text()
    out.write_text(text[: len(text) - 40])  # a crash in the middle of a row (not our writer's doing)
    found = inspect_results(out)
    assert found.truncated_lines == [2] and found.rows == []
    result = invoke("table", str(out))
    assert "left out truncated row(s) at line 2" in result.stderr
    _run_quick(out, resume=True)  # rewrites without the broken row, then runs the trial again
    (row,) = read_results(out)
    assert_lock_held_up(row)
    assert inspect_results(out).truncated_lines == []


def test_resume_with_another_ttl_runs_the_cells_again(tmp_path: Path) -> None:
    out = tmp_path / "r.csv"
    _run_quick(out)
    _run_quick(out, resume=True)  # same settings: nothing to do
    assert len(read_results(out)) == 1
    _run_quick(out, resume=True, overrides=Overrides(time_scale=0.1, rounds=3, ttl_ms=800))
    assert sorted(r["ttl_ms"] for r in read_results(out)) == [80, 100]


def test_resume_upgrades_an_old_schema_file_in_one_rewrite(tmp_path: Path) -> None:
    out = tmp_path / "old.csv"
    out.write_bytes((DATA / "schema2.csv").read_bytes())
    before = inspect_results(out)
    assert before.oldest_schema == 2
    # Its rows name no revision (written before provenance): resuming them is mixing, said so (issue 43).
    _run_quick(out, resume=True, allow_mixed_revisions="a schema-2 file from before provenance")
    after = inspect_results(out)
    assert not after.needs_rewrite and len(after.rows) == len(before.rows) + 1
    assert {r["schema_version"] for r in after.rows} == {SCHEMA_VERSION}
    assert [r["trial_id"] for r in after.rows[:-1]] == [r["trial_id"] for r in before.rows]


def test_a_results_file_from_a_newer_lockcompare_is_refused_and_untouched(tmp_path: Path) -> None:
    out = tmp_path / "new.csv"
    _run_quick(out)
    text = out.read_text().replace(f"\n{SCHEMA_VERSION},", f"\n{SCHEMA_VERSION + 1},")
    out.write_text(text)
    result = invoke("matrix", "--backends", "single", "--experiments", "baseline", "--trials", "1",
                    "--time-scale", "0.1", "--rounds", "3", "--out", str(out), "--resume")  # fmt: skip
    assert result.exit_code == 2 and "newer than this lockcompare" in result.stderr
    assert out.read_text() == text


# --- bounded calls and broken plug-ins -------------------------------------------------------


def test_a_hanging_acquire_is_unknown_names_the_call_and_the_matrix_goes_on(tmp_path: Path) -> None:
    out = tmp_path / "hang.csv"
    started = time.monotonic()
    result = invoke("matrix", "--backends", "plugins.broken:HangsInAcquire,none", "--experiments", "baseline",
                    "--trials", "1", "--time-scale", "0.1", "--rounds", "3", "--call-timeout-ms", "1000",
                    "--out", str(out))  # fmt: skip
    assert time.monotonic() - started < 30
    assert result.exit_code == 1
    assert "acquire() did not return within 1 s" in result.stderr
    rows = {r["backend"]: r for r in read_results(out)}  # in completion order: the trials ran side by side
    assert sorted(rows) == ["none", "plugins.broken:HangsInAcquire"]
    hung = rows["plugins.broken:HangsInAcquire"]
    assert hung["verdict"] == "unknown" and rows["none"]["verdict"] != "unknown"
    # Both workers hang in acquire(); which one passes its deadline first is a race of start-up.
    named = r"worker [01]: backend 'plugins\.broken:HangsInAcquire' acquire\(\) did not return"
    assert re.match(named, hung["problem"]), hung["problem"]


def test_a_plugin_that_cannot_be_constructed_is_one_load_error_before_any_trial(tmp_path: Path) -> None:
    result = invoke(
        "run", "--backend", "plugins.broken:RaisesInInit", "--time-scale", "0.1", "--out", str(tmp_path / "x.csv")
    )
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        "lockcompare: error: backend 'plugins.broken:RaisesInInit' cannot be constructed: RuntimeError: no licence key"
    ]
    assert not (tmp_path / "x.csv").exists()


def test_a_plugin_that_declares_nothing_is_refused_by_run_matrix_and_evaluate_in_one_line(tmp_path: Path) -> None:
    expected = (
        "lockcompare: error: backend 'plugins.broken:DeclaresNothing' does not declare itself: summary is missing "
        "(a non-empty str); exclusive is missing (a bool); issues_fencing_tokens is missing (a bool) "
        "(see lockcompare.backends.base.LockBackend)"
    )
    for command in (
        ["run", "--time-scale", "0.1", "--backend"],
        ["matrix", "--time-scale", "0.1", "--trials", "1", "--experiments", "baseline", "--backends"],
        ["evaluate", "--quick"],  # before the battery's minute of work
    ):
        out = tmp_path / f"{command[0]}.csv"
        result = invoke(*command, "plugins.broken:DeclaresNothing", "--out", str(out))
        assert result.exit_code == 2, result.output
        assert result.stderr.strip().splitlines() == [expected]
        assert not out.exists()


def test_an_acquire_of_the_wrong_type_is_unknown_with_a_reason(tmp_path: Path) -> None:
    result = invoke("run", "--backend", "plugins.broken:ReturnsWrongType", "--time-scale", "0.1", "--rounds", "2")
    assert result.exit_code == 1
    assert "acquire returned int, expected a Lease or a Refusal" in result.stderr


def test_a_lock_that_never_grants_is_unavailable(tmp_path: Path) -> None:
    result = invoke("run", "--backend", "plugins.broken:NeverGrants", "--time-scale", "0.1", "--rounds", "2",
                    "--acquire-timeout-ms", "1000")  # fmt: skip
    assert result.exit_code == 0
    assert "verdict: unavailable" in result.stdout
    assert "1 trial(s) unavailable" in result.stderr


# --- node health -----------------------------------------------------------------------------


def test_a_node_that_dies_mid_trial_makes_it_unknown_and_is_replaced_before_the_next() -> None:
    spec = make_spec(backend="single", experiment=get_experiment("baseline"), trial=0,
                     overrides=Overrides(time_scale=0.1, rounds=20, acquire_timeout_ms=3000))  # fmt: skip
    with open_cluster(node_count=1) as cluster:
        killer = threading.Timer(0.4, cluster.node_server(0).crash)
        killer.start()
        try:
            broken = run_trial(spec=spec, cluster=cluster, run_id=new_run_id())
        finally:
            killer.cancel()
        assert broken.metrics.verdict == "unknown"
        assert f"lock node 0 ({cluster.node_urls[0]}) died during the trial" in broken.metrics.problem
        healed = run_trial(spec=spec, cluster=cluster, run_id=new_run_id())
        assert healed.lock_nodes_reachable == 1
        assert_lock_held_up(healed.metrics)


# --- provenance and keys with a TTL ---------------------------------------------------------


def test_rows_carry_provenance_and_a_concurrent_run_is_warned_about(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (runs / f"{other.pid}.json").write_text(f'{{"pid": {other.pid}, "what": "matrix", "since": "now"}}')
        out = tmp_path / "p.csv"
        result = invoke("run", "--backend", "single", "--time-scale", "0.1", "--rounds", "2", "--out", str(out),
                        env={"LOCKCOMPARE_RUNS_DIR": str(runs)})  # fmt: skip
    finally:
        other.kill()
        other.wait()
    assert result.exit_code == 0, result.stderr
    assert f"another lockcompare run is active: pid {other.pid}" in result.stderr
    (row,) = read_results(out)
    assert row["concurrent_runs"] == "1"
    assert row["cpu_count"] == str(os.cpu_count()) and row["host"] and row["lockcompare_version"]
    assert row["lock_nodes_reachable"] == "5" and row["load_avg_1m"] >= 0
    assert not list(runs.glob(f"{os.getpid()}.json"))  # our own registration is gone afterwards


def test_resource_keys_expire_on_their_own_and_scripts_keep_the_ttl(cluster) -> None:
    prefix = f"lockcompare-test:{new_run_id()}"
    resource = RedisResource(url=cluster.resource_url, prefix=prefix)
    client = connect(cluster.resource_url)
    try:
        resource.prepare(expire_s=600)
        resource.enter()
        resource.write_balance(5, fencing_token=3)
        resource.exit()
        ttls = [client.ttl(k) for k in resource.keys.all()]
        assert all(0 < t <= 600 for t in ttls), ttls
    finally:
        client.delete(*resource.keys.all())
        client.close()
        resource.close()


def test_bad_values_and_files_are_one_line_errors(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    bad_history = tmp_path / "h.jsonl.gz"
    import gzip

    with gzip.open(bad_history, "wt") as fh:
        fh.write('{"not": "an event"}\n')
    u = "redis://127.0.0.1:7/0"
    cases = [
        (["run", "--ttl-ms", "inf"], "--ttl-ms takes a finite number, got 'inf'"),
        (["run", "--work-ms", "inf"], "--work-ms takes a finite number, got 'inf'"),
        (["matrix", "--backends", "single", "--pause-ms", "nan"], "--pause-ms takes a finite number, got 'nan'"),
        (["run", "--out", str(blocker / "r.csv")], f"{blocker} is not a directory"),
        (["history", str(bad_history)], "line 1 is not an event"),
        (["run", "--backend", "redlock", "--nodes", f"{u},{u}", "--resource", u], "is listed twice"),
        (["run", "--nodes", "redis://:hunter2@127.0.0.1:7/0", "--resource", "redis://:hunter2@127.0.0.1:7/0"], ":***@"),
    ]
    for args, fragment in cases:
        result = invoke(*args)
        assert result.exit_code != 0, args
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and fragment in lines[0] and "hunter2" not in lines[0], (args, result.stderr)


def test_a_worker_stopped_from_outside_makes_the_trial_unknown_instead_of_hanging(tmp_path: Path) -> None:
    """SIGSTOP to a worker (not the harness's own freeze) during the run: unknown within the deadline."""
    import signal as _signal

    spec = make_spec(backend="single", experiment=get_experiment("baseline"), trial=0,
                     overrides=Overrides(time_scale=0.1, rounds=200, call_timeout_ms=1000))  # fmt: skip
    stopped: list[int] = []

    def stop_a_worker() -> None:
        me = os.getpid()
        for line in Path(f"/proc/{me}/task/{me}/children").read_text().split():
            cmdline = Path(f"/proc/{line}/cmdline").read_bytes()
            if b"spawn_main" in cmdline:
                os.kill(int(line), _signal.SIGSTOP)
                stopped.append(int(line))
                return

    with open_cluster(node_count=1) as cluster:
        timer = threading.Timer(1.0, stop_a_worker)
        timer.start()
        started = time.monotonic()
        try:
            result = run_trial(spec=spec, cluster=cluster, run_id=new_run_id())
        finally:
            timer.cancel()
            for pid in stopped:
                try:
                    os.kill(pid, _signal.SIGCONT)
                except ProcessLookupError:
                    pass
    assert stopped, "no worker process found to stop"
    assert time.monotonic() - started < 15
    assert result.metrics.verdict == "unknown"
    assert "was stopped from outside the harness" in result.metrics.problem
