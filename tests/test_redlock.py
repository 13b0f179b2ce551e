"""``redlock`` honours the backend contract, and the Redlock-specific rules hold against real nodes.

Tests that crash or pause nodes use ``fresh_cluster`` (a private 5-node cluster) so that the
session-wide cluster stays healthy for everyone else. Nodes are checked with plain clients.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence

import pytest
import redis
from redis.connection import PythonRespSerializer

from lockcompare.backends import BackendConfig, Lease, Refusal, load_backend, redis_fanout
from lockcompare.backends.redlock import RELEASE_SHA, Redlock, clock_drift_ns, lock_node_urls, quorum
from lockcompare.backends.single import RELEASE_SCRIPT
from lockcompare.errors import InvalidValueError
from lockcompare.infra.cluster import Cluster
from lockcompare.infra.redis.client import connect
from lockcompare.testing import BackendContract
from wire_recorder import WireRecorder


class TestRedlockContract(BackendContract):
    backend_name = "redlock"


# --- helpers -----------------------------------------------------------------------------------


@pytest.fixture
def opened() -> Iterator[list]:
    """Backends and clients to close after the test, whatever happens."""
    things: list = []
    yield things
    for thing in things:
        thing.close()


def config_for(cluster: Cluster, **overrides) -> BackendConfig:
    return BackendConfig(node_urls=cluster.node_urls, **{"request_timeout_s": 0.5, **overrides})


def make_redlock(opened: list, cluster: Cluster, *, cls: type[Redlock] | None = None, **overrides) -> Redlock:
    backend = (cls or load_backend("redlock"))(config=config_for(cluster, **overrides))
    opened.append(backend)
    return backend


def plain_clients(opened: list, urls: Sequence[str]) -> list[redis.Redis]:
    clients = [connect(url, timeout_s=1.0) for url in urls]
    opened.extend(clients)
    return clients


def values(clients: Sequence[redis.Redis], key: str) -> list[str | None]:
    return [None if (v := c.get(key)) is None else v.decode() for c in clients]


def calls(client: redis.Redis, command: str) -> int:
    return int(client.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0))


@pytest.fixture(params=["raw-socket", "read-with-timeout", "can-read-then-read"])
def read_path(request, monkeypatch) -> str:
    """Every way of bounding a read: the fan-out's own non-blocking socket and hiredis reader (the
    default on plain TCP), and through redis-py (TLS nodes): redis-py 8's read_response(timeout=),
    and can_read() before."""
    if request.param != "raw-socket":
        monkeypatch.setattr(redis_fanout, "_RAW_SOCKETS", False)
    if request.param == "can-read-then-read":
        monkeypatch.setattr(redis_fanout, "_READ_TAKES_TIMEOUT", False)
    return request.param


def pause(clients: Sequence[redis.Redis], *, ms: int) -> None:
    """CLIENT PAUSE: the node accepts connections but answers nobody for at least ``ms``.

    In effect when the command returns; Redis lifts it from its cron, up to ~100 ms late.
    """
    for client in clients:
        client.execute_command("CLIENT", "PAUSE", ms)


# --- pure rules --------------------------------------------------------------------------------


def test_quorum_is_a_strict_majority() -> None:
    assert [quorum(n) for n in range(1, 8)] == [1, 2, 2, 3, 3, 4, 4]


def test_drift_is_one_percent_of_the_ttl_plus_two_ms() -> None:
    assert clock_drift_ns(1000) == 12_000_000
    assert clock_drift_ns(100) == 3_000_000
    assert clock_drift_ns(1) == 2_010_000


def test_node_count_selects_the_first_nodes() -> None:
    urls = tuple(f"redis://127.0.0.1:{7000 + i}/0" for i in range(5))
    assert lock_node_urls(BackendConfig(node_urls=urls)) == urls
    assert lock_node_urls(BackendConfig(node_urls=urls, node_count=3)) == urls[:3]
    for bad in (0, 6):
        with pytest.raises(InvalidValueError):
            lock_node_urls(BackendConfig(node_urls=urls, node_count=bad))


def test_node_timeout_is_a_tenth_of_the_ttl_between_5_ms_and_the_request_timeout(opened, cluster) -> None:
    lock = make_redlock(opened, cluster, request_timeout_s=0.5)
    assert lock.node_timeout_s(ttl_ms=1000) == pytest.approx(0.1)
    assert lock.node_timeout_s(ttl_ms=20) == pytest.approx(0.005)
    assert lock.node_timeout_s(ttl_ms=1) == pytest.approx(0.005)
    assert lock.node_timeout_s(ttl_ms=60_000) == pytest.approx(0.5)


# --- against the session cluster (all nodes up) ------------------------------------------------


def test_one_token_on_every_node_and_release_clears_them(opened, cluster, key) -> None:
    lock = make_redlock(opened, cluster)
    nodes = plain_clients(opened, cluster.node_urls)
    lease = lock.acquire(key=key, ttl_ms=1000)
    assert isinstance(lease, Lease)
    assert values(nodes, key) == [lease.owner] * 5
    assert all(0 < node.pttl(key) <= 1000 for node in nodes)
    assert lock.release(lease) is True
    assert values(nodes, key) == [None] * 5


def test_validity_ends_at_ttl_minus_drift_after_the_first_request(opened, cluster, key) -> None:
    lock = make_redlock(opened, cluster)
    before = time.monotonic_ns()
    lease = lock.acquire(key=key, ttl_ms=1000)
    after = time.monotonic_ns()
    assert isinstance(lease, Lease)
    margin = 1000 * 1_000_000 - clock_drift_ns(1000)
    assert before + margin <= lease.valid_until_ns <= after + margin
    lock.release(lease)


@pytest.mark.parametrize("ttl_ms", [1, 2])
def test_refused_for_validity_when_the_ttl_is_within_the_drift(opened, cluster, key, ttl_ms) -> None:
    lock = make_redlock(opened, cluster)
    nodes = plain_clients(opened, cluster.node_urls)
    assert lock.acquire(key=key, ttl_ms=ttl_ms) == Refusal("validity")
    assert values(nodes, key) == [None] * 5
    lease = lock.acquire(key=key, ttl_ms=1000)  # nothing left behind that blocks the next acquire
    assert isinstance(lease, Lease)
    assert lock.release(lease) is True


def test_held_when_the_taken_answers_alone_rule_out_a_quorum(opened, cluster, key) -> None:
    lock = make_redlock(opened, cluster)
    nodes = plain_clients(opened, cluster.node_urls)
    for node in nodes[:3]:  # a split vote: someone else won nodes 0-2, nodes 3-4 are free
        node.set(key, "other", px=5000)
    assert lock.acquire(key=key, ttl_ms=1000) == Refusal("held")
    assert values(nodes, key) == ["other"] * 3 + [None] * 2  # our partial keys removed, theirs kept


def test_release_is_false_when_only_a_minority_still_held_the_key(opened, cluster, key) -> None:
    lock = make_redlock(opened, cluster)
    nodes = plain_clients(opened, cluster.node_urls)
    lease = lock.acquire(key=key, ttl_ms=1000)
    assert isinstance(lease, Lease)
    for node in nodes[:3]:  # as if three nodes restarted empty
        node.delete(key)
    assert lock.release(lease) is False
    assert values(nodes, key) == [None] * 5  # the remaining copies are deleted all the same


# --- against a private cluster (nodes crashed, paused, flushed) --------------------------------


def test_quorum_reached_with_two_of_five_nodes_down(opened, fresh_cluster, key) -> None:
    connected_before = make_redlock(opened, fresh_cluster)  # its connections to 1 and 3 go stale
    for i in (1, 3):
        fresh_cluster.servers[i].crash()
    live = plain_clients(opened, [fresh_cluster.node_urls[i] for i in (0, 2, 4)])
    connected_after = make_redlock(opened, fresh_cluster)
    for lock in (connected_before, connected_after):
        lease = lock.acquire(key=key, ttl_ms=1000)
        assert isinstance(lease, Lease)
        assert values(live, key) == [lease.owner] * 3
        assert lock.release(lease) is True
        assert values(live, key) == [None] * 3


def test_refused_with_three_of_five_down_and_partial_keys_removed(opened, fresh_cluster, key) -> None:
    lock = make_redlock(opened, fresh_cluster)
    for i in (0, 1, 2):
        fresh_cluster.servers[i].crash()
    live = plain_clients(opened, fresh_cluster.node_urls[3:])
    assert lock.acquire(key=key, ttl_ms=1000) == Refusal("no-quorum")
    assert [node.exists(key) for node in live] == [0, 0]
    # The two live nodes did grant (one SET each) and were then released: EVALSHA met NOSCRIPT on
    # these new servers, and EVAL deleted the key.
    assert [calls(node, "set") for node in live] == [1, 1]
    assert [calls(node, "evalsha") for node in live] == [1, 1]
    assert [calls(node, "eval") for node in live] == [1, 1]


def test_no_quorum_when_the_failed_nodes_made_the_difference(opened, fresh_cluster, key) -> None:
    lock = make_redlock(opened, fresh_cluster)
    nodes = plain_clients(opened, fresh_cluster.node_urls[:3])
    nodes[0].set(key, "other", px=5000)
    for i in (3, 4):
        fresh_cluster.servers[i].crash()
    # granted 2 (nodes 1-2), taken 1 (node 0), failed 2: the failed nodes could have made 3 of 5.
    assert lock.acquire(key=key, ttl_ms=1000) == Refusal("no-quorum")
    assert values(nodes, key) == ["other", None, None]


def test_slow_majority_within_the_node_timeout_is_refused_for_validity(opened, fresh_cluster, key, read_path) -> None:
    class PatientRedlock(Redlock):
        NODE_TIMEOUT_FLOOR_S = 0.3  # waits for replies far slower than the TTL

    lock = make_redlock(opened, fresh_cluster, cls=PatientRedlock)
    nodes = plain_clients(opened, fresh_cluster.node_urls)
    pause(nodes[:3], ms=60)
    started = time.monotonic()
    # All five grant, but the third grant arrives ~60 ms after the first request: TTL 40 is gone.
    assert lock.acquire(key=key, ttl_ms=40) == Refusal("validity")
    assert time.monotonic() - started >= 0.04  # the quorum really answered after the TTL
    assert values(nodes, key) == [None] * 5  # released everywhere once the pause was over


def test_slow_majority_beyond_the_node_timeout_is_no_quorum_and_connections_resync(
    opened, fresh_cluster, key, read_path
) -> None:
    lock = make_redlock(opened, fresh_cluster)  # TTL 40 ms -> 5 ms per-node timeout
    nodes = plain_clients(opened, fresh_cluster.node_urls)
    pause(nodes[:3], ms=150)
    started = time.monotonic()
    assert lock.acquire(key=key, ttl_ms=40) == Refusal("no-quorum")
    assert time.monotonic() - started < 0.1  # gave up on the paused nodes, did not wait for them
    assert values(nodes[3:], key) == [None, None]
    for node in nodes[:3]:
        node.ping()  # returns once the pause is over (Redis ends it up to ~100 ms late)
    time.sleep(0.1)  # and any late SET of ours (PX 40) has expired
    # The late replies to the abandoned SET/EVALSHA ("OK", ...) must not be read as the answers
    # to these commands: here every node is taken, so a stale "OK" would turn into a grant.
    for node in nodes:
        node.set(key, "other", px=5000)
    assert lock.acquire(key=key, ttl_ms=1000) == Refusal("held")
    assert values(nodes, key) == ["other"] * 5
    for node in nodes:
        node.delete(key)
    lease = lock.acquire(key=key, ttl_ms=1000)
    assert isinstance(lease, Lease)
    assert values(nodes, key) == [lease.owner] * 5
    assert lock.release(lease) is True
    assert values(nodes, key) == [None] * 5


def test_release_never_deletes_another_owners_key(opened, fresh_cluster, key) -> None:
    a, b = make_redlock(opened, fresh_cluster), make_redlock(opened, fresh_cluster)
    nodes = plain_clients(opened, fresh_cluster.node_urls)
    old = a.acquire(key=key, ttl_ms=100)
    assert isinstance(old, Lease)
    time.sleep(0.15)
    new = b.acquire(key=key, ttl_ms=1000)
    assert isinstance(new, Lease)
    assert a.release(old) is False
    assert values(nodes, key) == [new.owner] * 5
    assert b.release(new) is True
    assert values(nodes, key) == [None] * 5


def test_node_count_three_uses_only_the_first_three_nodes(opened, fresh_cluster, key) -> None:
    three = make_redlock(opened, fresh_cluster, node_count=3)
    five = make_redlock(opened, fresh_cluster)
    assert three.node_urls == fresh_cluster.node_urls[:3] and three.quorum == 2
    nodes = plain_clients(opened, fresh_cluster.node_urls)
    lease = three.acquire(key=key, ttl_ms=1000)
    assert isinstance(lease, Lease)
    assert values(nodes, key) == [lease.owner] * 3 + [None] * 2
    assert three.release(lease) is True

    fresh_cluster.servers[0].crash()
    lease = three.acquire(key=key, ttl_ms=1000)  # 2 of 3 is a quorum
    assert isinstance(lease, Lease)
    assert three.release(lease) is True

    fresh_cluster.servers[1].crash()
    assert three.acquire(key=key, ttl_ms=1000) == Refusal("no-quorum")  # 1 of 3
    lease = five.acquire(key=key, ttl_ms=1000)  # while 3 of 5 is still a quorum
    assert isinstance(lease, Lease)
    assert five.release(lease) is True


def test_release_falls_back_to_eval_on_a_node_with_an_empty_script_cache(opened, fresh_cluster, key) -> None:
    lock = make_redlock(opened, fresh_cluster)
    nodes = plain_clients(opened, fresh_cluster.node_urls)
    warm = lock.acquire(key=key, ttl_ms=1000)  # a first release loads the script everywhere
    assert isinstance(warm, Lease) and lock.release(warm) is True
    evals_before = [calls(node, "eval") for node in nodes]
    lease = lock.acquire(key=key, ttl_ms=1000)
    assert isinstance(lease, Lease)
    for node in nodes[:2]:
        node.script_flush()  # as after a restart
    assert lock.release(lease) is True
    assert values(nodes, key) == [None] * 5
    evals_after = [calls(node, "eval") for node in nodes]
    evals = [after - before for after, before in zip(evals_after, evals_before, strict=True)]
    assert evals == [1, 1, 0, 0, 0]  # EVAL only where EVALSHA met NOSCRIPT


# --- what goes on the wire ---------------------------------------------------------------------


def _redis_py_bytes(*command: object) -> bytes:
    """The request redis-py itself sends for ``command`` (its pure-Python packer: an independent oracle)."""
    return b"".join(
        PythonRespSerializer(65536, redis.connection.Encoder("utf-8", "strict", False).encode).pack(*command)
    )


def test_pack_gives_redis_pys_bytes() -> None:
    for command in [
        ("SET", "k", "tok", "NX", "PX", 10_000),
        ("EVALSHA", RELEASE_SHA, 1, "k", "tok"),
        ("EVAL", "if a then\n  return 1\nend", 1, "ké", b"\xff\x00raw"),
    ]:
        assert redis_fanout.pack(command) == _redis_py_bytes(*command)


def test_every_node_gets_the_same_requests_byte_for_byte(opened, cluster, key) -> None:
    """The fan-out's requests, recorded by a loopback relay in front of each node: per node one
    SET NX PX and one EVALSHA per cycle, the bytes redis-py would send, and nothing else."""
    for client in plain_clients(opened, cluster.node_urls):
        assert client.script_load(RELEASE_SCRIPT) == RELEASE_SHA  # no NOSCRIPT: EVAL is another test's
    with WireRecorder(cluster.node_urls) as wire:
        lock = Redlock(config=BackendConfig(node_urls=wire.urls, request_timeout_s=0.5))
        opened.append(lock)
        wire.clear()  # the connects are done (the constructor's): from here on, only the cycles
        owners = []
        for _ in range(3):
            lease = lock.acquire(key=key, ttl_ms=10_000)
            assert isinstance(lease, Lease), lease
            owners.append(lease.owner)
            assert lock.release(lease) is True
        expected = b"".join(
            _redis_py_bytes("SET", key, owner, "NX", "PX", 10_000)
            + _redis_py_bytes("EVALSHA", RELEASE_SHA, 1, key, owner)
            for owner in owners
        )
        assert [wire.sent(i) for i in range(len(cluster.node_urls))] == [expected] * len(cluster.node_urls)
