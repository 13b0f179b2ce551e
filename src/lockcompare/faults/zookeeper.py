"""The faults that fit ZooKeeper: its session ended by the server, and which faults it cannot take.

**Session expiry forced from the server side** (the ``session-kill`` kind on ZooKeeper lock nodes):
ZooKeeper has no admin command that ends a session, so this does what operators and ZooKeeper's
own tests do — a second client attaches to the *holder's* session (same session id and password)
and closes it. The server then ends the session exactly as on expiry: its ephemeral znodes go,
the next waiter's watch fires and it is told it holds the lock; the holder's own connection is
dropped, and at its next reconnect the server answers "session expired" (kazoo: LOST).

Whose session: read on the server at injection time — the lock path's lowest contender znode is
the holder's, and its ``ephemeralOwner`` is the session id. The password is not secret from the
server: ZooKeeper derives it from the session id (``ZooKeeperServer.generatePasswd``:
``new java.util.Random(id ^ 0xB3415C00L).nextBytes(16 bytes)``), which :func:`session_password`
recomputes (checked against a live client's own password in tests/test_zookeeper.py). The history's
inject event names the session, the lock znode and the holder's identifier (its lease owner token,
which names the worker). Only that session is ended: safe on an ensemble lockcompare does not own.

**What does not apply** (infra/zookeeper_server.py's kind says so): clock jumps (ZooKeeper times sessions on
the leader's monotonic clock — ``Time.currentElapsedTime()``, ``System.nanoTime`` — never the wall
clock, so a wall-clock jump cannot end a session; and libfaketime is applied to redis-server only),
failover (an ensemble replicates by consensus: no asynchronous replica to promote).

**Which servers** (:func:`zookeeper_servers_for`): one standalone server (no server faults, or the
server restart: ``restart nodes=0``), else a three-server ensemble: the catalogue's ``node-crash`` is a *leader* crash
(the ensemble's node 0 is its leader whenever a trial starts: infra/cluster.py rebuilds one whose
leader moved) and ``partition`` cuts the holder off from the whole ensemble (it is the minority).
"""

from __future__ import annotations

from typing import Any

from lockcompare.errors import ClusterError
from lockcompare.infra.zookeeper_client import admin_session, contenders, kazoo_client_class
from lockcompare.infra.zookeeper_server import hosts_of, lock_path
from lockcompare.spec import faultkinds
from lockcompare.spec.schedule import Schedule

#: ZooKeeperServer.superSecret: the session password is java.util.Random(id ^ this).nextBytes(16).
_SUPER_SECRET = 0xB3415C00
_JAVA_MULTIPLIER = 0x5DEECE66D
_JAVA_MASK = (1 << 48) - 1

#: Servers in the ensemble that a leader crash or a partition needs (a quorum that survives one down).
ENSEMBLE_SERVERS = 3


def zookeeper_servers_for(schedule: Schedule) -> int:
    """1 (standalone) without server faults or for restarts of node 0 only (the server restart); else
    an ensemble (a leader crash, a link cut or slowed, any step naming another server)."""
    steps = schedule.of_kind(*faultkinds.acting_on(faultkinds.NODES, faultkinds.LINKS))
    restarts_node_0 = all(
        s.kind == "restart" and s.nodes is not None and s.nodes.mode == "fixed" and s.nodes.indices == (0,)
        for s in steps
    )
    return 1 if restarts_node_0 else ENSEMBLE_SERVERS


def session_password(session_id: int) -> bytes:
    """The password ZooKeeper gives session ``session_id``: java.util.Random(id ^ secret).nextBytes(16).

    >>> len(session_password(0x1000007923B0001))
    16
    """
    seed = ((session_id ^ _SUPER_SECRET) ^ _JAVA_MULTIPLIER) & _JAVA_MASK
    out = bytearray()
    while len(out) < 16:
        seed = (seed * _JAVA_MULTIPLIER + 0xB) & _JAVA_MASK
        word = seed >> 16  # Random.next(32), as an unsigned 32-bit number
        for _ in range(min(4, 16 - len(out))):
            out.append(word & 0xFF)
            word >>= 8
    return bytes(out)


def end_session(urls: list[str], *, session_id: int, timeout_s: float = 2.0) -> None:
    """Attach to ``session_id`` as a second client and close it: the server ends the session."""
    client: Any = kazoo_client_class()(hosts=hosts_of(urls), client_id=(session_id, session_password(session_id)))
    try:
        client.start(timeout=timeout_s)
    except Exception as exc:  # noqa: BLE001 - kazoo's handler timeout type, or the session already gone
        client.close()
        raise ClusterError(f"cannot attach to session {session_id:#x}: {exc or type(exc).__name__}") from None
    try:
        if client.client_id[0] != session_id:
            raise ClusterError(f"session {session_id:#x} had already ended")
    finally:
        client.stop()  # closeSession: the server ends it, ephemeral znodes and all
        client.close()


def expire_holder_session(urls: list[str], *, lock_key: str) -> tuple[str, list[int]]:
    """End the session holding ``lock_key``: (what was done, for the history — "skipped: ..." if
    nothing —, the session ids ended: the event's ``sessions_ended``, which tells the checker that
    the server ended the holder's session lease then)."""
    path = lock_path(lock_key)
    try:
        with admin_session(urls) as admin:
            holders = contenders(admin, path)
            if not holders:
                return "skipped: no session held the lock", []
            node = f"{path}/{holders[0]}"
            found = admin.get(node)
            data, stat = found
            session = int(stat.ephemeralOwner)
            end_session(urls, session_id=session)
    except ClusterError as exc:
        return f"skipped: {exc}", []
    identifier = data.decode(errors="replace")
    return f"closed the holder's session {session:#x} (lock znode {holders[0]}, identifier {identifier})", [session]
