"""The bench runs real worker processes and reports well-formed rows (no timing thresholds here)."""

from __future__ import annotations

import math

import pytest
import redis

from lockcompare.backends import BackendConfig
from lockcompare.backends.redis_direct import DirectCommands
from lockcompare.backends.redlock import Redlock
from lockcompare.backends.single import RELEASE_SCRIPT, SingleNodeLock
from lockcompare.errors import InvalidValueError, UnknownNameError
from lockcompare.infra.cluster import Cluster
from lockcompare.infra.redis.client import connect
from lockcompare.runner import bench
from lockcompare.runner.bench import BenchRow, render_bench, run_bench
from wire_recorder import WireRecorder


@pytest.fixture(scope="module")
def rows(cluster: Cluster) -> list[BenchRow]:
    return run_bench(cluster=cluster, backends=["single"], iterations=20, warmup=5)


def test_rows_are_the_floors_then_each_backend(rows: list[BenchRow]) -> None:
    assert [row.backend for row in rows] == ["floor", "floor-fanout", "single"]
    for row in rows:  # one backend: the floors were timed in its process only, once per cycle of its
        assert row.iterations == 20 and row.refused == 0  # one sequential client is never refused
        assert 0 < row.p50_us <= row.p99_us
        assert row.ops_per_s > 0 and math.isfinite(row.ops_per_s)


def test_bench_leaves_no_keys_behind(cluster: Cluster, rows: list[BenchRow]) -> None:
    for url in cluster.node_urls:
        client = connect(url, timeout_s=1.0)
        try:
            assert list(client.scan_iter(match="*lockcompare:bench:*")) == []
        finally:
            client.close()


def test_render_divides_by_single(rows: list[BenchRow]) -> None:
    text = render_bench(rows)
    header, _, *lines = text.splitlines()
    assert "x single" in header and "x pottery" not in header
    column = [cell.strip() for cell in header.split("|")].index("x single")
    assert lines[2].split("|")[1].strip() == "single"
    assert lines[2].split("|")[column].strip() == "1.00"


def test_render_without_single_divides_by_floor_and_adds_pottery() -> None:
    made = [
        BenchRow(backend="floor", iterations=10, refused=0, p50_us=100.0, p99_us=150.0, ops_per_s=9000.0),
        BenchRow(backend="pottery", iterations=10, refused=1, p50_us=400.0, p99_us=900.0, ops_per_s=2000.0),
    ]
    csv_text = render_bench(made, fmt="csv")
    assert csv_text.splitlines() == [
        "backend,cycles,refused,p50 µs,p99 µs,ops/s,x floor,x pottery",
        "floor,10,0,100,150,9000,1.00,0.25",
        "pottery,10,1,400,900,2000,4.00,1.00",
    ]


def test_render_refuses_an_unknown_format(rows: list[BenchRow]) -> None:
    with pytest.raises(UnknownNameError):
        render_bench(rows, fmt="html")


def test_unknown_backend_fails_before_any_worker(cluster: Cluster) -> None:
    with pytest.raises(UnknownNameError, match="no-such-backend"):
        run_bench(cluster=cluster, backends=["single", "no-such-backend"], iterations=5)


def test_iterations_must_be_positive(cluster: Cluster) -> None:
    with pytest.raises(InvalidValueError):
        run_bench(cluster=cluster, backends=["single"], iterations=0)


def _shapes(commands: list[list[bytes]], key: str) -> list[list[bytes]]:
    """Commands with each cycle's random owner token replaced by ``T`` (the rest must be equal)."""
    tokens = {c[2] for c in commands if c[0] == b"SET"}
    return [[b"T" if arg in tokens else arg for arg in command] for command in commands]


def test_the_floor_sends_singles_commands_over_singles_direct_path(
    cluster: Cluster, key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The floor is the least a lock can cost only if it takes the fastest path a lock takes: the
    same requests on node 0 as ``single`` (recorded on the wire), through DirectCommands, never
    through redis-py's per-call layers (which ``single`` skips: a floor through them measured slower
    than the lock it is the floor of)."""
    connect(cluster.node_urls[0]).script_load(RELEASE_SCRIPT)  # EVALSHA finds it: no NOSCRIPT detour
    direct_calls = []
    original = DirectCommands.call

    def counted(self: DirectCommands, *command: object) -> object:
        direct_calls.append(command[0])
        return original(self, *command)  # type: ignore[arg-type]

    def layered(*_args: object, **_kw: object) -> object:
        raise AssertionError("the floor went through redis-py's per-call layers")

    with WireRecorder(cluster.node_urls[:1]) as wire:
        config = BackendConfig(node_urls=wire.urls, request_timeout_s=1.0)
        job = bench._Job(
            backend=bench.FLOOR, row=bench.FLOOR, config=config, key=key, iterations=3, warmup=0, ttl_ms=10_000
        )
        floor = bench._floor_cycle(job)
        cycle, close = floor.run, floor.close
        monkeypatch.setattr(DirectCommands, "call", counted)
        monkeypatch.setattr(redis.Redis, "execute_command", layered)
        try:
            assert [cycle() for _ in range(3)] == [True] * 3
        finally:
            close()
        floor_commands = wire.commands(0)
        monkeypatch.undo()
        wire.clear()
        single = SingleNodeLock(config=config)
        try:
            for _ in range(3):
                single.release(single.acquire(key=f"{key}:floor", ttl_ms=10_000))  # the floor's key  # type: ignore[arg-type]
        finally:
            single.close()
        single_commands = wire.commands(0)
    assert direct_calls == ["SET", "EVALSHA"] * 3
    # The connect's handshake (the same client settings: the same HELLO and SETINFO), then the cycles.
    assert [c[0] for c in floor_commands[-6:]] == [b"SET", b"EVALSHA"] * 3
    assert _shapes(floor_commands, key) == _shapes(single_commands, key)


def test_the_fanout_floor_sends_redlocks_bytes_to_every_node(cluster: Cluster, key: str) -> None:
    """``floor-fanout`` is the least a Redlock can cost only if it sends what ``redlock`` sends: the
    same SET NX PX and EVALSHA, on every lock node (recorded on the wire), and nothing between."""
    for url in cluster.node_urls:
        connect(url).script_load(RELEASE_SCRIPT)
    with WireRecorder(cluster.node_urls) as wire:
        config = BackendConfig(node_urls=wire.urls, request_timeout_s=1.0)
        job = bench._Job(
            backend=bench.FLOOR, row=bench.FLOOR, config=config, key=key, iterations=3, warmup=0, ttl_ms=10_000
        )
        floor = bench._floor_cycle(job, fanout=True)
        try:
            assert [floor.run() for _ in range(3)] == [True] * 3
        finally:
            floor.close()
        floor_commands = [wire.commands(node) for node in range(len(cluster.node_urls))]
        wire.clear()
        lock = Redlock(config=config)
        try:
            for _ in range(3):
                assert lock.release(lock.acquire(key=f"{key}:floor-fanout", ttl_ms=10_000))  # type: ignore[arg-type]
        finally:
            lock.close()
        redlock_commands = [wire.commands(node) for node in range(len(cluster.node_urls))]
    for node, (floor_sent, redlock_sent) in enumerate(zip(floor_commands, redlock_commands, strict=True)):
        # The floor loads the script once before its cycles (SCRIPT LOAD); then the cycles, byte for byte.
        cycles = [c for c in floor_sent if c[0] != b"SCRIPT"]
        assert [c[0] for c in cycles] == [b"SET", b"EVALSHA"] * 3, node
        assert _shapes(cycles, key) == _shapes([c for c in redlock_sent if c[0] in (b"SET", b"EVALSHA")], key), node


def test_the_floors_are_timed_in_every_backends_process(cluster: Cluster) -> None:
    """A floor meets the machine state of the rows it is the floor of: each backend's process times a
    floor cycle before each of its own; each lock row carries the floor timed beside it, and a floor
    row is the one beside the row where it came out least."""
    got = run_bench(cluster=cluster, backends=["single", "redlock"], iterations=6, warmup=1, blocks=2)
    by_name = {row.backend: row for row in got}
    assert [row.backend for row in got] == ["floor", "floor-fanout", "single", "redlock"]
    assert by_name["single"].iterations == by_name["redlock"].iterations == 6
    for floor in ("floor", "floor-fanout"):
        assert by_name[floor].beside in ("single", "redlock") and by_name[floor].iterations == 6
    assert by_name["floor"].p50_us == min(by_name["single"].floor_p50_us, by_name["redlock"].floor_p50_us)
    assert "floor beside µs" in render_bench(got).splitlines()[0]
