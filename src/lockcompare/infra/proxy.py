"""A user-space TCP proxy for links client → lock node: delay replies, cut the link, reset it.

The kernel on the machines this runs on has no netem and the harness runs without root, so link
faults are made here (``tc qdisc ... netem`` answered "Specified qdisc kind is unknown"). A worker
connects to the proxy's port instead of the node's; the harness tells the proxy what to do to the
bytes.

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

import contextlib
from collections.abc import Iterable, Iterator, Sequence
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from types import TracebackType
from typing import Any, Self

from lockcompare.errors import ProxyError
from lockcompare.infra.lifecycle import SPAWN, start_worker_process
from lockcompare.infra.messages import send
from lockcompare.infra.proxy_host import proxy_host_main
from lockcompare.urls import parse_url

#: How long the parent waits for the proxy process to start, and for any control call's answer.
START_TIMEOUT_S = 20.0
CONTROL_TIMEOUT_S = 5.0

_LOOPBACK = "127.0.0.1"


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

    def call(self, op: str, **args: object) -> Any:
        """Send one control operation; return when the proxy process has applied it (the result is
        unpickled from the control pipe: Any)."""
        if self._control is None:
            raise ProxyError(f"proxy {self.name} is not running")
        try:
            send(self._control, (op, args))
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
                send(control, ("stop", {}))
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

    def __init__(
        self, *, target_port: int, name: str, host: ProxyHost | None = None, refused_wait_s: float = 0.0
    ) -> None:
        self.target_port = target_port
        self.name = name
        #: How long a connect the target refuses is tried again before the caller's connection is
        #: closed; 0 (a client's link): at once, as a refusal would reach it.
        self.refused_wait_s = refused_wait_s
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
            self.port = int(self._host.call("add", target_port=self.target_port, refused_wait_s=self.refused_wait_s))
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

    def delay_requests(self, *, ms: float) -> None:
        """Hold each client byte ``ms`` before it goes to the target, in order (a request late on the
        wire: it takes effect late, and its reply comes late with it). Bytes held when the link
        heals still go out at their time."""
        self._call("delay-requests", ms=ms)

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
    port = parse_url(url).port  # never raises (issue 38)
    if port is None:
        raise ValueError(f"no port in {url!r}")
    return port


def _netloc(url: str, *, port: int | None) -> str:
    """``url``'s network location moved to the link's loopback port; the user (and password) stay
    (a PostgreSQL URL names its role there: ``postgresql://postgres@host:port/db``)."""
    address = parse_url(url)
    user = address.to_url(host="", port=None).partition("://")[2].rpartition("@")[0] if address.has_userinfo else ""
    return f"{user + '@' if user else ''}{_LOOPBACK}:{port}"


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

    def resource_link(self, *, worker: int) -> LinkProxy:
        """Worker ``worker``'s link to the resource, in a set started with one (faults/network.py's
        ``start_links(resource=True)`` adds it as the last "node")."""
        return self.proxy(worker=worker, node=len(self.node_ports) - 1)

    def node_urls(self, *, worker: int) -> tuple[str, ...]:
        links = [self._links[(worker, n)] for n in range(len(self.node_ports))]
        if not self._node_urls:
            return tuple(link.url for link in links)
        return tuple(
            parse_url(url).to_url(host=_LOOPBACK, port=link.port)  # never raises (issue 38)
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
