"""Node health around every trial: no trial runs silently on fewer servers than it claims.

Before a trial every lock node the backend uses and the resource must answer PING. An embedded
cluster restarts a node that died (on its own port, empty) and says so; an external cluster cannot
be repaired, so the run stops with one line naming the node. After the trial the same check tells
a node that died *during* the trial — the runner then judges that trial ``unknown``, since its
numbers describe a broken cluster, not the lock.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from lockcompare.errors import LockcompareError, NodeUnreachableError
from lockcompare.infra.cluster import Cluster
from lockcompare.infra.kinds import kind_of_url
from lockcompare.redaction import redact

log = logging.getLogger("lockcompare")

_PING_TIMEOUT_S = 0.5


def answers(url: str, *, cluster: Cluster | None = None) -> bool:
    """Whether the server at ``url`` answers, as its kind asks it (PING, etcd's /health, a query);
    ``cluster``: the one it belongs to, whose kinds are asked about their own servers."""
    kind = cluster.kind_of(url) if cluster is not None else kind_of_url(url)
    return kind.answers(url, timeout_s=_PING_TIMEOUT_S)


def used_nodes(cluster: Cluster, node_count: int | None) -> range:
    return range(len(cluster.node_urls) if node_count is None else min(node_count, len(cluster.node_urls)))


def dead_nodes(
    cluster: Cluster, *, node_count: int | None, expected_down: Sequence[int] = (), settle_s: float = 0.0
) -> list[int]:
    """Indices of the used lock nodes that do not answer (``-1`` stands for the resource).

    ``settle_s``: how long a silent server may take to answer again before it counts as dead. A
    consensus member that rejoins after a partition healed (a ZooKeeper follower "not serving"
    through its re-election, 1-3 s) is alive; judging it dead at once made such trials ``unknown``
    ("lock node 1 died during the trial") in the holder-minority cells."""
    urls = {i: cluster.node_urls[i] for i in used_nodes(cluster, node_count) if i not in expected_down}
    urls[-1] = cluster.resource_url
    silent = [i for i, url in urls.items() if not answers(url, cluster=cluster)]
    deadline = time.monotonic() + settle_s
    while silent and time.monotonic() < deadline:
        time.sleep(0.2)
        silent = [i for i in silent if not answers(urls[i], cluster=cluster)]
    return sorted(i for i in silent if i >= 0) + ([-1] if -1 in silent else [])


def describe_dead(cluster: Cluster, dead: Sequence[int]) -> str:
    names = [
        "the resource" + f" ({redact(cluster.resource_url)})"
        if i < 0
        else f"lock node {i} ({redact(cluster.node_urls[i])})"
        for i in dead
    ]
    return " and ".join(names)


def prepare(cluster: Cluster, *, node_count: int | None) -> int:
    """Make sure every used lock node and the resource answer; return how many lock nodes do.

    Embedded: a dead server is restarted (empty, same port) and logged. External: raises
    :class:`NodeUnreachableError` naming the node (its password redacted).
    """
    dead = dead_nodes(cluster, node_count=node_count)
    if not dead:
        return len(used_nodes(cluster, node_count))
    if not cluster.embedded:
        raise NodeUnreachableError(f"{describe_dead(cluster, dead)} does not answer; the run stops")
    for index in dead:
        server = cluster.resource_server if index < 0 else cluster.node_server(index)
        if server is None:
            raise NodeUnreachableError(f"{describe_dead(cluster, [index])} does not answer; the run stops")
        server.crash()  # reap whatever is left of it
        try:
            server.start()
        except LockcompareError as exc:
            raise NodeUnreachableError(
                f"{describe_dead(cluster, [index])} was down and did not restart: {exc}"
            ) from None
        log.warning("%s was down before the trial: restarted it (empty)", describe_dead(cluster, [index]))
    still = dead_nodes(cluster, node_count=node_count)
    if still:
        raise NodeUnreachableError(f"{describe_dead(cluster, still)} does not answer after a restart; the run stops")
    return len(used_nodes(cluster, node_count))
