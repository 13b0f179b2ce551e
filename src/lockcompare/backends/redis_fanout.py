"""One command to N Redis nodes at once from one thread: every request written first, then every
reply read, each node with a deadline of its own (Redlock's fan-out, backends/redlock.py).

* **One thread, send all then read all.** The Redlock spec asks for the requests to go out "at the
  same time using multiplexing". On a 2-core machine this measured ~0.45 ms per acquire+release
  against 1.1-2 ms for sequential calls and 2-3 ms for a thread pool (acquire+release p50, 3 runs of
  500). Each node keeps one persistent connection. Replies are read in node order; the fan-out is
  over when the last one is read or given up on.
* **A node that fails** (connection refused, error, or no reply by the deadline) gives no reply, and
  its connection is dropped at once: the late reply would otherwise be read as the answer to the
  next command on that connection (a pipelined protocol never resynchronises by itself). The next
  fan-out reconnects every such node AT ONCE: non-blocking TCP connects to all of them, then one
  wait (bounded by the per-node timeout) in which each node's request is written as soon as its
  connect completes, while the replies of the connected nodes are already on their way. So a
  partitioned node whose connect hangs costs one per-node timeout per fan-out, however many such
  nodes there are (connecting one after another would cost one timeout per node). redis-py's
  connect handshake (HELLO, CLIENT SETINFO) is switched off so a reconnect is one TCP connect, not
  extra round trips that could block on a stuck node.
"""

from __future__ import annotations

import errno
import inspect
import select
import selectors
import socket
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Final

import hiredis
import redis
from redis._parsers.base import BaseParser

from lockcompare.infra.redis.client import connect

try:
    from redis.maint_notifications import (
        MaintNotificationsConfig as _MaintNotificationsConfig,
    )
except ImportError:  # redis-py < 8
    _MaintNotificationsConfig = None  # type: ignore[assignment,misc]  # absent class: None, checked before use

if TYPE_CHECKING:
    from redis.connection import AbstractConnection

#: Stands for "this node gave no reply" (down, or too slow). An error reply is returned as the
#: :class:`redis.ResponseError` it is (the connection stays in step); neither counts as a grant.
NO_REPLY: Final = object()

#: Stands for "the request never left": the node could not be (re)connected. Like NO_REPLY it is
#: not a grant, but the node cannot hold the key, so a refused acquire need not release there.
NOT_SENT: Final = object()

#: redis-py 8 bounds a single read itself (``read_response(timeout=...)``: one poll + recv); older
#: versions need ``can_read(timeout)`` first, which costs a few more system calls per node.
_READ_TAKES_TIMEOUT: Final = "timeout" in inspect.signature(redis.Connection.read_response).parameters

#: Plain TCP and unix sockets are written and read directly (see :class:`Node`); TLS ones go
#: through redis-py. False sends every node through redis-py (the tests run both paths).
_RAW_SOCKETS = True

#: A reply and when it was read (``time.monotonic_ns()``).
Reply = tuple[object, int]


def _handshake_free_connection(client: redis.Redis) -> AbstractConnection:
    """A new, unconnected connection with ``client``'s settings (no retries, short timeouts).

    The settings come from :func:`lockcompare.infra.redis.client.connect`; only the connect handshake is
    switched off, so that a reconnect in the middle of an acquire is a bare TCP connect and not
    extra round trips that a stuck or slowed node would hold up: RESP2 (redis-py 8 otherwise sends
    HELLO 3 and a CLIENT MAINT_NOTIFICATIONS probe; SET and EVAL replies read the same in both), and
    no CLIENT SETINFO (``driver_info=None`` in redis-py 8, ``lib_name``/``lib_version`` before).
    """
    pool = client.connection_pool
    # A client built with redis.Redis(...) (infra/redis/client.py, since the one URL parser) carries its
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
    """``command`` as one RESP request: the bytes redis-py's ``pack_command`` and the workers' direct
    path (backends/redis_direct.py) send for str, bytes and int, packed by hiredis in C (a Python
    loop over the arguments was a tenth of the fan-out's own cost).

    >>> pack(("SET", "k", "v", "PX", 10))
    b'*5\\r\\n$3\\r\\nSET\\r\\n$1\\r\\nk\\r\\n$1\\r\\nv\\r\\n$2\\r\\nPX\\r\\n$2\\r\\n10\\r\\n'
    """
    # hiredis's stub types the argument as a 1-tuple; it takes any tuple of str, bytes and numbers.
    return hiredis.pack_command(tuple(command))  # type: ignore[arg-type]


class Node:
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
        reader = self._reader
        reply = reader.gets()
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
            reader.feed(data)
            try:
                reply = reader.gets()
            except hiredis.ProtocolError:  # not RESP: nothing after it can be trusted either
                self.discard()
                return NO_REPLY
        if isinstance(reply, hiredis.ReplyError):  # as redis-py raises it: NoScriptError for NOSCRIPT...
            return BaseParser.parse_error(str(reply))
        return reply

    def discard(self) -> None:
        self._sock = None
        self._conn.disconnect()


def fan_out(
    nodes: Sequence[Node],
    command: Sequence[object],
    *,
    timeout_s: float,
    after_send: Callable[..., None] | None = None,
) -> list[Reply]:
    """Send ``command`` to every node, then read every reply: (reply, NO_REPLY or NOT_SENT; read time) per node.

    Disconnected nodes are reconnected concurrently, within ``timeout_s``; each node's reply gets
    ``timeout_s`` counted from when its request was written. ``after_send(in_flight=N)`` runs once
    every request is out and before any reply is read (an acquire's pause point: backends/pause_point.py);
    a reply already waiting is read however late, so a stall there lands in the caller's elapsed time.
    """
    packed = pack(command)  # the same bytes for every node: pack once
    size = len(packed)
    clock = time.monotonic_ns
    timeout_ns = int(timeout_s * 1e9)
    deadlines: list[int | None] = [None] * len(nodes)  # None: the request was not sent
    connecting: dict[socket.socket, int] = {}
    for index, node in enumerate(nodes):
        raw = node._sock
        if raw is not None:
            # The hot path, inline (Node.send's raw branch): one send on a connected raw socket.
            # Five nodes, two fan-outs per acquire + release: each layer of calls here is paid 10x.
            try:
                sent = raw.send(packed)
            except OSError:  # broken, or (never seen: a request is ~100 bytes) a full send buffer
                sent = -1
            if sent == size:
                deadlines[index] = clock() + timeout_ns
            else:
                node.discard()  # a partial request would put the connection out of step
            continue
        if not node.connected:
            sock = node.begin_connect(timeout_s=timeout_s)
            if sock is not None:
                connecting[sock] = index
                continue
        if node.send(packed):
            deadlines[index] = clock() + timeout_ns
    if connecting:
        _finish_connects(nodes, connecting, packed=packed, deadlines=deadlines, timeout_ns=timeout_ns)
    if after_send is not None:
        after_send(in_flight=sum(1 for deadline in deadlines if deadline is not None))
    replies: list[Reply] = []
    for node, deadline_ns in zip(nodes, deadlines, strict=True):
        raw = node._sock
        if deadline_ns is None:
            reply: object = NOT_SENT
        elif raw is not None:
            reply = node._read_raw(raw, deadline_ns=deadline_ns)  # Node.read's raw branch, inline
        else:
            reply = node.read(deadline_ns=deadline_ns)
        replies.append((reply, clock()))
    return replies


def _finish_connects(
    nodes: Sequence[Node],
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
