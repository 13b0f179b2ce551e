"""The conformance battery run whole (``evaluate``'s first source): every property of
:mod:`lockcompare.evaluation.conformance` against one backend, on the servers it is run on — the
user's, or an embedded cluster started and stopped here — with the node-loss properties' private
clusters built in the background meanwhile (battery_base.py)."""

from __future__ import annotations

import contextlib
from pathlib import Path

from lockcompare.errors import BackendError
from lockcompare.evaluation.battery_base import (
    CALL_TIMEOUT_S,
    BatteryContext,
    PropertyResult,
    battery_cluster,
    prestarted_private_clusters,
)
from lockcompare.evaluation.conformance import PROPERTIES, battery, check_property
from lockcompare.infra.cluster import open_cluster
from lockcompare.protocols import DEFAULT_PROTOCOL
from lockcompare.runner.lock_servers import NO_LOCK_SERVERS, LockServers


def run_battery(
    *,
    spec: str,
    call_timeout_s: float = CALL_TIMEOUT_S,
    redis_server: str | None = None,
    lock_servers: LockServers = NO_LOCK_SERVERS,
    history_dir: Path | None = None,
) -> list[PropertyResult]:
    """Every property against ``spec``, on embedded clusters started (and stopped) here; with
    ``history_dir``, each check's history is saved there (``<property>.jsonl.gz``).

    ``lock_servers``: the user's servers (``--lock-servers``, runner/lock_servers.py). Where they
    include servers of the backend's own protocol (``--postgres URL``: a PostgreSQL server), the
    battery runs on them — the deployment as it is, a pooler in front included; the node-loss
    properties still crash servers of a private embedded cluster. The shared Redis-protocol nodes
    (``--nodes``) are the experiments' cluster, not the battery's.
    """
    with (
        battery(spec=spec, node_urls=(), call_timeout_s=call_timeout_s) as ctx,
    ):
        ctx.history_dir = history_dir
        try:
            servers = ctx.claims.servers
        except BackendError:
            servers = DEFAULT_PROTOCOL  # the properties report why the backend cannot be used
        kind, node_count = battery_cluster(servers)
        users = lock_servers.own(kind)  # the user's servers of that protocol, if given
        with contextlib.ExitStack() as stack:
            if users is not None:
                ctx.node_urls = users
            else:
                cluster = stack.enter_context(
                    open_cluster(redis_server=redis_server, node_count=node_count, lock_servers=kind)
                )
                ctx.node_urls = cluster.node_urls
            # The node-loss properties' clusters start in the background meanwhile (battery_base.py).
            ctx.private_cluster = stack.enter_context(
                prestarted_private_clusters(servers, expected=_private_clusters_wanted(ctx), redis_server=redis_server)
            )
            return [check_property(prop, ctx) for prop in PROPERTIES]


def _private_clusters_wanted(ctx: BatteryContext) -> int:
    """How many private clusters the node-loss properties will open: one for each whose claim the
    backend makes (refuses_without_a_quorum: exclusive; survives_the_loss_of_a_minority:
    survives_minority_loss); none when its claims cannot be read (the properties say why)."""
    try:
        claims = ctx.claims
    except BackendError:
        return 0
    return int(claims.exclusive is True) + int(claims.survives_minority_loss is True)
