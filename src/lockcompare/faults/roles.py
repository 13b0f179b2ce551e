"""Role-aimed steps: ask the servers' kind who leads, and find the holder's member.

``nodes=leader`` / ``followers:K`` read the roles from the lock servers' kind (infra/kinds.py
``RoleKind.read_roles``: etcd's member status, ZooKeeper's ``srvr``, a replicated server's
primary) ahead of the step, from when the acquire that makes it due is reported (faults/aim.py),
and again right after its heal — so the history says who led
when the fault struck and who leads when it ends (faults/schedule.py puts both in the events as
``roles``). ``holder-member`` is the node the current holder's client is connected to: the
remote ports of the holder worker's established connections (infra/sockets.py), matched against
the lock nodes' ports and, where the workers go through proxied links, that worker's links.
A role that cannot be read is a skipped step with the reason, never a guess.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lockcompare.faults.targets import Resolution, resolve_role
from lockcompare.infra.kinds import RoleKind, Roles, get_kind
from lockcompare.infra.proxy import port_of
from lockcompare.infra.sockets import remote_ports
from lockcompare.scenario.schedule import HOLDER_MEMBER, NodeTarget

if TYPE_CHECKING:
    from lockcompare.infra.cluster import Cluster
    from lockcompare.infra.kinds import ServerKind
    from lockcompare.infra.proxy import ProxySet


def kind_of(cluster: Cluster) -> ServerKind:
    if cluster.shape is not None:
        return get_kind(cluster.shape.lock_servers)
    return cluster.kind_of(cluster.node_urls[0])


def read_roles(cluster: Cluster) -> tuple[Roles | None, str]:
    """The roles now, or (None, why not)."""
    kind = kind_of(cluster)
    if not isinstance(kind, RoleKind):
        return None, f"{kind.name} servers do not say which node leads"
    return kind.read_roles(cluster), ""


def holder_nodes(
    *, cluster: Cluster, worker: int | None, pids: tuple[int, ...], links: ProxySet | None
) -> tuple[tuple[int, ...] | None, str]:
    """The lock nodes the worker ``worker``'s process has connections to, or (None, why not)."""
    if worker is None:
        return None, "no lease reported yet"
    if worker >= len(pids):
        return None, f"worker {worker}'s process is not known"
    ports = {port_of(url): i for i, url in enumerate(cluster.node_urls)}
    if links is not None and links.is_running():
        for node in range(len(links.node_ports)):
            link = links.proxy(worker=worker, node=node)
            if link.port is not None:
                ports[link.port] = node
    connected = remote_ports(pids[worker])
    return tuple(sorted({node for port, node in ports.items() if port in connected})), ""


def aim_by_role(
    target: NodeTarget,
    *,
    cluster: Cluster,
    worker: int | None,
    pids: tuple[int, ...],
    links: ProxySet | None,
) -> Resolution:
    """The nodes ``target`` (a role) names now; the reading goes into the event (Resolution.roles)."""
    roles, why = read_roles(cluster)
    if target.mode != HOLDER_MEMBER or roles is None:
        return resolve_role(target, roles=roles, why=why)
    nodes, why = holder_nodes(cluster=cluster, worker=worker, pids=pids, links=links)
    resolution = resolve_role(target, roles=roles, holder_nodes=nodes, why=why)
    if resolution.roles is not None and worker is not None:
        resolution.roles["holder_worker"] = worker
    return resolution


def roles_now(cluster: Cluster) -> dict[str, object]:
    """What a heal event records as ``roles``: who leads as the fault ends ({} when unreadable)."""
    roles, _ = read_roles(cluster)
    return roles.as_event() if roles is not None else {}
