"""The protected resource: what the lock is supposed to protect, on a server of its own.

It keeps an occupancy counter (how many workers are inside the critical section right now), an
account balance that every critical section increments, a fence high-water mark and the owner
token last stored with the balance. It counts at the source, atomically on its server: entries,
conflicts (an entry that found someone already inside), and accepted / rejected reads and writes.
Those counters are the resource's own account of what happened, independent of what the workers
recorded in the history.

How the balance is touched is the *resource check* (see :class:`Check`): a plain read and write,
a fencing token checked on the write only or on every access, antirez's check-and-set on the
lease's random token, or no lock at all (an atomic increment, or an optimistic compare-and-set).

A resource is a kind too: :class:`Resource` is the interface, and which implementation serves a
URL is asked of the registry, the entry-point group ``lockcompare.resources`` (named by the
protocol its server speaks; the built-ins: runner/resource_redis.py, runner/resource_pg.py): the
one whose ``owns`` takes the URL. A third kind of resource is one module and one entry point; the
runner does not change. (The registry loads only the resources, never every server kind: a worker
process opens one, and its start-up is part of each trial's CPU.)
"""

from __future__ import annotations

import functools
from importlib.metadata import entry_points
from typing import Any, ClassVar, Protocol

from lockcompare.analysis.counters import ResourceCounters
from lockcompare.errors import UnknownNameError
from lockcompare.protocols import RESOURCE_ENTRY_POINT_GROUP
from lockcompare.scenario.choices import Check

__all__ = [
    "Check",
    "Resource",
    "ResourceCounters",
    "open_resource",
    "registered_resources",
    "resource_for",
    "resource_speaking",
]

ENTRY_POINT_GROUP = RESOURCE_ENTRY_POINT_GROUP


class Resource(Protocol):
    """A worker's (or the runner's) handle on one trial's part of the resource."""

    #: The exceptions a call raises when the resource's server fails under it: the runner counts a
    #: failure of these as a resource that died (an unknown trial), anything else as a bug.
    failures: ClassVar[tuple[type[Exception], ...]]
    #: The workers' link to its server can go through a proxy lockcompare controls, so that the
    #: faults acting on that link (delayed-write, lost-reply: ``on_resource_link``) can run.
    link_proxied: ClassVar[bool]

    def __init__(self, *, url: str, prefix: str, timeout_s: float = 2.0) -> None: ...

    @classmethod
    def owns(cls, url: str) -> bool:
        """Whether the resource lives on the server at ``url`` (its scheme: the servers it speaks to)."""
        ...

    def enter(self) -> int:
        """Enter the critical section; returns how many workers are inside now (>1: a conflict)."""
        ...

    def exit(self) -> None: ...

    def read_balance(
        self, *, check: Check = Check.PLAIN, fencing_token: int | None = None, owner: str = ""
    ) -> int | None:
        """The balance, or None when the resource refuses the read (a fenced read with a stale token)."""
        ...

    def write_balance(
        self, value: int, *, check: Check = Check.FENCE_WRITES, fencing_token: int | None = None, owner: str = ""
    ) -> bool:
        """Write the new balance; a checked write may be rejected (False)."""
        ...

    def increment(self) -> bool:
        """The lock-free critical section: one atomic increment."""
        ...

    def read_partition(self, partition: int) -> int: ...
    def write_partition(self, partition: int, value: int) -> bool: ...
    def increment_once(self, request_id: str, *, dedupe: bool) -> bool: ...

    def watch_balance(self) -> tuple[Any, int]:
        """Start an optimistic update: (what :meth:`commit_balance` takes back, the balance read)."""
        ...

    def commit_balance(self, pending: Any, value: int) -> bool:
        """Finish an optimistic update; False if the balance changed since the read."""
        ...

    def prepare(self, *, expire_s: float) -> None:
        """Create this trial's part with an expiry, so that a killed run leaves nothing behind for good."""
        ...

    def reset(self) -> None:
        """Delete this trial's part (only ours: servers are never flushed)."""
        ...

    def counters(self) -> ResourceCounters: ...
    def close(self) -> None: ...


@functools.cache
def registered_resources() -> dict[str, type[Resource]]:
    """Every installed resource by the protocol of its server (entry-point group ``lockcompare.resources``)."""
    return {entry.name: entry.load() for entry in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name)}


def resource_for(url: str) -> type[Resource]:
    """The resource that lives on the server at ``url``: the registered one whose ``owns`` takes it."""
    resources = registered_resources()
    for cls in resources.values():
        if cls.owns(url):
            return cls
    known = ", ".join(resources) or "none installed"
    raise UnknownNameError(f"no installed resource lives on {url.split('://', 1)[0]}:// servers (known: {known})")


def resource_speaking(protocol: str) -> type[Resource]:
    """The installed resource whose server speaks ``protocol`` (a trial's ``resource_kind``)."""
    resources = registered_resources()
    if protocol not in resources:
        known = ", ".join(resources) or "none installed"
        raise UnknownNameError(f"no installed resource lives on {protocol} servers (known: {known})")
    return resources[protocol]


def open_resource(*, url: str, prefix: str, timeout_s: float = 2.0) -> Resource:
    """A handle on the resource at ``url`` under one trial's ``prefix``."""
    return resource_for(url)(url=url, prefix=prefix, timeout_s=timeout_s)
