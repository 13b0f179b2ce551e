"""The Java external client (clients/java: Apache Curator's InterProcessMutex) on a real ZooKeeper.

What is checked: the protocol handshake (CLOCK_MONOTONIC, the library and runtime it names, a wrong
protocol refused); exclusion and owner-checked release between two clients; a baseline trial is
exclusive; a client-pause freezes the whole JVM — no heartbeat (ZooKeeper ping) inside a pause, the
holder's session expires during it (the rival is granted while the holder is still frozen), and the
client reports the loss after the thaw; the checked variant skips that stale write; session-kill finds
Curator's lock znode. Pure: Curator's contender names are read like kazoo's, and a manifest's
``session_timeout_is_ttl`` needs a session lock.

The client is built once per session, in place (``bash clients/java/build.sh``: javac against Debian's
jars, ~3 s, output in the gitignored clients/java/build/) when the sources are newer than the jar;
without a JDK, the Curator jars or ZooKeeper the real-server tests skip with one line.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from client_build import build_if_stale
from lockcompare.backends import BackendConfig, Lease, Refusal, load_backend
from lockcompare.backends.external.manifest import parse_manifest
from lockcompare.backends.external.shipped import clients_dir
from lockcompare.errors import BackendLoadError, BackendNotViableError
from lockcompare.infra.cluster import Cluster
from lockcompare.runner.trial import TrialResult, new_run_id, run_trial
from lockcompare.scenario.experiments import get_experiment
from lockcompare.scenario.trialspec import Overrides, make_spec

JAVA_DIR = clients_dir() / "java"
JAR = JAVA_DIR / "build" / "curator-mutex.jar"
SOURCES = [*sorted(JAVA_DIR.glob("*.java")), JAVA_DIR / "build.sh"]
CURATOR_JAR = Path("/usr/share/java/curator-recipes.jar")


def _missing() -> str:
    if shutil.which("javac") is None or not CURATOR_JAR.is_file():
        return "a JDK or Curator's jars are not installed (apt-get install -y libcurator-recipes-java)"
    try:
        from lockcompare.infra.zookeeper.client import kazoo_client_class
        from lockcompare.infra.zookeeper.server import find_zookeeper

        find_zookeeper()
        kazoo_client_class()
    except BackendNotViableError as exc:
        return f"ZooKeeper not available: {exc}"
    return ""


MISSING = _missing()
needs_java = pytest.mark.skipif(bool(MISSING), reason=MISSING)


@pytest.fixture(scope="module")
def built() -> None:
    """Build the client (in place) once per session when a source is newer than the jar."""
    build_if_stale(script=JAVA_DIR / "build.sh", output=JAR, sources=SOURCES, timeout_s=300)


@pytest.fixture(scope="module")
def zk_cluster(built: None, zk_cluster: Cluster) -> Cluster:
    """The shared ZooKeeper server (conftest.py), once the client is built."""
    return zk_cluster


def _trial(backend: str, experiment: str, cluster: Cluster, **settings: object) -> TrialResult:
    overrides = Overrides(**({"time_scale": 0.5, "rounds": 3} | settings))
    spec = make_spec(
        backend=backend, experiment=get_experiment(experiment), trial=0, overrides=overrides, lock_servers="zookeeper"
    )
    return run_trial(spec=spec, cluster=cluster, run_id=new_run_id())


# --- pure ------------------------------------------------------------------------------------------


def test_curators_contender_znodes_are_read_like_kazoos() -> None:
    from lockcompare.infra.zookeeper.client import contenders

    class Children:
        def get_children(self, path: str) -> list[str]:
            return [
                "_c_9dcf0c06-ad77-4a46-a22f-81d5ac2b077b-lock-0000000012",
                "leases",  # not a contender
                "_c_85201b25-859f-45cd-8724-b0cc2486424b-lock-0000000003",
                "4f1c2e__lock__0000000007",
            ]

    assert contenders(Children(), "/lockcompare/k") == [
        "_c_85201b25-859f-45cd-8724-b0cc2486424b-lock-0000000003",
        "4f1c2e__lock__0000000007",
        "_c_9dcf0c06-ad77-4a46-a22f-81d5ac2b077b-lock-0000000012",
    ]


def test_the_manifests_are_session_locks_whose_session_timeout_is_the_ttl() -> None:
    for name, checks in (("curator-mutex", False), ("curator-mutex-checked", True)):
        cls: Any = load_backend(name, check_viable=False)
        assert (cls.servers, cls.has_ttl, cls.session_timeout_is_ttl, cls.renews) == ("zookeeper", False, True, True)
        assert cls.checks_lease is checks
    text = (JAVA_DIR / "curator-mutex.toml").read_text().replace("has_ttl = false", "has_ttl = true")
    with pytest.raises(BackendLoadError, match="session_timeout_is_ttl is for a session lock"):
        parse_manifest(text, source=JAVA_DIR / "broken.toml")


def test_without_the_build_the_backend_is_not_viable_with_the_build_command(tmp_path: Path) -> None:
    copy = tmp_path / "curator-mutex.toml"
    copy.write_text((JAVA_DIR / "curator-mutex.toml").read_text())
    cls: Any = load_backend(str(copy), check_viable=False)
    with pytest.raises(BackendNotViableError, match=r"build/curator-mutex.jar missing.*clients install java"):
        cls.check_viable()


# --- the protocol ----------------------------------------------------------------------------------


def _exchange(process: subprocess.Popen[str], request: dict[str, Any]) -> dict[str, Any]:
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(json.dumps(request) + "\n")
    process.stdin.flush()
    reply: dict[str, Any] = json.loads(process.stdout.readline())
    return reply


@needs_java
def test_the_handshake_is_on_clock_monotonic_and_names_curator(zk_cluster: Cluster) -> None:
    command = load_backend("curator-mutex", check_viable=False).manifest.command  # type: ignore[attr-defined]
    process = subprocess.Popen(
        command, cwd=JAVA_DIR, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    try:
        hello = {"op": "hello", "nodes": list(zk_cluster.node_urls), "request_timeout_ms": 2000}
        wrong = _exchange(process, {"id": 1, "protocol": 99, **hello})
        assert wrong["ok"] is False and wrong["protocol"] == 1
        before = _last_zxid(zk_cluster)
        sent = time.monotonic_ns()
        reply = _exchange(process, {"id": 2, "protocol": 1, **hello})
        received = time.monotonic_ns()
        assert reply["ok"] is True and reply["id"] == 2 and reply["protocol"] == 1
        assert sent <= reply["monotonic_ns"] <= received  # System.nanoTime() is CLOCK_MONOTONIC
        # Its warm-up lock (warmUpLock) was written and taken away before the reply: a session
        # opened and closed, a lock znode created and deleted (ZooKeeper counts every write in its
        # zxid), and nothing of it is left under lockcompare's path.
        assert _last_zxid(zk_cluster) - before >= 4
        assert not [name for name in _lockcompare_children(zk_cluster) if name.startswith("warm-up-")]
        assert reply["library"] == "curator-recipes InterProcessMutex"
        assert reply["version"].startswith("5.4.0 (zookeeper 3.8") and reply["runtime"].startswith("java ")
        # what each row records (issue 53): read from the jars, not typed
        assert reply["versions"]["curator-recipes"] == "5.4.0" and reply["versions"]["zookeeper"].startswith("3.8")
        assert _exchange(process, {"id": 3, "op": "frobnicate"})["ok"] is False
        assert _exchange(process, {"id": 4, "op": "close"}) == {"id": 4, "ok": True}
        assert process.wait(timeout=10) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


@needs_java
def _last_zxid(cluster: Cluster) -> int:
    """The newest transaction any member has applied (ZooKeeper's ``srvr``: ``Zxid: 0x...``)."""
    from lockcompare.infra.zookeeper.server import four_letter

    zxids = []
    for url in cluster.node_urls:
        host, port = url.removeprefix("zk://").rstrip("/").split(":")
        answer = four_letter(host, int(port), "srvr")
        zxids += [int(line.split(":", 1)[1], 16) for line in answer.splitlines() if line.startswith("Zxid:")]
    return max(zxids)


def _lockcompare_children(cluster: Cluster) -> list[str]:
    from lockcompare.infra.zookeeper.client import kazoo_client_class

    hosts = ",".join(url.removeprefix("zk://").rstrip("/") for url in cluster.node_urls)
    client = kazoo_client_class()(hosts=hosts, timeout=5.0)
    client.start(timeout=5.0)
    try:
        return client.get_children("/lockcompare") if client.exists("/lockcompare") else []
    finally:
        client.stop()
        client.close()


def test_two_clients_exclude_each_other_and_release_only_their_own(zk_cluster: Cluster) -> None:
    cls = load_backend("curator-mutex")
    config = BackendConfig(node_urls=zk_cluster.node_urls, request_timeout_s=2.0)
    a, b = cls(config=config), cls(config=config)
    key = f"lockcompare-test:{uuid.uuid4().hex}"
    try:
        lease = a.acquire(key=key, ttl_ms=1000)
        assert isinstance(lease, Lease) and lease.valid_until_ns is None  # a session lock: no deadline
        assert "-lock-" in lease.owner  # the owner names its znode
        refused = b.acquire(key=key, ttl_ms=1000)  # waits up to a TTL for the holder, then gives up
        assert isinstance(refused, Refusal) and refused.reason == "held"
        assert a.release(lease) is True
        assert a.release(lease) is False  # released already: nothing of ours is left
        second = b.acquire(key=key, ttl_ms=1000)
        assert isinstance(second, Lease)
        assert b.release(second) is True
    finally:
        a.close()
        b.close()


# --- trials ----------------------------------------------------------------------------------------


@needs_java
def test_a_baseline_trial_is_exclusive(zk_cluster: Cluster) -> None:
    m = _trial("curator-mutex", "baseline", zk_cluster).metrics
    assert (m.problem, m.entries, m.conflicts, m.lost_updates, m.verdict) == ("", 6, 0, 0, "exclusive")


def _pauses(history: list[dict[str, Any]]) -> list[tuple[int, int, int]]:
    """(worker, frozen from, frozen until): from the freeze's end to the thaw's start."""
    faults = [e for e in history if e["kind"] == "fault" and e.get("fault") == "pause"]
    freezes = [e for e in faults if e["action"] == "inject"]
    thaws = [e for e in faults if e["action"] == "heal"]
    return [(f["target_worker"], f["t1"], h["t0"]) for f, h in zip(freezes, thaws, strict=True)]


@needs_java
def test_a_pause_freezes_the_jvm_and_the_session_expires_inside_it(zk_cluster: Cluster) -> None:
    # Session 1000 ms (the TTL at ×1), frozen 2500 ms right after the acquire. A JVM left running
    # would keep pinging, its session would live, and nobody else would get the lock.
    result = _trial("curator-mutex", "client-pause", zk_cluster, time_scale=1.0, rounds=2, pause_ms=2500)
    history = result.history
    pauses = _pauses(history)
    assert len(pauses) == 2
    pings = [e for e in history if e["kind"] == "renew" and e["ok"] and e.get("reason") == "ping"]
    # The heartbeats reach the history (every third of the session timeout while a client idles: the
    # rival's while it waits; the paused worker's own may all fall outside its rounds, with warm
    # workers acquiring at once) ...
    assert pings, "no ping in the history: the heartbeats are not recorded"
    for worker, start, end in pauses:
        # ...and none of the paused worker's lies inside the freeze: no ping went out while the JVM was frozen.
        assert not [p for p in pings if p["worker"] == worker and start < p["t0"] < end]
        # The server expired the frozen holder's session: the rival was granted while it was still frozen...
        holder = max(
            (e for e in history if e["kind"] == "acquire" and e["ok"] and e["worker"] == worker and e["t1"] < start),
            key=lambda e: e["t1"],
        )
        rivals = [e for e in history if e["kind"] == "acquire" and e["ok"] and e["worker"] != worker]
        if rivals and rivals[-1]["t1"] > start:  # the rival still had rounds to run
            assert any(start < e["t1"] < end and e["t1"] - holder["t1"] >= 1000 * 1e6 for e in rivals)
        # ...and the holder's client learnt it only after the thaw (SUSPENDED, then LOST).
        told = [e for e in history if e["kind"] == "renew" and not e["ok"] and e["worker"] == worker]
        assert any(e["reason"] == "lost" and e["t0"] > end for e in told), told
        release = next(e for e in history if e["kind"] == "release" and e["worker"] == worker and e["t0"] > end)
        assert release["released"] is False
    assert result.metrics.verdict != "exclusive"  # the thawed holder writes on: the lock alone is unsafe


@needs_java
def test_the_checked_client_skips_the_frozen_holders_write(zk_cluster: Cluster) -> None:
    result = _trial("curator-mutex-checked", "client-pause", zk_cluster, time_scale=1.0, rounds=2, pause_ms=2500)
    m = result.metrics
    assert m.lost_updates == 0 and m.writes_skipped >= 1, m.problem
    skipped = [
        e for e in result.history if e["kind"] == "write-skipped" and e["worker"] == _pauses(result.history)[0][0]
    ]
    assert skipped and {e["reason"] for e in skipped} <= {"suspended", "lost", "client-exited"}


@needs_java
def test_session_kill_finds_curators_lock_znode_and_names_the_client(zk_cluster: Cluster) -> None:
    result = _trial("curator-mutex", "session-kill", zk_cluster)
    assert result.metrics.verdict != "unknown", result.metrics.problem
    kills = [e for e in result.history if e.get("fault") == "session-kill" and e["action"] == "inject"]
    ended = [e for e in kills if e["detail"].startswith("closed the holder's session 0x")]
    assert ended, [e["detail"] for e in kills]
    assert all("-lock-" in e["detail"] for e in ended)  # Curator's contender znode, found by its sequence
    pids = {e["pid"] for e in result.history if e["kind"] == "client"}
    assert any(int(e["detail"].rsplit("curator-mutex pid ", 1)[1].rstrip(")")) in pids for e in ended)
