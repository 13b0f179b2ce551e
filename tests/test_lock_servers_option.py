"""--lock-servers KIND=URL,...: one option for the user's lock servers of any kind; --nodes,
--postgres and --zookeeper are its aliases (the same value, the same refusals, the same runs)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from expect import error_lines
from lockcompare.analysis.results import read_results
from lockcompare.cli import app
from lockcompare.cli.options import _cluster_options, server_args
from lockcompare.errors import BackendNotViableError, ConfigError, InvalidValueError
from lockcompare.infra.cluster import Cluster
from lockcompare.infra.kinds import registered
from lockcompare.infra.redis.client import connect
from lockcompare.runner.lock_servers import lock_servers_from
from lockcompare.runner.plan import ClusterOptions, check_faults, plan_matrix
from lockcompare.scenario.parsing import Overrides
from lockcompare.scenario.trialspec import TrialSpec

NODES = "redis://127.0.0.1:7001/0,redis://127.0.0.1:7002/0,redis://127.0.0.1:7003/0"


def options(**given: object) -> ClusterOptions:
    args: dict[str, object] = {"nodes": None, "resource": None, "redis_server": None, "redlock_nodes": None}
    return _cluster_options(**(args | given))  # type: ignore[arg-type]


def one_line_refusal(args: list[str]) -> str:
    result = CliRunner().invoke(app, args)
    lines = error_lines(result.stderr)  # without the "skipping <optional backend>" notes
    assert result.exit_code == 2 and len(lines) == 1, (result.exit_code, result.stderr)
    return lines[0]


# --- the aliases give the same value -------------------------------------------------------------


def test_nodes_is_an_alias_of_lock_servers_of_a_redis_protocol_kind(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCKCOMPARE_REDIS_PASSWORD", "s3cret")  # completed the same way either way
    resource = "redis://127.0.0.1:7000/0"
    by_alias = options(nodes=NODES, resource=resource)
    assert by_alias == options(lock_servers=[f"redis={NODES}"], resource=resource)
    # valkey speaks the same protocol: its servers are the same lock nodes
    assert by_alias == options(lock_servers=[f"valkey={NODES}"], resource=resource)
    assert by_alias.lock_servers.shared() == tuple(u.replace("//", "//:s3cret@") for u in NODES.split(","))
    assert by_alias.external


def test_nodes_file_is_the_same_value(tmp_path: Path) -> None:
    listed = tmp_path / "nodes.txt"
    listed.write_text("\n".join(NODES.split(",")) + "\nresource=redis://127.0.0.1:7000/0\n")
    assert options(nodes_file=listed) == options(lock_servers=[f"redis={NODES}"], resource="redis://127.0.0.1:7000/0")


def test_postgres_and_zookeeper_are_aliases_too() -> None:
    keywords = "host=127.0.0.1 port=5432 user=u dbname=d"  # --postgres also takes a libpq keyword string
    url = "postgresql://u@127.0.0.1:5432/d"
    assert options(postgres=keywords) == options(lock_servers=[f"postgres={url}"])
    assert options(postgres=url).lock_servers.urls_for("postgres") == (url,)
    ensemble = options(zookeeper="127.0.0.1:2181, 127.0.0.1:2182")
    assert ensemble == options(lock_servers=["zookeeper=zk://127.0.0.1:2181,zk://127.0.0.1:2182"])
    # Two kinds at once, in any order: one value.
    both = options(zookeeper="127.0.0.1:2181", postgres=url)
    assert both == options(lock_servers=["zookeeper=zk://127.0.0.1:2181", f"postgres={url}"])
    assert both == options(lock_servers=[f"postgres={url}", "zookeeper=zk://127.0.0.1:2181"])
    assert not options().external


def test_the_constructor_aliases_fold_into_the_one_value() -> None:
    url = "postgresql://u@127.0.0.1:5432/d"
    assert ClusterOptions(postgres=url) == ClusterOptions(lock_servers=lock_servers_from(texts=[f"postgres={url}"]))
    folded = ClusterOptions(zookeeper=("zk://127.0.0.1:2181",))
    assert folded.lock_servers.urls_for("zookeeper") == ("zk://127.0.0.1:2181",) and folded.nodes is None


def test_a_printed_command_carries_the_lock_servers_as_typed_without_a_password() -> None:
    given = ["postgres=postgresql://u:s3cret@127.0.0.1/d", "zookeeper=zk://127.0.0.1:2181"]
    args = server_args(nodes=None, nodes_file=None, resource=None, postgres=None, redis_server=None, lock_servers=given)
    assert args == ("--lock-servers", "postgres=postgresql://u:***@127.0.0.1/d", "--lock-servers", given[1])


# --- bad input: one line, exit 2 ------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, fragment",
    [
        ("nope=redis://127.0.0.1:1", "--lock-servers: unknown server kind 'nope' (known: "),
        ("redis=postgresql://u@127.0.0.1/db", "is not a redis server's URL: a postgres server's URL"),
        ("postgres=zk://127.0.0.1:2181", "is not a postgres server's URL: a zookeeper server's URL"),
        ("zookeeper=127.0.0.1:2181", "'127.0.0.1:2181' is not a zookeeper server's URL"),
        ("", "--lock-servers takes KIND=URL[,URL...]"),
        ("redis", "--lock-servers takes KIND=URL[,URL...]"),
        ("redis=", "--lock-servers redis=: no URL given"),
        ("redis= , ", "--lock-servers redis=: no URL given"),
        ("etcd=http://127.0.0.1:2379", "lockcompare starts etcd lock servers itself"),
        ("postgres=postgresql://a@h/d,postgresql://b@h/d", "one postgres server"),
        ("zookeeper=zk://u:s3cret@127.0.0.1:1", "--lock-servers zookeeper takes HOST:PORT,... without a user"),
        ("redis=postgresql://u:s3cret@127.0.0.1/db", "is not a redis server's URL"),
        ("redis=redis://:s3cret@127.0.0.1:1,redis://:s3cret@127.0.0.1:1", "is listed twice"),
    ],
)
def test_bad_lock_servers_are_refused_in_one_line(value: str, fragment: str, tmp_path: Path) -> None:
    line = one_line_refusal(["matrix", "--backends", "single", "--lock-servers", value, "--out", str(tmp_path / "o")])
    assert fragment in line, line
    assert "s3cret" not in line  # a password typed into a URL is never printed
    assert not (tmp_path / "o").exists()


def test_an_unknown_kind_lists_every_registered_kind() -> None:
    line = one_line_refusal(["run", "--lock-servers", "nope=redis://127.0.0.1:1"])
    assert line.endswith(f"(known: {', '.join(registered())})")


def test_the_same_servers_given_twice_are_refused() -> None:
    line = one_line_refusal(
        ["run", "--nodes", "redis://127.0.0.1:1", "--lock-servers", "valkey=redis://127.0.0.1:2",
         "--resource", "redis://127.0.0.1:3"]
    )  # fmt: skip
    assert "redis-protocol lock servers are given already" in line
    with pytest.raises(InvalidValueError, match="given already"):
        ClusterOptions(postgres="postgresql://a@h/d", lock_servers=lock_servers_from(postgres="postgresql://b@h/d"))


# --- the plan asks the one option -----------------------------------------------------------------


def plan(backend: str, experiment: str = "baseline", **overrides: Any) -> list[TrialSpec]:
    return plan_matrix(
        backends=[backend], experiments=[experiment], trials=1, overrides=Overrides(**overrides), node_count=None
    )


#: A server fault that every kind can take (node 0: no lease holders to read).
RESTART = "restart nodes=0 after-acquire=50 every for=0"


@pytest.mark.parametrize("alias", [True, False])
def test_check_faults_refuses_the_same_through_either_spelling(alias: bool) -> None:
    url = "postgresql://u@127.0.0.1:5432/d"

    def given(**servers: str) -> ClusterOptions:
        if alias:
            return options(resource="redis://127.0.0.1:7000/0" if "nodes" in servers else None, **servers)
        kinds = {"nodes": "redis", "postgres": "postgres", "zookeeper": "zookeeper"}
        texts = [f"{kinds[k]}={'zk://' + v if k == 'zookeeper' else v}" for k, v in servers.items()]
        return options(resource="redis://127.0.0.1:7000/0" if "nodes" in servers else None, lock_servers=texts)

    with pytest.raises(ConfigError, match="runs on etcd servers that lockcompare starts: drop --nodes/--resource"):
        check_faults(plan("etcd"), cluster_options=given(nodes=NODES))
    with pytest.raises(ConfigError, match="runs on zookeeper servers that lockcompare starts"):
        check_faults(plan("zk-lock"), cluster_options=given(nodes=NODES, zookeeper="127.0.0.1:2181"))
    with pytest.raises(ConfigError, match="give --postgres URL"):
        check_faults(plan("pg-lease"), cluster_options=given(nodes=NODES))
    check_faults(plan("pg-lease"), cluster_options=given(nodes=NODES, postgres=url))  # beside the shared nodes
    with pytest.raises(ConfigError, match=r"needs the embedded one.*not --postgres"):
        check_faults(plan("pg-lease", faults=RESTART), cluster_options=given(postgres=url))
    with pytest.raises(ConfigError, match=r"needs the embedded one.*not --zookeeper"):
        check_faults(plan("zk-lock", faults=RESTART), cluster_options=given(zookeeper="127.0.0.1:2181"))
    with pytest.raises(ConfigError, match="failover needs lock nodes with replicas"):
        check_faults(plan("single", "failover"), cluster_options=given(nodes=NODES))
    with pytest.raises(ConfigError, match="needs the embedded cluster, not --nodes/--resource"):
        check_faults(plan("single", "node-restart"), cluster_options=given(nodes=NODES))
    check_faults(plan("zk-lock", "client-pause"), cluster_options=given(zookeeper="127.0.0.1:2181"))


# --- a real run on the user's servers --------------------------------------------------------------


def test_a_run_on_lock_servers_is_the_run_on_nodes(cluster: Cluster, tmp_path: Path) -> None:
    """The session cluster plays the user's servers; the same trial through either spelling: the
    same trial id, both recorded as external, only the trial's own keys touched."""
    ids: list[str] = []
    for servers in (
        ["--nodes", ",".join(cluster.node_urls)],
        ["--lock-servers", "redis=" + ",".join(cluster.node_urls)],
    ):
        out = tmp_path / f"{len(ids)}.csv"
        result = CliRunner().invoke(
            app,
            ["run", "--backend", "single", "--rounds", "3", "--time-scale", "0.1", *servers,
             "--resource", cluster.resource_url, "--out", str(out)],
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        (row,) = read_results(out)
        assert row["cluster"] == "external"
        ids.append(row["trial_id"])
    assert ids[0] == ids[1]
    for url in (*cluster.node_urls, cluster.resource_url):
        assert list(connect(url).scan_iter("lockcompare:*")) == []


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    """One PostgreSQL server started here, playing the user's (skipped without PostgreSQL)."""
    try:
        from lockcompare.infra.postgres.server import find_postgres_bin, start_postgres

        find_postgres_bin()
        import psycopg  # noqa: F401 - the client the backends need
    except (BackendNotViableError, ImportError) as exc:
        pytest.skip(f"PostgreSQL not installed: {exc}")
    server = start_postgres(name="lock-servers")
    try:
        yield server.url
    finally:
        server.cleanup()


def test_a_run_on_postgres_lock_servers_is_the_run_on_postgres(postgres_url: str, tmp_path: Path) -> None:
    ids: list[tuple[str, str, str]] = []
    for servers in (["--postgres", postgres_url], ["--lock-servers", f"postgres={postgres_url}"]):
        out = tmp_path / f"{len(ids)}.csv"
        result = CliRunner().invoke(
            app,
            ["run", "--backend", "pg-lease", "--rounds", "3", "--time-scale", "0.2", *servers, "--out", str(out)],
        )
        assert result.exit_code == 0, result.output
        (row,) = read_results(out)
        ids.append((row["trial_id"], row["cluster"], row["lock_servers"]))
    assert ids[0] == ids[1]
    # a server fault needs servers lockcompare started, whichever spelling named the user's
    line = one_line_refusal(
        ["run", "--backend", "pg-lease", "--faults", RESTART, "--lock-servers", f"postgres={postgres_url}"]
    )
    assert "needs the embedded ones, not --postgres" in line


def test_a_run_on_zookeeper_lock_servers_is_the_run_on_zookeeper(tmp_path: Path) -> None:
    try:
        from lockcompare.infra.zookeeper.client import kazoo_client_class
        from lockcompare.infra.zookeeper.server import find_zookeeper, start_servers

        find_zookeeper()
        kazoo_client_class()
    except BackendNotViableError as exc:
        pytest.skip(f"ZooKeeper not available: {exc}")
    (server,) = start_servers(count=1)  # the user's server: this run did not start it
    try:
        host_port = server.url.removeprefix("zk://")
        ids: list[tuple[str, str]] = []
        for servers in (["--zookeeper", host_port], ["--lock-servers", f"zookeeper={server.url}"]):
            out = tmp_path / f"{len(ids)}.csv"
            result = CliRunner().invoke(
                app,
                ["run", "--backend", "zk-lock", "--rounds", "2", "--time-scale", "0.5", *servers, "--out", str(out)],
            )
            assert result.exit_code == 0, result.output
            (row,) = read_results(out)
            ids.append((row["trial_id"], row["lock_servers"]))
        assert ids[0] == ids[1]
        line = one_line_refusal(
            ["run", "--backend", "zk-lock", "--experiment", "node-restart", "--lock-servers", f"zookeeper={server.url}"]
        )
        assert "needs the embedded ones, not --zookeeper" in line
    finally:
        server.cleanup()
