"""Plug-ins whose lease lives where the harness does not look by default (issue 38.1).

- ``ToozLikeLock``: tooz's Redis driver stores a lock named ``<key>`` at ``_tooz_<key>_lock``, outside
  the default ``*{key}`` pattern: under node-restart no fault can find its holder, so every step is
  skipped. ``DeclaredToozLikeLock`` says where the key is (``key_pattern``), and the faults strike.
- ``SemaphoreLikeLock``: kazoo's ``Semaphore(max_leases=1)``: its lease is an ephemeral znode (a uuid
  name, not a ``__lock__`` sequence) under the semaphore's path, so the session-kill fault, which looks
  for kazoo Lock contenders, finds no holder. ``DeclaredSemaphoreLikeLock`` declares ``lease_znodes``.
"""

from __future__ import annotations

import secrets
import time
import uuid
from typing import Any, ClassVar

import redis

from lockcompare.backends.base import Lease, Refusal
from lockcompare.backends.single import SingleNodeLock
from lockcompare.backends.zk_lock import ZkLock, _Attempt
from lockcompare.infra.zookeeper.server import lock_path


class ToozLikeLock(SingleNodeLock):
    summary: ClassVar[str] = "SET NX PX at tooz's key, _tooz_<key>_lock (no declaration)"

    def acquire(self, *, key: str, ttl_ms: int) -> Lease | Refusal:
        owner = secrets.token_hex(8)
        started_ns = time.monotonic_ns()
        name = f"_tooz_{key}_lock"
        try:
            granted = self._client.set(name, owner, nx=True, px=ttl_ms)
        except redis.RedisError:
            return Refusal("error")
        return Lease(key=name, owner=owner, valid_until_ns=started_ns + ttl_ms * 1_000_000) if granted else Refusal()


class DeclaredToozLikeLock(ToozLikeLock):
    summary: ClassVar[str] = "SET NX PX at tooz's key, declared: key_pattern = _tooz_{key}_lock"
    key_pattern: ClassVar[str] = "_tooz_{key}_lock"
    key_type: ClassVar[str] = "string"


class SemaphoreLikeLock(ZkLock):
    """kazoo's ``Semaphore(max_leases=1)`` at the key's path; the session timeout is the TTL, as zk-lock's."""

    summary: ClassVar[str] = "ZooKeeper, kazoo's Semaphore(max_leases=1) (no declaration)"

    def acquire(self, *, key: str, ttl_ms: int) -> Lease | Refusal:
        from kazoo.exceptions import LockTimeout

        client = self._session(ttl_ms)
        if client is None or not client.connected:
            return Refusal("error")
        identifier = uuid.uuid4().hex
        semaphore = client.Semaphore(lock_path(key), identifier, max_leases=1)
        outcome = _Attempt(semaphore, wait_s=ttl_ms / 1000).result(within_s=ttl_ms / 1000 + self._request_timeout_s)
        if isinstance(outcome, LockTimeout) or outcome is False:
            return Refusal("held")
        if outcome is not True:
            return Refusal("error")
        owner = f"{identifier}.{client.client_id[0]:x}.{semaphore.create_path.rsplit('/', 1)[-1]}"
        self._held[owner] = semaphore
        return Lease(key=key, owner=owner, valid_until_ns=None)

    def release(self, lease: Lease) -> bool:
        from kazoo.exceptions import KazooException

        semaphore: Any = self._held.pop(lease.owner, None)
        if semaphore is None:
            return False
        try:
            semaphore.client.delete_async(semaphore.create_path).get(timeout=self._request_timeout_s)
        except (KazooException, semaphore.client.handler.timeout_exception):
            return False
        semaphore.is_acquired = False
        return True


class DeclaredSemaphoreLikeLock(SemaphoreLikeLock):
    summary: ClassVar[str] = "ZooKeeper, kazoo's Semaphore(max_leases=1), declared: lease_znodes = {path}"
    #: The semaphore's lease znodes are the children of the key's path (kazoo names them by uuid).
    lease_znodes: ClassVar[str] = "{path}"
