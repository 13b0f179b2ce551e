"""Whom a fault step hits, resolved at injection time from the lease the nodes actually hold.

Pure: given what the runner just read on every lock node (faults/holders.py: per node the owner
token of the trial's lock key, ``None`` free, ``"?"`` unreadable) and which worker's acquire
returned which owner, these functions say which nodes or which worker a step means — or why it
cannot be resolved, in which case the runner records the step as ``skipped`` and aims it nowhere
else (the old harness hit nodes 0..K-1, which after a restart were often not the holder's: the
next fan-out found node 0's old socket dead and the lease was granted without it).

The *current lease* is the owner found on the most readable nodes (a Redlock holder has a majority;
a stale key a restart left behind is on fewer); on a tie the followed worker's latest owner wins,
then the lowest node. ``holders:K`` takes the K lowest-numbered nodes holding it, ``others:K`` the K
lowest readable nodes not holding it. Lowest-numbered rather than random: the same lease gives the
same target, so a trial can be re-read from its history.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from lockcompare.analysis.holders import UNREADABLE
from lockcompare.spec.schedule import NodeTarget, WorkerTarget


@dataclass(frozen=True)
class Resolution:
    """The step's targets, or ``reason`` (non-empty) why it has none."""

    nodes: tuple[int, ...] = ()
    worker: int | None = None
    lease_owner: str | None = None
    reason: str = ""


def current_owner(holders: Sequence[str | None], *, preferred: str | None = None) -> str | None:
    """The owner on the most readable nodes (ties: ``preferred``, then the lowest node); None: no lease."""
    owners = [v for v in holders if v is not None and v != UNREADABLE]
    if not owners:
        return None
    best = max(owners.count(v) for v in owners)
    tied = [v for v in owners if owners.count(v) == best]
    return preferred if preferred in tied else tied[0]


def resolve_nodes(
    target: NodeTarget,
    *,
    node_count: int,
    holders: Sequence[str | None] | None,
    preferred_owner: str | None = None,
) -> Resolution:
    """The nodes ``target`` means now. ``holders`` None: the nodes could not be read at all."""
    if target.mode == "all":
        return Resolution(nodes=tuple(range(node_count)))
    if target.mode == "fixed":
        missing = [i for i in target.indices if i >= node_count]
        if missing:
            return Resolution(reason=f"node {missing[0]} does not exist ({node_count} lock nodes)")
        return Resolution(nodes=target.indices)
    if holders is None:
        return Resolution(reason=f"nodes={target.text}: the lock nodes cannot be read here")
    owner = current_owner(holders, preferred=preferred_owner)
    if owner is None:
        return Resolution(reason=f"nodes={target.text}: no lease on any node")
    if target.mode == "holders":
        matching = [i for i, v in enumerate(holders) if v == owner]
        what = "holding the current lease"
    else:
        matching = [i for i, v in enumerate(holders) if v not in (owner, UNREADABLE)]
        what = "readable and not holding the current lease"
    if len(matching) < target.count:
        return Resolution(lease_owner=owner, reason=f"nodes={target.text}: only {len(matching)} node(s) {what}")
    return Resolution(nodes=tuple(matching[: target.count]), lease_owner=owner)


def resolve_worker(
    target: WorkerTarget,
    *,
    workers: int,
    holders: Sequence[str | None] | None,
    owners: Mapping[str, int],
    preferred_owner: str | None = None,
    last_acquirer: int | None = None,
) -> Resolution:
    """The worker ``target`` means now: an index, or the worker whose lease is current.

    ``owners``: owner token -> the worker whose acquire returned it. Without readable nodes (etcd
    members, external servers) the holder is the worker whose acquire was reported last.
    """
    if target.index is not None:
        if target.index >= workers:
            return Resolution(reason=f"worker {target.index} does not exist ({workers} workers)")
        return Resolution(worker=target.index)
    if holders is None:
        if last_acquirer is None:
            return Resolution(reason="worker=holder: no lease reported yet")
        return Resolution(worker=last_acquirer)
    owner = current_owner(holders, preferred=preferred_owner)
    if owner is None:
        return Resolution(reason="worker=holder: no lease on any node")
    worker = owners.get(owner)
    if worker is None:
        return Resolution(lease_owner=owner, reason="worker=holder: the current lease is no worker's reported acquire")
    return Resolution(worker=worker, lease_owner=owner)
