"""Whom a step hits, from what was read ahead of it: the scheduler's targeting (faults/schedule.py).

The reads a pending step will need start when the acquire that made it due is reported (on the
aim's thread, faults/aim.py): every node's holders for ``holders:K`` / ``others:K`` — none when the
lease names the nodes that granted it (Redlock) —, the servers' roles and the holder's member for a
role step. At the planned moment :meth:`Targets.resolve` turns them into nodes and a worker
(faults/targets.py), for the lease the step strikes; it reads now only for a step no acquire
triggered (``at=start``), which has nothing to read ahead of.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lockcompare.analysis.holders import UNREADABLE
from lockcompare.faults.aim import Aim, Fetched, Lease
from lockcompare.faults.holders import LockHolders
from lockcompare.faults.roles import aim_by_role
from lockcompare.faults.targets import Resolution, resolve_lease_nodes, resolve_nodes, resolve_worker
from lockcompare.infra.cluster import Cluster
from lockcompare.scenario.schedule import HOLDER_MEMBER, FaultStep, NodeTarget

if TYPE_CHECKING:
    from lockcompare.infra.proxy import ProxySet

#: The key of the lock-holders read among the aim's reads; a role's is ("roles", text, worker).
HOLDERS = "holders"


def lease_relative(step: FaultStep) -> bool:
    """Is ``step`` aimed relative to the lease (``holders:K``, ``others:K``, ``holder-member``, ``worker=holder``)?"""
    return (step.nodes is not None and (step.nodes.from_lease or step.nodes.mode == HOLDER_MEMBER)) or (
        step.worker is not None and step.worker.index is None
    )


@dataclass
class Targets:
    """What a trial's steps are resolved against: its servers, its workers, the reads made ahead."""

    cluster: Cluster
    node_count: int
    workers: int
    aim: Aim
    links: ProxySet | None = None
    #: Reads which node holds the lock (faults/holders.py); None: not read (external servers, etcd).
    holders: LockHolders | None = None
    pids: tuple[int, ...] = ()
    last_acquirer: int | None = None
    seen_lease: bool = False  # some read of this trial found a lease (the key pattern matches the backend's)
    last_holders: list[str | None] | None = None  # the holders read the injection being made uses

    def read_ahead(self, worker: int, *, pending: Sequence[NodeTarget], granted: bool = False) -> None:
        """Start the reads the pending steps (``pending``: their node targets) will need, now that
        ``worker`` reported a lease: every node's holders (``holders:K``, ``others:K``), a role (who
        leads; the member ``worker``'s client is attached to). Never at the planned moment: the step
        would land that much late. ``granted``: the lease names the nodes that granted it, which is
        all ``holders:K`` needs to aim (the holders read is then evidence only)."""
        holders_needed = False
        for target in pending:
            if target.by_role:
                member_of = worker if target.mode == HOLDER_MEMBER else None
                self.aim.read_ahead(("roles", target.text, member_of), self.role_reader(target, member_of))
            else:  # a granted lease's, a fixed node's too: the event's evidence, never waited for
                holders_needed = True
        if holders_needed and self.holders is not None:
            self.aim.read_ahead(HOLDERS, self.holders.read)

    def role_reader(self, target: NodeTarget, worker: int | None) -> Callable[[], Resolution]:
        return lambda: aim_by_role(target, cluster=self.cluster, worker=worker, pids=self.pids, links=self.links)

    def read_covers(self, step: FaultStep, lease: Lease) -> bool:
        """Were the servers read, for what ``step`` needs, since ``lease`` was reported?"""
        target = step.nodes
        if target is None or not (target.from_lease or target.mode == HOLDER_MEMBER):
            return True
        if target.mode == "holders" and lease.granted_by is not None:
            return True
        key: object = HOLDERS if target.from_lease else ("roles", target.text, lease.worker)
        return self.aim.has_read_since(key, lease.reported_ns)

    def resolve(
        self, step: FaultStep, *, lease: Lease | None, since_ns: int | None
    ) -> tuple[Resolution, Fetched | None]:
        """The step's targets: for ``lease`` (the one it strikes, confirmed held), else the lease the
        nodes hold; from the reads made since ``since_ns`` (ahead of the step), else read now."""
        target = step.nodes
        if target is not None and target.by_role:  # asked of the servers' kind (faults/roles.py)
            member_of = (lease.worker if lease else self.last_acquirer) if target.mode == HOLDER_MEMBER else None
            key, reader = ("roles", target.text, member_of), self.role_reader(target, member_of)
            roles = self.fetch(key, reader, since_ns, older_if_running=True)
            return roles.value, roles
        relative = lease_relative(step)
        fetched: Fetched | None = None
        holders = None
        if lease is not None and lease.granted_by is not None and target is not None and target.mode == "holders":
            # The nodes that granted it hold it until its deadline (confirmed by its worker's slot): no
            # read is waited for. The holders read ahead, if it has finished, goes into the event.
            holders = [lease.owner if i in lease.granted_by else None for i in range(self.node_count)]
            fetched = self.aim.finished_since(HOLDERS, lease.reported_ns)
            self.last_holders = fetched.value if fetched is not None else None
        elif (
            self.holders is not None
            and step.at != "acquire"
            and ((target is not None and target.from_lease) or (lease is None and relative))
        ):
            fetched = self.fetch(HOLDERS, self.holders.read, since_ns)
            holders = self.last_holders = fetched.value
            self.seen_lease = self.seen_lease or any(v not in (None, UNREADABLE) for v in holders)
        preferred = lease.owner if lease is not None else self.latest_owner(step.follow)
        nodes: tuple[int, ...] = ()
        owner = None
        if target is not None:
            r = (
                resolve_lease_nodes(target, holders=holders, owner=lease.owner)
                if lease is not None and target.from_lease
                else resolve_nodes(target, node_count=self.node_count, holders=holders, preferred_owner=preferred)
            )
            if r.reason:
                return r, fetched
            nodes, owner = r.nodes, r.lease_owner
        worker = None
        if step.worker is not None:
            if lease is not None and step.worker.index is None:
                worker, owner = lease.worker, owner or lease.owner
            else:
                r = resolve_worker(
                    step.worker, workers=self.workers, holders=holders, owners=self.aim.owners(),
                    preferred_owner=preferred, last_acquirer=self.last_acquirer,
                )  # fmt: skip
                if r.reason:
                    return r, fetched
                worker, owner = r.worker, owner or r.lease_owner
        if not relative:
            owner = None
        return Resolution(nodes=nodes, worker=worker, lease_owner=owner), fetched

    def fetch(
        self, key: object, read: Callable[[], Any], since_ns: int | None, *, older_if_running: bool = False
    ) -> Fetched:
        ahead = self.aim.read_since(key, since_ns, older_if_running=older_if_running) if since_ns is not None else None
        return ahead if ahead is not None else self.aim.read_now(key, read)

    def latest_owner(self, worker: int) -> str | None:
        lease = self.aim.latest(worker)
        return lease.owner if lease is not None else None

    def hinted(self, resolution: Resolution) -> Resolution:
        """A lease-relative step that found no lease, in a trial where no read ever found one: the
        backend's key is probably not where the harness looks."""
        if self.holders is None or self.seen_lease or "no lease on any node" not in resolution.reason:
            return resolution
        pattern = getattr(self.holders, "pattern", "?")
        return Resolution(
            reason=f"{resolution.reason} (no read in this trial found a lease under the key pattern "
            f"{pattern!r}: a backend whose key lies elsewhere declares key_pattern, docs/plugins.md)"
        )
