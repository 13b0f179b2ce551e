"""The shipped conformance battery: a backend in a child process, a deadline on every call, and
the pytest plugin as a plug-in author uses it (a generated test module run by a real pytest)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from lockcompare.backends import BackendConfig, Lease, Refusal, add_plugin_paths
from lockcompare.errors import BackendLoadError
from lockcompare.evaluation import backend_host
from lockcompare.evaluation.backend_host import (
    BackendCallFailed,
    BackendCallRaised,
    BackendCallTimedOut,
    BackendHost,
    BackendHostDied,
)
from lockcompare.evaluation.conformance import (
    PROPERTIES,
    Status,
    battery,
    check_property,
    property_named,
)
from lockcompare.infra.cluster import Cluster
from lockcompare.render.timeline import load_history
from lockcompare.testing import BackendContract
from misbehaving_backends import PID_FILE_ENV
from slow_loading_backend import IMPORT_SLEEP_ENV

REPO = Path(__file__).resolve().parents[1]


def _gone(pid: int) -> bool:
    """The process no longer exists (killed and reaped; a zombie would still have /proc/<pid>)."""
    return not Path(f"/proc/{pid}").exists()


@pytest.fixture
def host_for(request):
    hosts: list[BackendHost] = []

    def make(spec: str, call_timeout_s: float = 5.0) -> BackendHost:
        host = BackendHost(spec=spec, call_timeout_s=call_timeout_s)
        hosts.append(host)
        return host

    yield make
    for host in hosts:
        host.close()


def config(cluster: Cluster) -> BackendConfig:
    return BackendConfig(node_urls=cluster.node_urls, request_timeout_s=0.5)


def test_every_property_is_a_test_of_the_contract_class() -> None:
    tests = {name.removeprefix("test_") for name in dir(BackendContract) if name.startswith("test_")}
    assert tests == {prop.name for prop in PROPERTIES}


def test_a_hung_acquire_fails_within_its_deadline_and_the_process_is_killed(
    host_for, cluster, tmp_path, monkeypatch
) -> None:
    pid_file = tmp_path / "pids"
    monkeypatch.setenv(PID_FILE_ENV, str(pid_file))  # the spawned host inherits the environment
    host = host_for("misbehaving_backends:HangingLock", call_timeout_s=0.5)
    lock = host.new_instance(config=config(cluster))
    started = time.monotonic()
    with pytest.raises(BackendCallTimedOut, match=r"acquire did not return within 0.5 s"):
        lock.acquire(key="k", ttl_ms=1000)
    waited = time.monotonic() - started
    assert 0.5 <= waited < 3.0  # the deadline, plus a generous bound for killing and reaping
    (pid,) = [int(line) for line in pid_file.read_text().split()]
    assert _gone(pid)
    with pytest.raises(BackendHostDied):  # the killed instance does not come back to life...
        lock.acquire(key="k", ttl_ms=1000)
    lock.close()  # ...and closing it is a no-op
    host.new_instance(config=config(cluster))  # while the host starts afresh for the next one
    assert host.pid is not None and host.pid != pid


def test_a_slow_plugin_import_is_start_up_and_not_cut_at_the_call_deadline(host_for, cluster, monkeypatch) -> None:
    # The import sleeps 1 s, five times the 0.2 s call deadline: no machine is fast enough to pass
    # without the start-up allowance (a host restarted on a busy machine was cut loading its plug-in).
    monkeypatch.setenv(IMPORT_SLEEP_ENV, "1.0")
    host = host_for("slow_loading_backend:SlowLoadingLock", call_timeout_s=0.2)
    assert host.claims().summary == "slow to import"
    lock = host.new_instance(config=config(cluster))  # the backend's own calls keep the call deadline
    assert isinstance(lock.acquire(key="k", ttl_ms=1000), Lease)
    assert host.call_timeout_s == 0.2


def test_a_plugin_import_that_hangs_is_cut_at_the_start_up_allowance(host_for, monkeypatch) -> None:
    monkeypatch.setenv(IMPORT_SLEEP_ENV, "3600")
    monkeypatch.setattr(backend_host, "LOAD_TIMEOUT_S", 0.5)  # instead of 20 s, for the test's sake
    host = host_for("slow_loading_backend:SlowLoadingLock", call_timeout_s=0.2)
    with pytest.raises(
        BackendCallTimedOut, match=r"^loading slow_loading_backend:SlowLoadingLock did not return within 0.5 s"
    ):
        host.claims()
    assert host.pid is None  # killed and reaped


def test_an_exception_is_a_failure_not_a_refusal(host_for, cluster) -> None:
    lock = host_for("misbehaving_backends:RaisingLock").new_instance(config=config(cluster))
    with pytest.raises(BackendCallRaised, match=r"^acquire raised ConnectionError: node 0 went away$"):
        lock.acquire(key="k", ttl_ms=1000)


def test_a_result_that_is_neither_lease_nor_refusal_fails(host_for, cluster) -> None:
    lock = host_for("misbehaving_backends:NoneReturningLock").new_instance(config=config(cluster))
    with pytest.raises(BackendCallFailed, match=r"acquire returned None, not a Lease or a Refusal"):
        lock.acquire(key="k", ttl_ms=1000)


def test_a_refusal_and_a_lease_cross_the_process_boundary(host_for, cluster, key) -> None:
    host = host_for("single")
    a, b = host.new_instance(config=config(cluster)), host.new_instance(config=config(cluster))
    lease = a.acquire(key=key, ttl_ms=1000)
    assert isinstance(lease, Lease) and lease.key == key
    assert b.acquire(key=key, ttl_ms=1000) == Refusal("held")
    assert a.release(lease) is True
    assert host.claims().exclusive is True and host.claims().survives_minority_loss is False


def test_a_spec_that_does_not_import_is_a_one_line_load_error(host_for) -> None:
    with pytest.raises(BackendLoadError, match=r"cannot import 'no_such_module'.*--plugin-path"):
        host_for("no_such_module:Lock").claims()


def test_the_battery_reports_a_hung_backend_as_a_failed_property(cluster) -> None:
    with battery(spec="misbehaving_backends:HangingLock", node_urls=cluster.node_urls, call_timeout_s=0.5) as ctx:
        started = time.monotonic()
        result = check_property(property_named("acquire_returns_a_lease_with_a_random_owner"), ctx)
        assert time.monotonic() - started < 5.0
    assert result.status is Status.FAIL and "did not return within 0.5 s" in result.evidence


def test_plugin_paths_go_first_and_the_current_directory_last(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(sys, "path", ["/installed"])
    add_plugin_paths(first=[tmp_path / "a", tmp_path / "b"], last=[tmp_path])
    add_plugin_paths(last=[tmp_path])  # twice: no duplicate
    assert sys.path == [str(tmp_path / "a"), str(tmp_path / "b"), "/installed", str(tmp_path)]


GENERATED = """
from lockcompare.testing import BackendContract


class TestCareless(BackendContract):
    backend_name = "careless_lock:CarelessLock"


class TestHanging(BackendContract):
    backend_name = "misbehaving_backends:HangingLock"
    call_timeout_s = 1.0
"""


def test_a_plug_in_authors_test_module_needs_one_subclass_and_no_conftest(tmp_path: Path) -> None:
    """A real pytest on a generated module: the careless lock fails exactly the release property;
    the hanging backend fails within its deadline; every process the battery started is gone."""
    (tmp_path / "test_my_lock.py").write_text(textwrap.dedent(GENERATED))
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # this directory is the rootdir: no conftest.py
    pid_file = tmp_path / "pids"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO / "examples"), str(REPO / "tests")]),
        PID_FILE_ENV: str(pid_file),
    }
    env.pop("PYTEST_DISABLE_PLUGIN_AUTOLOAD", None)  # the plugin comes in by its pytest11 entry point
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--junitxml", "report.xml",
         "test_my_lock.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr  # tests failed (not 2: interrupted, 4: usage)
    outcomes = {}
    for case in ET.parse(tmp_path / "report.xml").getroot().iter("testcase"):
        failure = case.find("failure")
        skipped = case.find("skipped")
        outcome = "failed" if failure is not None else "skipped" if skipped is not None else "passed"
        message = failure.get("message", "") if failure is not None else ""
        outcomes[(case.get("classname").rsplit(".", 1)[-1], case.get("name"))] = (
            outcome,
            message,
            float(case.get("time")),
        )
    careless = {name: outcome for (cls, name), (outcome, _, _) in outcomes.items() if cls == "TestCareless"}
    assert [name for name, outcome in careless.items() if outcome == "failed"] == [
        "test_expired_holder_cannot_release_its_successors_lock"
    ]
    assert careless["test_second_acquire_is_refused_while_held"] == "passed"
    assert careless["test_refuses_without_a_quorum"] == "passed"
    message = outcomes[("TestCareless", "test_expired_holder_cannot_release_its_successors_lock")][1]
    assert "deleted its successor's lock" in message
    outcome, message, seconds = outcomes[("TestHanging", "test_acquire_returns_a_lease_with_a_random_owner")]
    assert outcome == "failed" and "did not return within 1 s" in message
    assert seconds < 10  # 1 s deadline; the rest is a generous bound for a loaded 2-core machine
    pids = [int(line) for line in pid_file.read_text().split()]
    assert pids and all(_gone(pid) for pid in pids)


def test_the_guides_example_backend_passes_every_property_it_claims(cluster, tmp_path, monkeypatch) -> None:
    guide = (REPO / "docs" / "plugins.md").read_text()
    (code,) = [block for block in re.findall(r"```python\n(.*?)```", guide, re.DOTALL) if "class MyLock" in block]
    (tmp_path / "mylock.py").write_text(code)
    monkeypatch.syspath_prepend(str(tmp_path))  # the spawned host starts with this sys.path
    with battery(spec="mylock:MyLock", node_urls=cluster.node_urls) as ctx:
        results = {r.prop.name: r.status for r in (check_property(prop, ctx) for prop in PROPERTIES)}
    assert results.pop("survives_the_loss_of_a_minority") is Status.NOT_CLAIMED
    claims = {name: results.pop(name) for name in list(results) if name.startswith("claim_")}
    assert set(claims.values()) == {Status.NOT_CLAIMED}, claims  # it has a TTL, no renewal, no lease check
    assert set(results.values()) == {Status.PASS}, results


def test_a_checks_history_records_every_clients_calls_and_the_battery_steps(cluster, tmp_path) -> None:
    """The history behind a card line (issue 48.3): one worker per client, its calls as the host
    timed them, and the battery's own steps (the holder's process frozen and continued) as worker -1."""
    with battery(spec="single", node_urls=cluster.node_urls) as ctx:
        ctx.history_dir = tmp_path
        refused = check_property(property_named("second_acquire_is_refused_while_held"), ctx)
        freed = check_property(property_named("lock_is_free_again_after_the_ttl"), ctx)
    assert refused.status is freed.status is Status.PASS
    steps = [
        (e["worker"], e["round"], e["kind"], e.get("ok", e.get("released")), e.get("refusals"))
        for e in load_history(refused.history)
        if e["kind"] != "check"
    ]
    assert steps == [
        (0, 0, "acquire", True, None),
        (1, 0, "acquire", False, {"held": 1}),
        (0, 0, "release", True, None),
        (1, 1, "acquire", True, None),
        (1, 1, "release", True, None),
    ]
    events = load_history(freed.history)
    pause = [(e["action"], e["target"]) for e in events if e["kind"] == "fault"]
    assert pause == [("inject", "worker 0"), ("heal", "worker 0")]
    inject, heal = [e for e in events if e["kind"] == "fault"]
    inside = [e for e in events if e["kind"] == "acquire" and inject["t1"] <= e["t0"] and e["t1"] <= heal["t0"]]
    assert [(e["worker"], e["ok"]) for e in inside] == [(1, False), (1, True)]  # refused, then free after the TTL
    assert {e["ttl_ms"] for e in events if e["kind"] == "acquire" and e["worker"] == 0} == {150}
    assert (events[0]["kind"], events[-1]["kind"], events[-1]["status"]) == ("check", "check", "PASS")
