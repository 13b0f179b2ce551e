"""backends/redis_direct.py: a client's commands on one held connection, against a real redis-server."""

from __future__ import annotations

import pytest
import redis

from lockcompare.backends import BackendConfig, Lease
from lockcompare.backends.fenced import FencedLock
from lockcompare.backends.redis_direct import DirectCommands
from lockcompare.backends.single import SingleNodeLock
from lockcompare.infra.cluster import Cluster
from lockcompare.infra.redis.client import connect
from lockcompare.runner.resource import Check
from lockcompare.runner.resource_redis import RedisResource


def test_replies_as_redis_py_gives_them(cluster: Cluster, key: str) -> None:
    client = connect(cluster.resource_url)
    direct = DirectCommands(client)
    try:
        assert direct.call("SET", key, "v", "NX", "PX", 5000) == b"OK"
        assert direct.call("SET", key, "w", "NX", "PX", 5000) is None  # NX: not set
        assert direct.call("GET", key) == client.get(key) == b"v"
        with pytest.raises(redis.ResponseError):
            direct.call("INCR", key)  # not an integer: an error reply...
        assert direct.call("DEL", key) == 1  # ...and the connection is still in step
    finally:
        direct.close()
        client.close()


def test_a_script_the_server_forgot_is_loaded_again(cluster: Cluster, key: str) -> None:
    client = connect(cluster.resource_url)
    direct = DirectCommands(client)
    script = client.register_script("return redis.call('INCR', KEYS[1])")
    try:
        assert direct.script(script, [key]) == 1
        client.script_flush()  # as a node restarted empty: EVALSHA answers NOSCRIPT
        assert direct.script(script, [key]) == 2
        client.delete(key)
    finally:
        direct.close()
        client.close()


def test_a_dropped_connection_fails_one_call_and_the_next_reconnects(cluster: Cluster, key: str) -> None:
    client = connect(cluster.resource_url)
    direct = DirectCommands(client)
    try:
        direct.call("SET", key, "1")
        port = client.connection_pool.connection_kwargs["port"]
        assert direct.server == f"127.0.0.1:{port}"
        client.client_kill_filter(skipme=True, _type="normal")  # every other connection: the held one
        with pytest.raises(redis.ConnectionError):
            direct.call("GET", key)
        # Dropped, not kept: the next call checks one out of the pool, which connects it through the
        # connection's connect() (a Sentinel-managed one asks the sentinels: test_replicated_failover).
        assert direct.server is None
        assert direct.call("GET", key) == b"1"
        assert direct.server == f"127.0.0.1:{port}"
        client.delete(key)
    finally:
        direct.close()
        client.close()


def test_the_resource_and_the_locks_on_the_direct_path(cluster: Cluster, key: str) -> None:
    config = BackendConfig(node_urls=cluster.node_urls, request_timeout_s=0.5)
    resource = RedisResource(url=cluster.resource_url, prefix=key)
    fenced, single = FencedLock(config=config), SingleNodeLock(config=config)
    try:
        resource.prepare(expire_s=60)
        lease = fenced.acquire(key=key, ttl_ms=5000)
        assert isinstance(lease, Lease) and lease.fencing_token is not None
        assert single.acquire(key=key, ttl_ms=5000).reason == "held"  # type: ignore[union-attr]
        assert resource.enter() == 1
        balance = resource.read_balance(check=Check.FENCE_ALL, fencing_token=lease.fencing_token)
        assert balance == 0
        assert resource.write_balance(1, check=Check.FENCE_WRITES, fencing_token=lease.fencing_token)
        assert not resource.write_balance(2, check=Check.FENCE_WRITES, fencing_token=lease.fencing_token - 1)
        resource.exit()
        assert fenced.release(lease)
        counters = resource.counters()
        assert (counters.entries, counters.writes_accepted, counters.writes_rejected, counters.final_balance) == (
            1,
            1,
            1,
            1,
        )
    finally:
        resource.reset()
        resource.close()
        fenced.close()
        single.close()
        cluster.delete_keys_containing(key)
