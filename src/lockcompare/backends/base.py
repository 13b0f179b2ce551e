"""The one interface every lock backend implements, and what it hands out.

A backend is a class constructed as ``Backend(config=BackendConfig(...))`` inside each worker
process; it needs only ``acquire`` / ``release`` / ``close`` and a few class attributes. Plug-ins
implement the same protocol and are found by entry point (group ``lockcompare.backends``) or by
``package.module:Class``.

Example, against a running redis-server::

    >>> from lockcompare.backends.single import SingleNodeLock
    >>> lock = SingleNodeLock(config=BackendConfig(node_urls=("redis://127.0.0.1:6379/0",)))
    >>> lease = lock.acquire(key="demo", ttl_ms=1000)       # doctest: +SKIP
    >>> lock.release(lease)                                   # doctest: +SKIP
    True
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal, Protocol, runtime_checkable

from lockcompare.infra.redisconn import DEFAULT_TIMEOUT_S


@dataclass(frozen=True, kw_only=True)
class BackendConfig:
    """What the harness tells a backend: where the lock nodes are and how long to wait for one.

    ``node_count``: how many of ``node_urls`` a multi-node backend (Redlock) should use; ``None``
    means all of them. Single-node backends use ``node_urls[0]``.

    ``wait_replicas``: 0, or how many replicas must acknowledge the write that grants a lease. A
    backend that honours it declares the class attribute ``supports_wait_replicas = True``; it then
    sends ``WAIT wait_replicas <timeout>`` on the connection that wrote the key (WAIT counts only
    that connection's writes) and refuses the lease (``Refusal("not-replicated")``, after releasing
    it) when fewer replicas acknowledged. The harness never gives a non-zero value to a backend
    without the attribute (its trials run with 0, and the results say 0).

    ``retry_delay_ms``: the trial's wait between acquire attempts (``--retry-delay-ms``, scaled), for a
    backend whose library retries by itself or sizes its own waits by it; None where no trial says
    (the conformance battery, bench). The harness still does the retrying: ``acquire`` tries once.
    """

    node_urls: tuple[str, ...]
    request_timeout_s: float = DEFAULT_TIMEOUT_S
    node_count: int | None = None
    wait_replicas: int = 0
    retry_delay_ms: float | None = None


#: The largest fencing token a resource stores exactly (a signed 64-bit integer).
FENCING_TOKEN_MAX = 2**63 - 1


def _short_repr(value: object) -> str:
    text = (
        repr(value)
        if not isinstance(value, int) or value.bit_length() < 200
        else f"an int of {value.bit_length()} bits"
    )
    return text if len(text) <= 60 else text[:57] + "..."


@dataclass(frozen=True, kw_only=True)
class Lease:
    """A successful acquire: the key, the random owner token, and what the holder may assume.

    ``valid_until_ns`` is the holder's belief, on the shared monotonic clock
    (``time.monotonic_ns()``), of when the lease ends; ``None`` means it never expires.
    ``fencing_token`` is a strictly increasing number when the backend issues one.
    ``granted_by``: which lock nodes (indices into ``node_urls``) granted it, when a multi-node
    backend says so; the history records it, so a split majority can be seen there.
    """

    key: str
    owner: str
    valid_until_ns: int | None = None
    fencing_token: int | None = None
    granted_by: tuple[int, ...] | None = None
    #: The server session holding a session lock (PostgreSQL: the backend pid), when the backend
    #: knows it: the checker then ends the lease exactly at a session end that names it.
    session: str | None = None

    def problem(self) -> str | None:
        """What makes this lease unusable (a plug-in's wrong field type or range), or None.

        A fencing token must be an integer the resources store exactly: Redis integers and
        PostgreSQL ``bigint`` are 64-bit signed, and the resources compare tokens as integers, never
        as floats (above 2**53 neighbouring floats are equal, and a stale write would pass).
        """
        if self.valid_until_ns is not None and (type(self.valid_until_ns) is not int):
            return f"valid_until_ns must be an int (ns) or None, got {type(self.valid_until_ns).__name__}"
        token = self.fencing_token
        if token is not None and (type(token) is not int or not 0 <= token <= FENCING_TOKEN_MAX):
            return f"fencing_token must be an int in 0..2**63-1 or None, got {_short_repr(token)}"
        return None

    def is_valid(self, now_ns: int | None = None) -> bool:
        if self.valid_until_ns is None:
            return True
        return (time.monotonic_ns() if now_ns is None else now_ns) < self.valid_until_ns


@dataclass(frozen=True)
class Refusal:
    """An acquire that did not get the lock, and why.

    Reasons used by the built-ins: ``held`` (someone else has it), ``no-quorum`` (a multi-node
    lock reached too few nodes), ``validity`` (the quorum answered, but too late for the lease to
    be worth anything), ``error`` (a node failed to answer), ``not-replicated`` (fewer replicas
    than ``BackendConfig.wait_replicas`` acknowledged the lock key in time).
    """

    reason: str = "held"

    def __bool__(self) -> Literal[False]:  # so `if not result:` narrows Lease | Refusal for type checkers
        return False


@runtime_checkable
class LockBackend(Protocol):
    """A lock design. ``exclusive`` is False for designs that do not even try (the ``none`` baseline).

    Optional class attribute, read with ``getattr(cls, "survives_minority_loss", False)``:
    ``survives_minority_loss = True`` claims that the design keeps granting exclusive leases while a
    minority of its nodes is down (a majority quorum, as Redlock's). The conformance battery
    (:mod:`lockcompare.testing`) checks every claim a backend makes, and only those.

    Optional class attributes for a lock service that is not Redis (the ``etcd`` backends set them):
    ``servers = "etcd"`` makes the harness start etcd members as the lock nodes (default "redis");
    ``min_ttl_ms`` is the shortest TTL it can grant and ``expiry_lag_ms`` how late after its TTL the
    service may end a lease (the battery times its expiry checks with them); a ``check_ttl(*,
    ttl_ms)`` classmethod raising InvalidValueError refuses, before anything starts, a TTL it cannot
    grant exactly.
    """

    summary: ClassVar[str]
    exclusive: ClassVar[bool]
    issues_fencing_tokens: ClassVar[bool]

    def __init__(self, *, config: BackendConfig) -> None: ...

    def acquire(self, *, key: str, ttl_ms: int) -> Lease | Refusal:
        """Try once, without blocking; the harness does the retrying."""
        ...

    def release(self, lease: Lease) -> bool:
        """Release if still the owner; True if this call released it."""
        ...

    def close(self) -> None: ...


def first_node(node_urls: Sequence[str]) -> str:
    if not node_urls:
        raise ValueError("this backend needs at least one lock node")
    return node_urls[0]
