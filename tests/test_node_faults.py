"""Node faults on real redis-server processes: crash, restart (with and without persistence), a
port taken by someone else, and a wall clock moved by libfaketime."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

import lockcompare.server as server_module
from lockcompare.errors import InvalidValueError, ServerStartError
from lockcompare.redisconn import connect
from lockcompare.server import RedisServer, find_redis_server


@pytest.fixture(autouse=True)
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Every temp dir lockcompare makes in a test lands here, and none may be left behind."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    yield tmp
    assert sorted(p.name for p in tmp.iterdir()) == []


@pytest.fixture
def binary() -> Path:
    return find_redis_server()


@pytest.fixture
def servers(binary: Path) -> Iterator[list[RedisServer]]:
    """Servers a test makes go here; all are stopped, reaped and removed afterwards."""
    made: list[RedisServer] = []
    yield made
    for server in made:
        pid = server.pid
        server.cleanup()
        assert not server.data_dir.exists()
        if pid is not None:
            assert not process_exists(pid)


def process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def new_server(servers: list[RedisServer], binary: Path, **kwargs: object) -> RedisServer:
    server = RedisServer(binary=binary, name=f"t{len(servers)}", **kwargs)  # type: ignore[arg-type]
    servers.append(server)
    return server


def fill(url: str, *, count: int) -> None:
    client = connect(url)
    try:
        for i in range(count):
            client.set(f"k{i}", f"v{i}")
    finally:
        client.close()


def surviving(url: str, *, count: int) -> int:
    client = connect(url)
    try:
        return sum(client.get(f"k{i}") == f"v{i}".encode() for i in range(count))
    finally:
        client.close()


def test_a_crashed_node_refuses_connections(servers: list[RedisServer], binary: Path) -> None:
    server = new_server(servers, binary)
    server.start()
    pid = server.pid
    assert pid is not None
    server.crash()
    assert not server.is_running()
    assert not process_exists(pid)  # reaped, not a zombie
    client = connect(server.url, timeout_s=0.5)
    with pytest.raises(redis.ConnectionError, match="refused"):
        client.ping()
    client.close()


@pytest.mark.parametrize(("persistence", "kept"), [("none", 0), ("aof-always", 10)])
def test_a_restarted_node_keeps_only_what_it_persisted(
    servers: list[RedisServer], binary: Path, persistence: str, kept: int
) -> None:
    server = new_server(servers, binary, persistence=persistence)
    server.start()
    port, first_pid = server.port, server.pid
    fill(server.url, count=10)
    server.crash()
    server.restart()
    assert server.port == port
    assert server.pid != first_pid
    assert surviving(server.url, count=10) == kept
    assert (server.data_dir / "appendonly.aof").exists() == (persistence == "aof-always")


def test_restart_crashes_a_running_node_first(servers: list[RedisServer], binary: Path) -> None:
    server = new_server(servers, binary)
    server.start()
    first_pid = server.pid
    assert first_pid is not None
    fill(server.url, count=3)
    server.restart()
    assert not process_exists(first_pid)
    assert surviving(server.url, count=3) == 0


def test_unknown_persistence_is_refused(binary: Path) -> None:
    with pytest.raises(InvalidValueError, match="aof-always"):
        RedisServer(binary=binary, name="x", persistence="rdb")


def test_restart_on_a_port_taken_meanwhile_refuses_to_adopt_the_squatter(
    servers: list[RedisServer], binary: Path
) -> None:
    node = new_server(servers, binary)
    node.start()
    node.crash()
    squatter = new_server(servers, binary, port=node.port)
    squatter.start()
    with pytest.raises(ServerStartError, match=f"port {node.port} is taken") as info:
        node.restart()
    assert "\n" not in str(info.value)
    assert not node.is_running()
    assert squatter.is_running()  # never touched


def test_first_start_skips_a_port_held_by_another_redis_server(
    servers: list[RedisServer], binary: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    squatter = new_server(servers, binary)
    squatter.start()
    # The first port handed out is the squatter's, as if it had bound it after free_port() looked.
    real_free_port = server_module.free_port
    ports = iter([squatter.port])
    monkeypatch.setattr(server_module, "free_port", lambda: next(ports, None) or real_free_port())
    node = new_server(servers, binary)
    node.start()
    assert node.port != squatter.port
    client = connect(node.url)
    try:
        assert int(client.info("server")["process_id"]) == node.pid
    finally:
        client.close()
    assert squatter.is_running()
