"""What the kinds declare decides how the runner routes servers (issue 50): the user's servers by
their kind's route, the battery's cluster by the kind's node count, the resource link by the
resource, the fixed node count by the kind's LockNodes read with faults/plan.py's rule. Pure: no
server starts (the URLs are parsed, never dialled)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lockcompare.errors import UnknownNameError
from lockcompare.evaluation.battery_base import PRIVATE_NODES, battery_cluster
from lockcompare.faults import plan as fault_plan
from lockcompare.infra.kinds import get_kind, protocols_spoken, registered, settings_taken
from lockcompare.protocols import DEFAULT_PROTOCOL, POSTGRES_PROTOCOL
from lockcompare.runner.lock_servers import lock_servers_from
from lockcompare.runner.resource import registered_resources, resource_speaking
from lockcompare.scenario.choices import RESOURCE_KINDS
from lockcompare.scenario.experiments import get_experiment
from lockcompare.scenario.parsing import Overrides
from lockcompare.scenario.schedule import parse_schedule
from lockcompare.scenario.settings import SETTINGS_LIST
from lockcompare.scenario.trialspec import make_spec

REDIS_URLS = ("redis://127.0.0.1:7001", "redis://127.0.0.1:7002")
PG_URL = "postgresql://lc@127.0.0.1:5432/lc"
ZK_URL = "zk://127.0.0.1:2181"


def test_the_resource_choices_are_the_installed_resources() -> None:
    """--resource-kind's choices (a value list for the pure settings table) name every resource the
    runner loads and nothing else, after "auto" and the default protocol."""
    assert RESOURCE_KINDS[:2] == ("auto", DEFAULT_PROTOCOL)
    assert sorted(RESOURCE_KINDS[1:]) == sorted(registered_resources())


#: A check run in a fresh interpreter (the choices are read once, at import): the settings table's
#: choices, and whether --resource-kind takes the plug-in's protocol.
_CHOICES = """
from lockcompare.scenario.parsing import setting_for_flag, _convert
setting = setting_for_flag("--resource-kind")
print(",".join(setting.choices), _convert(setting, "memcached"))
"""


def test_a_plug_in_resource_is_a_choice_without_an_edit_and_without_being_loaded(tmp_path: Path) -> None:
    """A distribution that declares a resource under ``lockcompare.resources`` (a dist-info directory
    on the path is what installing it does for importlib.metadata) is one of --resource-kind's
    choices. Its module does not exist: the choices are the registry's names, nothing is loaded."""
    info = tmp_path / "lockcompare_memcached-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: lockcompare-memcached\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[lockcompare.resources]\nmemcached = lockcompare_memcached_absent:Nothing\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run(
        [sys.executable, "-c", _CHOICES], capture_output=True, text=True, env=env, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["auto,redis,memcached,postgres", "memcached"]


def test_a_fault_on_the_resource_link_asks_the_resource_whether_its_link_is_proxied() -> None:
    assert resource_speaking("redis").link_proxied is True
    assert resource_speaking("postgres").link_proxied is False
    with pytest.raises(UnknownNameError, match="no installed resource lives on tinylock servers"):
        resource_speaking("tinylock")


def test_the_users_servers_are_routed_by_their_kinds_declared_route() -> None:
    servers = lock_servers_from(texts=[f"redis={','.join(REDIS_URLS)}", f"postgres={PG_URL}", f"zookeeper={ZK_URL}"])
    # Redis-protocol nodes are shared by every trial; PostgreSQL serves beside them; a ZooKeeper
    # ensemble is the lock nodes of the pool's clusters of its protocol, and only of those.
    assert servers.shared() == REDIS_URLS
    assert servers.beside_shared() == (PG_URL,)
    assert servers.pooled("zookeeper") == (ZK_URL,)
    assert servers.pooled("redis") is None and servers.pooled("postgres") is None
    assert servers.by_alias("--nodes") == REDIS_URLS and servers.by_alias("--zookeeper") == (ZK_URL,)
    alone = lock_servers_from(texts=[f"zookeeper={ZK_URL}"])
    assert alone.shared() is None and alone.beside_shared() is None


def test_every_installed_kinds_protocol_may_be_a_manifests_servers() -> None:
    assert set(protocols_spoken()) == {kind.speaks for kind in registered().values()}
    assert DEFAULT_PROTOCOL in protocols_spoken()


def test_the_battery_cluster_is_the_kinds_own_where_it_fixes_the_count() -> None:
    assert battery_cluster("redis") == ("redis", PRIVATE_NODES)
    assert battery_cluster("etcd") == ("etcd", 1)
    # Sentinel-managed pairs: the battery's private clusters are plain nodes (its backends are the plain ones).
    assert battery_cluster("sentinel") == (DEFAULT_PROTOCOL, PRIVATE_NODES)
    assert battery_cluster("nonesuch") == (DEFAULT_PROTOCOL, PRIVATE_NODES)
    assert battery_cluster(None) == (DEFAULT_PROTOCOL, PRIVATE_NODES)


@pytest.mark.parametrize(
    ("schedule", "servers"),
    [
        ("", 1),
        ("pause worker=0 after-acquire=0 every for=1200; session-kill worker=holder after-acquire=50 every", 1),
        ("restart nodes=0 after-acquire=50 once", 1),  # the server restart: the standalone server
        ("restart nodes=1 after-acquire=50 once", 3),
        ("restart nodes=holders:1 after-acquire=50 every", 3),
        ("crash nodes=0 after-acquire=50 once", 3),  # the leader crash
        ("cut nodes=all worker=holder after-acquire=50 every for=2000", 3),
    ],
)
def test_an_ensemble_only_where_a_step_faults_more_than_the_one_server(schedule: str, servers: int) -> None:
    """The ZooKeeper kind's LockNodes (one standalone server, restarted in place; three under faults)
    read with faults/plan.py's rule, as runner/plan.py cluster_shape reads them."""
    parsed = parse_schedule(schedule)
    lock_nodes = get_kind("zookeeper").capabilities.lock_nodes
    count = lock_nodes.count(asked=None, run=5, struck=fault_plan.touches_servers(parsed),
                             restarts_node_0_only=fault_plan.restarts_node_0_only(parsed))  # fmt: skip
    assert count == servers


def test_a_setting_the_servers_take_applies_where_their_kind_declares_it() -> None:
    """--idle-session-timeout-ms acts on PostgreSQL's lock sessions: the postgres kind declares it
    (its capabilities' ``settings``), the runner hands a trial the settings its kind takes, and the
    settings table applies the setting only where they name it (it names no protocol itself)."""
    assert settings_taken(POSTGRES_PROTOCOL) == {"idle_session_timeout_ms"}
    assert settings_taken(DEFAULT_PROTOCOL) == frozenset()
    assert settings_taken("no-such-protocol") == frozenset()

    def timeout_ms(taken: frozenset[str]) -> float:
        return make_spec(
            backend="pg-advisory", experiment=get_experiment("partition"), trial=0,
            overrides=Overrides(idle_session_timeout_ms=100, time_scale=0.5), lock_servers=POSTGRES_PROTOCOL,
            server_settings=taken,
        ).idle_session_timeout_ms  # fmt: skip

    assert timeout_ms(settings_taken(POSTGRES_PROTOCOL)) == 50.0  # taken, and scaled
    assert timeout_ms(frozenset()) == 0.0  # the same protocol, a kind that does not take it: neutral


def test_the_settings_the_kinds_declare_are_the_ones_the_table_lets_servers_take() -> None:
    """Both ways: a kind declares only settings the table marks ``taken_by_servers`` (another would
    never apply), and each such setting is taken by some installed kind (else it never would)."""
    declared = {name for kind in registered().values() for name in kind.capabilities.settings}
    assert declared == {setting.name for setting in SETTINGS_LIST if setting.taken_by_servers}
