"""The runner's own short commands (health PINGs, FLUSHALL, key clean-up) go over one kept
connection per server (infra/redis/client.py ``admin_call``), and still give the answer a new
connection would: a server restarted on its port answers, a stopped one does not, a frozen one
is judged as fast as before."""

from __future__ import annotations

import os
import signal

import redis

from lockcompare.infra import health
from lockcompare.infra.cluster import open_cluster
from lockcompare.infra.redis.client import admin_call
from lockcompare.infra.redis.server import pings


def _client_id(url: str) -> int:
    return int(admin_call(url, lambda client: client.client_id(), timeout_s=0.5))


def test_checks_reuse_one_connection_per_server() -> None:
    with open_cluster(node_count=1) as cluster:
        url = cluster.node_urls[0]
        first = _client_id(url)
        for _ in range(5):
            assert pings(url, timeout_s=0.5)
        assert _client_id(url) == first  # the same connection: no new one per check


def test_a_server_restarted_on_its_port_answers_and_a_stopped_one_does_not() -> None:
    with open_cluster(node_count=1) as cluster:
        url = cluster.node_urls[0]
        server = cluster.node_server(0)
        server.crash()
        assert not pings(url, timeout_s=0.5)  # the kept connection is dead, and a new one is refused
        server.start()  # the same port, a new process
        assert pings(url, timeout_s=0.5)  # the kept connection was opened again, once
        assert health.dead_nodes(cluster, node_count=1) == []


def test_a_frozen_server_is_asked_once_not_twice() -> None:
    with open_cluster(node_count=1) as cluster:
        url = cluster.node_urls[0]
        assert pings(url, timeout_s=0.5)
        pid = cluster.node_server(0).pid
        assert pid is not None
        calls = []

        def ping(client: redis.Redis) -> object:
            calls.append(1)
            return client.ping()

        os.kill(pid, signal.SIGSTOP)
        try:
            try:
                admin_call(url, ping, timeout_s=0.2)
                answered = True
            except redis.TimeoutError:
                answered = False
        finally:
            os.kill(pid, signal.SIGCONT)
        assert not answered
        assert calls == [1]  # a timeout is never retried: a frozen server is judged as fast as before
        assert pings(url, timeout_s=0.5)  # it answers again once thawed


def test_a_command_error_is_not_retried() -> None:
    with open_cluster(node_count=1) as cluster:
        url = cluster.node_urls[0]
        calls = []

        def failing(client: redis.Redis) -> object:
            calls.append(1)
            return client.execute_command("NO-SUCH-COMMAND")

        try:
            admin_call(url, failing, timeout_s=0.5)
        except redis.ResponseError:
            pass
        assert calls == [1]
