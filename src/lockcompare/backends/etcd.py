"""``etcd`` and ``etcd-fenced``: etcd's lease + lock, the lock key's revision as the fencing token.

What ``etcdctl lock`` / ``concurrency.Mutex`` do, as one non-blocking attempt (the harness retries):

1. ``lease/grant`` with the TTL in whole seconds;
2. one transaction: *if* the lock key does not exist (``create_revision == 0``) *then* put it, with
   a random owner token as its value, attached to the lease. The revision of that transaction is
   the key's create revision: a number etcd's raft log makes strictly increasing across holders and
   members — the fencing token Kleppmann asks for, and the one Jepsen (etcd 3.4.3) says to check;
3. while held, a watchdog thread keeps the lease alive (``lease/keepalive`` every TTL/3, as
   ``etcdctl lock``'s session does with ``concurrency.NewSession``): work longer than the TTL keeps
   the lock, and the thread freezes with its worker (a pause or a cut stops the renewals);
4. release: one transaction deletes the key *only if* its create revision is still ours (a holder
   whose lease expired finds its successor's key and leaves it), then the lease is revoked.

A cheap linearizable read first refuses at once when the key is there, so a waiting worker costs
one round trip per retry instead of a grant and a revoke.

``etcd`` is the lock alone: it renews, but never looks at its lease before writing (a paused or
cut-off holder wakes and writes after its lease ended: Jepsen's etcd 3.4.3 analysis asks for the
revision to be checked); ``etcd-fenced`` hands the revision to the resource, which rejects the stale write, exactly
as ``fenced`` does for the single-node lock.

TTL: etcd leases are whole seconds with a server minimum (etcd_server.MIN_LEASE_S, 1 s with the
embedded members' timing flags). A TTL etcd cannot grant exactly is refused up front
(:meth:`EtcdLock.check_ttl`), never stretched silently; a grant that comes back longer than asked
(an external etcd with other flags) is an error too. The holder believes its lease ends TTL after
it *sent* the grant; etcd ends it later (its lessor looks for expired leases every 500 ms), so the
belief is on the safe side.

The lock nodes are etcd members (``servers = "etcd"``): the harness starts them, and the resource
stays a redis-server.
"""

from __future__ import annotations

import time
from typing import Any, ClassVar

from lockcompare.backends.base import BackendConfig, Lease, Refusal
from lockcompare.backends.renewals import RenewalLog, Watchdog
from lockcompare.backends.single import new_owner_token
from lockcompare.errors import BackendNotViableError, InvalidValueError
from lockcompare.infra.etcd.client import (
    EtcdClient,
    EtcdRequestError,
    EtcdUnavailable,
    b64,
)
from lockcompare.infra.etcd.server import EXPIRY_LAG_MS, MIN_LEASE_S, find_etcd


def lease_seconds(ttl_ms: int) -> int:
    """The etcd lease TTL for ``ttl_ms``, or :class:`InvalidValueError` when etcd cannot grant it exactly."""
    if ttl_ms % 1000 or ttl_ms < MIN_LEASE_S * 1000:
        raise InvalidValueError(
            f"etcd grants leases in whole seconds of at least {MIN_LEASE_S} s, not {ttl_ms} ms "
            "(choose a --time-scale that makes the TTL whole seconds)"
        )
    return ttl_ms // 1000


class EtcdLock:
    """A lease + a create-if-absent transaction on etcd; release deletes only our own key."""

    summary: ClassVar[str] = "etcd lease + create-if-absent txn (etcdctl lock), released only by its owner"
    #: The client request timeout (used where links are slowed or cut): lockcompare's own choice for
    #: its built-ins, 2 s (its own HTTP client, infra/etcd/client.py).
    client_timeout_s: ClassVar[float] = 2.0
    exclusive: ClassVar[bool] = True
    issues_fencing_tokens: ClassVar[bool] = False
    survives_minority_loss: ClassVar[bool] = True
    #: Its watchdog keeps the lease alive while the holder runs (etcdctl lock's session keepalive).
    renews: ClassVar[bool] = True
    #: Which servers the lock nodes are: the harness starts etcd members instead of redis-servers.
    servers: ClassVar[str] = "etcd"
    #: The shortest TTL it grants, and how late etcd may end a lease after its TTL (the battery's timing).
    min_ttl_ms: ClassVar[int] = MIN_LEASE_S * 1000
    expiry_lag_ms: ClassVar[int] = EXPIRY_LAG_MS

    @classmethod
    def check_viable(cls) -> None:
        """Refuse with one line when no etcd binary is installed (the lock nodes could not start)."""
        try:
            find_etcd()
        except BackendNotViableError as exc:
            raise BackendNotViableError(f"the etcd backends are not viable here: {exc}") from None

    @classmethod
    def check_ttl(cls, *, ttl_ms: int) -> None:
        lease_seconds(ttl_ms)

    def __init__(self, *, config: BackendConfig) -> None:
        # No request here: a client made while its cluster has no quorum must still be made.
        self._client = EtcdClient(endpoints=config.node_urls, timeout_s=config.request_timeout_s)
        self._config = config
        self._log = RenewalLog()
        self._watchdogs: dict[str, tuple[Watchdog, EtcdClient]] = {}

    def acquire(self, *, key: str, ttl_ms: int) -> Lease | Refusal:
        seconds = lease_seconds(ttl_ms)
        # The lease's clock starts with the call, before the range check, as every backend's here
        # (Redlock's rule): a claim never longer than the server's lease, and one the battery can
        # judge from the call (docs/verdicts.md). Read after the range, a slow range (20 ms, three
        # test workers on two cores) made the claim look 20 ms past the TTL: a false FAIL.
        started_ns = time.monotonic_ns()
        lease_id = None
        try:
            if self._client.call("/v3/kv/range", {"key": b64(key), "count_only": True}).get("count"):
                return Refusal("held")
            grant = self._client.call("/v3/lease/grant", {"TTL": seconds})
            lease_id = grant["ID"]
            if int(grant.get("TTL", 0)) != seconds:
                self._revoke(lease_id)
                raise InvalidValueError(f"etcd granted a {grant.get('TTL')} s lease when asked for {seconds} s")
            owner = new_owner_token()
            txn = self._client.call("/v3/kv/txn", {
                "compare": [{"key": b64(key), "target": "CREATE", "result": "EQUAL", "create_revision": "0"}],
                "success": [{"request_put": {"key": b64(key), "value": b64(owner), "lease": lease_id}}],
            })  # fmt: skip
        except (EtcdUnavailable, EtcdRequestError) as exc:
            if lease_id is not None:
                self._revoke(lease_id)  # whatever the txn did, the lease (and a key on it) goes
            return Refusal.failed(exc)
        if not txn.get("succeeded"):
            self._revoke(lease_id)
            return Refusal("held")
        revision = int(txn["header"]["revision"])
        lease = Lease(
            key=key,
            owner=f"{owner}.{lease_id}.{revision}",  # random token; release needs the lease and revision
            valid_until_ns=started_ns + ttl_ms * 1_000_000,
            fencing_token=revision if self.issues_fencing_tokens else None,
        )
        self._keep_alive(lease, lease_id=lease_id, ttl_ms=ttl_ms)
        return lease

    def _keep_alive(self, lease: Lease, *, lease_id: str, ttl_ms: int) -> None:
        """Start the lease's watchdog, with a client of its own (EtcdClient is one thread's)."""
        client = EtcdClient(endpoints=self._config.node_urls, timeout_s=self._config.request_timeout_s)

        def extend() -> bool:
            # A keepalive of an expired or revoked lease answers without a TTL: the lease, and the
            # key attached to it, are gone.
            reply = client.call("/v3/lease/keepalive", {"ID": lease_id})
            return int(reply.get("result", {}).get("TTL", 0) or 0) > 0

        self._log.track(lease)
        watchdog = Watchdog(
            extend=extend, transient=(EtcdUnavailable, EtcdRequestError), lease=lease, ttl_ms=ttl_ms, log=self._log
        )
        self._watchdogs[lease.owner] = (watchdog, client)
        watchdog.start()

    def drain_renewals(self) -> list[dict[str, Any]]:
        """Keepalive attempts since the last call (see :mod:`lockcompare.backends.renewals`)."""
        return self._log.drain()

    def stop_renewal(self, lease: Lease) -> None:
        """Stop keeping ``lease`` alive without releasing it: it then expires one TTL after its last
        keepalive. The lease can still be released."""
        found = self._watchdogs.pop(lease.owner, None)
        if found is not None:
            watchdog, client = found
            watchdog.stop()
            client.close()

    def release(self, lease: Lease) -> bool:
        # Stop renewing first: a keepalive racing the revoke would find the lease gone and record a loss.
        self.stop_renewal(lease)
        self._log.forget(lease.owner)
        try:
            _, lease_id, revision = lease.owner.rsplit(".", 2)
        except ValueError:
            return False  # not a lease of ours
        try:
            # Delete only the key this lease created (same create_revision): never a successor's.
            created_by_us = {"key": b64(lease.key), "target": "CREATE", "result": "EQUAL", "create_revision": revision}
            txn = self._client.call("/v3/kv/txn", {
                "compare": [created_by_us],
                "success": [{"request_delete_range": {"key": b64(lease.key)}}],
            })  # fmt: skip
        except (EtcdUnavailable, EtcdRequestError):
            txn = {}
        self._revoke(lease_id)
        return bool(txn.get("succeeded"))

    def _revoke(self, lease_id: str) -> None:
        try:
            self._client.call("/v3/lease/revoke", {"ID": lease_id})
        except (EtcdUnavailable, EtcdRequestError):
            pass  # expired already (lease not found), or unreachable: it expires on its own

    def close(self) -> None:
        # Leases still held are abandoned, not released: they expire within one TTL.
        for owner in list(self._watchdogs):
            found = self._watchdogs.pop(owner)
            found[0].stop()
            found[1].close()
        self._client.close()


class EtcdFencedLock(EtcdLock):
    """``etcd`` + its revision as the fencing token, checked by the resource."""

    summary: ClassVar[str] = "etcd lock + the key's revision as fencing token, checked by the resource"
    issues_fencing_tokens: ClassVar[bool] = True
