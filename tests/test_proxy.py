"""LinkProxy / ProxySet against a real redis-server, over real loopback sockets."""

from __future__ import annotations

import socket
import statistics
import threading
import time
from collections.abc import Iterator

import pytest
import redis

from lockcompare.infra.proxy import LinkProxy, ProxyError, ProxySet, port_of
from lockcompare.infra.redis.client import connect
from lockcompare.infra.redis.kind import redis_protocol_binary
from lockcompare.infra.redis.server import RedisServer
from lockcompare.infra.spawned import free_port, release_port
from test_lifecycle import alive as process_exists  # a reaped or zombie process is gone

#: Long enough that a busy machine's scheduling noise (tens of ms in CI) stays inside the ±10 % the
#: proxy must hold: the proxy's own timer is accurate to ~1 ms, the client around it is not.
DELAY_MS = 200
TIMEOUT_S = 0.3


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    s = RedisServer(binary=redis_protocol_binary(), name="proxy-target")
    s.start()
    try:
        yield s
    finally:
        s.cleanup()


@pytest.fixture
def proxy(server: RedisServer) -> Iterator[LinkProxy]:
    with LinkProxy(target_port=server.port, name="test") as p:  # type: ignore[arg-type]
        yield p


def ping_url(url: str, *, timeout_s: float = 1.0) -> bool:
    client = connect(url, timeout_s=timeout_s)
    try:
        return bool(client.ping())
    finally:
        client.close()


def get_url(url: str, key: str) -> bytes | None:
    client = connect(url, timeout_s=1)
    try:
        return client.get(key)  # type: ignore[return-value]
    finally:
        client.close()


def ping_ms(client: redis.Redis, *, n: int) -> list[float]:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        client.ping()
        times.append((time.perf_counter() - t0) * 1000)
    return times


def test_forwards_to_the_target(server: RedisServer, proxy: LinkProxy) -> None:
    via_proxy = connect(proxy.url, timeout_s=1)
    direct = connect(server.url, timeout_s=1)
    try:
        via_proxy.set("proxy-test:k", b"v")
        assert direct.get("proxy-test:k") == b"v"
        assert port_of(proxy.url) == proxy.port != server.port
    finally:
        direct.delete("proxy-test:k")
        via_proxy.close()
        direct.close()


def test_delay_holds_each_reply_back_by_the_configured_time(proxy: LinkProxy) -> None:
    client = connect(proxy.url, timeout_s=2)
    try:
        undelayed = statistics.median(ping_ms(client, n=20))
        proxy.delay(ms=DELAY_MS)
        delayed = ping_ms(client, n=7)
        proxy.delay(ms=0)
        after = statistics.median(ping_ms(client, n=20))
    finally:
        client.close()
    assert min(delayed) >= DELAY_MS  # never early
    assert statistics.median(delayed) <= DELAY_MS * 1.1  # the issue's ±10 %
    # and off again: a loopback PING is ~0.15 ms; still delayed would be >= DELAY_MS
    assert undelayed < DELAY_MS / 4 and after < DELAY_MS / 4, (undelayed, after)


def test_a_request_delay_holds_the_request_itself_back(server: RedisServer, proxy: LinkProxy) -> None:
    # A write delayed on the wire takes effect late (a reply delay would let it land at once).
    via_proxy, direct = connect(proxy.url, timeout_s=2), connect(server.url, timeout_s=1)
    try:
        via_proxy.ping()  # connected before the delay: only the request's bytes are held
        proxy.delay_requests(ms=DELAY_MS)
        t0 = time.monotonic()
        # Send without waiting for the reply, then watch the target directly.
        conn = via_proxy.connection_pool.get_connection("SET")
        conn.send_command("SET", "proxy-test:late", b"v")
        landed = None
        while landed is None and time.monotonic() - t0 < 2:
            if direct.get("proxy-test:late") == b"v":
                landed = (time.monotonic() - t0) * 1000
            time.sleep(0.005)
        assert conn.read_response() == b"OK"
        via_proxy.connection_pool.release(conn)
        proxy.heal()
        t1 = time.monotonic()
        via_proxy.ping()
        after_ms = (time.monotonic() - t1) * 1000
    finally:
        direct.delete("proxy-test:late")
        via_proxy.close()
        direct.close()
    assert landed is not None and DELAY_MS <= landed < DELAY_MS * 2, landed  # not before the delay
    assert after_ms < DELAY_MS / 2, after_ms  # healed: requests go at once again


def test_delay_is_per_chunk_not_cumulative(proxy: LinkProxy) -> None:
    """Five PINGs 10 ms apart: each reply waits DELAY_MS from its own arrival, in order."""
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=2) as sock:  # type: ignore[arg-type]
        proxy.delay(ms=DELAY_MS)
        sent = []
        for i in range(5):
            sent.append(time.monotonic())
            sock.sendall(f"ECHO m{i}\r\n".encode())
            time.sleep(0.01)
        received: list[tuple[float, bytes]] = []
        buffer = b""
        while len(received) < 5:
            buffer += sock.recv(1000)
            now = time.monotonic()
            while b"\r\n" in buffer and buffer.startswith(b"$"):
                _header, _, rest = buffer.partition(b"\r\n")
                value, _, buffer = rest.partition(b"\r\n")
                received.append((now, value))
    assert [value for _, value in received] == [f"m{i}".encode() for i in range(5)]
    waits_ms = [(at - sent_at) * 1000 for (at, _), sent_at in zip(received, sent, strict=True)]
    # Cumulative delays would wait 200, 390, 580... ms; each must be one delay (with room for noise).
    assert all(DELAY_MS <= wait < DELAY_MS * 1.5 for wait in waits_ms), waits_ms


def test_blackhole_times_out_within_the_socket_timeout_and_heal_restores(proxy: LinkProxy) -> None:
    client = connect(proxy.url, timeout_s=TIMEOUT_S)
    try:
        client.ping()
        proxy.blackhole()
        t0 = time.monotonic()
        with pytest.raises(redis.TimeoutError):
            client.ping()  # on the open connection: the request vanishes
        waited = time.monotonic() - t0
        assert TIMEOUT_S * 0.9 <= waited < TIMEOUT_S + 0.5
        t0 = time.monotonic()
        with pytest.raises(redis.TimeoutError):
            client.ping()  # a new connection: the connect itself hangs, as behind a partition
        assert time.monotonic() - t0 < TIMEOUT_S + 0.5
        proxy.heal()
        assert client.ping() is True
    finally:
        client.close()


def test_new_tcp_connects_hang_while_blackholed(proxy: LinkProxy) -> None:
    proxy.blackhole()
    try:
        t0 = time.monotonic()
        with pytest.raises(TimeoutError):
            socket.create_connection(("127.0.0.1", proxy.port), timeout=TIMEOUT_S)  # type: ignore[arg-type]
        assert time.monotonic() - t0 >= TIMEOUT_S * 0.9
    finally:
        proxy.heal()
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=1) as sock:  # type: ignore[arg-type]
        sock.sendall(b"PING\r\n")
        assert sock.recv(100) == b"+PONG\r\n"


def test_heal_resets_connections_that_lost_bytes_but_keeps_idle_ones(proxy: LinkProxy) -> None:
    idle = socket.create_connection(("127.0.0.1", proxy.port), timeout=1)  # type: ignore[arg-type]
    lossy = socket.create_connection(("127.0.0.1", proxy.port), timeout=TIMEOUT_S)  # type: ignore[arg-type]
    try:
        for sock in (idle, lossy):
            sock.sendall(b"PING\r\n")
            assert sock.recv(100) == b"+PONG\r\n"
        proxy.blackhole()
        lossy.sendall(b"PING\r\n")
        with pytest.raises(TimeoutError):
            lossy.recv(100)
        proxy.heal()
        idle.sendall(b"PING\r\n")
        assert idle.recv(100) == b"+PONG\r\n"
        with pytest.raises(ConnectionResetError):
            lossy.sendall(b"PING\r\n")
            lossy.recv(100)
    finally:
        idle.close()
        lossy.close()


def test_a_close_inside_the_blackhole_reaches_the_server_only_at_heal(server: RedisServer, proxy: LinkProxy) -> None:
    admin = connect(server.url, timeout_s=1)
    try:
        admin.client_setname("admin")
        sock = socket.create_connection(("127.0.0.1", proxy.port), timeout=1)  # type: ignore[arg-type]
        sock.sendall(b"CLIENT SETNAME behind-proxy\r\n")
        assert sock.recv(100) == b"+OK\r\n"
        proxy.blackhole()
        sock.close()
        time.sleep(0.05)
        names = [c["name"] for c in admin.client_list()]
        assert "behind-proxy" in names  # the FIN vanished: the server still sees the client
        proxy.heal()
        deadline = time.monotonic() + 2
        while "behind-proxy" in [c["name"] for c in admin.client_list()] and time.monotonic() < deadline:
            time.sleep(0.01)
        assert "behind-proxy" not in [c["name"] for c in admin.client_list()]
    finally:
        admin.close()


def test_reset_closes_current_connections_with_rst(proxy: LinkProxy) -> None:
    sock = socket.create_connection(("127.0.0.1", proxy.port), timeout=1)  # type: ignore[arg-type]
    try:
        sock.sendall(b"PING\r\n")
        assert sock.recv(100) == b"+PONG\r\n"
        proxy.reset()
        with pytest.raises(ConnectionResetError):
            sock.recv(100)
    finally:
        sock.close()
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=1) as again:  # type: ignore[arg-type]
        again.sendall(b"PING\r\n")
        assert again.recv(100) == b"+PONG\r\n"


def test_a_target_that_dies_closes_the_client_connection() -> None:
    target = RedisServer(binary=redis_protocol_binary(), name="proxy-dies")
    target.start()
    try:
        with LinkProxy(target_port=target.port, name="dies") as proxy:  # type: ignore[arg-type]
            client = connect(proxy.url, timeout_s=2)
            client.ping()
            target.crash()
            t0 = time.monotonic()
            with pytest.raises(redis.ConnectionError):
                client.ping()
            assert time.monotonic() - t0 < 1  # closed, not left hanging until the timeout
            client.close()
    finally:
        target.cleanup()


def test_stop_is_idempotent_and_reaps_the_process(server: RedisServer) -> None:
    proxy = LinkProxy(target_port=server.port, name="stop")  # type: ignore[arg-type]
    proxy.start()
    pid = proxy.pid
    assert pid is not None and process_exists(pid)
    proxy.stop()
    proxy.stop()
    assert not process_exists(pid)
    with pytest.raises(ProxyError):
        proxy.blackhole()


def test_a_test_that_raises_mid_fault_leaves_no_proxy_process(server: RedisServer) -> None:
    pids = []
    with pytest.raises(RuntimeError, match="test body failed"):
        with LinkProxy(target_port=server.port, name="raises") as proxy:  # type: ignore[arg-type]
            pids.append(proxy.pid)
            proxy.blackhole()
            raise RuntimeError("test body failed")
    with pytest.raises(RuntimeError, match="test body failed"):
        with ProxySet(node_ports=[server.port], workers=2, name="raises-set") as links:  # type: ignore[list-item]
            pids.append(links.pid)
            try:
                links.proxy(worker=1, node=0).delay(ms=10)
                raise RuntimeError("test body failed")
            finally:
                links.heal_all()
    assert len(pids) == 2 and all(pid is not None for pid in pids)
    assert [pid for pid in pids if process_exists(pid)] == []  # type: ignore[arg-type]


def test_proxy_set_gives_each_worker_its_own_link_to_each_node(server: RedisServer) -> None:
    other = RedisServer(binary=redis_protocol_binary(), name="proxy-other")
    other.start()
    try:
        ports = [server.port, other.port]
        with ProxySet(node_ports=ports, workers=2) as links:  # type: ignore[arg-type]
            urls = {w: links.node_urls(worker=w) for w in range(2)}
            assert len({*urls[0], *urls[1]}) == 4
            assert len({link.pid for link in links}) == 1  # one process serves all four
            for n, node_url in enumerate((server.url, other.url)):
                direct = connect(node_url, timeout_s=1)
                try:
                    direct.set("proxy-set:node", n)
                    for w in range(2):
                        assert get_url(urls[w][n], "proxy-set:node") == str(n).encode()
                finally:
                    direct.delete("proxy-set:node")
                    direct.close()
            # A fault on one link leaves the others alone.
            links.proxy(worker=0, node=1).blackhole()
            with pytest.raises(redis.TimeoutError):
                ping_url(urls[0][1], timeout_s=TIMEOUT_S)
            assert ping_url(urls[1][1])
            assert ping_url(urls[0][0])
            links.heal_all()
            assert ping_url(urls[0][1])
    finally:
        other.cleanup()


def _echo_once_on(port: int, *, after_s: float) -> threading.Thread:
    """A target that starts listening on ``port`` only ``after_s`` from now and echoes one chunk."""

    def serve() -> None:
        time.sleep(after_s)
        with socket.create_server(("127.0.0.1", port)) as listener:
            listener.settimeout(5)
            conn, _ = listener.accept()
            with conn:
                conn.sendall(conn.recv(100))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


def test_a_peer_links_refused_connect_is_tried_again_until_the_target_listens() -> None:
    # A ZooKeeper follower dials its new leader tens of ms before the leader listens (peerlinks.py):
    # through the proxy, its connection waits for the port, with the bytes it sent meanwhile.
    port = free_port()
    try:
        with LinkProxy(target_port=port, name="late-target", refused_wait_s=1.0) as proxy:
            assert proxy.port is not None
            target = _echo_once_on(port, after_s=0.3)
            with socket.create_connection(("127.0.0.1", proxy.port), timeout=3) as client:
                client.sendall(b"hello")  # before the target listens
                assert client.recv(100) == b"hello"
            target.join(timeout=5)
    finally:
        release_port(port)


def test_a_refused_connect_closes_a_client_link_at_once_and_a_peer_link_after_its_wait() -> None:
    port = free_port()  # nothing listens there
    try:
        closed_after: dict[float, float] = {}
        for wait_s in (0.0, 1.0):
            with LinkProxy(target_port=port, name=f"refused-{wait_s}", refused_wait_s=wait_s) as proxy:
                assert proxy.port is not None
                with socket.create_connection(("127.0.0.1", proxy.port), timeout=3) as client:
                    t0 = time.monotonic()
                    assert client.recv(100) == b""  # closed by the proxy, not left open
                    closed_after[wait_s] = time.monotonic() - t0
        assert closed_after[0.0] < 0.9 and 1.0 <= closed_after[1.0] < 3.0, closed_after
    finally:
        release_port(port)
