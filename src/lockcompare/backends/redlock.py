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

* **Concurrency.** The spec asks for the SETs to go out "at the same time using multiplexing"
  (send all, read all later). One thread writes the request to every node, then reads every reply:
  on a 2-core machine this measured ~0.45 ms per acquire+release against 1.1-2 ms for sequential
  calls and 2-3 ms for a thread pool (acquire+release p50, 3 runs of 500). Each node keeps one persistent connection.
  Replies are read in node order; elapsed ends when the last one is read or given up on.
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
  granted, and its connection is dropped at once: the late reply would otherwise be read as the
  answer to the next command on that connection (a pipelined protocol never resynchronises by
  itself). The next fan-out reconnects every such node AT ONCE: non-blocking TCP connects to all
  of them, then one wait (bounded by the per-node timeout) in which each node's request is written
  as soon as its connect completes, while the replies of the connected nodes are already on their
  way. So a partitioned node whose connect hangs costs one per-node timeout per acquire, however
  many such nodes there are (connecting one after another would cost one timeout per node).
  redis-py's connect handshake (HELLO, CLIENT SETINFO) is switched off so a reconnect is one TCP
  connect, not extra round trips that could block on a stuck node. A request abandoned this way may still land
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

import errno
import hashlib
import inspect
import select
import selectors
import socket
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar, Final

import hiredis
import redis
from redis._parsers.base import BaseParser

from lockcompare.backends.base import BackendConfig, Lease, Refusal
from lockcompare.backends.single import RELEASE_SCRIPT, new_owner_token
from lockcompare.errors import InvalidValueError
from lockcompare.infra.redisconn import connect

try:
    from redis.maint_notifications import (
        MaintNotificationsConfig as _MaintNotificationsConfig,
    )
except ImportError:  # redis-py < 8
    _MaintNotificationsConfig = None  # type: ignore[assignment,misc]  # absent class: None, checked before use

if TYPE_CHECKING:
    from redis.connection import AbstractConnection

#: The spec's clock-drift allowance: 1 % of the TTL plus 2 ms (pottery and redlock-py use the same).
DRIFT_PER_TTL: Final = 0.01
DRIFT_FIXED_NS: Final = 2_000_000

#: Stands for "this node gave no reply" (down, or too slow). An error reply is returned as the
#: :class:`redis.ResponseError` it is (the connection stays in step); neither counts as a grant.
NO_REPLY: Final = object()

#: Stands for "the request never left": the node could not be (re)connected. Like NO_REPLY it is
#: not a grant, but the node cannot hold the key, so a refused acquire need not release there.
NOT_SENT: Final = object()

#: EVALSHA name of the compare-and-delete script; EVAL is the fallback on NOSCRIPT.
RELEASE_SHA: Final = hashlib.sha1(RELEASE_SCRIPT.encode()).hexdigest()

#: redis-py 8 bounds a single read itself (``read_response(timeout=...)``: one poll + recv); older
#: versions need ``can_read(timeout)`` first, which costs a few more system calls per node.
_READ_TAKES_TIMEOUT: Final = "timeout" in inspect.signature(redis.Connection.read_response).parameters

#: Plain TCP and unix sockets are written and read directly (see :class:`_Node`); TLS ones go
#: through redis-py. False sends every node through redis-py (the tests run both paths).
_RAW_SOCKETS = True

#: A reply and when it was read (``time.monotonic_ns()``).
Reply = tuple[object, int]


def quorum(node_count: int) -> int:
    """How many nodes must grant: a strict majority.

    >>> [quorum(n) for n in (1, 2, 3, 4, 5)]
    [1, 2, 2, 3, 3]
    """
    return node_count // 2 + 1


def clock_drift_ns(ttl_ms: int) -> int:
    """The spec's drift allowance in ns: 1 % of the TTL + 2 ms.

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


def _handshake_free_connection(client: redis.Redis) -> AbstractConnection:
    """A new, unconnected connection with ``client``'s settings (no retries, short timeouts).

    The settings come from :func:`lockcompare.infra.redisconn.connect`; only the connect handshake is
    switched off, so that a reconnect in the middle of an acquire is a bare TCP connect and not
    extra round trips that a stuck or slowed node would hold up: RESP2 (redis-py 8 otherwise sends
    HELLO 3 and a CLIENT MAINT_NOTIFICATIONS probe; SET and EVAL replies read the same in both), and
    no CLIENT SETINFO (``driver_info=None`` in redis-py 8, ``lib_name``/``lib_version`` before).
    """
    pool = client.connection_pool
    # A client built with redis.Redis(...) (infra/redisconn.py, since the one URL parser) carries its
    # own driver_info / lib_name in the pool's kwargs: passing ours beside them raised TypeError, and
    # the fallback below connected WITH the SETINFO handshake — a reconnect to a paused node then
    # waited on it (test_slow_majority_beyond_the_node_timeout: 170-245 ms against a 5 ms timeout).
    setinfo = ("driver_info", "lib_name", "lib_version")
    kwargs = {k: v for k, v in pool.connection_kwargs.items() if k not in setinfo} | {"protocol": 2}
    if _MaintNotificationsConfig is not None:
        # redis-py >= 8 probes for cluster maintenance push notifications, which RESP2 with the
        # pure-Python parser cannot carry (it raises at connect time without hiredis).
        kwargs["maint_notifications_config"] = _MaintNotificationsConfig(enabled=False)
    for no_setinfo in ({"driver_info": None}, {"lib_name": None, "lib_version": None}):
        try:
            return pool.connection_class(**kwargs, **no_setinfo)
        except TypeError:  # this redis-py does not know that keyword
            continue
    return pool.connection_class(**kwargs)


def pack(command: Sequence[object]) -> bytes:
    """``command`` as one RESP request (what redis-py's ``pack_command`` sends, for str, bytes and int).

    >>> pack(("SET", "k", "v", "PX", 10))
    b'*5\\r\\n$3\\r\\nSET\\r\\n$1\\r\\nk\\r\\n$1\\r\\nv\\r\\n$2\\r\\nPX\\r\\n$2\\r\\n10\\r\\n'
    """
    parts = [b"*%d\r\n" % len(command)]
    for arg in command:
        data = arg if isinstance(arg, bytes) else str(arg).encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(parts)


class _Node:
    """One lock node behind one persistent connection, dropped whenever its replies may be out of step.

    redis-py opens and closes the connection; on a plain (non-TLS) socket the fan-out itself then
    writes and reads it directly: the socket in non-blocking mode, a hiredis reader of its own.
    A request is one ``send``, a reply that is already there one ``recv`` (redis-py's timed reads
    poll before every send and recv, and wrap each in several Python calls: with five nodes that
    was most of the fan-out's own cost).
    """

    def __init__(self, url: str, *, timeout_s: float) -> None:
        self.url = url
        self._conn = _handshake_free_connection(connect(url, timeout_s=timeout_s))
        self._raw = _RAW_SOCKETS and not isinstance(self._conn, redis.SSLConnection)
        self._sock: socket.socket | None = None  # the raw path's socket, once connected
        self._reader = hiredis.Reader()

    def _adopt(self) -> None:
        """After a connect: take the socket over for the raw path (redis-py's connect is done with it)."""
        if self._raw and self._conn._sock is not None:
            self._sock = self._conn._sock
            self._sock.setblocking(False)
            self._reader = hiredis.Reader()

    def try_connect(self) -> None:
        """Connect now if possible, so the first acquire does not pay for it; a dead node is fine.

        Bounded by ``request_timeout_s`` (the connection's own connect timeout): this runs in the
        constructor, before any timed operation.
        """
        try:
            self._conn.connect()
        except redis.RedisError:
            self.discard()
            return
        self._adopt()

    @property
    def connected(self) -> bool:
        return self._conn._sock is not None

    def begin_connect(self, *, timeout_s: float) -> socket.socket | None:
        """Start a non-blocking TCP connect; the socket to wait on, or None (connected, or failed).

        Connections that are not plain TCP (unix sockets, TLS) connect here, blocking, bounded by
        ``timeout_s``: they are not what the harness partitions.
        """
        if type(self._conn) is not redis.Connection:
            self._conn.socket_connect_timeout = timeout_s
            try:
                self._conn.connect()
            except redis.RedisError:
                self.discard()
                return None
            self._adopt()
            return None
        sock: socket.socket | None = None
        try:
            family, socktype, proto, _, address = socket.getaddrinfo(
                self._conn.host, self._conn.port, type=socket.SOCK_STREAM
            )[0]
            sock = socket.socket(family, socktype, proto)
            sock.setblocking(False)
            error = sock.connect_ex(address)
        except OSError:
            if sock is not None:
                sock.close()
            return None
        if error not in (0, errno.EINPROGRESS):
            sock.close()  # refused at once: a dead node costs nothing
            return None
        return sock

    def finish_connect(self, sock: socket.socket) -> bool:
        """Adopt ``sock`` once its connect completed; False (and the socket closed) if it failed."""
        if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) != 0:
            sock.close()
            return False
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as redis-py's own connect
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        sock.settimeout(self._conn.socket_timeout)
        # redis-py's connect() with its socket factory swapped for this socket: its own state
        # (parser, handshake-free on_connect) is set up exactly as for a connect it made itself.
        self._conn._connect = lambda: sock  # type: ignore[method-assign]
        try:
            self._conn.connect()
        except redis.RedisError:
            self.discard()
            return False
        finally:
            del self._conn._connect
        self._adopt()
        return True

    def send(self, request: bytes) -> bool:
        """Write one packed request on the open connection; False if it is closed or broken."""
        if not self.connected:
            return False  # never a hidden blocking reconnect: fan_out connects, concurrently
        if self._sock is not None:
            try:
                sent = self._sock.send(request)
            except OSError:  # broken, or (never seen: a request is ~100 bytes) a full send buffer
                sent = -1
            if sent == len(request):
                return True
            self.discard()  # a partial request would put the connection out of step
            return False
        try:
            self._conn.send_packed_command([request], check_health=False)
        except redis.RedisError:
            self.discard()
            return False
        return True

    def read(self, *, deadline_ns: int) -> object:
        """The reply to the command just sent, or :data:`NO_REPLY` if none came by ``deadline_ns``.

        Past the deadline the wait is 0 s, which still picks up a reply that is already waiting.
        """
        if self._sock is not None:
            return self._read_raw(self._sock, deadline_ns=deadline_ns)
        wait_s = max(0.0, (deadline_ns - time.monotonic_ns()) / 1e9)
        try:
            if _READ_TAKES_TIMEOUT:
                return self._conn.read_response(timeout=wait_s)
            if not self._conn.can_read(timeout=wait_s):
                self.discard()
                return NO_REPLY
            return self._conn.read_response()
        except redis.ResponseError as error_reply:  # OOM, LOADING, NOSCRIPT...: consumed, still in step
            return error_reply
        except redis.RedisError:  # no reply in time, or a broken connection
            self.discard()  # a late reply must never be read as the answer to the next command
            return NO_REPLY

    def _read_raw(self, sock: socket.socket, *, deadline_ns: int) -> object:
        reply = self._reader.gets()
        while reply is False:  # hiredis: no whole reply buffered yet
            try:
                data = sock.recv(65536)
            except BlockingIOError:
                wait_s = (deadline_ns - time.monotonic_ns()) / 1e9
                if wait_s > 0 and select.select((sock,), (), (), wait_s)[0]:
                    continue
                try:  # the deadline passed: a reply already waiting is still read (one last look)
                    data = sock.recv(65536)
                except OSError:
                    data = b""
            except OSError:
                data = b""
            if not data:  # closed, broken, or no reply in time
                self.discard()  # a late reply must never be read as the answer to the next command
                return NO_REPLY
            self._reader.feed(data)
            try:
                reply = self._reader.gets()
            except hiredis.ProtocolError:  # not RESP: nothing after it can be trusted either
                self.discard()
                return NO_REPLY
        if isinstance(reply, hiredis.ReplyError):  # as redis-py raises it: NoScriptError for NOSCRIPT...
            return BaseParser.parse_error(str(reply))
        return reply

    def discard(self) -> None:
        self._sock = None
        self._conn.disconnect()


def fan_out(nodes: Sequence[_Node], command: Sequence[object], *, timeout_s: float) -> list[Reply]:
    """Send ``command`` to every node, then read every reply: (reply, NO_REPLY or NOT_SENT; read time) per node.

    Disconnected nodes are reconnected concurrently, within ``timeout_s``; each node's reply gets
    ``timeout_s`` counted from when its request was written.
    """
    packed = pack(command)  # the same bytes for every node: pack once
    timeout_ns = int(timeout_s * 1e9)
    deadlines: list[int | None] = [None] * len(nodes)  # None: the request was not sent
    connecting: dict[socket.socket, int] = {}
    for index, node in enumerate(nodes):
        if not node.connected:
            sock = node.begin_connect(timeout_s=timeout_s)
            if sock is not None:
                connecting[sock] = index
                continue
        if node.send(packed):
            deadlines[index] = time.monotonic_ns() + timeout_ns
    if connecting:
        _finish_connects(nodes, connecting, packed=packed, deadlines=deadlines, timeout_ns=timeout_ns)
    replies: list[Reply] = []
    for node, deadline_ns in zip(nodes, deadlines, strict=True):
        reply = node.read(deadline_ns=deadline_ns) if deadline_ns is not None else NOT_SENT
        replies.append((reply, time.monotonic_ns()))
    return replies


def _finish_connects(
    nodes: Sequence[_Node],
    connecting: dict[socket.socket, int],
    *,
    packed: bytes,
    deadlines: list[int | None],
    timeout_ns: int,
) -> None:
    """Wait, at most ``timeout_ns``, for the connects in flight; send to each node as it connects."""
    give_up_ns = time.monotonic_ns() + timeout_ns
    with selectors.DefaultSelector() as selector:
        for pending in connecting:
            selector.register(pending, selectors.EVENT_WRITE)
        while connecting:
            wait_s = (give_up_ns - time.monotonic_ns()) / 1e9
            if wait_s <= 0:
                break
            for selected, _ in selector.select(wait_s):
                sock = selected.fileobj
                assert isinstance(sock, socket.socket)
                selector.unregister(sock)
                index = connecting.pop(sock)
                if nodes[index].finish_connect(sock) and nodes[index].send(packed):
                    deadlines[index] = time.monotonic_ns() + timeout_ns
        for sock in connecting:  # never connected: these nodes count as failed
            selector.unregister(sock)
            sock.close()


class Redlock:
    """Redlock over the first ``node_count`` lock nodes: quorum N//2+1, validity TTL - elapsed - drift."""

    summary: ClassVar[str] = "Redlock: SET NX PX on N nodes at once, majority quorum, validity = TTL - elapsed - drift"
    #: The client request timeout (used where links are slowed or cut; it caps the
    #: per-node timeout, TTL/10): lockcompare's own choice for
    #: its built-ins, 2 s (infra.redisconn.DEFAULT_TIMEOUT_S: generous next to a loopback round trip).
    client_timeout_s: ClassVar[float] = 2.0
    exclusive: ClassVar[bool] = True
    issues_fencing_tokens: ClassVar[bool] = False
    #: A majority quorum: keeps granting (and stays exclusive) with a minority of its nodes down.
    survives_minority_loss: ClassVar[bool] = True

    #: Per-node timeout = min(request_timeout_s, max(NODE_TIMEOUT_FLOOR_S, TTL * NODE_TIMEOUT_TTL_FRACTION));
    #: a subclass may change them (e.g. to wait past the TTL and see ``validity`` refusals instead).
    NODE_TIMEOUT_TTL_FRACTION: ClassVar[float] = 0.1
    NODE_TIMEOUT_FLOOR_S: ClassVar[float] = 0.005

    def __init__(self, *, config: BackendConfig) -> None:
        urls = lock_node_urls(config)
        self._request_timeout_s = config.request_timeout_s
        self._nodes = [_Node(url, timeout_s=config.request_timeout_s) for url in urls]
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
        scaled = max(self.NODE_TIMEOUT_FLOOR_S, ttl_ms / 1000 * self.NODE_TIMEOUT_TTL_FRACTION)
        return min(self._request_timeout_s, scaled)

    def acquire(self, *, key: str, ttl_ms: int) -> Lease | Refusal:
        """One Redlock attempt (spec steps 1-5); no retry: the harness retries after its own delay."""
        owner = new_owner_token()
        timeout_s = self.node_timeout_s(ttl_ms=ttl_ms)
        self._release_timeout_s = timeout_s
        started_ns = time.monotonic_ns()  # T1: before the first request can set any key
        replies = fan_out(self._nodes, ("SET", key, owner, "NX", "PX", ttl_ms), timeout_s=timeout_s)
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

    def _delete_everywhere(self, *, key: str, owner: str, nodes: Sequence[_Node]) -> int:
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
