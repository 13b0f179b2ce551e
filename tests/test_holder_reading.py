"""The runner reads the right key for every backend whose lease holders are readable (issue 42.3).

Before a node fault the runner reads, on every lock node, the key the backend says its lease lives
under (faults/holders.py). python-redis-lock keeps a list ``lock-signal:<name>`` beside its
``lock:<name>``, which the default pattern ``*<key>`` also matched: 678 injection events of the
reproduction recorded ``'<list>'`` as the holder. Each backend here takes a real lease on the
session's real Redis nodes, and the reading must name that lease's owner on a node that holds it.
"""

from __future__ import annotations

import time

import pytest

from lockcompare.backends import BackendConfig, Lease, load_backend
from lockcompare.errors import BackendNotViableError
from lockcompare.faults.holders import DEFAULT_KEY_PATTERN, LockHolders, key_glob
from lockcompare.infra.cluster import Cluster

#: Backends on Redis-protocol lock nodes that take a lease (the lock-free ones hold none; the
#: fenced lock stores a token beside its lease: checked too).
LEASE_BACKENDS = (
    "single", "redlock", "fenced", "pottery", "redis-py", "single-renew", "redis-lock-renew",
    "redis-lock-renew-checked", "node-redlock", "node-semaphore-mutex", "node-semaphore-redlock",
)  # fmt: skip

TTL_MS = 5000


@pytest.mark.parametrize("name", LEASE_BACKENDS)
def test_the_holder_read_before_a_fault_is_the_lease_owner(name: str, cluster: Cluster, key: str) -> None:
    try:
        cls = load_backend(name)
    except BackendNotViableError as exc:
        pytest.skip(f"{name}: {exc}")
    backend = cls(config=BackendConfig(node_urls=cluster.node_urls, request_timeout_s=0.5))
    holders = LockHolders(
        node_urls=cluster.node_urls,
        key_pattern=key_glob(key, pattern=str(getattr(cls, "key_pattern", DEFAULT_KEY_PATTERN))),
        key_type=str(getattr(cls, "key_type", "string")),
    )
    try:
        # A round before, as in a trial: a library may leave keys of its own behind after a release
        # (python-redis-lock's lock-signal list), and the reading must not take one for the lease.
        first = backend.acquire(key=key, ttl_ms=TTL_MS)
        assert isinstance(first, Lease), first
        backend.release(first)
        acquired = time.monotonic()
        lease = backend.acquire(key=key, ttl_ms=TTL_MS)
        assert isinstance(lease, Lease), lease
        read = holders.read()
        held = [value for value in read if value is not None]
        assert held, f"{name}: no node holds a key matching its pattern: {read}"
        assert not any(value.startswith("<") for value in held), f"{name}: read a key of another type: {read}"
        assert lease.owner in held or str(lease.owner) in held, (name, lease.owner, read)
        backend.release(lease)
        # pottery returns from acquire and from release once a quorum answered (its BailOutExecutor
        # leaves the rest in flight): a deletion lands a moment later, and a SET still in flight can
        # land after the release's DEL on its node and live out its TTL. So a key may stay until the
        # lease's TTL has run out; one left past that is no lease (a library's list, a key without TTL).
        deadline = acquired + TTL_MS / 1000 + 1.0
        while any(value is not None for value in holders.read()) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert all(value is None for value in holders.read()), f"{name}: a lease key is left after release"
    finally:
        holders.close()
        backend.close()
