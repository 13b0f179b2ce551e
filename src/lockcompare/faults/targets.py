"""Whom a fault step hits, resolved from the lease the nodes actually hold (read ahead of the step).

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
from lockcompare.backends.base import traits_of
from lockcompare.infra.kinds import Roles
from lockcompare.scenario.schedule import HOLDER_MEMBER, LEADER_WORDS, FaultStep, NodeTarget, WorkerTarget


@dataclass(frozen=True)
class Resolution:
    """The step's targets, or ``reason`` (non-empty) why it has none."""

    nodes: tuple[int, ...] = ()
    worker: int | None = None
    lease_owner: str | None = None
    reason: str = ""
    #: A role-aimed step's reading (infra/kinds.py Roles.as_event, plus the holder's member): what
    #: its inject event records as ``roles``.
    roles: dict[str, object] | None = None


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


def resolve_lease_nodes(target: NodeTarget, *, holders: Sequence[str | None] | None, owner: str) -> Resolution:
    """The nodes ``holders:K`` / ``others:K`` mean for the lease ``owner`` (the one a step is aimed at,
    confirmed held by its worker), from a read of every node made since that lease was granted.

    >>> resolve_lease_nodes(NodeTarget("holders", count=1), holders=["b", "a", "a"], owner="a").nodes
    (1,)
    >>> resolve_lease_nodes(NodeTarget("others", count=1), holders=["b", "a", "?"], owner="a").nodes
    (0,)
    """
    if holders is None:
        return Resolution(reason=f"nodes={target.text}: the lock nodes cannot be read here")
    if current_owner(holders) is None:
        return Resolution(reason=f"nodes={target.text}: no lease on any node")
    if target.mode == "holders":
        matching = [i for i, v in enumerate(holders) if v == owner]
        what = "holding the lease it was aimed at"
    else:
        matching = [i for i, v in enumerate(holders) if v not in (owner, UNREADABLE)]
        what = "readable and not holding the lease it was aimed at"
    if len(matching) < target.count:
        return Resolution(lease_owner=owner, reason=f"nodes={target.text}: only {len(matching)} node(s) {what}")
    return Resolution(nodes=tuple(matching[: target.count]), lease_owner=owner)


def resolve_role(
    target: NodeTarget, *, roles: Roles | None, holder_nodes: Sequence[int] | None = None, why: str = ""
) -> Resolution:
    """The nodes a role names now (``roles``: what the kind read; None: it could not, ``why``).

    ``leader`` (primary, master): the node that leads; ``followers:K``: the K lowest-numbered nodes
    that answer and do not lead; ``holder-member``: the one node the holder's client is connected to
    (``holder_nodes``: every node it has a connection to; None: not known, ``why``).

    >>> r = Roles(leader=1, modes=("follower", "leader", "down"))
    >>> resolve_role(NodeTarget("leader", count=1), roles=r).nodes
    (1,)
    >>> resolve_role(NodeTarget("followers", count=2), roles=r).reason
    'nodes=followers:2: only 1 node(s) answer and do not lead (follower, leader, down)'
    >>> resolve_role(NodeTarget("holder-member", count=1), roles=r, holder_nodes=(0, 2)).reason
    'nodes=holder-member: the holder is connected to 2 nodes (0, 2), not one'
    """
    if roles is None:
        return Resolution(reason=f"nodes={target.text}: {why or 'the roles cannot be read'}")
    seen = roles.as_event()
    modes = ", ".join(roles.modes)
    if target.mode in LEADER_WORDS:
        if roles.leader is None:
            return Resolution(roles=seen, reason=f"nodes={target.text}: no node leads now ({modes})")
        return Resolution(nodes=(roles.leader,), roles=seen)
    if target.mode == HOLDER_MEMBER:
        if holder_nodes is None:
            return Resolution(roles=seen, reason=f"nodes={target.text}: {why or 'the holder is not known'}")
        seen = {**seen, "holder_nodes": list(holder_nodes)}
        if len(holder_nodes) != 1:
            shown = ", ".join(map(str, holder_nodes)) or "none"
            return Resolution(
                roles=seen,
                reason=f"nodes={target.text}: the holder is connected to {len(holder_nodes)} nodes ({shown}), not one",
            )
        return Resolution(nodes=tuple(holder_nodes), roles=seen)
    followers = [i for i, mode in enumerate(roles.modes) if i != roles.leader and mode != "down"]
    if len(followers) < target.count:
        return Resolution(
            roles=seen,
            reason=f"nodes={target.text}: only {len(followers)} node(s) answer and do not lead ({modes})",
        )
    return Resolution(nodes=tuple(followers[: target.count]), roles=seen)


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


def lease_nodes(declared: type, *, node_count: int) -> int:
    """How many lock nodes a backend's lease can be on, from what it declares: none for a design that
    takes no lease (``exclusive = False``: none, atomic, optimistic), all ``node_count`` it uses for a
    quorum design (``survives_minority_loss``: Redlock, etcd members), else one (node 0)."""
    traits = traits_of(declared)
    if not traits.exclusive:
        return 0
    return node_count if traits.survives_minority_loss else 1


def never_resolves(
    steps: Sequence[FaultStep], *, lease_nodes: int, fixed_nodes: bool = True, on_every_node: bool = False
) -> str:
    """Why a step of ``steps`` can never reach this backend's lock ("" when each can): it acts on lock
    nodes of a backend that holds no lease on any (or aims at ``worker=holder`` of one), asks for more
    holders than a lease has nodes (or more others than the nodes beside a holder), names only
    nodes the backend does not use, or aims at ``holder-member`` of a client connected to every node
    (``on_every_node``: the trait ``connects_to_every_node``; at run time such a step was skipped in
    every round, "the holder is connected to 3 nodes (0, 1, 2), not one", and every trial was unknown).
    Checked before anything starts, instead of recording the step as skipped in every round.

    ``fixed_nodes`` False leaves fixed indices alone (the catalogue's scenarios are written for the
    five-node cast: bare-majority cuts nodes 3,4 of a Redlock and restarts a single node's holder)."""
    for step in steps:
        if lease_nodes == 0 and step.worker is not None and step.worker.index is None:
            # worker=holder on a design that takes no lease: every step skipped, a trial without its fault.
            return f"fault step {step.text!r}: this backend holds no lease on any lock node, so no worker is its holder"
        target = step.nodes
        if target is None:
            continue
        if lease_nodes == 0:
            return f"fault step {step.text!r}: this backend holds no lease on any lock node"
        if on_every_node and target.mode == HOLDER_MEMBER:
            return (
                f"fault step {step.text!r}: this backend's client is connected to every lock node at once, "
                "so no one node is the holder's member to aim at"
            )
        if target.mode == "holders" and target.count > lease_nodes:
            return f"fault step {step.text!r}: a lease of this backend is on at most {lease_nodes} lock node(s)"
        if target.mode == "others" and target.count > lease_nodes - 1:
            return (
                f"fault step {step.text!r}: this backend uses {lease_nodes} lock node(s), so at most "
                f"{lease_nodes - 1} beside a holder's"
            )
        if fixed_nodes and target.mode == "fixed" and min(target.indices) >= lease_nodes:
            used = "node 0" if lease_nodes == 1 else f"nodes 0..{lease_nodes - 1}"
            return f"fault step {step.text!r}: this backend uses lock {used} only"
    return ""
