"""Roles and partitions between servers (issue 40) on real clusters: etcd x3 and ZooKeeper x3 over loopback.

What is checked: each role resolved from the servers themselves (one leader, the rest following);
the node a client is attached to found from its process's connections (holder-member); a leader
isolated from its peers replaced by a new one, a chosen minority cut off from the majority, and after
each heal one leader with every member following it; nothing left running (servers, peer proxies).
The pure parts (the syntax, the resolution, the sides) are checked on hand-built inputs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import pytest

from lockcompare.errors import BackendNotViableError, InvalidValueError
from lockcompare.faults.roles import holder_nodes
from lockcompare.faults.targets import resolve_role
from lockcompare.infra.cluster import Cluster
from lockcompare.infra.kinds import RoleKind, Roles
from lockcompare.infra.peerlinks import peer_links_of
from lockcompare.infra.sockets import parse_line
from lockcompare.scenario.faultkinds.isolate import Partition
from lockcompare.scenario.schedule import NodeTarget, parse_schedule

# --- pure ------------------------------------------------------------------------------------------


def test_role_targets_parse_and_print_back() -> None:
    for text in (
        "isolate nodes=leader after-acquire=50 once for=3000",
        "split nodes=holder-member after-acquire=50 once for=3000",
        "crash nodes=followers:2 after-acquire=50 once",
        "node-freeze nodes=primary after-acquire=0 once for=100",
    ):
        assert parse_schedule(text).text == text
    # split's side may be written minority= (the same nodes=), never both.
    assert parse_schedule("split minority=leader for=100") == parse_schedule("split nodes=leader for=100")
    with pytest.raises(InvalidValueError, match="nodes= and minority= name the same nodes"):
        parse_schedule("split nodes=0 minority=1 for=100")
    with pytest.raises(InvalidValueError, match="holder-member is read from a lease"):
        parse_schedule("isolate nodes=holder-member at=start for=100")


def test_roles_resolve_to_nodes_or_say_why_not() -> None:
    roles = Roles(leader=2, modes=("follower", "down", "leader"), term=4)
    assert resolve_role(NodeTarget("leader", count=1), roles=roles).nodes == (2,)
    assert resolve_role(NodeTarget("followers", count=1), roles=roles).nodes == (0,)
    assert "only 1 node(s)" in resolve_role(NodeTarget("followers", count=2), roles=roles).reason
    leaderless = Roles(leader=None, modes=("no leader", "no leader", "down"))
    assert "no node leads now" in resolve_role(NodeTarget("leader", count=1), roles=leaderless).reason
    assert resolve_role(NodeTarget("holder-member", count=1), roles=roles, holder_nodes=(1,)).nodes == (1,)
    assert (
        "connected to 0 nodes"
        in resolve_role(NodeTarget("holder-member", count=1), roles=roles, holder_nodes=()).reason
    )
    assert resolve_role(NodeTarget("leader", count=1), roles=None, why="x cannot").reason == "nodes=leader: x cannot"


def test_sides_of_isolate_and_split() -> None:
    assert Partition(split=False).sides([2, 0], 5) == [[0], [2], [1, 3, 4]]
    assert Partition(split=True).sides([2, 0], 5) == [[0, 2], [1, 3, 4]]


def test_proc_net_tcp_row() -> None:
    row = "   7: 0100007F:A2C3 0100007F:0CEA 06 00000000:00000000 03:00000F1C 00000000     0 0 0 3"
    socket = parse_line(row)
    assert socket is not None and (socket.local_port, socket.remote_port, socket.established) == (41667, 3306, False)
    assert parse_line("  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid") is None


# --- real clusters ---------------------------------------------------------------------------------


def _etcd() -> tuple[RoleKind, Callable[[], list]]:
    from lockcompare.infra.etcd.kind import ETCD
    from lockcompare.infra.etcd.server import find_etcd, start_members

    try:
        find_etcd()
    except BackendNotViableError as exc:
        pytest.skip(f"etcd not installed: {exc}")
    return ETCD, lambda: list(start_members(count=3))


def _zookeeper() -> tuple[RoleKind, Callable[[], list]]:
    from lockcompare.infra.zookeeper.kind import ZOOKEEPER
    from lockcompare.infra.zookeeper.server import find_zookeeper, start_servers

    try:
        find_zookeeper()
    except BackendNotViableError as exc:
        pytest.skip(f"ZooKeeper not available: {exc}")
    return ZOOKEEPER, lambda: list(start_servers(count=3))


@pytest.fixture(scope="module", params=["etcd", "zookeeper"])
def ensemble(request: pytest.FixtureRequest) -> Iterator[tuple[RoleKind, Cluster]]:
    """One ensemble per kind for the module (each start and stop costs seconds, a JVM ensemble's more
    under load): every test below leaves it whole — a partition test heals and waits for one leader
    with every member following — and each test first waits for it whole itself."""
    kind, start = _etcd() if request.param == "etcd" else _zookeeper()
    servers = start()
    cluster = Cluster(
        node_urls=tuple(s.url for s in servers), resource_url="", embedded=True, server_version="",
        servers=tuple(servers),
    )  # fmt: skip
    links = peer_links_of(cluster)
    pids = [s.pid for s in servers]
    try:
        yield kind, cluster
    finally:
        for server in servers:
            server.cleanup()
    # Nothing left running: every server process and the peer links' proxy process are gone.
    assert links is not None and not links.is_running()
    for pid in pids:
        assert pid is not None and not _alive(pid), f"server pid {pid} still runs"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _wait(kind: RoleKind, cluster: Cluster, test: Callable[[Roles], bool], *, within_s: float) -> Roles:
    deadline = time.monotonic() + within_s
    roles = kind.read_roles(cluster)
    while not test(roles) and time.monotonic() < deadline:
        time.sleep(0.1)
        roles = kind.read_roles(cluster)
    return roles


def _whole(roles: Roles) -> bool:
    return roles.leader is not None and sorted(roles.modes) == ["follower", "follower", "leader"]


def test_roles_are_read_from_the_servers(ensemble: tuple[RoleKind, Cluster]) -> None:
    kind, cluster = ensemble
    roles = _wait(kind, cluster, _whole, within_s=10)
    assert _whole(roles), roles
    assert roles.leader is not None
    assert resolve_role(NodeTarget("leader", count=1), roles=roles).nodes == (roles.leader,)
    followers = resolve_role(NodeTarget("followers", count=2), roles=roles).nodes
    assert sorted((*followers, roles.leader)) == [0, 1, 2]


def test_holder_member_is_the_node_a_client_is_connected_to(ensemble: tuple[RoleKind, Cluster]) -> None:
    kind, cluster = ensemble
    assert _whole(_wait(kind, cluster, _whole, within_s=10))  # every member serving, as on a fresh ensemble
    node = 2
    # The client in a process of its own, as a worker's is (the test process is the servers' parent:
    # their own connections would count as its descendants').
    client = subprocess.Popen(
        [sys.executable, "-c", _CLIENT, cluster.node_urls[node]],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert client.stdout is not None and client.stdout.readline().strip() == "ready"
        assert holder_nodes(cluster=cluster, worker=0, pids=(client.pid,), links=None) == ((node,), "")
    finally:
        client.kill()
        client.wait(timeout=10)


#: Connects to one server (argv[1]) and holds the connection open until killed.
_CLIENT = """
import sys, time
url = sys.argv[1]
if url.startswith("zk://"):
    from lockcompare.infra.zookeeper.client import kazoo_client_class
    zk = kazoo_client_class()(hosts=url.removeprefix("zk://"), timeout=5.0)
    zk.start(timeout=10)
else:
    from lockcompare.infra.etcd.client import EtcdClient
    client = EtcdClient(endpoints=(url,), timeout_s=2.0)
    client.call("/v3/kv/range", {"key": "eA=="})
print("ready", flush=True)
time.sleep(60)
"""


def test_an_isolated_leader_is_replaced_and_rejoins_after_the_heal(ensemble: tuple[RoleKind, Cluster]) -> None:
    kind, cluster = ensemble
    before = _wait(kind, cluster, _whole, within_s=10)
    assert before.leader is not None
    fault = Partition(split=False)
    _detail, fields = fault.inject(cluster, [before.leader])
    try:
        assert fields["sides"] == [[before.leader], [i for i in range(3) if i != before.leader]]
        during = _wait(kind, cluster, lambda r: r.leader not in (None, before.leader), within_s=15)
        assert during.leader not in (None, before.leader), during
        assert during.term > before.term, during  # elected anew (the old one may still claim its old term)
    finally:
        fault.heal(cluster, [before.leader])
    after = _wait(kind, cluster, _whole, within_s=30)
    assert _whole(after), after


def test_a_minority_cut_off_and_healed(ensemble: tuple[RoleKind, Cluster]) -> None:
    kind, cluster = ensemble
    before = _wait(kind, cluster, _whole, within_s=10)
    minority = next(i for i in range(3) if i != before.leader)
    fault = Partition(split=True)
    fault.inject(cluster, [minority])
    try:
        # The majority keeps its leader; the minority's member no longer follows one that serves it.
        during = _wait(kind, cluster, lambda r: r.modes[minority] != "follower", within_s=15)
        assert during.modes[minority] != "follower", during
        assert during.leader is not None and during.leader != minority
    finally:
        fault.heal(cluster, [minority])
    # A ZooKeeper member that looked for a leader while cut off doubles the wait between its election
    # notifications up to maxNotificationInterval (60 s by default): after the heal it may rejoin only
    # that long later (one CI run: still 'not serving' 30 s after the heal).
    after = _wait(kind, cluster, _whole, within_s=75)
    assert _whole(after), after


def test_cells_that_cannot_run_say_why_before_anything_starts() -> None:
    from lockcompare.runner.matrix import plan_matrix
    from lockcompare.scenario.parsing import Overrides

    def refusal(backend: str, experiment: str, **settings: object) -> str:
        with pytest.raises(InvalidValueError) as caught:
            plan_matrix(
                backends=[backend], experiments=[experiment], trials=1, overrides=Overrides(**settings),
                node_count=None, skip_unfit=False,
            )  # fmt: skip
        return str(caught.value)

    assert "no peer links to cut" in refusal("redlock", "holder-minority")
    assert "whole seconds" in refusal("etcd", "leader-isolated", time_scale=0.1)
