"""FailoverPair: a real master and replica, the replication link through a real LinkProxy."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from lockcompare.errors import ReplicationError
from lockcompare.infra.redis.client import connect
from lockcompare.infra.redis.failover_pair import FailoverPair
from lockcompare.infra.redis.kind import redis_protocol_binary
from test_lifecycle import alive as process_exists  # a reaped or zombie process is gone


@pytest.fixture
def pair() -> Iterator[FailoverPair]:
    with FailoverPair(binary=redis_protocol_binary(), name="test") as p:
        yield p


def test_writes_replicate_while_the_link_is_open(pair: FailoverPair) -> None:
    master = connect(pair.master_url, timeout_s=1)
    replica = connect(pair.replica_url, timeout_s=1)
    try:
        master.set("repl:open", b"1")
        pair.wait_in_sync(timeout_s=5)
        assert replica.get("repl:open") == b"1"
        assert master.execute_command("WAIT", 1, 1000) == 1  # acknowledged on the writing connection
    finally:
        master.close()
        replica.close()


def test_a_held_back_link_keeps_the_replica_behind(pair: FailoverPair) -> None:
    master = connect(pair.master_url, timeout_s=1)
    replica = connect(pair.replica_url, timeout_s=1)
    try:
        pair.hold_back()
        assert master.set("repl:held", b"1", nx=True, px=10_000) is True  # the master acknowledges
        assert master.execute_command("WAIT", 1, 200) == 0  # no replica acknowledged it
        time.sleep(0.2)
        assert replica.get("repl:held") is None
        with pytest.raises(ReplicationError, match="not in sync"):
            pair.wait_in_sync(timeout_s=0.3)
        # Letting the link through again resyncs the replica (the cut connection is reset).
        pair.let_through()
        pair.wait_in_sync(timeout_s=10)
        assert replica.get("repl:held") == b"1"
    finally:
        master.close()
        replica.close()


def test_failover_loses_the_unreplicated_lock_key(pair: FailoverPair) -> None:
    holder = connect(pair.master_url, timeout_s=1)
    master_pid = pair.master.pid
    try:
        holder.set("repl:before", b"1")
        pair.wait_in_sync(timeout_s=5)
        pair.hold_back()
        assert holder.set("repl:lock", b"holder-1", nx=True, px=10_000) is True
        new_url = pair.fail_over()
    finally:
        holder.close()
    assert new_url == pair.replica_url == pair.url
    assert master_pid is not None and not process_exists(master_pid)
    contender = connect(new_url, timeout_s=1)
    try:
        assert contender.get("repl:before") == b"1"  # what replicated survived
        assert contender.get("repl:lock") is None  # the lock key did not
        assert contender.set("repl:lock", b"holder-2", nx=True, px=10_000) is True  # a second holder
    finally:
        contender.close()


def test_close_leaves_no_process_even_when_the_body_raises() -> None:
    pids: list[int | None] = []
    with pytest.raises(RuntimeError, match="body failed"):
        with FailoverPair(binary=redis_protocol_binary(), name="raises") as pair:
            assert pair.replica is not None and pair.link is not None
            pids = [pair.master.pid, pair.replica.pid, pair.link.pid]
            pair.hold_back()
            raise RuntimeError("body failed")
    assert None not in pids
    assert [pid for pid in pids if process_exists(pid)] == []  # type: ignore[arg-type]
