"""A user-space TCP proxy for links client → lock node: delay replies, cut the link, reset it.

The kernel on the machines this runs on has no netem and the harness runs without root, so link
faults are made here (FIELD-NOTES.md, "Network faults"). A worker connects to the proxy's port
instead of the node's; the harness tells the proxy what to do to the bytes.

The proxy runs in its OWN process (spawned, reaped, PR_SET_PDEATHSIG), never in the runner's
threads: a thread of the runner would share its GIL, and a busy runner would then add its own
delays to every forwarded reply. One process (a :class:`ProxyHost`) serves any number of links
with an asyncio loop; a standalone :class:`LinkProxy` has a host of its own, a :class:`ProxySet`
shares one host among all its links (10 links, one process: fewer processes competing for 2 cores).

What each fault does (control calls are synchronous: when one returns, the proxy applies it):

* ``delay(ms=...)``: every chunk of reply bytes (server → client) is written ``ms`` after it was
  read from the server, in order (the delay is not cumulative: back-to-back replies each wait
  ``ms`` from their own arrival). Requests go through at once. The loop's timer has millisecond
  granularity (epoll), so a delay can overshoot by up to ~1 ms. With ``nulls=False`` a reply that
  is exactly one RESP null (``$-1``, ``*-1``, ``_``: what a SET NX that did not set answers) goes
  through at once unless delayed replies are still queued ahead of it: "the reply that grants a
  lock is late, a refusal is not" (slow-response: a late refusal would only slow the refused
  worker's retries, and the rival would finish its rounds first).
* ``blackhole()``: a partition. Bytes in both directions vanish, connections stay open (no FIN,
  no RST), so a client waits for its own timeout. New connections hang too, as they would behind
  a real partition: the listening socket's accept queue is shrunk to 0 and filled with one
  connection of the proxy's own, and Linux drops the SYNs of a listener whose accept queue is
  full; a client's ``connect()`` then waits for its connect timeout.
  A close on one side is not passed on either: the other end learns of it only at heal().
* ``heal()``: forward normally again; new connections work at once. A connection that lost bytes
  during the blackhole is reset (RST) on heal, because a byte stream with a hole is no longer the
  stream either end sent (TCP would have retransmitted or given up, never skipped): for Redis, a
  reply that vanished would otherwise be read as the answer to a later command. Connections that
  lost nothing (idle during the blackhole) carry on.
* ``reset()``: every current connection is closed with an RST (SO_LINGER 0), on both sides.
* ``retarget(target_port=...)``: new connections go to another port; current ones are reset, as
  when a virtual IP moves to another host (the failover experiment's stable lock-node address).

Example::

    >>> with LinkProxy(target_port=node_port, name="w0-n0") as proxy:   # doctest: +SKIP
    ...     client = connect(proxy.url, timeout_s=0.2)
    ...     proxy.delay(ms=50)        # every reply now arrives 50 ms late
    ...     proxy.blackhole()         # the next command times out after 0.2 s
    ...     proxy.heal()
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import socket
import struct
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from types import TracebackType
from typing import Self

from lockcompare.errors import LockcompareError
from lockcompare.infra.lifecycle import SPAWN, die_with_parent, start_worker_process

#: How long the parent waits for the proxy process to start, and for any control call's answer.
START_TIMEOUT_S = 20.0
CONTROL_TIMEOUT_S = 5.0

_LOOPBACK = "127.0.0.1"
_BACKLOG = 128
_READ_SIZE = 256 * 1024
#: SO_LINGER on, 0 s: close() sends an RST instead of a FIN.
_LINGER_RST = struct.pack("ii", 1, 0)


class ProxyError(LockcompareError):
    """The link proxy process failed to start, or did not answer a control call."""


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


@dataclass(eq=False)
class _Conn:
    """One client connection and its connection to the target."""

    link: _Link
    client: _Side | None = None
    server: _Side | None = None
    pending: list[bytes] = field(default_factory=list)  # client bytes before the target connected
    replies: collections.deque[tuple[float, bytes | None]] = field(default_factory=collections.deque)
    timer: asyncio.TimerHandle | None = None
    lost_bytes: bool = False  # bytes vanished in a blackhole: reset on heal
    closed: bool = False

    def from_client(self, data: bytes) -> None:
        if self.link.blackholed:
            self.lost_bytes = True
        elif self.server is None or self.server.transport is None:
            self.pending.append(data)
        else:
            self.server.transport.write(data)

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
        elif self.link.blackholed:  # applied when the bytes would go out, like a cut wire
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
        for data in self.pending:
            side.transport.write(data)
        self.pending.clear()

    def side_lost(self, *, upstream: bool) -> None:
        if self.closed:
            return
        if self.link.blackholed:
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
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.replies.clear()
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

    def __init__(self, *, loop: asyncio.AbstractEventLoop, target_port: int) -> None:
        self.loop = loop
        self.target_port = target_port
        self.delay_s = 0.0
        self.delay_nulls = True
        self.blackholed = False
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
                sock, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return  # e.g. EMFILE: the client will see its connect hang, then time out
            conn = _Conn(link=self)
            self.conns.add(conn)
            self.loop.create_task(self._open(conn, sock))

    async def _open(self, conn: _Conn, sock: socket.socket) -> None:
        client_side = _Side(conn, upstream=False)
        conn.client = client_side
        try:
            await self.loop.connect_accepted_socket(lambda: client_side, sock)
            server_side = _Side(conn, upstream=True)
            await self.loop.create_connection(lambda: server_side, _LOOPBACK, self.target_port)
        except OSError:
            conn.close(rst=False)  # target down: the client sees its connection closed
            return
        if conn.closed:
            server_side.transport.close()  # type: ignore[union-attr]
            return
        conn.server_connected(server_side)

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
        self.control.send(("ready", os.getpid()))
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
                    self.control.send(("error", f"{type(exc).__name__}: {exc}"))
                    continue
                self.control.send(("ok", result))
                if op == "stop":
                    self._finish()
                    return
        except (EOFError, OSError):  # the parent went away: nothing left to serve
            self._finish()

    def _finish(self) -> None:
        self.loop.remove_reader(self.control.fileno())
        if not self.done.done():
            self.done.set_result(None)

    def _do(self, op: str, args: Mapping[str, object]) -> object:
        if op == "add":
            link = _Link(loop=self.loop, target_port=int(args["target_port"]))  # type: ignore[call-overload]
            self.links[link.port] = link
            return link.port
        if op == "stop":
            return None
        link = self.links[int(args["port"])]  # type: ignore[call-overload]
        if op == "delay":
            link.delay_s = float(args["ms"]) / 1000  # type: ignore[arg-type]
            link.delay_nulls = bool(args.get("nulls", True))
        elif op == "blackhole":
            link.blackhole()
        elif op == "heal":
            link.delay_s = 0.0
            link.heal()
        elif op == "reset":
            link.reset()
        elif op == "retarget":
            link.target_port = int(args["target_port"])  # type: ignore[call-overload]
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


# --------------------------------------------------------------------------------------------
# In the caller's process
# --------------------------------------------------------------------------------------------


class ProxyHost:
    """Handle on one proxy process, which serves any number of links."""

    def __init__(self, *, name: str) -> None:
        self.name = name
        self._proc: BaseProcess | None = None
        self._control: Connection | None = None
        self.pid: int | None = None

    def start(self) -> None:
        if self._proc is not None:
            return
        parent_end, child_end = SPAWN.Pipe(duplex=True)
        self._proc = start_worker_process(target=proxy_host_main, args=(child_end,))
        child_end.close()
        self._control = parent_end
        try:
            if not parent_end.poll(START_TIMEOUT_S):
                raise ProxyError(f"proxy {self.name}: the proxy process did not start within {START_TIMEOUT_S:.0f} s")
            _, self.pid = parent_end.recv()
        except (EOFError, OSError):
            self.stop()
            raise ProxyError(f"proxy {self.name}: the proxy process exited while starting") from None
        except ProxyError:
            self.stop()
            raise

    def call(self, op: str, **args: object) -> object:
        """Send one control operation; return when the proxy process has applied it."""
        if self._control is None:
            raise ProxyError(f"proxy {self.name} is not running")
        try:
            self._control.send((op, args))
            if not self._control.poll(CONTROL_TIMEOUT_S):
                raise ProxyError(f"proxy {self.name}: no answer to {op!r} within {CONTROL_TIMEOUT_S:.0f} s")
            status, result = self._control.recv()
        except (EOFError, OSError):
            raise ProxyError(f"proxy {self.name}: the proxy process is gone ({op!r} not applied)") from None
        if status != "ok":
            raise ProxyError(f"proxy {self.name}: {op!r} failed: {result}")
        return result

    def is_running(self) -> bool:
        return self._proc is not None and self._proc.is_alive()

    def stop(self) -> None:
        """Close every link, end the process and reap it. Safe to call twice."""
        proc, control = self._proc, self._control
        self._proc = self._control = None
        if control is not None:
            with contextlib.suppress(EOFError, OSError):
                control.send(("stop", {}))
                if control.poll(CONTROL_TIMEOUT_S):
                    control.recv()
            control.close()
        if proc is not None:
            proc.join(timeout=CONTROL_TIMEOUT_S)
            if proc.is_alive():
                proc.kill()
                proc.join()


class LinkProxy:
    """One proxied link to ``127.0.0.1:target_port``; see the module docstring for the faults.

    Standalone (``host=None``) it starts and stops a proxy process of its own; given a running
    :class:`ProxyHost` it is one link of that process (what :class:`ProxySet` does).
    """

    def __init__(self, *, target_port: int, name: str, host: ProxyHost | None = None) -> None:
        self.target_port = target_port
        self.name = name
        self._own_host = host is None
        self._host = host if host is not None else ProxyHost(name=name)
        self.port: int | None = None

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>/0``: what a client connects to instead of the node."""
        if self.port is None:
            raise ProxyError(f"proxy {self.name} has not been started")
        return f"redis://{_LOOPBACK}:{self.port}/0"

    @property
    def pid(self) -> int | None:
        """The proxy process's PID (shared by every link of one host)."""
        return self._host.pid

    def start(self) -> None:
        """Listen on a free loopback port and forward to the target."""
        if self.port is not None:
            return
        if self._own_host:
            self._host.start()
        try:
            self.port = int(self._host.call("add", target_port=self.target_port))  # type: ignore[call-overload]
        except BaseException:
            if self._own_host:
                self._host.stop()
            raise

    def delay(self, *, ms: float, nulls: bool = True) -> None:
        """Replies (server → client) arrive ``ms`` after they were read; 0 forwards at once.
        ``nulls=False``: a lone null reply (a refusal) is not delayed (see the module docstring)."""
        if ms < 0:
            raise ValueError(f"a delay cannot be negative, got {ms} ms")
        self._call("delay", ms=ms, nulls=nulls)

    def blackhole(self) -> None:
        """Bytes in both directions vanish; connections stay open; new connects hang."""
        self._call("blackhole")

    def reset(self) -> None:
        """Close every current connection with an RST."""
        self._call("reset")

    def heal(self) -> None:
        """No delay, no blackhole; connections that lost bytes are reset (see the module docstring)."""
        self._call("heal")

    def retarget(self, *, target_port: int) -> None:
        """Forward new connections to ``target_port``; every current connection is reset."""
        self._call("retarget", target_port=target_port)
        self.target_port = target_port

    def stop(self) -> None:
        """Close this link (and its own process, if standalone). Safe to call twice."""
        port, self.port = self.port, None
        if self._own_host:
            self._host.stop()
        elif port is not None and self._host.is_running():
            self._host.call("remove", port=port)

    def _call(self, op: str, **args: object) -> None:
        if self.port is None:
            raise ProxyError(f"proxy {self.name} has not been started")
        self._host.call(op, port=self.port, **args)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def port_of(url: str) -> int:
    """The port of a ``redis://host:port/db`` URL (lock nodes are always on 127.0.0.1 here)."""
    from urllib.parse import urlsplit

    port = urlsplit(url).port
    if port is None:
        raise ValueError(f"no port in {url!r}")
    return port


class ProxySet:
    """One proxy per (worker, node) link, all served by one proxy process.

    ``node_ports[n]`` is lock node n's real port; ``proxy(worker=w, node=n)`` is worker w's link to
    node n, and ``node_urls(worker=w)`` the URLs worker w should use instead of the nodes'.
    Use as a context manager, or call :meth:`stop` in ``finally``; :meth:`heal_all` belongs in the
    ``finally`` of every fault.
    """

    def __init__(
        self, *, node_ports: Iterable[int], workers: int, name: str = "links", node_urls: Sequence[str] = ()
    ) -> None:
        self.node_ports = tuple(node_ports)
        #: The nodes' own URLs, when given: a worker's URL keeps its node's scheme and path (an etcd
        #: member is ``http://``), with the link's port. Without them: ``redis://...:port/0``.
        self._node_urls = tuple(node_urls)
        self.workers = workers
        self._host = ProxyHost(name=name)
        self._links: dict[tuple[int, int], LinkProxy] = {
            (w, n): LinkProxy(target_port=port, name=f"{name}-w{w}-n{n}", host=self._host)
            for w in range(workers)
            for n, port in enumerate(self.node_ports)
        }

    @property
    def pid(self) -> int | None:
        return self._host.pid

    def is_running(self) -> bool:
        """True while the proxy process serves the links (False before start, after stop, or if it died)."""
        return self._host.is_running()

    def start(self) -> None:
        try:
            self._host.start()
            for link in self._links.values():
                link.start()
        except BaseException:
            self.stop()
            raise

    def proxy(self, *, worker: int, node: int) -> LinkProxy:
        return self._links[(worker, node)]

    def node_urls(self, *, worker: int) -> tuple[str, ...]:
        links = [self._links[(worker, n)] for n in range(len(self.node_ports))]
        if not self._node_urls:
            return tuple(link.url for link in links)
        from urllib.parse import urlsplit

        return tuple(
            urlsplit(url)._replace(netloc=f"{_LOOPBACK}:{link.port}").geturl()
            for url, link in zip(self._node_urls, links, strict=True)
        )

    def __iter__(self) -> Iterator[LinkProxy]:
        return iter(self._links.values())

    def heal_all(self) -> None:
        """Heal every link (no delay, no blackhole). A no-op once stopped."""
        if not self._host.is_running():
            return
        for link in self._links.values():
            if link.port is not None:
                link.heal()

    def stop(self) -> None:
        """Close every link and end the proxy process. Safe to call twice."""
        for link in self._links.values():
            link.port = None
        self._host.stop()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
