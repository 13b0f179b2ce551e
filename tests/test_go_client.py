"""The Go external client (clients/go: etcd's clientv3/concurrency.Mutex) on real etcd members.

What is checked: a baseline trial is exclusive; a client-pause freezes the whole Go runtime (no
keepalive inside a pause, the lease expires during it, the loss is reported after the thaw); the
fenced variant's token is the mutex key's create revision, strictly increasing across holders; and
the manifest's TTL limits leave out, up front, the cells etcd cannot grant. The client is built in
the test session (``bash clients/go/build.sh``, offline, ~10 s) where Go and etcd's Go sources are
installed; without them the real-server tests skip with one line.
"""

from __future__ import annotations

import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from client_build import build_if_stale
from lockcompare.backends import BackendConfig, Lease, load_backend
from lockcompare.backends.external.shipped import clients_dir
from lockcompare.errors import BackendNotViableError, InvalidValueError
from lockcompare.infra.cluster import Cluster
from lockcompare.infra.etcd.client import EtcdClient, b64
from lockcompare.infra.etcd.server import find_etcd
from lockcompare.runner.matrix import plan_matrix
from lockcompare.runner.trial import TrialResult, new_run_id, run_trial
from lockcompare.scenario.experiments import get_experiment
from lockcompare.scenario.trialspec import Overrides, make_spec

GO_DIR = clients_dir() / "go"
BINARY = GO_DIR / "build" / "etcd-lock-client"
ETCD_SOURCES = Path("/usr/share/gocode/src/go.etcd.io/etcd/clientv3/concurrency")


def _etcd_missing() -> str:
    try:
        find_etcd()
    except BackendNotViableError as exc:
        return f"etcd not installed: {exc}"
    return ""


MISSING = (
    "go or etcd's Go sources not installed (apt-get install -y golang-go golang-etcd-server-dev)"
    if shutil.which("go") is None or not ETCD_SOURCES.is_dir()
    else _etcd_missing()
)
needs_go = pytest.mark.skipif(bool(MISSING), reason=MISSING)


@pytest.fixture(scope="module")
def built() -> None:
    """Build the client once per session when its source is newer than the binary (the toolchain is there)."""
    build_if_stale(script=GO_DIR / "build.sh", output=BINARY, sources=[GO_DIR / "main.go"], timeout_s=600)


@pytest.fixture(scope="module")
def etcd_cluster(built: None, etcd_cluster: Cluster) -> Cluster:
    """The shared etcd cluster (conftest.py), once the client is built."""
    return etcd_cluster


def _trial(backend: str, experiment: str, cluster: Cluster, **settings: object) -> TrialResult:
    # etcd's leases are whole seconds: ×1 keeps the lesson's TTL of 1000 ms.
    overrides = Overrides(**({"time_scale": 1.0, "rounds": 3} | settings))
    spec = make_spec(backend=backend, experiment=get_experiment(experiment), trial=0, overrides=overrides)
    return run_trial(spec=spec, cluster=cluster, run_id=new_run_id())


def test_the_manifest_leaves_out_ttls_etcd_cannot_grant() -> None:
    # Pure: the manifest's min_ttl_ms / ttl_step_ms, read without the binary or a server.
    cls = load_backend("etcd-go-mutex", check_viable=False)
    cls.check_ttl(ttl_ms=2000)  # type: ignore[attr-defined]
    for ttl_ms, says in ((500, "at least 1000 ms"), (1500, "multiples of 1000 ms")):
        with pytest.raises(InvalidValueError, match=says):
            cls.check_ttl(ttl_ms=ttl_ms)  # type: ignore[attr-defined]
    specs = plan_matrix(backends=["etcd-go-mutex", "single"], experiments=["baseline"], trials=1,
                        overrides=Overrides(time_scale=0.5), node_count=None)  # fmt: skip
    assert [s.backend for s in specs] == ["single"]  # TTL 500 ms: the Go cell is left out, the rest runs


@needs_go
def test_a_baseline_trial_is_exclusive(etcd_cluster: Cluster) -> None:
    result = _trial("etcd-go-mutex", "baseline", etcd_cluster)
    assert result.metrics.verdict == "exclusive", result.metrics.problem
    assert result.metrics.acquires == 6
    starts = [e for e in result.history if e["kind"] == "client"]
    assert len(starts) == 2 and all(e["version"].startswith("3.4") and e["runtime"].startswith("go") for e in starts)
    # build.sh stamps the etcd client's version (Debian's package version where it came from there)
    stamped = subprocess.run(
        ["dpkg-query", "-W", "-f=${Version}", "golang-etcd-server-dev"], capture_output=True, text=True, check=False
    ).stdout.strip()
    assert all(e["versions"] == {"go.etcd.io/etcd/clientv3": e["version"]} for e in starts)
    assert not stamped or all(e["version"] == stamped for e in starts)


@needs_go
def test_a_pause_freezes_the_go_runtime_and_the_lease_expires_inside_it(etcd_cluster: Cluster) -> None:
    # read → work 900 ms (the session's keepalive renews the 1 s lease meanwhile) → frozen 2.5 s →
    # write. A Go runtime left running would keep the lease alive and nobody else would get in.
    result = _trial(
        "etcd-go-mutex", "client-pause", etcd_cluster, rounds=2, work_ms=900, pause_ms=2500, pause_point="before-write"
    )
    history = result.history
    # The frozen windows: from the freeze's end to the thaw's start (the runner's fault events).
    faults = [e for e in history if e["kind"] == "fault" and e["fault"] == "pause"]
    freezes = [e for e in faults if e["action"] == "inject"]
    thaws = [e for e in faults if e["action"] == "heal"]
    pauses = [(f["target_worker"], f["t1"], h["t0"]) for f, h in zip(freezes, thaws, strict=True)]
    assert len(pauses) == 2
    renewals = [e for e in history if e["kind"] == "renew" and e["ok"]]
    assert renewals, "the session's keepalive replies reach the history"
    inside = [r for r in renewals if any(w == r["worker"] and t0 < r["t0"] < t1 for w, t0, t1 in pauses)]
    assert inside == []
    for worker, _, t1 in pauses:
        # The library says so once the holder thaws (the session's Done())...
        losses = [e for e in history if e["kind"] == "renew" and not e["ok"] and e["worker"] == worker]
        assert any(e["t0"] >= t1 and e["reason"] == "lost" for e in losses), losses
        # ...and etcd agrees: the lease had expired (the release's revoke finds no lease).
        release = next(e for e in history if e["kind"] == "release" and e["worker"] == worker and e["t0"] > t1)
        assert release["released"] is False
    # The other worker, while it still has rounds to run, is granted inside the first freeze.
    worker, t0, t1 = pauses[0]
    others = [e for e in history if e["kind"] == "acquire" and e["ok"] and e["worker"] != worker]
    assert any(t0 < e["t1"] < t1 for e in others), (worker, t0, t1)
    assert result.metrics.verdict != "exclusive"  # the thawed holder writes on: the lock alone is unsafe


@needs_go
def test_the_fenced_token_is_the_mutex_keys_create_revision_increasing(etcd_cluster: Cluster) -> None:
    config = BackendConfig(node_urls=etcd_cluster.node_urls, request_timeout_s=0.5)
    cls = load_backend("etcd-go-fenced")
    a, b = cls(config=config), cls(config=config)
    etcd = EtcdClient(endpoints=etcd_cluster.node_urls, timeout_s=2.0)
    key = f"lockcompare-test:{uuid.uuid4().hex}"
    tokens = []
    try:
        for holder in (a, b, a, b):
            lease = holder.acquire(key=key, ttl_ms=1000)
            assert isinstance(lease, Lease), lease
            found = etcd.call("/v3/kv/range", {"key": b64(lease.owner)})["kvs"]  # the owner is the mutex's key
            assert lease.fencing_token == int(found[0]["create_revision"])
            tokens.append(lease.fencing_token)
            assert holder.release(lease) is True
        assert tokens == sorted(set(tokens)), tokens
    finally:
        a.close()
        b.close()
        etcd.close()


@needs_go
def test_bench_runs_the_go_client_on_etcd_beside_the_redis_floor(cluster: Cluster, etcd_cluster: Cluster) -> None:
    from lockcompare.runner.bench import lock_servers_needed, run_bench

    names = ["single", "etcd-go-mutex", "etcd"]
    assert lock_servers_needed(names, cluster=cluster) == ["etcd"]  # the floor and single stay on Redis
    rows = run_bench(
        cluster=cluster, backends=["etcd-go-mutex"], iterations=20, warmup=2, blocks=1, ttl_ms=10_000,
        lock_clusters={"etcd": etcd_cluster},
    )  # fmt: skip
    go = next(row for row in rows if row.backend == "etcd-go-mutex")
    assert go.iterations == 20 and go.refused == 0
    assert 0 < go.library_p50_us < go.p50_us  # the client's own time in concurrency.Mutex, the hop apart
