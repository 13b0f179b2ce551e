"""Fencing tokens are 64-bit integers and are compared exactly (issue 26): at the Redis resource's
Lua scripts, at the fenced lock's counter, in the checker, and in a whole client-pause trial."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lockcompare.analysis.fencing import accepted_below_earlier_token
from lockcompare.analysis.results import read_results
from lockcompare.backends import BackendConfig
from lockcompare.backends.base import Lease
from lockcompare.backends.fenced import FencedLock, fence_counter_key
from lockcompare.cli import app
from lockcompare.infra.cluster import Cluster
from lockcompare.infra.redis.client import connect
from lockcompare.runner.resource_redis import RedisResource
from lockcompare.scenario.choices import Check

#: Tokens a float cannot tell apart from their neighbours, and the largest a resource stores.
WIDE = [2**53 - 1, 2**53, 2**53 + 1, (2**28 << 32) | 7, 2**63 - 2, 2**63 - 1]


def _resource(cluster: Cluster) -> RedisResource:
    r = RedisResource(url=cluster.resource_url, prefix=f"lockcompare-test:{uuid.uuid4().hex}")
    r.prepare(expire_s=60)
    return r


@pytest.mark.parametrize("check", [Check.FENCE_WRITES, Check.FENCE_ALL])
@pytest.mark.parametrize("high", WIDE[1:])
def test_a_token_one_below_the_mark_is_refused_and_the_mark_itself_accepted(
    cluster: Cluster, check: Check, high: int
) -> None:
    r = _resource(cluster)
    try:
        assert r.write_balance(1, check=check, fencing_token=high) is True
        assert r.write_balance(2, check=check, fencing_token=high - 1) is False  # the stale holder
        assert r.read_balance(check=check, fencing_token=high - 1) is (None if check is Check.FENCE_ALL else 1)
        assert r.write_balance(3, check=check, fencing_token=high) is True  # the same holder again
        assert r.read_balance(check=check, fencing_token=high) == 3
        counters = r.counters()
        assert (counters.writes_accepted, counters.writes_rejected) == (2, 1)
    finally:
        r.reset()
        r.close()


def test_the_tokens_in_order_are_all_accepted(cluster: Cluster) -> None:
    r = _resource(cluster)
    try:
        assert [r.write_balance(i, fencing_token=t) for i, t in enumerate([0, 1, 9, 10, *WIDE])] == [True] * 10
    finally:
        r.reset()
        r.close()


def test_the_fenced_locks_counter_hands_out_64_bit_tokens_exactly(cluster: Cluster, key: str) -> None:
    client = connect(cluster.node_urls[0])
    client.set(fence_counter_key(key), 2**53)  # the next INCR: 2**53 + 1, which a double rounds to 2**53
    lock = FencedLock(config=BackendConfig(node_urls=cluster.node_urls[:1]))
    try:
        lease = lock.acquire(key=key, ttl_ms=1000)
        assert isinstance(lease, Lease) and lease.fencing_token == 2**53 + 1
        assert lock.release(lease)
    finally:
        client.delete(key, fence_counter_key(key))
        lock.close()
        client.close()


def test_the_checker_compares_tokens_as_integers() -> None:
    def w(t0: int, fence: int) -> dict:
        return {"kind": "write", "t0": t0, "t1": t0 + 1, "fence": fence, "accepted": True}

    assert accepted_below_earlier_token([w(0, 2**53 + 1), w(2, 2**53)]) == 1
    assert accepted_below_earlier_token([w(0, 2**63 - 2), w(2, 2**63 - 1)]) == 0


@pytest.mark.parametrize(
    "token, problem",
    [(2**63, "fencing_token must be an int in 0..2**63-1"), (-1, "0..2**63-1"), (1.5, "got 1.5"), (True, "True")],
)
def test_a_token_no_resource_can_store_exactly_is_a_broken_lease(token: object, problem: str) -> None:
    lease = Lease(key="k", owner="o", fencing_token=token)  # type: ignore[arg-type]
    assert problem in (lease.problem() or "")


def test_a_string_deadline_is_a_broken_lease() -> None:
    assert "valid_until_ns must be an int" in (Lease(key="k", owner="o", valid_until_ns="soon").problem() or "")  # type: ignore[arg-type]


def test_64_bit_tokens_fence_a_paused_client_as_small_ones_do(tmp_path: Path) -> None:
    """The zxid-style lock beside ``fenced`` under client-pause: no lost update, stale writes refused.

    ``--fence all``: with the token checked on the write only, a paused holder that wakes before its
    successor wrote anything may still lose an update now and then, whatever the tokens' size
    (fencing depth, analysis/fencing.py); on every access none may be lost, so any loss is a bug.

    ``--workload contend``: a worker that has run its rounds keeps contending, so every pause meets
    a rival. In the lesson workload a loaded machine sometimes let worker 1 finish all 4 rounds
    before worker 0's pause: no overlap, only the zombie's stale write with no rival to refuse it
    (``lease-violated``), and nothing tested (seen once in CI).
    """
    out = tmp_path / "wide.csv"
    result = CliRunner().invoke(
        app,
        ["matrix", "--backends", "plugins.wide_tokens:WideTokenLock,fenced", "--experiments", "client-pause",
         "--fence", "all", "--workload", "contend", "--trials", "1", "--rounds", "4", "--time-scale", "0.1",
         "--out", str(out)],
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    rows = {r["backend"]: r for r in read_results(out)}
    for backend in ("plugins.wide_tokens:WideTokenLock", "fenced"):
        row = rows[backend]
        assert row["verdict"] == "conflicts-no-damage", (backend, row)
        assert int(row["lost_updates"]) == 0 and int(row["writes_rejected"]) + int(row["reads_rejected"]) > 0
