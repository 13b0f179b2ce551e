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
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import ClassVar, Literal, Protocol, runtime_checkable

from lockcompare.errors import BackendLoadError
from lockcompare.infra.redis.client import DEFAULT_TIMEOUT_S


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
    #: The server (``host:port``) that granted it, when a replicated lock node has several and the
    #: backend knows which answered (a Sentinel-managed node: the master the sentinels named); the
    #: history records it, so a grant after a failover can be seen on the promoted server.
    server: str | None = None

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

    ``detail``: what failed, in one line (an ``error`` refusal's exception, as
    :meth:`failed` writes it). The worker records the first of each distinct detail in the history
    (the acquire event's ``errors``), so a reader can tell a harness fault from the lock's
    behaviour; a refusal without one is counted all the same.

    >>> Refusal.failed(ConnectionError("Error 111 connecting to 127.0.0.1:6379"))
    Refusal(reason='error', detail='ConnectionError: Error 111 connecting to 127.0.0.1:6379')
    """

    reason: str = "held"
    #: Commentary, not identity: ``Refusal("error", "…") == Refusal("error")`` (plug-ins' tests compare reasons).
    detail: str = field(default="", compare=False)

    @classmethod
    def failed(cls, exc: BaseException, *, reason: str = "error") -> Refusal:
        """An ``error`` refusal that says which exception ended the attempt."""
        text = str(exc).strip().splitlines()
        return cls(reason, f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__)

    def __bool__(self) -> Literal[False]:  # so `if not result:` narrows Lease | Refusal for type checkers
        return False


@runtime_checkable
class LockBackend(Protocol):
    """A lock design. ``exclusive`` is False for designs that do not even try (the ``none`` baseline).

    Every declaration, required or optional, is read through :func:`traits_of` (one :class:`Traits`
    record per class, with each attribute's single default). Optional class attribute:
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
        """Release if still the owner; True if this call released it, False if the lock was not
        held by this lease. A release whose request failed, so that it cannot tell either, may
        raise :class:`~lockcompare.errors.ReleaseFailed` instead of returning False: the history
        then says the unlock failed, which is no evidence of where the lock was (docs/verdicts.md)."""
        ...

    def close(self) -> None: ...


#: Where a lock lives on a Redis node when the backend does not say: any key ending with the harness's key.
DEFAULT_KEY_PATTERN = "*{key}"


@dataclass(frozen=True, kw_only=True)
class Traits:
    """Everything a backend class declares about itself, each with its one default (docs/plugins.md).

    A backend still declares these as class attributes; :func:`traits_of` reads them once into this
    record, and the harness asks the record, never the class. ``summary``, ``exclusive`` and
    ``issues_fencing_tokens`` are required (``run``/``matrix`` refuse a class without them:
    ``require_declarations``); their defaults only serve readers that tolerate an incomplete class.
    """

    summary: str = ""
    exclusive: bool = True
    issues_fencing_tokens: bool = False
    #: A majority-quorum design that keeps granting exclusive leases with a minority of its nodes down.
    survives_minority_loss: bool = False
    #: False: a lease without a deadline (held while its session lives, as ``pg-advisory``).
    has_ttl: bool = True
    #: A renewing lock; undeclared, whether it has the hooks ``drain_renewals`` / ``stop_renewal``.
    renews: bool = False
    #: A lock whose client checks its lease before writing; undeclared, whether it has ``before_write``.
    checks_lease: bool = False
    #: Which servers the lock nodes are (a server kind's name), and where the balance lives by default.
    servers: str = "redis"
    resource_kind: str = "redis"
    #: A lock-free design's own strategy at the resource (``atomic``, ``optimistic``), or None.
    resource_check: str | None = None
    #: The request timeout the library's users get by default, or None (the harness's own).
    client_timeout_s: float | None = None
    #: The shortest TTL it can grant, TTLs in multiples of (0: any), and how late its service ends one.
    min_ttl_ms: int = 0
    ttl_step_ms: int = 0
    expiry_lag_ms: int = 0
    #: Where its lease lives on a Redis node, and what the key holds (``string`` or ``hash``).
    key_pattern: str = DEFAULT_KEY_PATTERN
    key_type: str = "string"
    #: ZooKeeper: a path with ``{key}``/``{path}``, or a callable ``(client, key) -> znodes``; None: kazoo's Lock.
    lease_znodes: str | Callable[..., object] | None = None
    #: A session lock whose server ends the session after a TTL of silence (ZooKeeper).
    session_timeout_is_ttl: bool = False
    #: Its acquire calls backends/pause_point.py's ``inside_acquire`` between sending its requests and
    #: reading their replies, so ``--pause-point in-acquire`` can stop it there (Redlock, single).
    pauses_inside_acquire: bool = False
    #: It waits inside ``acquire`` (kazoo's Lock): its acquires are not a livelock's evidence.
    acquire_waits: bool = False
    #: It honours ``BackendConfig.wait_replicas``.
    supports_wait_replicas: bool = False
    #: Its ``check_ttl(*, ttl_ms)`` classmethod, raising InvalidValueError for a TTL it cannot grant
    #: exactly (whole seconds), or None: it grants any.
    check_ttl: Callable[..., object] | None = None
    #: An external client (a process driven over a pipe: backends/external), constructed in a child of its own.
    external: bool = False
    #: A lock-free design's workload skew: the share (0..1) of updates that fall on another worker's key.
    skew: float = 0.0
    #: The fault kinds (their one names, e.g. ``("crash",)``) that leave this design without a server
    #: by its nature: a single-node lock whose only node crashed, a PostgreSQL primary with no
    #: failover. A trial in which it stops granting after one of them, refused with errors only, keeps
    #: its verdict; without the declaration it is ``unknown`` (analysis/exercised.py, docs/verdicts.md).
    unavailable_under: tuple[str, ...] = ()
    #: Run by ``matrix`` when no ``--backends`` is given. False for a design with a comparison of its
    #: own (the lock-free alternatives' table) or whose every trial builds a topology of its own (a
    #: Sentinel set): the README's main command stays the lesson's comparison, within a minute.
    in_default_matrix: bool = True
    #: Its client keeps a connection to every lock node at once (etcd's Go client balances its requests
    #: over every endpoint): no one node is the holder's, so a step aimed at ``nodes=holder-member``
    #: can never be aimed at it, and the matrix leaves such a cell out (faults/targets.py never_resolves).
    connects_to_every_node: bool = False
    #: The Python distributions the lock runs (importlib.metadata names: ``("pottery", "redis")``), whose
    #: versions every row records (``client_versions``, backends/versions.py); an external client
    #: reports its own in ``hello`` instead.
    libraries: tuple[str, ...] = ()


def _is_bool(value: object) -> bool:
    return isinstance(value, bool)


def _is_str(value: object) -> bool:
    return isinstance(value, str)


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_seconds_or_none(value: object) -> bool:
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0)


#: What each trait must be: a phrase for the refusal, and the test.
TRAIT_KINDS: dict[str, tuple[str, Callable[[object], bool]]] = {
    "summary": ("a non-empty str", lambda v: isinstance(v, str) and bool(v.strip())),
    "servers": ("a str", _is_str),
    "resource_kind": ("a str", _is_str),
    "resource_check": ("a str or None", lambda v: v is None or isinstance(v, str)),
    "client_timeout_s": ("a positive number or None", _is_seconds_or_none),
    "min_ttl_ms": ("an int >= 0", _is_count),
    "ttl_step_ms": ("an int >= 0", _is_count),
    "expiry_lag_ms": ("an int >= 0", _is_count),
    "key_pattern": ("a str", _is_str),
    "key_type": ("a str", _is_str),
    "lease_znodes": ("a str, a callable or None", lambda v: v is None or isinstance(v, str) or callable(v)),
    "check_ttl": ("a classmethod or None", lambda v: v is None or callable(v)),
    "unavailable_under": (
        "a tuple of fault kind names",
        lambda v: isinstance(v, tuple) and all(isinstance(k, str) for k in v),
    ),
    "libraries": (
        "a tuple of distribution names (str)",
        lambda v: isinstance(v, tuple) and all(isinstance(name, str) and name.strip() for name in v),
    ),
    "skew": ("a number in 0..1", lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= 1),
} | {f.name: ("a bool", _is_bool) for f in fields(Traits) if f.type == "bool"}

#: Traits whose default, when a class leaves them out, is whether it has these hooks.
_HOOKED = {"renews": ("drain_renewals", "stop_renewal"), "checks_lease": ("before_write",)}

_MISSING = object()

#: Each trait's one default, by name.
TRAIT_DEFAULTS: dict[str, object] = {f.name: f.default for f in fields(Traits)}


def declared_traits(declared: object) -> dict[str, object]:
    """The trait attributes a class (or a record of them) declares, as declared: unchecked, no defaults.

    The one place a backend's attributes are read by name; everyone else asks :func:`traits_of`.
    """
    found = {f.name: getattr(declared, f.name, _MISSING) for f in fields(Traits)}
    return {name: value for name, value in found.items() if value is not _MISSING}


def trait_problems(declared: Mapping[str, object]) -> list[str]:
    """One phrase per declared trait of the wrong type (``[]`` if none); a missing trait is no problem here."""
    return [
        f"{name} is {value!r}, expected {TRAIT_KINDS[name][0]}"
        for name, value in declared.items()
        if name in TRAIT_KINDS and not TRAIT_KINDS[name][1](value)
    ]


def traits_of(cls: type) -> Traits:
    """The :class:`Traits` record of a backend class, read and checked once per class.

    A declaration of the wrong type is one :class:`~lockcompare.errors.BackendLoadError` line.

    >>> class Mine:
    ...     summary = "mine"
    ...     exclusive = True
    ...     issues_fencing_tokens = False
    ...     servers = "etcd"
    >>> traits_of(Mine).servers, traits_of(Mine).has_ttl
    ('etcd', True)
    >>> class Wrong(Mine):
    ...     has_ttl = "no"
    >>> traits_of(Wrong)
    Traceback (most recent call last):
    ...
    lockcompare.errors.BackendLoadError: backend Wrong declares has_ttl is 'no', expected a bool (see docs/plugins.md)
    """
    cached = _TRAITS.get(cls)
    if cached is not None:
        return cached
    declared = declared_traits(cls)
    if declared.get("summary") is None:  # required: its absence is require_declarations' to refuse
        declared.pop("summary", None)
    problems = trait_problems(declared)
    if problems:
        raise BackendLoadError(f"backend {cls.__name__} declares {'; '.join(problems)} (see docs/plugins.md)")
    for name, hooks in _HOOKED.items():
        declared.setdefault(name, any(callable(getattr(cls, hook, None)) for hook in hooks))
    traits = Traits(**declared)  # type: ignore[arg-type]
    _TRAITS[cls] = traits
    return traits


_TRAITS: weakref.WeakKeyDictionary[type, Traits] = weakref.WeakKeyDictionary()


def first_node(node_urls: Sequence[str]) -> str:
    if not node_urls:
        raise ValueError("this backend needs at least one lock node")
    return node_urls[0]
