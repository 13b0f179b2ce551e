"""The closed sets of values some settings take, shared by the spec, the runner and the CLI."""

from __future__ import annotations

from enum import StrEnum

from lockcompare.protocols import resource_protocols


class Check(StrEnum):
    """What the resource checks when a critical section touches the balance."""

    PLAIN = "plain"  # read, write: nothing checked (a lock without fencing)
    FENCE_WRITES = "fence-writes"  # the fencing token is checked on the final write only
    FENCE_ALL = "fence-all"  # the read carries the token too and raises the high-water mark
    TOKEN_CAS = "token-cas"  # the read stores the lease's random token; the write needs it unchanged
    ATOMIC = "atomic"  # no read-modify-write: one INCRBY
    OPTIMISTIC = "optimistic"  # WATCH the balance, read, MULTI/SET/EXEC; retry when it changed
    PARTITIONED = "partitioned"  # each worker read-modify-writes its own key (backends/partitioned.py)
    PARTITIONED_SKEW = "partitioned-skew"  # ...and a share of its updates falls on another worker's key
    FOR_UPDATE = "pg-for-update"  # a transaction: SELECT ... FOR UPDATE, work, UPDATE, COMMIT (PostgreSQL)
    SERIALIZABLE = "pg-serializable"  # a SERIALIZABLE transaction, retried on serialization failure
    IDEMPOTENT = "idempotent"  # an atomic increment carrying a request id the resource remembers


#: What the resource checks, as --fence names it: the token on the write, on every access, or the
#: lease's random token by check-and-set.
FENCE_MODES = ("writes", "all", "token")

#: lesson: each worker runs its rounds and stops; contend: no worker ever runs alone.
WORKLOADS = ("lesson", "contend")
DEFAULT_WORKLOAD = "lesson"


class PausePoint(StrEnum):
    """Where in a round a scheduled pause lands."""

    AFTER_ACQUIRE = "after-acquire"  # the lesson's lab: the zombie wakes before it reads
    BEFORE_WRITE = "before-write"  # read → work → pause → write: the zombie wakes holding a stale read
    #: read → work → lease check → pause → write: the check passed, then the world stopped — what
    #: a check-then-act client cannot prevent (the worker skips a write only when the check fails;
    #: a backend without a ``before_write`` check writes either way: as ``before-write`` for it).
    AFTER_CHECK = "after-check"
    #: Inside the acquire, after its requests went out and before their replies are read (Kleppmann's
    #: pause during the acquire): only where the backend offers the point (backends/pause_point.py).
    IN_ACQUIRE = "in-acquire"


class PauseHow(StrEnum):
    """How a worker is paused."""

    SLEEP = "sleep"  # in-process sleep, as in the lesson's lab: only the sleeping thread stops
    SIGSTOP = "sigstop"  # a real freeze from outside: every thread of the process stops


#: Where the resource lives (--resource-kind): "auto" takes the backend's ``resource_kind`` attribute
#: (the pg backends: PostgreSQL, the database checks the token itself), else a redis-server; or the
#: protocol of any installed resource (read once, from the registry's names: protocols.py).
RESOURCE_KINDS = ("auto", *resource_protocols())
