"""Who held the lock on each node when a fault struck (faults/holders.py): pure formatting on
hand-built events, and the reads themselves on real nodes that crash and restart."""

from __future__ import annotations

import uuid

from lockcompare.analysis.holders import (
    UNREADABLE,
    describe_holders,
    majority_broken,
    worker_of_owner,
)
from lockcompare.backends import BackendConfig, Lease
from lockcompare.backends.pottery_redlock import PotteryRedlock
from lockcompare.backends.redlock import Redlock
from lockcompare.faults.holders import LockHolders, glob_escape
from lockcompare.infra.cluster import open_cluster
from lockcompare.render.timeline import render_timeline


def test_holders_are_named_by_the_worker_whose_acquire_returned_the_owner() -> None:
    events = [
        {"worker": 0, "round": 0, "kind": "acquire", "t0": 0, "t1": 1, "ok": True, "owner": "aaaa"},
        {"worker": 1, "round": 0, "kind": "acquire", "t0": 0, "t1": 2, "ok": False, "owner": None},
        {"worker": 1, "round": 1, "kind": "acquire", "t0": 5, "t1": 6, "ok": True, "owner": "bbbb"},
        {"worker": -1, "round": 0, "kind": "fault", "t0": 3, "t1": 4, "fault": "node-restart", "action": "inject",
         "nodes": [0], "detail": "SIGKILL", "holders": ["aaaa", "aaaa", None, UNREADABLE, "cccccccccc"]},
    ]  # fmt: skip
    owners = worker_of_owner(events)
    assert owners == {"aaaa": 0, "bbbb": 1}
    assert describe_holders(events[-1]["holders"], owners) == "[w0 w0 - ? cccccccc]"
    assert "holders=[w0 w0 - ? cccccccc]" in render_timeline(events)


def test_a_fault_breaks_the_majority_only_of_a_holder_it_leaves_short_of_one() -> None:
    def inject(holders: list, nodes: list[int]) -> dict:
        return {"kind": "fault", "action": "inject", "fault": "node-restart", "nodes": nodes, "holders": holders}

    assert majority_broken(inject(["a", "a", "a", None, None], [0])) is True  # 3 of 5, one hit: 2 left
    assert majority_broken(inject(["a", "a", "a", "a", None], [0])) is False  # 4 of 5: 3 left
    assert majority_broken(inject(["a", "a", "a", None, None], [4])) is False  # the fault missed the holder
    assert majority_broken(inject(["a", "a", "a", "a", "a"], [0, 1, 2])) is True  # a majority hit
    assert majority_broken(inject(["a", "a", "b", "b", UNREADABLE], [0])) is False  # nobody held a majority
    assert majority_broken(inject([None] * 5, [0])) is False  # free
    assert majority_broken(inject(["a"], [0])) is True  # a single node's holder loses it to every fault
    assert majority_broken({"kind": "fault", "action": "inject", "nodes": [0]}) is None  # not read: unknown


def test_glob_escape_makes_every_pattern_character_literal() -> None:
    assert glob_escape("lockcompare:r1:t.0:lock") == "lockcompare:r1:t.0:lock"
    assert glob_escape("a*b?[c]\\") == "a\\*b\\?\\[c\\]\\\\"


def test_the_lock_is_read_on_every_node_under_a_librarys_own_key_prefix() -> None:
    key = f"lockcompare-test:{uuid.uuid4().hex}:lock"
    with open_cluster() as cluster:
        config = BackendConfig(node_urls=cluster.node_urls, request_timeout_s=0.5)
        ours, pottery = Redlock(config=config), PotteryRedlock(config=config)
        holders = LockHolders(node_urls=cluster.node_urls, key_pattern="*" + glob_escape(key))
        try:
            assert holders.read() == [None] * 5
            lease = ours.acquire(key=key, ttl_ms=10_000)
            assert isinstance(lease, Lease)
            assert holders.read() == [lease.owner] * 5
            cluster.node_server(1).crash()
            assert holders.read() == [lease.owner, UNREADABLE, *[lease.owner] * 3]
            cluster.node_server(1).start()  # back, empty; the read reconnects on its own
            assert holders.read() == [lease.owner, None, *[lease.owner] * 3]
            assert ours.release(lease)
            theirs = pottery.acquire(key=key, ttl_ms=10_000)  # stored as redlock:<key>
            assert isinstance(theirs, Lease)
            seen = holders.read()
            assert seen.count(theirs.owner) >= 3 and set(seen) <= {theirs.owner, None}
            assert pottery.release(theirs)
        finally:
            holders.close()
            ours.close()
            pottery.close()
