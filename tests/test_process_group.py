"""A pause stops the whole client: each worker (and each battery host) leads its own process group,
pause, strobe and kill signal the group, the stopped-check reads every member, and a helper that
left the group is named. Real processes, real redis-server nodes; the helper is a Python child
that renews the lease itself (tests/plugins/renewing_child.py)."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import pytest

from lockcompare.evaluation.conformance import (
    Status,
    battery,
    check_property,
    property_named,
)
from lockcompare.faults.freeze import Freezer
from lockcompare.faults.steps import FaultContext
from lockcompare.infra import cgroup
from lockcompare.infra.cluster import Cluster
from lockcompare.infra.lifecycle import SPAWN, reap_group, start_worker_process, terminate_group
from lockcompare.infra.procgroup import (
    GroupView,
    Proc,
    boot_ticks,
    command_line,
    descendants,
    escaped_helpers,
    process_table,
    read_stat,
)
from lockcompare.runner.trial import new_run_id, run_trial
from lockcompare.scenario.experiments import get_experiment
from lockcompare.scenario.faultkinds.starve import Strobe
from lockcompare.scenario.trialspec import Overrides, make_spec

IN_GROUP = "plugins.renewing_child:RenewingChildLock"
ESCAPING = "plugins.renewing_child:EscapingChildLock"

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "renewals_in_pauses.py"
_spec = importlib.util.spec_from_file_location("renewals_in_pauses", SCRIPT)
assert _spec is not None and _spec.loader is not None
renewals_in_pauses = importlib.util.module_from_spec(_spec)
sys.modules["renewals_in_pauses"] = renewals_in_pauses  # its dataclasses look their module up there
_spec.loader.exec_module(renewals_in_pauses)


def _wait_for(predicate: Any, *, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def _state(pid: int) -> str:
    proc = read_stat(pid)
    return proc.state if proc is not None else "gone"


def _gone(pid: int) -> bool:
    return _state(pid) in ("gone", "Z")


# --- a spawned process leads its group; its helpers are in it; teardown ends them all ------------


def _parent_of_helpers(conn: Connection, escape: bool) -> None:
    """A worker-like process: start two helpers (one may leave the group), report their pids, wait."""
    helper = subprocess.Popen(["sleep", "60"])
    escaper = subprocess.Popen(["sleep", "61"], start_new_session=escape)
    conn.send((helper.pid, escaper.pid))
    time.sleep(60)


@pytest.fixture
def spawned() -> Iterator[Any]:
    """Start a process the way workers are started; whatever it left is killed after the test."""
    started: list[Any] = []

    def start(*, escape: bool) -> tuple[Any, int, int]:
        ours, theirs = SPAWN.Pipe(duplex=False)
        proc = start_worker_process(target=_parent_of_helpers, args=(theirs, escape))
        theirs.close()
        assert ours.poll(30), "the process did not start"
        helper, escaper = ours.recv()
        started.append((proc, helper, escaper))
        return proc, helper, escaper

    yield start
    for proc, helper, escaper in started:
        for pid in (helper, escaper):
            if not _gone(pid):
                os.kill(pid, signal.SIGKILL)
        proc.kill()
        proc.join()


def test_a_spawned_process_leads_its_group_and_its_helpers_inherit_it(spawned: Any) -> None:
    proc, helper, escaper = spawned(escape=True)
    table = process_table()
    assert table[proc.pid].pgid == proc.pid
    assert table[helper].pgid == proc.pid
    assert table[escaper].pgid == escaper  # it left (setsid)
    assert [p.pid for p in escaped_helpers(proc.pid, table)] == [escaper]


def test_a_freeze_stops_every_member_of_the_group_and_only_them(spawned: Any) -> None:
    proc, helper, escaper = spawned(escape=True)
    ours, _ = SPAWN.Pipe()
    freezer = Freezer()
    try:
        freezer.freeze(pid=proc.pid, conn=ours, pause_s=60, worker=0)
        assert _wait_for(lambda: _state(proc.pid) == "T" and _state(helper) == "T")
        # The freeze did not reach it (why the runner names it). Not stopped, rather than "S":
        # a `sleep` just exec'd on a loaded machine can still be running (CI saw "R").
        assert _state(escaper) not in ("T", "t")
        inject = next(e for e in freezer.events if e["action"] == "inject")
        assert inject["group"] == sorted([proc.pid, helper])  # the history says whom the stop reached
    finally:
        freezer.thaw_all()
    assert _wait_for(lambda: _state(proc.pid) == "S" and _state(helper) == "S")


def test_a_strobe_starves_the_whole_group(spawned: Any, cluster: Cluster) -> None:
    proc, helper, _ = spawned(escape=False)
    freezer = Freezer()
    strobe = Strobe(worker=0, duty=0.0001, period_s=60)  # stopped (almost) throughout
    world = FaultContext(cluster=cluster, pids=(proc.pid,), freezer=freezer)
    strobe.inject(world, [])
    try:
        assert _wait_for(lambda: _state(proc.pid) == "T" and _state(helper) == "T")
    finally:
        strobe.heal(world, [])
        freezer.thaw_all()
    assert _wait_for(lambda: _state(helper) == "S")


def test_the_stopped_check_sees_a_helper_stopped_from_outside(spawned: Any) -> None:
    proc, helper, _ = spawned(escape=False)
    groups = GroupView(leaders=[proc.pid])
    groups.refresh(force=True)
    assert not groups.stopped(proc.pid)
    os.kill(helper, signal.SIGSTOP)  # not the worker: a member of its group
    try:
        assert _wait_for(lambda: groups.stopped(proc.pid))
    finally:
        os.kill(helper, signal.SIGCONT)


def test_teardown_ends_the_worker_and_every_helper_of_its_group_even_a_stopped_one(spawned: Any) -> None:
    proc, helper, _ = spawned(escape=False)
    os.kill(helper, signal.SIGSTOP)  # a stopped process would sit on a SIGTERM until continued
    terminate_group(proc)
    reap_group(proc, timeout_s=5)
    assert _wait_for(lambda: _gone(helper)), f"helper {helper} outlived its worker: {_state(helper)}"


def test_new_escapes_are_named_once() -> None:
    table = {
        10: Proc(pid=10, ppid=1, pgid=10, state="S", comm="python"),
        11: Proc(pid=11, ppid=10, pgid=11, state="S", comm="node"),
        12: Proc(pid=12, ppid=11, pgid=11, state="Z", comm="dead"),
    }
    assert [p.pid for p in escaped_helpers(10, table)] == [11]  # a zombie is no helper


def test_a_view_made_after_a_helper_started_does_not_name_it_and_ending_spares_none(spawned: Any) -> None:
    """A warm worker's next trial: its view begins after the last trial's helper started (issue 48.5)."""
    proc, _, escaper = spawned(escape=True)
    time.sleep(0.05)  # start times are in ticks (10 ms): the helper's is now strictly earlier
    later = GroupView(leaders=[proc.pid], since_ticks=boot_ticks())
    later.refresh(force=True)
    assert later.newly_escaped() == []
    assert later.end_escaped() == [] and not _gone(escaper)  # not its trial's: not ended by it
    ours = GroupView(leaders=[proc.pid])
    ours.refresh(force=True)
    assert [helper.pid for _, helper in ours.newly_escaped()] == [escaper]
    assert ours.end_escaped() == [escaper]
    assert _wait_for(lambda: _gone(escaper))


# --- trials: the pause freezes the child's renewals; an escaping child is named ------------------


def _client_pause(backend: str, cluster: Cluster) -> Any:
    spec = make_spec(
        backend=backend,
        experiment=get_experiment("client-pause"),
        trial=0,
        overrides=Overrides(time_scale=0.1, rounds=10),
    )
    return run_trial(spec=spec, cluster=cluster, run_id=new_run_id())


def test_under_client_pause_a_child_that_renews_is_frozen_with_its_worker(cluster: Cluster) -> None:
    result = _client_pause(IN_GROUP, cluster)
    history = result.history
    count = renewals_in_pauses.count(history)
    assert count.pauses >= 5 and count.measured_by == "SIGSTOP"
    assert count.renewals > 0, "the child never renewed: the test would show nothing"
    assert count.inside == 0, f"{count.inside} renewals inside a pause"
    assert result.metrics.conflicts > 0, result.metrics
    injects = [e for e in history if e["kind"] == "fault" and e.get("fault") == "pause" and e["action"] == "inject"]
    assert all(len(e["group"]) == 2 for e in injects), injects  # the worker and its child
    # Each pause is counted from when the runner saw the worker stopped, after it asked (t1).
    assert all(e["stopped_by"] == "worker" and e["seen_stopped_ns"] >= e["t1"] for e in injects), injects
    assert not [e for e in history if e["kind"] == "escaped"]
    assert all(_gone(pid) for e in injects for pid in e["group"]), "a helper outlived its trial"


def test_a_renewal_between_the_request_and_the_stop_is_not_inside_the_pause() -> None:
    """A worker takes its request's time, sends it, then stops itself: its helper may renew in
    between (CI: one such renewal counted "inside"). The pause is counted from when the runner saw
    the stop (``seen_stopped_ns``); a history without it, from the inject's t1 as before."""
    inject = {"kind": "fault", "fault": "pause", "action": "inject", "target_worker": 0, "t0": 100, "t1": 100}
    heal = {"kind": "fault", "fault": "pause", "action": "heal", "target_worker": 0, "t0": 1000, "t1": 1001}
    renewals = [{"kind": "renew", "worker": 0, "t0": t0} for t0 in (50, 120, 600, 1100)]
    assert renewals_in_pauses.count([inject, heal, *renewals]).inside == 2  # 120 and 600
    seen = {**inject, "stopped_by": "worker", "seen_stopped_ns": 150}
    assert renewals_in_pauses.count([seen, heal, *renewals]).inside == 1  # 600: a helper the stop missed


def test_a_child_that_left_the_group_is_named_and_the_verdict_is_not_trusted(
    cluster: Cluster, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where no cgroup can be made (process-group isolation; with one, tests/test_cgroups.py)."""
    monkeypatch.setattr(cgroup, "new_client_cgroup", lambda: None)
    with caplog.at_level("WARNING", logger="lockcompare"):
        result = _client_pause(ESCAPING, cluster)
    escaped = [e for e in result.history if e["kind"] == "escaped"]
    assert sorted(e["target_worker"] for e in escaped) == [0, 1]
    assert all("renewing_child_client.py" in e["helper"] and "--escape" in e["helper"] for e in escaped)
    named = [r.getMessage() for r in caplog.records if "left the worker's process group" in r.getMessage()]
    assert len(named) == 2, named  # one line per helper
    assert result.metrics.verdict == "unknown"
    assert "left its worker's process group" in result.metrics.problem
    # Why: the escaped child renewed while its worker was frozen (what made the lock look exclusive).
    assert renewals_in_pauses.count(result.history).inside > 0
    assert all(_wait_for(lambda pid=e["pid"]: _gone(pid)) for e in escaped), "an escaped helper outlived its trial"


# --- the battery: a paused client is paused; the TTL lines freeze the holder's whole client -------

FREEZING = (
    "a_paused_client_is_paused",
    "lock_is_free_again_after_the_ttl",
    "expired_holder_cannot_release_its_successors_lock",
)


def _statuses(spec: str, cluster: Cluster) -> dict[str, tuple[Status, str]]:
    with battery(spec=spec, node_urls=cluster.node_urls) as ctx:
        results = [check_property(property_named(name), ctx) for name in FREEZING]
    return {r.prop.name: (r.status, r.evidence) for r in results}


@pytest.mark.parametrize("spec", [IN_GROUP, "single-renew", "single"])
def test_the_freezing_lines_pass_for_a_client_that_stays_in_its_group(spec: str, cluster: Cluster) -> None:
    statuses = _statuses(spec, cluster)
    assert {name: status for name, (status, _) in statuses.items()} == dict.fromkeys(FREEZING, Status.PASS), statuses


def test_the_freezing_lines_pass_for_redis_lock_renew_at_a_ttl_it_can_express(cluster: Cluster) -> None:
    statuses = _statuses("plugins.whole_second_renew:WholeSecondRenewLock", cluster)
    assert {name: status for name, (status, _) in statuses.items()} == dict.fromkeys(FREEZING, Status.PASS), statuses


def test_a_paused_client_is_paused_fails_for_a_client_that_escapes_its_group(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where no cgroup can be made (with one, the freeze reaches it: tests/test_cgroups.py)."""
    monkeypatch.setattr(cgroup, "new_client_cgroup", lambda: None)
    with battery(spec=ESCAPING, node_urls=cluster.node_urls) as ctx:
        result = check_property(property_named("a_paused_client_is_paused"), ctx)
    assert result.status is Status.FAIL
    assert "refused throughout" in result.evidence
    assert "renewing_child_client.py" in result.evidence and "left the client's process group" in result.evidence


# --- the script that counts renewals inside pauses, on a hand-built history -----------------------


def _event(kind: str, t0: int, t1: int | None = None, *, worker: int = 0, **fields: Any) -> dict[str, Any]:
    return {"worker": worker, "round": 0, "kind": kind, "t0": t0, "t1": t0 if t1 is None else t1, **fields}


def test_the_script_counts_a_renewal_inside_a_pause_and_none_outside() -> None:
    pause = {"fault": "pause", "target_worker": 0}
    history = [
        _event("fault", 100, 110, worker=-1, action="inject", **pause),  # stopped from 110
        _event("renew", 105),  # before the stop took effect: outside
        _event("renew", 150),  # inside
        _event("renew", 150, worker=1),  # the rival's: not the paused worker's
        _event("fault", 200, 201, worker=-1, action="heal", **pause),  # continued after 200
        _event("renew", 200),  # at the SIGCONT: outside
        _event("fault", 300, 310, worker=-1, action="inject", **pause),
        _event("fault", 400, 401, worker=-1, action="heal", **pause),
    ]
    count = renewals_in_pauses.count(history)
    assert (count.pauses, count.renewals, count.inside, count.pauses_with_renewals) == (2, 3, 1, 1)
    assert count.measured_by == "SIGSTOP"


# --- Ctrl-C: workers lead their own groups now, and the runner still ends every helper ----------

REPO = Path(__file__).resolve().parents[1]


def _helpers_below(pid: int) -> list[int]:
    return [p.pid for p in descendants(pid, process_table()) if "renewing_child_client.py" in command_line(p.pid)]


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_an_interrupted_run_ends_every_helper_of_every_worker(tmp_path: Path, how: signal.Signals) -> None:
    """The helpers neither die with their parent nor exit at the end of their input (LingeringChildLock):
    only the end of their worker's process group ends them."""
    cmd = [
        sys.executable, "-m", "lockcompare", "--plugin-path", str(REPO / "tests"), "matrix",
        "--backends", "plugins.renewing_child:LingeringChildLock", "--experiments", "client-pause",
        "--trials", "20", "--rounds", "10", "--time-scale", "0.1", "--jobs", "1", "--out", str(tmp_path / "r.csv"),
    ]  # fmt: skip
    # A session of its own, so that "Ctrl-C" can go to its process group as a terminal's would:
    # the runner's group, which its workers have left.
    token = uuid.uuid4().hex
    mark, env = f"LOCKCOMPARE_TEST_RUN={token}", {**os.environ, "LOCKCOMPARE_TEST_RUN": token}
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True, env=env
    )
    helpers: list[int] = []
    try:
        assert _wait_for(lambda: len(_helpers_below(proc.pid)) >= 2, timeout_s=60), "no helper processes appeared"
        helpers = _helpers_below(proc.pid)
        os.killpg(proc.pid, how)
        _, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == (130 if how == signal.SIGINT else 143), stderr
    assert "Traceback" not in stderr
    left = [pid for pid in helpers if not _wait_for(lambda pid=pid: _gone(pid), timeout_s=5)]
    for pid in _marked(mark):  # whatever of this run is left, helpers started after the snapshot too
        os.kill(pid, signal.SIGKILL)
    assert not left, f"helper processes outlived the run: {left}"


def _marked(mark: str) -> list[int]:
    """Live processes whose environment carries ``mark`` (they inherited it from the run)."""
    found = []
    for pid in process_table():
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if mark.encode() in environ and not _gone(pid):
            found.append(pid)
    return found
