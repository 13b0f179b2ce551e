"""External lock clients (backends/external, docs/clients.md): a manifest makes a command a backend.

Real child processes over real pipes, real redis-server nodes. The misbehaving clients are the
reference client (clients/python/refclient.py, stdlib Python) with ``--misbehave``: a reply that is
garbage, too late, or a client that dies mid-call must each be a refusal (or an ``unknown`` trial),
never a traceback or a hung trial. The shipped Node clients run a short real trial when ``node``
and their ``node_modules`` are installed (``npm ci --prefix clients/node``); skipped with one line
otherwise.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lockcompare.analysis.results import read_results
from lockcompare.backends import BackendConfig, Lease, Refusal, describe_backends, load_backend
from lockcompare.backends.external.backend import ExternalBackend
from lockcompare.backends.external.manifest import parse_manifest
from lockcompare.backends.external.named import ENV as NAMED_MANIFESTS
from lockcompare.backends.external.shipped import clients_dir
from lockcompare.backends.versions import client_versions
from lockcompare.errors import BackendLoadError, BackendNotViableError, ExternalClientError
from lockcompare.evaluation.conformance import Status, battery, check_property, property_named
from lockcompare.faults.holders import LockHolders, key_glob
from lockcompare.infra.cluster import Cluster, open_cluster
from lockcompare.runner.matrix import run_matrix
from lockcompare.runner.trial import TrialResult, new_run_id, run_trial
from lockcompare.scenario.experiments import get_experiment
from lockcompare.scenario.trialspec import Overrides, make_spec

REFCLIENT = clients_dir() / "python" / "refclient.py"
NODE_DIR = clients_dir() / "node"

CLAIMS = """
[claims]
exclusive = true
issues_fencing_tokens = false
checks_lease = true
"""


def manifest(directory: Path, *args: str, name: str = "ref", extra: str = "", key: str = "") -> str:
    """A manifest for the reference client with ``args``, written in ``directory``; its path."""
    command = ", ".join(f'"{part}"' for part in (sys.executable, str(REFCLIENT), *args))
    path = directory / f"{name}.toml"
    text = f'protocol = 1\nname = "{name}"\nsummary = "reference client {name}"\ncommand = [{command}]\n{extra}\n'
    path.write_text(text + CLAIMS + key)
    return str(path)


@pytest.fixture
def config(cluster: Cluster) -> BackendConfig:
    return BackendConfig(node_urls=cluster.node_urls, request_timeout_s=0.5)


@pytest.fixture
def make(config: BackendConfig) -> Iterator:
    made: list[ExternalBackend] = []

    def new(spec: str) -> ExternalBackend:
        backend = load_backend(spec)(config=config)
        assert isinstance(backend, ExternalBackend)
        made.append(backend)
        return backend

    yield new
    for backend in made:
        backend.close()


# --- the manifest --------------------------------------------------------------------------------


def test_a_manifest_builds_a_backend_class_with_its_claims(tmp_path: Path) -> None:
    spec = manifest(tmp_path, extra='servers = "redis"\nclient_timeout_s = 1.5', key='[key]\npattern = "x:{key}"\n')
    cls = load_backend(spec)
    assert (cls.exclusive, cls.issues_fencing_tokens, cls.survives_minority_loss) == (True, False, False)
    assert cls.checks_lease and not cls.renews and callable(cls.before_write)  # type: ignore[attr-defined]
    assert (cls.key_pattern, cls.key_type, cls.client_timeout_s) == ("x:{key}", "string", 1.5)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('protocol = 1\nname = "a"\nsummary = "s"\ncommand = ["x"]\n', "'claims' is missing"),
        ('protocol = 2\nname = "a"\nsummary = "s"\ncommand = ["x"]\n' + CLAIMS, "protocol 2"),
        ('protocol = 1\nname = "a"\nsummary = "s"\ncommand = []\n' + CLAIMS, "command must be"),
        ('protocol = 1\nname = "a"\nsummary = "s"\ncommand = ["x"]\ncolour = 1\n' + CLAIMS, "unknown field 'colour'"),
        (
            'protocol = 1\nname = "a"\nsummary = "s"\ncommand = ["x"]\n'
            '[claims]\nexclusive = "yes"\nissues_fencing_tokens = false\n',
            "expected true",
        ),
        ('protocol = 1\nname = "a"\nsummary = "s"\ncommand = ["x"]\n' + CLAIMS + '[key]\npattern = "k"\n', "{key}"),
        ('protocol = 1\nname = "a"\nsummary = "s"\ncommand = ["x"]\n' + CLAIMS + '[key]\ntype = "set"\n', "'set'"),
        ("protocol = 1\nname = ", "not TOML"),
    ],
)
def test_a_bad_manifest_is_one_line_naming_the_file_and_field(text: str, says: str) -> None:
    with pytest.raises(BackendLoadError, match=re.escape("client manifest /tmp/m.toml")) as caught:
        parse_manifest(text, source=Path("/tmp/m.toml"))
    assert says in str(caught.value) and "\n" not in str(caught.value)


def test_a_client_whose_command_is_missing_is_not_viable_with_what_to_install(tmp_path: Path) -> None:
    path = tmp_path / "gone.toml"
    path.write_text(
        'protocol = 1\nname = "gone"\nsummary = "s"\ncommand = ["no-such-runtime-here", "x.js"]\n'
        'requires = ["node_modules/x"]\ninstall = "npm ci --prefix somewhere"\n' + CLAIMS
    )
    with pytest.raises(BackendNotViableError, match=r"not viable here: 'no-such-runtime-here' not found.*npm ci"):
        load_backend(str(path))


# --- the protocol against a well-behaved client --------------------------------------------------


def test_the_reference_client_grants_refuses_checks_and_releases(tmp_path: Path, make, key: str) -> None:
    a, b = make(manifest(tmp_path)), make(manifest(tmp_path))
    assert a.hello["library"] == "refclient" and a.hello["runtime"].startswith("python")
    before = time.monotonic_ns()
    lease = a.acquire(key=key, ttl_ms=2000)
    after = time.monotonic_ns()
    assert isinstance(lease, Lease) and lease.granted_by == (0,)
    assert before + 1_900_000_000 < lease.valid_until_ns <= after + 2_000_000_000  # type: ignore[operator]
    assert b.acquire(key=key, ttl_ms=2000) == Refusal("held")
    checked = a.before_write(lease)  # type: ignore[attr-defined]
    # The node's PTTL, read after the grant: the key expires no later than ttl after the acquire
    # returned (PTTL has ms precision).
    assert isinstance(checked, Lease) and checked.valid_until_ns <= after + 2_001_000_000  # type: ignore[operator]
    assert a.release(lease) is True
    assert a.before_write(lease) == Refusal("lost")  # type: ignore[attr-defined]
    assert [r["kind"] for r in a.drain_renewals()] == ["client"]
    assert a.take_library_ns() > 0


@pytest.mark.parametrize(
    ("args", "status", "says"),
    [
        ((), Status.PASS, "ms from the call"),
        # 30 ms in the pipe, the TTL counted from after it: the battery cannot tell whose 30 ms they were.
        (("--misbehave", "slow-pipe", "--delay-s", "0.03"), Status.SKIPPED, "could not tell in 3 leases"),
        # 30 ms more than the TTL, from the library's own start: a FAIL whatever the hop.
        (("--misbehave", "overstate", "--delay-s", "0.03"), Status.FAIL, "past it from the latest start"),
    ],
)
def test_the_validity_property_credits_an_external_client_with_the_protocols_hop_and_no_more(
    tmp_path: Path, cluster: Cluster, args: tuple[str, ...], status: Status, says: str
) -> None:
    with battery(spec=manifest(tmp_path, *args), node_urls=cluster.node_urls) as ctx:
        result = check_property(property_named("lease_validity_is_within_the_ttl"), ctx)
    assert result.status is status and says in result.evidence, result.evidence


def test_the_handshake_refuses_a_client_whose_clock_is_not_clock_monotonic(tmp_path: Path, config) -> None:
    cls = load_backend(manifest(tmp_path, "--misbehave", "clock"))
    with pytest.raises(ExternalClientError, match="its clock is not CLOCK_MONOTONIC") as caught:
        cls(config=config)
    assert "\n" not in str(caught.value)


def test_a_client_that_cannot_start_is_one_line(tmp_path: Path, config) -> None:
    path = tmp_path / "false.toml"
    path.write_text(f'protocol = 1\nname = "f"\nsummary = "s"\ncommand = ["{shutil.which("false")}"]\n' + CLAIMS)
    with pytest.raises(ExternalClientError, match="no hello: client 'f' exited with code 1"):
        load_backend(str(path))(config=config)


# --- misbehaving clients: refusals, never a traceback or a hang -----------------------------------


def test_a_garbage_reply_is_a_refusal_recorded_as_malformed(tmp_path: Path, make, key: str) -> None:
    backend = make(manifest(tmp_path, "--misbehave", "garbage"))
    assert backend.acquire(key=key, ttl_ms=1000) == Refusal("malformed")
    problems = [r for r in backend.drain_renewals() if r["kind"] == "client-reply"]
    assert problems[0]["op"] == "acquire" and problems[0]["problem"] == "malformed"
    assert "this is not a JSON reply" in problems[0]["detail"]


def test_a_late_reply_is_a_refusal_after_the_reply_timeout_and_its_grant_is_let_go(
    tmp_path: Path, make, key: str, cluster: Cluster
) -> None:
    backend = make(manifest(tmp_path, "--misbehave", "late", "--delay-s", "1.0", extra="reply_timeout_s = 0.3"))
    t0 = time.monotonic()
    assert backend.acquire(key=key, ttl_ms=30_000) == Refusal("late")
    assert 0.3 <= time.monotonic() - t0 < 1.0
    time.sleep(1.2)  # the grant arrives after we gave up
    assert backend.acquire(key=key, ttl_ms=30_000) == Refusal("late")  # reads (and releases) the stale grant
    records = backend.drain_renewals()
    assert [r["kind"] for r in records].count("client-late-grant") == 1
    time.sleep(1.5)  # the client works through the release the stale grant triggered
    holders = LockHolders(node_urls=cluster.node_urls[:1], key_pattern=key_glob(key, pattern="{key}"))
    try:
        assert holders.read() in ([None], [records[-1].get("owner")])  # the second late grant may hold it
    finally:
        holders.close()


def test_a_client_that_dies_mid_call_is_a_refusal_then_a_restart(tmp_path: Path, make, key: str) -> None:
    backend = make(manifest(tmp_path, "--misbehave", "die"))
    assert backend.acquire(key=key, ttl_ms=1000) == Refusal("client-exited")
    time.sleep(0.2)
    records = backend.drain_renewals()
    exits = [r for r in records if r["kind"] == "client-exit"]
    assert exits and exits[0]["code"] == 3 and "dying in the middle of an acquire" in exits[0]["stderr"]
    assert backend.acquire(key=key, ttl_ms=1000) == Refusal("client-exited")  # a new client, which dies too
    assert [r["kind"] for r in backend.drain_renewals()].count("client") == 1


def test_a_client_that_exits_while_holding_loses_the_lease_and_says_so(tmp_path: Path, make, key: str) -> None:
    backend = make(manifest(tmp_path, "--misbehave", "exit-holding", "--delay-s", "0.1"))
    lease = backend.acquire(key=key, ttl_ms=5000)
    assert isinstance(lease, Lease)
    time.sleep(0.5)
    assert backend.before_write(lease) == Refusal("client-exited")
    assert backend.release(lease) is False
    records = backend.drain_renewals()
    assert any(r["kind"] == "client-exit" and r["holding"] == [lease.owner] for r in records)
    assert any(r.get("kind") is None and r["reason"] == "client-exited" and r["owner"] == lease.owner for r in records)


def _trial(backend: str, experiment: str, cluster: Cluster, **settings: object) -> TrialResult:
    overrides = Overrides(**({"time_scale": 0.1, "rounds": 4} | settings))  # type: ignore[arg-type]
    spec = make_spec(backend=backend, experiment=get_experiment(experiment), trial=0, overrides=overrides)
    return run_trial(spec=spec, cluster=cluster, run_id=new_run_id())


@pytest.mark.parametrize("mode", ["garbage", "die"])
def test_a_trial_with_a_broken_client_ends_judged_not_exclusive(tmp_path: Path, cluster: Cluster, mode: str) -> None:
    t0 = time.monotonic()
    # Acquire deadline 1 s (×0.1): the worker gives up after three rounds without a lease.
    result = _trial(manifest(tmp_path, "--misbehave", mode, name=mode), "baseline", cluster, acquire_timeout_ms=10_000)
    assert time.monotonic() - t0 < 60
    assert result.metrics.verdict != "exclusive"
    assert result.metrics.acquires == 0
    refusals = [e for e in result.history if e["kind"] == "acquire"]
    expected = "malformed" if mode == "garbage" else "client-exited"
    assert refusals and all(set(e["refusals"]) == {expected} for e in refusals)


def test_the_cli_runs_a_manifest_and_a_broken_one_without_a_traceback(tmp_path: Path) -> None:
    spec = manifest(tmp_path, "--misbehave", "clock", name="clock")
    out = subprocess.run(
        [sys.executable, "-m", "lockcompare", "run", "--backend", spec, "--time-scale", "0.1", "--rounds", "2"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert out.returncode != 0
    assert "Traceback" not in out.stderr + out.stdout
    assert "CLOCK_MONOTONIC" in out.stderr


def test_a_manifest_run_by_its_path_is_shown_by_its_name_records_its_versions_and_reruns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 53: rows, trial ids and history names say the manifest's name; the row keeps the path
    (``backend_source``) that ``--resume`` and ``run --from`` load it from, and what its hello said."""
    monkeypatch.setenv(NAMED_MANIFESTS, "{}")
    (tmp_path / "some" / "where").mkdir(parents=True)
    spec = manifest(tmp_path / "some" / "where", name="ref-named")
    out = tmp_path / "r.csv"
    quick = Overrides(time_scale=0.1, rounds=3, call_timeout_ms=1500)
    run_matrix(backends=[spec], experiments=["baseline"], trials=1, overrides=quick, out=out)
    (row,) = read_results(out)
    assert row["backend"] == "ref-named" and row["backend_source"] == str(Path(spec).resolve())
    assert row["trial_id"].startswith("ref-named.baseline.") and "where" not in row["trial_id"]
    assert Path(row["history"]).name.startswith("ref-named.baseline.")
    # the reference client's hello: library "refclient", version "1", runtime "python X.Y.Z"
    assert row["client_versions"] == f"refclient 1; python {sys.version.split()[0]}"
    resumed = run_matrix(backends=[spec], experiments=["baseline"], trials=1, overrides=quick, out=out, resume=True)
    assert resumed.trials_run == 0 and resumed.trials_skipped == 1
    fresh = {k: v for k, v in os.environ.items() if k != NAMED_MANIFESTS}  # a new shell: only the row says where
    rerun = subprocess.run(
        [sys.executable, "-m", "lockcompare", "run", "--from", f"{out}:{row['trial_id']}"],
        capture_output=True, text=True, timeout=120, check=False, env=fresh,
    )  # fmt: skip
    assert rerun.returncode == 0, rerun.stderr
    assert f"trial_id: {row['trial_id']}" in rerun.stdout


# --- where the key lives: fault targeting --------------------------------------------------------


def test_a_hash_key_is_read_by_its_manifest_location(tmp_path: Path, make, key: str, cluster: Cluster) -> None:
    spec = manifest(tmp_path, "--hash", name="hashed", key='[key]\npattern = "{key}:h"\ntype = "hash"\n')
    backend = make(spec)
    cls = type(backend)
    located = LockHolders(
        node_urls=cluster.node_urls, key_pattern=key_glob(key, pattern=cls.key_pattern), key_type=cls.key_type
    )
    default = LockHolders(node_urls=cluster.node_urls, key_pattern=key_glob(key))
    try:
        lease = backend.acquire(key=key, ttl_ms=10_000)
        assert isinstance(lease, Lease)
        assert located.read() == [lease.owner, None, None, None, None]
        assert default.read() == [None] * 5  # the old "*<key>" GET finds nothing: every holders:K step skipped
        assert backend.release(lease)
        assert located.read() == [None] * 5
    finally:
        located.close()
        default.close()


def test_a_node_restart_finds_the_holder_of_a_hash_lock(tmp_path: Path) -> None:
    spec = manifest(tmp_path, "--hash", name="hashed", key='[key]\npattern = "{key}:h"\ntype = "hash"\n')
    with open_cluster() as cluster:
        result = _trial(spec, "node-restart", cluster, time_scale=0.5, rounds=4, fault_nodes=1)
    faults = [e for e in result.history if e["kind"] == "fault" and e["action"] in ("inject", "skipped")]
    injects = [e for e in faults if e["action"] == "inject"]
    assert injects, [e.get("reason") for e in faults]
    assert all(e["nodes"] == [0] and e["holders"][0] == e["lease_owner"] for e in injects)


# --- the shipped Node clients --------------------------------------------------------------------

NODE_MISSING = (
    "node is not installed"
    if shutil.which("node") is None
    else "clients/node/node_modules missing (npm ci --prefix clients/node)"
    if not (NODE_DIR / "node_modules" / "redis-semaphore").is_dir()
    else ""
)
needs_node = pytest.mark.skipif(bool(NODE_MISSING), reason=NODE_MISSING)


@needs_node
def test_node_redlock_runs_a_short_trial_exclusive(cluster: Cluster) -> None:
    result = _trial("node-redlock", "baseline", cluster, time_scale=0.5)  # ×0.1 leaves 70 ms: load decides
    assert result.metrics.verdict == "exclusive", result.metrics.problem
    assert result.metrics.acquires == 8
    starts = [e for e in result.history if e["kind"] == "client"]
    assert len(starts) == 2 and all(e["library"] == "redlock" and e["version"] == "4.2.0" for e in starts)
    # what its row records (issue 53): the packages as installed, and the runtime, from its hello
    ioredis = json.loads((NODE_DIR / "node_modules" / "ioredis" / "package.json").read_text())["version"]
    node = subprocess.run(["node", "--version"], capture_output=True, text=True, check=True).stdout.strip()
    recorded = client_versions(libraries=(), external=True, history=result.history)
    assert recorded == f"redlock 4.2.0; ioredis {ioredis}; node {node}"
    grants = [e for e in result.history if e["kind"] == "acquire" and e["ok"]]
    assert all(len(e["granted_by"]) >= 3 for e in grants)


@needs_node
def test_node_semaphore_mutex_refreshes_and_its_renewals_reach_the_history(cluster: Cluster) -> None:
    # Work 3 × the TTL: the lease survives only because the library refreshes it (every 0.8 × TTL).
    result = _trial("node-semaphore-mutex", "baseline", cluster, time_scale=1.0, rounds=2, ttl_ms=200, work_ms=600)
    assert result.metrics.verdict == "exclusive", result.metrics.problem
    renewals = [e for e in result.history if e["kind"] == "renew"]
    assert len(renewals) >= 4 and all(e["ok"] for e in renewals)
    assert result.metrics.writes_skipped == 0


@needs_node
def test_a_stopped_renewing_client_lets_its_lease_expire_and_cannot_release_the_successors(
    config: BackendConfig, key: str
) -> None:
    # The battery's "free again after the TTL" and "a release never deletes another owner's lock"
    # for a lock whose library keeps renewing: stop_renewal freezes the client (SIGSTOP) until its
    # next request.
    cls = load_backend("node-semaphore-mutex")
    first, second = cls(config=config), cls(config=config)
    try:
        lease = first.acquire(key=key, ttl_ms=400)
        assert isinstance(lease, Lease)
        first.stop_renewal(lease)  # type: ignore[attr-defined]
        time.sleep(0.7)
        successor = second.acquire(key=key, ttl_ms=5000)
        assert isinstance(successor, Lease)
        assert first.release(lease) is False  # its key is gone: whether it died of onLockLost or not
        assert isinstance(second.before_write(successor), Lease)  # type: ignore[attr-defined]
        assert second.release(successor) is True
    finally:
        first.close()
        second.close()


def test_bench_shows_the_librarys_time_and_the_hops_apart() -> None:
    from lockcompare.runner.bench import _row, render_bench

    external = _row("node-x", [3000_000, 4000_000], 0, 10_000_000, [2000_000, 2500_000])
    builtin = _row("single", [1000_000, 1000_000], 0, 10_000_000, [])
    assert (external.library_p50_us, external.hop_p50_us) == (2250.0, 1250.0)
    table = render_bench([builtin, external])
    assert "library p50 µs" in table and "hop p50 µs" in table
    assert "| n/a" in table.splitlines()[2].replace("  ", "")  # the built-in reports no library time


def test_shipped_clients_without_their_node_modules_are_skipped_with_one_shared_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copy = tmp_path / "node"
    copy.mkdir()
    for manifest_path in NODE_DIR.glob("*.toml"):
        shutil.copy(manifest_path, copy / manifest_path.name)
    monkeypatch.setenv("LOCKCOMPARE_CLIENTS_DIR", str(tmp_path))
    problems = {info.name: info.problem for info in describe_backends() if info.name.startswith("node-")}
    assert len(problems) == 5
    assert len(set(problems.values())) == 1  # one line skips them all (lockcompare matrix's default backends)
    assert "lockcompare clients install node" in next(iter(problems.values()))


@needs_node
def test_a_pause_freezes_the_node_client_too(cluster: Cluster) -> None:
    # client-pause at ×0.5: TTL 500 ms, the holder frozen 600 ms. The worker leads its process group
    # and the pause stops the group, so the Node client's refresh timer is frozen with it: no renewal
    # starts inside a pause, the key expires, and redis-semaphore's default onLockLost ends the client
    # when it thaws — so the holder's write is skipped (client-exited), as its process would have died.
    result = _trial("node-semaphore-mutex", "client-pause", cluster, time_scale=0.5, rounds=3)
    pauses = [(e["worker"], e["t0"], e["t1"]) for e in result.history if e["kind"] == "pause"]
    renewals = [e for e in result.history if e["kind"] == "renew" and e["ok"]]
    assert len(pauses) == 3
    inside = [r for r in renewals if any(w == r["worker"] and t0 < r["t0"] < t1 for w, t0, t1 in pauses)]
    assert inside == []
    exits = [e for e in result.history if e["kind"] == "client-exit"]
    assert exits and all(e["code"] == 1 and "LostLockError" in e["stderr"] for e in exits)
    skipped = [e for e in result.history if e["kind"] == "write-skipped"]
    # Usually the exit comes first; a check that beats it finds the lease past its deadline.
    assert len(skipped) == 3 and {e["reason"] for e in skipped} <= {"client-exited", "expired"}
