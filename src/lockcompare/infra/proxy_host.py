"""Inside the link proxy's own process: an asyncio loop forwarding each link's bytes, and doing to
them what the caller asked (delay replies, blackhole, reset). What each fault does is described in
proxy.py, the caller's side."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import socket
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from lockcompare.infra.lifecycle import die_with_parent
from lockcompare.infra.messages import send

_LOOPBACK = "127.0.0.1"
_BACKLOG = 128
#: SO_LINGER on, 0 s: close() sends an RST instead of a FIN.
_LINGER_RST = struct.pack("ii", 1, 0)
#: How often a link with a refused wait tries its target again.
_REFUSED_RETRY_S = 0.02


# --------------------------------------------------------------------------------------------
# Inside the proxy process
# --------------------------------------------------------------------------------------------


class _Side(asyncio.Protocol):
    """One socket of a proxied connection; hands every chunk it reads to its :class:`_Conn`."""

    def __init__(self, conn: _Conn, *, upstream: bool) -> None:
        self.conn = conn
        self.upstream = upstream
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        if self.upstream:
            self.conn.from_server(data)
        else:
            self.conn.from_client(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.conn.side_lost(upstream=self.upstream)


#: A reply that is one RESP null (RESP2 bulk, RESP2 array, RESP3): ``delay(nulls=False)`` passes it at once.
_NULL_REPLIES = frozenset({b"$-1\r\n", b"*-1\r\n", b"_\r\n"})

#: In the reply queue: the server closed; close the client once what came before it is out.
_CLOSE = None

#: A peer link rewrites addresses in the first bytes a client sends only (ZooKeeper's election
#: handshake: infra/peerlinks.py).
_REWRITE_WITHIN = 256


@dataclass(eq=False)
class _Conn:
    """One client connection and its connection to the target."""

    link: _Link
    client: _Side | None = None
    server: _Side | None = None
    pending: list[bytes] = field(default_factory=list)  # client bytes before the target connected
    replies: collections.deque[tuple[float, bytes | None]] = field(default_factory=collections.deque)
    timer: asyncio.TimerHandle | None = None
    #: Client bytes held back by a request delay (due time, bytes), in order, and their timer.
    requests: collections.deque[tuple[float, bytes]] = field(default_factory=collections.deque)
    request_timer: asyncio.TimerHandle | None = None
    lost_bytes: bool = False  # bytes vanished in a blackhole: reset on heal
    closed: bool = False
    #: A peer link's: the client's port, and the server it belongs to (None: not known yet).
    peer_port: int = 0
    source: int | None = None
    identifying: bool = False  # its source is being read: its bytes wait in pending
    rewritten: int = 0  # client bytes looked at for :attr:`_Link.rewrites`

    @property
    def cut(self) -> bool:
        """Whether this connection's bytes vanish now: its link is blackholed, or (a peer link) its
        source is cut from the link's server. An unknown source is cut: a partition never leaks."""
        if self.link.blackholed:
            return True
        if self.identifying:
            return False
        return bool(self.link.cut_from) and (self.source is None or self.source in self.link.cut_from)

    def from_client(self, data: bytes) -> None:
        if self.link.rewrites and self.rewritten < _REWRITE_WITHIN:
            self.rewritten += len(data)
            for old, new in self.link.rewrites:
                data = data.replace(old, new)
        if self.requests or self.link.request_delay_s > 0:  # behind earlier delayed requests: keep the order
            self.requests.append((self.link.loop.time() + self.link.request_delay_s, data))
            self._schedule_requests()
        else:
            self._to_server(data)

    def _to_server(self, data: bytes) -> None:
        if self.cut:
            self.lost_bytes = True
        elif self.server is None or self.server.transport is None:
            self.pending.append(data)
        else:
            self.server.transport.write(data)

    def _schedule_requests(self) -> None:
        if self.request_timer is None and self.requests:
            self.request_timer = self.link.loop.call_at(self.requests[0][0], self._drain_requests)

    def _drain_requests(self) -> None:
        self.request_timer = None
        now = self.link.loop.time()
        while self.requests and self.requests[0][0] <= now:
            self._to_server(self.requests.popleft()[1])
        self._schedule_requests()

    def from_server(self, data: bytes) -> None:
        delayed = self.link.delay_s > 0 and (self.link.delay_nulls or data not in _NULL_REPLIES)
        if self.replies or delayed:  # behind earlier delayed replies: keep the order
            self.replies.append((self.link.loop.time() + self.link.delay_s, data))
            self._schedule()
        else:
            self._to_client(data)

    def _to_client(self, data: bytes | None) -> None:
        if self.client is None or self.client.transport is None:
            return
        if data is None:  # _CLOSE
            self.client.transport.close()  # flushes what was written before
        elif self.cut:  # applied when the bytes would go out, like a cut wire
            self.lost_bytes = True
        else:
            self.client.transport.write(data)

    def _schedule(self) -> None:
        if self.timer is None and self.replies:
            self.timer = self.link.loop.call_at(self.replies[0][0], self._drain)

    def _drain(self) -> None:
        self.timer = None
        now = self.link.loop.time()
        while self.replies and self.replies[0][0] <= now:
            self._to_client(self.replies.popleft()[1])
        self._schedule()

    def server_connected(self, side: _Side) -> None:
        self.server = side
        assert side.transport is not None
        if self.cut and self.pending:  # opened during a partition from the other side: its bytes vanish
            self.lost_bytes = True
            self.pending.clear()
        for data in self.pending:
            side.transport.write(data)
        self.pending.clear()

    def side_lost(self, *, upstream: bool) -> None:
        if self.closed:
            return
        if self.cut:
            # The FIN vanishes like every other byte: the other end keeps its connection, as
            # behind a real partition, until heal() resets it.
            self.lost_bytes = True
            if upstream:
                self.server = None
            else:
                self.client = None
            return
        if upstream:
            # The server closed (or died): the client learns it after the replies already read.
            if self.replies:
                self.replies.append((self.link.loop.time() + self.link.delay_s, _CLOSE))
                self._schedule()
                self.server = None
                return
            self._to_client(_CLOSE)
        self.close(rst=False)

    def close(self, *, rst: bool) -> None:
        self.closed = True
        for timer in (self.timer, self.request_timer):
            if timer is not None:
                timer.cancel()
        self.timer = self.request_timer = None
        self.replies.clear()
        self.requests.clear()
        for side in (self.client, self.server):
            if side is None or side.transport is None:
                continue
            if rst:
                sock = side.transport.get_extra_info("socket")
                if sock is not None:
                    with contextlib.suppress(OSError):
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RST)
                side.transport.abort()
            else:
                side.transport.close()
        self.link.conns.discard(self)


class _Link:
    """One listening port forwarding to one target port, with its fault state."""

    def __init__(self, *, loop: asyncio.AbstractEventLoop, target_port: int, refused_wait_s: float = 0.0) -> None:
        self.loop = loop
        self.target_port = target_port
        #: How long a connect the target refuses is tried again before the client's connection is
        #: closed (0: closed at once). See :data:`lockcompare.infra.peerlinks.REFUSED_WAIT_S`.
        self.refused_wait_s = refused_wait_s
        self.delay_s = 0.0
        self.delay_nulls = True
        #: How late each client byte reaches the target (a request delayed on the wire): 0 = at once.
        self.request_delay_s = 0.0
        self.blackholed = False
        #: A peer link's partition: the servers (by index) whose connections to it are cut, and
        #: the servers' pids (pid -> index) that name a connection's source (infra/sockets.py).
        self.cut_from: frozenset[int] = frozenset()
        self.pids: dict[int, int] = {}
        self.rewrites: tuple[tuple[bytes, bytes], ...] = ()
        self.conns: set[_Conn] = set()
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind((_LOOPBACK, 0))
        self._listener.listen(_BACKLOG)
        self._listener.setblocking(False)
        self.port: int = self._listener.getsockname()[1]
        self._filler: socket.socket | None = None  # fills the accept queue while blackholed
        loop.add_reader(self._listener.fileno(), self._accept)

    def _accept(self) -> None:
        while True:
            try:
                sock, addr = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return  # e.g. EMFILE: the client will see its connect hang, then time out
            conn = _Conn(link=self, peer_port=int(addr[1]))
            self.conns.add(conn)
            self.loop.create_task(self._open(conn, sock))

    async def _open(self, conn: _Conn, sock: socket.socket) -> None:
        client_side = _Side(conn, upstream=False)
        conn.client = client_side
        try:
            await self.loop.connect_accepted_socket(lambda: client_side, sock)
            if self.cut_from:
                # During a partition: whose connection is it? Read off the loop; its bytes wait.
                conn.identifying = True
                conn.source = await self.loop.run_in_executor(None, self._identify, conn)
                conn.identifying = False
            server_side = _Side(conn, upstream=True)
            await self._connect_target(conn, server_side)
        except OSError:
            conn.close(rst=False)  # target down: the client sees its connection closed
            return
        if conn.closed:
            assert server_side.transport is not None  # create_connection returned: connection_made ran
            server_side.transport.close()
            return
        conn.server_connected(server_side)

    async def _connect_target(self, conn: _Conn, side: _Side) -> None:
        """Connect ``side`` to the target; a refusal is tried again every :data:`_REFUSED_RETRY_S`
        for :attr:`refused_wait_s` while the client stays (the client's bytes wait in pending)."""
        give_up = self.loop.time() + self.refused_wait_s
        while True:
            try:
                await self.loop.create_connection(lambda: side, _LOOPBACK, self.target_port)
                return
            except ConnectionRefusedError:
                if conn.closed or self.loop.time() >= give_up:
                    raise
            await asyncio.sleep(_REFUSED_RETRY_S)

    def cut_sources(self, *, members: frozenset[int], pids: dict[int, int], sources: Mapping[int, int]) -> None:
        """Cut the connections from ``members`` (servers by index) to this link. ``sources``: the
        current connections' client ports -> server, read by the caller (infra/sockets.py: a reading
        of /proc takes ~150 ms on a busy machine, which would stall every link of this process);
        ``pids`` (pid -> server) name the connections made during the partition."""
        self.pids = dict(pids)
        for conn in self.conns:
            conn.source = sources.get(conn.peer_port, conn.source)
        self.cut_from = members

    def _identify(self, conn: _Conn) -> int | None:
        """Which server opened ``conn`` (run in a thread: it reads /proc)."""
        from lockcompare.infra.sockets import owner_of

        pid = owner_of(local_port=conn.peer_port, remote_port=self.port, pids=list(self.pids))
        return None if pid is None else self.pids.get(pid)

    def blackhole(self) -> None:
        self.blackholed = True
        if self._filler is not None:
            return
        # Stop accepting, and make new SYNs be dropped: Linux drops the SYN of a listener whose
        # accept queue is full, and with a backlog of 0 one queued connection fills it.
        self.loop.remove_reader(self._listener.fileno())
        self._listener.listen(0)
        filler = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        filler.settimeout(1.0)
        try:
            filler.connect((_LOOPBACK, self.port))
        except OSError:
            pass  # a client's connection took the one slot: the queue is full all the same
        self._filler = filler

    def heal(self) -> None:
        self.blackholed = False
        self.cut_from = frozenset()
        if self._filler is not None:
            filler_addr = self._filler.getsockname()
            self._listener.listen(_BACKLOG)
            # What sits in the accept queue connected during the partition: the filler, and
            # perhaps a client that raced it. Neither is a clean connection: close both.
            while True:
                try:
                    sock, addr = self._listener.accept()
                except (BlockingIOError, InterruptedError):
                    break
                if addr != filler_addr:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RST)
                sock.close()
            self._filler.close()
            self._filler = None
            self.loop.add_reader(self._listener.fileno(), self._accept)
        for conn in [c for c in self.conns if c.lost_bytes]:
            conn.close(rst=True)

    def reset(self) -> None:
        for conn in list(self.conns):
            conn.close(rst=True)

    def close(self) -> None:
        self.reset()
        with contextlib.suppress(ValueError, OSError):
            self.loop.remove_reader(self._listener.fileno())
        self._listener.close()
        if self._filler is not None:
            self._filler.close()
            self._filler = None


class _Host:
    """The proxy process's state: its links and the control pipe."""

    def __init__(self, control: Connection) -> None:
        self.control = control
        self.links: dict[int, _Link] = {}
        self.loop = asyncio.get_running_loop()
        self.done: asyncio.Future[None] = self.loop.create_future()

    async def serve(self) -> None:
        self.loop.add_reader(self.control.fileno(), self._on_control)
        send(self.control, ("ready", os.getpid()))
        await self.done
        for link in self.links.values():
            link.close()

    def _on_control(self) -> None:
        try:
            while self.control.poll():
                op, args = self.control.recv()
                try:
                    result = self._do(op, args)
                except Exception as exc:  # noqa: BLE001 - reported to the parent as data
                    send(self.control, ("error", f"{type(exc).__name__}: {exc}"))
                    continue
                send(self.control, ("ok", result))
                if op == "stop":
                    self._finish()
                    return
        except (EOFError, OSError):  # the parent went away: nothing left to serve
            self._finish()

    def _finish(self) -> None:
        self.loop.remove_reader(self.control.fileno())
        if not self.done.done():
            self.done.set_result(None)

    def _do(self, op: str, args: Mapping[str, Any]) -> object:  # Any: unpickled from the control pipe
        if op == "add":
            link = _Link(
                loop=self.loop,
                target_port=int(args["target_port"]),
                refused_wait_s=float(args.get("refused_wait_s", 0.0)),
            )
            self.links[link.port] = link
            return link.port
        if op == "stop":
            return None
        if op == "partition":  # {port: the servers cut from it}: every peer link at once
            pids, sources = dict(args["pids"]), dict(args["sources"])
            for port, members in dict(args["cuts"]).items():
                link = self.links[int(port)]
                link.cut_sources(members=frozenset(members), pids=pids, sources=sources.get(port, {}))
            return sum(1 for port in args["cuts"] for c in self.links[int(port)].conns if c.source is None)
        link = self.links[int(args["port"])]
        if op == "delay":
            link.delay_s = float(args["ms"]) / 1000
            link.delay_nulls = bool(args.get("nulls", True))
        elif op == "blackhole":
            link.blackhole()
        elif op == "delay-requests":
            link.request_delay_s = float(args["ms"]) / 1000
        elif op == "heal":
            link.delay_s = 0.0
            link.request_delay_s = 0.0  # requests already held back still arrive late, in order
            link.heal()
        elif op == "reset":
            link.reset()
        elif op == "rewrite":
            link.rewrites = tuple(args["rewrites"])
        elif op == "retarget":
            link.target_port = int(args["target_port"])
            link.reset()
        elif op == "remove":
            link.close()
            del self.links[link.port]
        else:
            raise ValueError(f"unknown proxy operation {op!r}")
        return None


def proxy_host_main(control: Connection) -> None:
    """Entry point of the proxy process."""
    die_with_parent()

    async def run() -> None:
        await _Host(control).serve()

    try:
        asyncio.run(run())
    finally:
        control.close()
