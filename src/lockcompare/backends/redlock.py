"""``redlock``: the Redlock algorithm over N independent lock nodes, as Redis's documentation gives it.

Spec: "Distributed Locks with Redis", section "The Redlock Algorithm"
(https://redis.io/docs/latest/develop/use/patterns/distributed-locks/). With N nodes and a quorum
of N//2+1, one acquire is:

1. read the clock (here ``time.monotonic_ns()``) before any request is sent;
2. ``SET key token NX PX ttl`` on every node, with the same key and the same random token everywhere,
   each node given a timeout that is small next to the TTL, so that a dead node costs little;
3. elapsed = the time from step 1 (T1) until the WHOLE fan-out is over (T2: the last reply was
   read, or the last node's timeout ran out), not until the quorum-th grant: the spec measures
   "the time elapsed to acquire the lock", and the acquire is not over while requests are still
   out. The lock is acquired iff at least a quorum granted and the validity
   ``TTL - elapsed - drift`` is positive, where ``drift = 1 % of TTL + 2 ms`` allows for processes
   whose clocks run at slightly different rates. So a quorum that answered in time is still
   refused (``validity``) when slow nodes kept the acquire going past ``TTL - drift``;
4. the holder may count on the lock for that validity, i.e. until ``T2 + validity``
   (= ``T1 + TTL - drift``: every key was set no earlier than T1, so it lives at least until then);
5. on any failure, release on *all* nodes, also those that seemed not to grant (a SET may have
   landed even though its reply was lost or late). Only a node the SET never even left for (its
   connect failed) is skipped: it cannot hold the key.

Release runs the compare-and-delete script (:data:`~lockcompare.backends.single.RELEASE_SCRIPT`) on
every node. The spec's "retry after a random delay" (section "Retry on Failure") is the harness's
job: ``acquire`` tries exactly once and returns a :class:`Refusal`.

Choices the spec leaves open, made here:

* **Concurrency.** The spec asks for the SETs to go out "at the same time using multiplexing" (send
  all, read all later): one thread writes the request to every node, then reads every reply
  (:func:`~lockcompare.backends.redis_fanout.fan_out`, which says what that measured). Each node
  keeps one persistent connection. Replies are read in node order; elapsed ends when the last one
  is read or given up on.
* **Per-node timeout** = ``min(request_timeout_s, max(5 ms, TTL / 10))``, counted for each node
  from the moment its request was written. TTL/10 is "small next to the TTL": a node that has not answered
  by then would leave at most ~90 % of the lease, and a partitioned node then costs a tenth of the
  TTL, not the TTL. The 5 ms floor keeps a loaded 2-core machine's scheduling jitter (several ms;
  a loopback round trip is ~0.15 ms) from being mistaken for a dead node at short TTLs, and
  ``request_timeout_s`` caps it for long TTLs. A reply that is already waiting is always read,
  even past the deadline: if *this process* stalled, the elapsed-time check is what must refuse.
  Consequence: a reply slower than the timeout counts as a failed node (``no-quorum``); a
  ``validity`` refusal comes from TTLs too short for the drift allowance (<= ~2 ms), from this
  client stalling mid-acquire, or from a subclass that raises the timeout above the TTL.
* **A node that fails** (connection refused, error, or no reply by the deadline) counts as not
  granted; the fan-out drops its connection at once and reconnects every such node at once on the
  next call, so a partitioned node costs one per-node timeout per acquire however many there are
  (redis_fanout.py says how). A request abandoned this way may still land
  after the release that follows it: that key then has no holder and expires after the TTL (an
  availability cost on one node, never two holders).
* **Refusal reasons.** ``validity``: a quorum granted, too late. ``held``: the nodes that answered
  "already set" are alone enough to rule out a quorum, so unreachable nodes could not have changed
  the outcome: contention, including a split vote between racing contenders. ``no-quorum``: too
  few grants, and the failed nodes made the difference (they could have completed a quorum).
* **Release result.** ``True`` iff the owner's key was deleted on at least a quorum of nodes. A
  token can only exist on a node if it was there continuously since our SET, so True means this
  holder still held a majority when it released (no one else could have held the lock meanwhile).
  ``False`` — the harness's "failed release" — means the lease had already lapsed on enough nodes
  (expiry, a node restarted empty, a node unreachable) that it was no longer a majority lock; the
  remaining copies are deleted all the same.
* The compare-and-delete goes out as ``EVALSHA`` (measured a few % cheaper per acquire+release
  than ``EVAL`` on 5 loopback nodes), with ``EVAL`` sent to just the nodes that answer NOSCRIPT
  (a node restarted with an empty script cache), in a second fan-out.

Example, against five running redis-servers::

    >>> lock = Redlock(config=BackendConfig(node_urls=urls))     # doctest: +SKIP
    >>> lease = lock.acquire(key="demo", ttl_ms=1000)             # doctest: +SKIP
    >>> lock.release(lease)                                       # doctest: +SKIP
    True
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from typing import ClassVar, Final

import redis

from lockcompare.backends import pause_point
from lockcompare.backends.base import BackendConfig, Lease, Refusal
from lockcompare.backends.redis_fanout import NOT_SENT, Node, Reply, fan_out
from lockcompare.backends.single import RELEASE_SCRIPT, new_owner_token
from lockcompare.errors import InvalidValueError

#: The clock-drift allowance of the Redlock client libraries: 1 % of the TTL plus 2 ms (redlock-py, pottery,
#: node-redlock). The spec itself asks only for "a few milliseconds" to compensate for drift between processes.
DRIFT_PER_TTL: Final = 0.01
DRIFT_FIXED_NS: Final = 2_000_000

#: EVALSHA name of the compare-and-delete script; EVAL is the fallback on NOSCRIPT.
RELEASE_SHA: Final = hashlib.sha1(RELEASE_SCRIPT.encode()).hexdigest()


def quorum(node_count: int) -> int:
    """How many nodes must grant: a strict majority.

    >>> [quorum(n) for n in (1, 2, 3, 4, 5)]
    [1, 2, 2, 3, 3]
    """
    return node_count // 2 + 1


def clock_drift_ns(ttl_ms: int) -> int:
    """The client libraries' drift allowance in ns: 1 % of the TTL + 2 ms (the spec: "a few milliseconds").

    >>> clock_drift_ns(1000)
    12000000
    """
    return round(ttl_ms * 1_000_000 * DRIFT_PER_TTL) + DRIFT_FIXED_NS


def lock_node_urls(config: BackendConfig) -> tuple[str, ...]:
    """The first ``config.node_count`` node URLs (all of them when it is None)."""
    urls = config.node_urls
    count = len(urls) if config.node_count is None else config.node_count
    if count < 1:
        raise InvalidValueError(f"a Redlock needs at least one lock node, got node_count={count}")
    if count > len(urls):
        raise InvalidValueError(f"node_count={count} but only {len(urls)} lock node URLs were given")
    return tuple(urls[:count])


class Redlock:
    """Redlock over the first ``node_count`` lock nodes: quorum N//2+1, validity TTL - elapsed - drift."""

    summary: ClassVar[str] = "Redlock: SET NX PX on N nodes at once, majority quorum, validity = TTL - elapsed - drift"
    #: The client request timeout (used where links are slowed or cut; it caps the
    #: per-node timeout, TTL/10): lockcompare's own choice for
    #: its built-ins, 2 s (infra.redis.client.DEFAULT_TIMEOUT_S: generous next to a loopback round trip).
    client_timeout_s: ClassVar[float] = 2.0
    exclusive: ClassVar[bool] = True
    issues_fencing_tokens: ClassVar[bool] = False
    libraries: ClassVar[tuple[str, ...]] = ("redis",)  # recorded with their versions in every row
    #: A majority quorum: keeps granting (and stays exclusive) with a minority of its nodes down.
    survives_minority_loss: ClassVar[bool] = True
    #: Its acquire stops at backends/pause_point.py once every SET is out, before a reply is read
    #: and the validity computed (Kleppmann's pause during the acquire).
    pauses_inside_acquire: ClassVar[bool] = True

    #: Per-node timeout = min(request_timeout_s, max(NODE_TIMEOUT_FLOOR_S, TTL * NODE_TIMEOUT_TTL_FRACTION));
    #: a subclass may change them (e.g. to wait past the TTL and see ``validity`` refusals instead).
    NODE_TIMEOUT_TTL_FRACTION: ClassVar[float] = 0.1
    NODE_TIMEOUT_FLOOR_S: ClassVar[float] = 0.005

    def __init__(self, *, config: BackendConfig) -> None:
        urls = lock_node_urls(config)
        self._request_timeout_s = config.request_timeout_s
        self._nodes = [Node(url, timeout_s=config.request_timeout_s) for url in urls]
        for node in self._nodes:
            node.try_connect()
        self.quorum = quorum(len(self._nodes))
        # release() has no TTL to size its timeout by: it reuses the last acquire's.
        self._release_timeout_s = config.request_timeout_s

    @property
    def node_urls(self) -> tuple[str, ...]:
        return tuple(node.url for node in self._nodes)

    def node_timeout_s(self, *, ttl_ms: int) -> float:
        """How long each node is given to answer, for a lease of ``ttl_ms`` (see the module docstring)."""
        return self.node_timeout_for(ttl_ms=ttl_ms, request_timeout_s=self._request_timeout_s)

    @classmethod
    def node_timeout_for(cls, *, ttl_ms: int, request_timeout_s: float) -> float:
        """:meth:`node_timeout_s` without an instance (the bench's fan-out floor sizes its waits by it)."""
        scaled = max(cls.NODE_TIMEOUT_FLOOR_S, ttl_ms / 1000 * cls.NODE_TIMEOUT_TTL_FRACTION)
        return min(request_timeout_s, scaled)

    def acquire(self, *, key: str, ttl_ms: int) -> Lease | Refusal:
        """One Redlock attempt (spec steps 1-5); no retry: the harness retries after its own delay."""
        owner = new_owner_token()
        timeout_s = self.node_timeout_s(ttl_ms=ttl_ms)
        self._release_timeout_s = timeout_s
        started_ns = time.monotonic_ns()  # T1: before the first request can set any key
        replies = fan_out(
            self._nodes,
            ("SET", key, owner, "NX", "PX", ttl_ms),
            timeout_s=timeout_s,
            after_send=pause_point.inside_acquire,
        )
        verdict = self._judge(replies, started_ns=started_ns, ttl_ms=ttl_ms)
        if isinstance(verdict, Refusal):
            # Step 5: every node the SET reached, not only the grantors. A node the request never
            # left cannot hold the key: skipping it spares a partitioned node a second timeout.
            reached = [node for node, (reply, _) in zip(self._nodes, replies, strict=True) if reply is not NOT_SENT]
            self._delete_everywhere(key=key, owner=owner, nodes=reached)
            return verdict
        granted_by = tuple(i for i, (reply, _) in enumerate(replies) if reply == b"OK")
        return Lease(key=key, owner=owner, valid_until_ns=verdict, granted_by=granted_by)

    def release(self, lease: Lease) -> bool:
        """Compare-and-delete on every node; True iff a quorum still held this owner's key."""
        return self._delete_everywhere(key=lease.key, owner=lease.owner, nodes=self._nodes) >= self.quorum

    def close(self) -> None:
        for node in self._nodes:
            node.discard()

    def _judge(self, replies: list[Reply], *, started_ns: int, ttl_ms: int) -> int | Refusal:
        """The lease's deadline (monotonic ns), or why there is none."""
        grants = sum(1 for reply, _ in replies if reply == b"OK")  # SET NX: OK or nil
        if grants < self.quorum:
            return Refusal(self._why_no_quorum(replies))
        finished_ns = max(read_ns for _, read_ns in replies)  # T2: the whole fan-out is over
        elapsed_ns = finished_ns - started_ns
        validity_ns = ttl_ms * 1_000_000 - elapsed_ns - clock_drift_ns(ttl_ms)
        if validity_ns <= 0:
            return Refusal("validity")
        return finished_ns + validity_ns

    def _why_no_quorum(self, replies: list[Reply]) -> str:
        # "held" when the "already set" answers alone rule out a quorum; else failures decided it.
        taken = sum(1 for reply, _ in replies if reply is None)
        return "held" if taken > len(replies) - self.quorum else "no-quorum"

    def _delete_everywhere(self, *, key: str, owner: str, nodes: Sequence[Node]) -> int:
        """How many of ``nodes`` deleted ``owner``'s key (compare-and-delete on each)."""
        if not nodes:
            return 0
        args = (1, key, owner)
        timeout_s = self._release_timeout_s
        replies = fan_out(nodes, ("EVALSHA", RELEASE_SHA, *args), timeout_s=timeout_s)
        deleted = sum(1 for reply, _ in replies if reply == 1)
        # A node that restarted has an empty script cache: EVAL there loads the script again.
        unloaded = [node for node, (reply, _) in zip(nodes, replies, strict=True) if _noscript(reply)]
        if unloaded:
            retried = fan_out(unloaded, ("EVAL", RELEASE_SCRIPT, *args), timeout_s=timeout_s)
            deleted += sum(1 for reply, _ in retried if reply == 1)
        return deleted


def _noscript(reply: object) -> bool:
    return isinstance(reply, redis.exceptions.NoScriptError)
