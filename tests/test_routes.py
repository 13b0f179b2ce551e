"""What the kinds declare decides how the runner routes servers (issue 50): the user's servers by
their kind's route, the battery's cluster by the kind's node count, the resource link by the
resource, the fixed node count by the kind's LockNodes read with faults/plan.py's rule. Pure: no
server starts (the URLs are parsed, never dialled)."""

from __future__ import annotations

import pytest

from lockcompare.errors import UnknownNameError
from lockcompare.evaluation.battery_base import PRIVATE_NODES, battery_cluster
from lockcompare.faults import plan as fault_plan
from lockcompare.infra.kinds import get_kind, protocols_spoken, registered
from lockcompare.protocols import DEFAULT_PROTOCOL, RESOURCE_PROTOCOLS
from lockcompare.runner.lock_servers import lock_servers_from
from lockcompare.runner.resource import registered_resources, resource_speaking
from lockcompare.scenario.schedule import parse_schedule

REDIS_URLS = ("redis://127.0.0.1:7001", "redis://127.0.0.1:7002")
PG_URL = "postgresql://lc@127.0.0.1:5432/lc"
ZK_URL = "zk://127.0.0.1:2181"


def test_the_resource_choices_are_the_installed_resources() -> None:
    """--resource-kind's choices (a value list for the pure settings table) name every installed
    resource and nothing else."""
    assert sorted(RESOURCE_PROTOCOLS) == sorted(registered_resources())


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
