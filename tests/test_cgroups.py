"""Each client in a cgroup of its own (infra/cgroup.py, issue 38): a pause freezes helpers that left
the worker's process group (``setsid``, a double fork, one that ignores the end of its input), the
trial's end kills them, ``pids.max`` bounds a fork loop, and no cgroup directory is left behind.

Real processes, real redis-server nodes; the hostile helpers are tests/plugins/hostile_helpers.py
and tests/plugins/fork_loop.py. The fork loop runs only inside a cgroup whose ``pids.max`` is set
before its worker starts (the plug-in refuses otherwise), and gives up after 2 s by itself.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lockcompare.analysis.results import COLUMNS, SCHEMA_VERSION, read_results
from lockcompare.evaluation.conformance import Status, battery, check_property, property_named
from lockcompare.infra import cgroup
from lockcompare.infra.cluster import Cluster
from lockcompare.infra.procgroup import read_stat
from lockcompare.runner.crew import WorkerPool
from lockcompare.runner.trial import TrialResult, new_run_id, run_trial
from lockcompare.scenario.experiments import get_experiment
from lockcompare.scenario.trialspec import Overrides, make_spec

needs_cgroups = pytest.mark.skipif(
    cgroup.probe() == cgroup.PROCESS_GROUP, reason="needs writable cgroups (v1 freezer+pids, or v2 with pids): root"
)

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "renewals_in_pauses.py"
_spec = importlib.util.spec_from_file_location("renewals_in_pauses", SCRIPT)
assert _spec is not None and _spec.loader is not None
renewals_in_pauses = importlib.util.module_from_spec(_spec)
sys.modules["renewals_in_pauses"] = renewals_in_pauses
_spec.loader.exec_module(renewals_in_pauses)

HOSTILE = [
    "plugins.hostile_helpers:SetsidHelperLock",
    "plugins.hostile_helpers:DoubleForkHelperLock",
    "plugins.hostile_helpers:EofIgnoringHelperLock",
]
FORK_LOOP = "plugins.fork_loop:ForkLoopLock"


def _alive(pid: int) -> bool:
    proc = read_stat(pid)
    return proc is not None and proc.state not in ("Z", "X")


def _marked(mark: str) -> list[int]:
    """Live processes whose environment carries ``mark`` (inherited from this test's trial)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            environ = Path(f"/proc/{name}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if mark.encode() in environ and _alive(int(name)) and "resource_tracker" not in _cmdline(int(name)):
            found.append(int(name))  # multiprocessing's tracker belongs to this test process, not a trial
    return found


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _own_cgroup_dirs() -> list[Path]:
    prefix = f"lockcompare-p{os.getpid()}-"
    found = []
    for base in (Path("/sys/fs/cgroup/freezer"), Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup")):
        if base.is_dir():
            found += [d for d in base.iterdir() if d.name.startswith(prefix)]
    return found


@pytest.fixture
def marked(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A token in the environment every process of the test's trials inherits; whatever carries it
    after the test is killed (and the test fails if the trial left any)."""
    token = uuid.uuid4().hex
    monkeypatch.setenv("LOCKCOMPARE_TEST_RUN", token)
    mark = f"LOCKCOMPARE_TEST_RUN={token}"
    yield mark
    for pid in _marked(mark):
        os.kill(pid, signal.SIGKILL)


def _trial(backend: str, cluster: Cluster, experiment: str = "client-pause", **kw: Any) -> TrialResult:
    spec = make_spec(
        backend=backend,
        experiment=get_experiment(experiment),
        trial=0,
        overrides=Overrides(time_scale=0.1, rounds=kw.pop("rounds", 10)),
    )
    return run_trial(spec=spec, cluster=cluster, run_id=new_run_id(), **kw)


# --- the cgroup itself: a double-forked, setsid'ed process is frozen with the rest and killed -----


def _joining(group: cgroup.ClientCgroup, body: str) -> str:
    """A ``python -c`` program that joins ``group`` first, then runs ``body``."""
    join = "".join(f"open({str(d / 'cgroup.procs')!r}, 'w').write(str(os.getpid()))\n" for d in group.dirs)
    return "import os, sys, time\n" + join + textwrap.dedent(body)


@needs_cgroups
def test_a_cgroup_freezes_and_kills_a_double_forked_helper() -> None:
    group = cgroup.new_client_cgroup()
    assert group is not None
    daemonise = """
        if os.fork():
            os._exit(0)
        os.setsid()
        if os.fork():
            os._exit(0)
        print(os.getpid(), flush=True)
        time.sleep(60)
    """
    try:
        proc = subprocess.Popen([sys.executable, "-c", _joining(group, daemonise)], stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        daemon = int(proc.stdout.readline())
        proc.wait(timeout=10)
        stat = read_stat(daemon)
        assert stat is not None and proc.pid not in (stat.ppid, stat.pgid)  # no descendant, no group member
        assert group.procs() == [daemon]
        assert group.freeze() and group.frozen()
        group.thaw()
        assert not group.frozen()
        assert group.kill_all() == [daemon]
        time.sleep(0.2)
        assert not _alive(daemon)
    finally:
        group.kill_all()
        assert group.remove()
    assert not any(d.exists() for d in group.dirs)


@needs_cgroups
def test_pids_max_refuses_a_fork_past_the_limit_and_counts_it() -> None:
    group = cgroup.new_client_cgroup()
    assert group is not None
    group.set_pids_max(3)  # before anything forks
    fork_twenty = """
        refused = 0
        for _ in range(20):
            try:
                pid = os.fork()
            except OSError:
                refused += 1
                continue
            if pid == 0:
                os.close(1)  # the pipe's end: the run ends when the program does, not the sleepers
                os.close(2)
                time.sleep(30)
                os._exit(0)
        print(refused)
    """
    try:
        program = _joining(group, fork_twenty)
        out = subprocess.run(
            ["timeout", "30", sys.executable, "-c", program], capture_output=True, text=True, check=True
        )
        assert int(out.stdout) == 18  # the program and 2 children fit under 3
        assert group.limit_hits() == 18
    finally:
        group.kill_all()
        group.remove()


# --- trials: the freeze stops every hostile helper; none outlives its trial ---------------------


@needs_cgroups
@pytest.mark.parametrize("backend", HOSTILE, ids=lambda b: b.rsplit(":", 1)[1])
def test_under_client_pause_an_escaping_helper_is_frozen_and_ended(backend: str, cluster: Cluster, marked: str) -> None:
    result = _trial(backend, cluster)
    assert result.isolation == cgroup.probe()
    count = renewals_in_pauses.count(result.history)
    assert count.pauses >= 5 and count.renewals > 0, count  # renewals happened: the count can show something
    assert count.inside == 0, f"{count.inside} renewals inside a pause: the freeze missed a helper"
    assert result.metrics.verdict != "unknown", result.metrics.problem
    assert not [e for e in result.history if e["kind"] == "escaped"]  # nothing left the cgroup
    injects = [
        e for e in result.history if e["kind"] == "fault" and e.get("fault") == "pause" and e["action"] == "inject"
    ]
    assert all(e["detail"] == "cgroup freeze" and len(e["group"]) >= 2 for e in injects), injects
    time.sleep(1.0)
    assert [_cmdline(p) for p in _marked(marked)] == [], "a helper outlived its trial"
    assert _own_cgroup_dirs() == []


@pytest.mark.parametrize("isolation", ["cgroup", "process group"])
def test_a_pause_is_the_workers_own_stop_at_its_request_and_lasts_from_there(
    isolation: str, cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where nothing else stops workers, a SIGSTOP pause is the worker's own stop, made as it asks
    (its cgroup, else its process group: every thread at once), and the runner only continues it,
    the pause counted from the request — not from when the runner read it, while the holder's
    renewal thread ran on (issue 54: 0.2-12.9 ms on a loaded machine). From the history: each pause
    step holds one inject the worker made inside it, healed no sooner than the pause after it, and
    no renewal lands inside one."""
    if isolation == "process group":
        monkeypatch.setattr(cgroup, "new_client_cgroup", lambda: None)
    elif cgroup.probe() == cgroup.PROCESS_GROUP:
        pytest.skip("this machine offers no cgroup for clients")
    result = _trial("single-renew", cluster, rounds=6)
    assert result.metrics.verdict != "unknown", result.metrics.problem
    history = result.history
    pause_ns = int(result.spec.pause_ms * 1e6)
    steps = sorted((e for e in history if e["kind"] == "pause"), key=lambda e: e["t0"])
    faults = [e for e in history if e["kind"] == "fault" and e.get("fault") == "pause"]
    injects = sorted((e for e in faults if e["action"] == "inject"), key=lambda e: e["t0"])
    heals = sorted((e for e in faults if e["action"] == "heal"), key=lambda e: e["t0"])
    assert len(steps) == len(injects) == len(heals) >= 1, (len(steps), len(injects), len(heals))
    for step, inject, heal in zip(steps, injects, heals, strict=True):
        assert inject["stopped_by"] == "worker" and inject["target_worker"] == step["worker"]
        assert inject["detail"] == ("SIGSTOP" if isolation == "process group" else "cgroup freeze")
        assert step["t0"] <= inject["t0"] <= step["t1"], "the stop was asked from inside the worker's pause step"
        assert heal["planned_ns"] == inject["t0"] + pause_ns, "the pause is counted from the worker's request"
        assert heal["t0"] >= heal["planned_ns"] and step["t1"] >= heal["t0"], "never continued before the pause is over"
        # ...by the continuer process, on time whatever the runner's threads do (faults/continuer.py)
        assert heal["continued_by"].startswith("continuer (") and "failed" not in heal["continued_by"], heal
    count = renewals_in_pauses.count(history)
    assert count.renewals > 0 and count.inside == 0, count  # the renewal thread stopped with its worker


@needs_cgroups
def test_a_warm_worker_keeps_running_but_its_trials_helper_does_not(cluster: Cluster, marked: str) -> None:
    pool = WorkerPool()
    try:
        result = _trial("plugins.hostile_helpers:DoubleForkHelperLock", cluster, crews=pool.start, rounds=4)
        assert result.isolation == cgroup.probe() and result.metrics.verdict != "unknown", result.metrics.problem
        time.sleep(1.0)
        left = _marked(marked)
        assert len(left) == 2, left  # the two warm workers, idle; no helper
        assert all("renewing_child_client" not in Path(f"/proc/{p}/cmdline").read_text() for p in left)
    finally:
        pool.close()
    time.sleep(0.5)
    assert _marked(marked) == []
    assert _own_cgroup_dirs() == []


def test_under_process_groups_a_double_forked_helper_goes_unseen(
    cluster: Cluster, marked: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Why cgroups: without one, the double-forked helper renews inside the pauses, is named nowhere,
    and outlives its trial (this test kills it)."""
    monkeypatch.setattr(cgroup, "new_client_cgroup", lambda: None)
    result = _trial("plugins.hostile_helpers:DoubleForkHelperLock", cluster, rounds=6)
    assert result.isolation == cgroup.PROCESS_GROUP
    assert renewals_in_pauses.count(result.history).inside > 0
    assert not [e for e in result.history if e["kind"] == "escaped"]
    time.sleep(1.0)
    assert _marked(marked), "the helper was ended after all: the contrast shows nothing"


def test_without_cgroups_an_escaped_helper_ends_with_its_trial_and_is_not_blamed_on_the_next(
    cluster: Cluster, marked: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 48.5: under process groups a helper that called setsid() and ignores the end of its input
    outlived its trial, and the next trial on the same warm workers was judged unknown in its name.
    Now it is named in its own trial, ended at that trial's end, and the next trial names nothing."""
    monkeypatch.setattr(cgroup, "new_client_cgroup", lambda: None)
    pool = WorkerPool()
    try:
        first = _trial("plugins.hostile_helpers:EofIgnoringHelperLock", cluster, crews=pool.start, rounds=4)
        assert first.isolation == cgroup.PROCESS_GROUP
        escaped = [e for e in first.history if e["kind"] == "escaped"]
        assert sorted(e["target_worker"] for e in escaped) == [0, 1], escaped  # named in its own trial
        assert first.metrics.verdict == "unknown" and "left its worker's process group" in first.metrics.problem
        assert [e["pid"] for e in escaped if _alive(e["pid"])] == [], "a helper outlived its trial"
        second = _trial("single", cluster, crews=pool.start, rounds=4)
        assert pool.spawned == 2  # the same two warm workers ran both trials
        assert [e for e in second.history if e["kind"] == "escaped"] == []
        assert second.metrics.verdict != "unknown", second.metrics.problem
    finally:
        pool.close()
    time.sleep(0.5)
    assert _marked(marked) == []


# --- a fork loop: bounded by pids.max, the trial unknown with the reason, nothing left -----------


@needs_cgroups
def test_a_fork_loop_is_bounded_and_its_trial_is_unknown(
    cluster: Cluster, marked: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(cgroup.PIDS_MAX_ENV, "48")
    result = _trial(FORK_LOOP, cluster, experiment="baseline", rounds=2)
    assert result.metrics.verdict == "unknown"
    assert "hit its process limit (pids.max=48)" in result.metrics.problem, result.metrics.problem
    time.sleep(1.0)
    assert _marked(marked) == [], "a forked child outlived its trial"
    assert _own_cgroup_dirs() == []


@needs_cgroups
def test_a_dead_runs_cgroups_are_swept() -> None:
    """A run SIGKILLed with a helper in its cgroup: the next run's sweep kills the helper and
    removes the cgroup."""
    code = (
        "import os,sys,time\nfrom lockcompare.infra import cgroup\n"
        "g=cgroup.new_client_cgroup()\nimport subprocess\n"
        "p=subprocess.Popen(['sleep','60'], stdout=subprocess.DEVNULL)\ng.add(p.pid)\n"
        "print(p.pid, g.name, flush=True)\nos.kill(os.getpid(), 9)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    helper, name = proc.stdout.readline().split()
    proc.wait(timeout=30)
    assert _alive(int(helper))
    swept = cgroup.sweep_stale()
    assert name in {d.name for d in swept}
    time.sleep(0.2)
    assert not _alive(int(helper))


def test_the_row_says_which_isolation_and_older_files_read_without_it() -> None:
    assert COLUMNS.count("isolation") == 1 and SCHEMA_VERSION >= 9
    rows = read_results(Path(__file__).parent / "data" / "schema2.csv")  # written before the column existed
    assert rows and {r["isolation"] for r in rows} == {""}  # unknown, never guessed


@needs_cgroups
@pytest.mark.parametrize("backend", HOSTILE[:2], ids=lambda b: b.rsplit(":", 1)[1])
def test_the_batterys_freeze_reaches_a_helper_that_left_the_group(backend: str, cluster: Cluster, marked: str) -> None:
    """evaluate's host process is in a cgroup too: "a paused client is paused" holds for a client
    whose helper called setsid() or double-forked (under process groups the first fails it)."""
    with battery(spec=backend, node_urls=cluster.node_urls) as ctx:
        result = check_property(property_named("a_paused_client_is_paused"), ctx)
    assert result.status is Status.PASS, result.evidence
    time.sleep(1.0)
    assert [_cmdline(p) for p in _marked(marked)] == [], "a helper outlived the battery"


UNIFIED = Path("/sys/fs/cgroup/unified")


@pytest.mark.skipif(
    not (UNIFIED / "cgroup.procs").exists() or not os.access(UNIFIED, os.W_OK),
    reason="needs a writable hybrid cgroup2 mount at /sys/fs/cgroup/unified",
)
def test_the_v2_freeze_and_kill_work_on_a_cgroup2_tree_without_pids() -> None:
    """cgroup v2's freeze (``cgroup.freeze``, ``frozen 1`` in ``cgroup.events``) needs no controller:
    exercised where this machine has a controller-less cgroup2 tree (its pids limit cannot be)."""
    directory = UNIFIED / f"lockcompare-p{os.getpid()}-v2test"
    directory.mkdir()
    group = cgroup.ClientCgroup(kind=cgroup.CGROUP_V2, dirs=(directory,), pids_max=0)
    try:
        proc = subprocess.Popen([sys.executable, "-c", _joining(group, "time.sleep(60)")])
        assert _wait(lambda: group.procs() == [proc.pid])
        assert group.freeze() and group.frozen()
        group.thaw()
        assert not group.frozen()
        assert group.kill_all() == [proc.pid]
        proc.wait(timeout=5)
    finally:
        group.kill_all()
        assert group.remove()


def _wait(predicate: Any, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True
