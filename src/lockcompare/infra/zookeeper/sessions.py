"""ZooKeeper's end of the session-kill fault: end the session holding a lock, from the server side.

ZooKeeper has no admin command that ends a session, so this does what operators and ZooKeeper's
own tests do — a second client attaches to the *holder's* session (same session id and password)
and closes it. The server then ends the session exactly as on expiry: its ephemeral znodes go,
the next waiter's watch fires and it is told it holds the lock; the holder's own connection is
dropped, and at its next reconnect the server answers "session expired" (kazoo: LOST). The kind
(kind.py, :class:`~lockcompare.infra.kinds.SessionKind`) calls it;
scenario/faultkinds/session_kill.py says why and when.

Whose session: read on the server at injection time — the lock path's lowest contender znode is
the holder's, and its ``ephemeralOwner`` is the session id — and **checked against the lock again
at kill time**: attaching to a session takes a connection (tens of ms, hundreds on a loaded
machine), in which the holder may release and wait for its next round with a new znode on the same
session; ending it then would end a *waiting* worker's session (seen: ``zk-lock.session-kill``
``t0.aaeae84b`` in results/archive/zookeeper-44abcca/). So the session is attached to first (a raw connection:
:func:`attach_session`), the lock's holder read again, and the session closed only if it still
holds the lock; otherwise the connection is dropped without closing the session (its client
reconnects to it) and the step records that it ended nothing. The event names whose session it
was: ``session_owner``, the identifier the holder's znode stores (faults/schedule.py maps it to the
worker, ``session_worker``).

Where the lease lives: kazoo's Lock recipe by default (contenders named ``...__lock__<seq>`` under
``lock_path(key)``, the lowest holds it). A backend whose lease is elsewhere says so with the class
attribute ``lease_znodes`` (docs/plugins.md): a path with ``{key}`` (the harness's lock key) or
``{path}`` (``lock_path(key)``, the znode the harness gives the key and cleans up) under
which the lease's ephemeral znodes live (a kazoo ``Semaphore(max_leases=1)``: its lease nodes, in
creation order), or a callable ``(client, key) -> paths`` returning the lease's znodes, holder
first. The password is not secret from the
server: ZooKeeper derives it from the session id (``ZooKeeperServer.generatePasswd``:
``new java.util.Random(id ^ 0xB3415C00L).nextBytes(16 bytes)``), which :func:`session_password`
recomputes (checked against a live client's own password in tests/test_zookeeper.py). The history's
inject event names the session, the lock znode and the holder's identifier (its lease owner token,
which names the worker). Only that session is ended: safe on an ensemble lockcompare does not own.
"""

from __future__ import annotations

import contextlib
import socket
import struct
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from lockcompare.errors import ClusterError
from lockcompare.infra.zookeeper.client import admin_session, contenders
from lockcompare.infra.zookeeper.server import hosts_of, lock_path

#: ZooKeeperServer.superSecret: the session password is java.util.Random(id ^ this).nextBytes(16).
_SUPER_SECRET = 0xB3415C00
_JAVA_MULTIPLIER = 0x5DEECE66D
_JAVA_MASK = (1 << 48) - 1


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


#: A backend's ``lease_znodes``: a path with ``{key}``, or ``(client, key) -> the lease's znode paths``.
LeaseZnodes = str | Callable[[Any, str], Sequence[str]] | None


def lease_paths(client: Any, *, lock_key: str, lease_znodes: LeaseZnodes = None) -> list[str]:
    """The lease's znodes for ``lock_key``, the holder's first (see the module docstring)."""
    from kazoo.exceptions import NoNodeError

    if callable(lease_znodes):
        return list(lease_znodes(client, lock_key))
    if lease_znodes is None:
        path = lock_path(lock_key)
        return [f"{path}/{c}" for c in contenders(client, path)]
    path = lease_znodes.replace("{path}", lock_path(lock_key)).replace("{key}", lock_key)
    try:
        children = client.get_children(path)
    except NoNodeError:
        return []
    created = []
    for child in children:
        found = client.exists(f"{path}/{child}")
        if found is not None and found.ephemeralOwner:
            created.append((found.czxid, f"{path}/{child}"))
    return [p for _, p in sorted(created)]


def lease_holder(client: Any, *, lock_key: str, lease_znodes: LeaseZnodes = None) -> tuple[str, int, str] | None:
    """(znode, session id, identifier stored in it) of the lease's holder, read now; None: no holder."""
    from kazoo.exceptions import NoNodeError

    for path in lease_paths(client, lock_key=lock_key, lease_znodes=lease_znodes):
        try:
            data, stat = client.get(path)
        except NoNodeError:
            continue  # released since the listing
        if stat.ephemeralOwner:
            return path, int(stat.ephemeralOwner), (data or b"").decode(errors="replace")
    return None


def expire_holder_session(
    urls: list[str],
    *,
    lock_key: str,
    lease_znodes: LeaseZnodes = None,
    holds: Callable[[object], bool] | None = None,
) -> tuple[str, list[int], dict[str, Any]]:
    """End the session holding ``lock_key``, checked against the lock at kill time: (what was done,
    for the history — "skipped: ..." if nothing —, the session ids ended: the event's
    ``sessions_ended``, which tells the checker that the server ended that session lease then, and
    the event's other fields: ``session_owner``, the identifier of the holder whose session it was).
    ``holds`` (the runner's, faults/aim.py): asked with the session id (hex, as the lock's owner
    tokens carry it) right before the close — is it still a worker's current lease, by the worker's
    own account? One it denies is left alone (the holder had begun releasing: its session is about
    to be a waiter's)."""
    try:
        with admin_session(urls) as admin:
            found = lease_holder(admin, lock_key=lock_key, lease_znodes=lease_znodes)
            if found is None:
                return f"skipped: no session held the lock{_undeclared(admin, lock_key, lease_znodes)}", [], {}
            node, session, identifier = found
            with attach_session(urls, session_id=session) as attached:
                now = lease_holder(admin, lock_key=lock_key, lease_znodes=lease_znodes)
                if now is None or now[1] != session:
                    # The holder let go while the kill attached: its session is no longer the lock's.
                    whose = "no one" if now is None else f"session {now[1]:#x}"
                    return (
                        f"skipped: session {session:#x} no longer held the lock at kill time (now {whose}); not ended",
                        [],
                        {"session_owner": identifier},
                    )
                if holds is not None and not holds(f"{session:x}"):
                    return (
                        f"skipped: session {session:#x} (identifier {identifier}) was no worker's current lease "
                        "at kill time (its holder had begun releasing it); not ended",
                        [],
                        {"session_owner": identifier},
                    )
                attached.close_session()
    except ClusterError as exc:
        return f"skipped: {exc}", [], {}
    name = node.rsplit("/", 1)[-1]
    detail = f"closed the holder's session {session:#x} (lock znode {name}, identifier {identifier})"
    return detail, [session], {"session_owner": identifier}


def _undeclared(admin: Any, lock_key: str, lease_znodes: LeaseZnodes) -> str:
    """A hint when the key's path holds znodes but no kazoo Lock contender, and the backend declared
    no ``lease_znodes``: its lease is probably there, in a shape the default lookup does not read."""
    from kazoo.exceptions import NoNodeError

    if lease_znodes is not None:
        return ""
    try:
        children = admin.get_children(lock_path(lock_key))
    except NoNodeError:
        return ""
    if not children:
        return ""
    return (
        f" ({len(children)} znode(s) under the key's path, none a kazoo Lock contender: a backend whose lease "
        "lives elsewhere declares lease_znodes: a class attribute, docs/plugins.md; a manifest field, "
        "docs/clients.md)"
    )


class AttachedSession:
    """A raw connection to a server on another client's session (ZooKeeper's wire protocol, no
    threads): closing the session ends it; dropping the connection leaves it to its client."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    def close_session(self) -> None:
        """closeSession (op -11): the server ends the session, ephemeral znodes and all."""
        self._sock.sendall(struct.pack(">iii", 8, 1, -11))
        length = struct.unpack(">i", _read(self._sock, 4))[0]
        _xid, _zxid, err = struct.unpack(">iqi", _read(self._sock, length)[:16])
        if err != 0:
            raise ClusterError(f"closeSession answered error {err}")


@contextlib.contextmanager
def attach_session(urls: Sequence[str], *, session_id: int, timeout_s: float = 2.0) -> Iterator[AttachedSession]:
    """A connection on ``session_id`` (its password recomputed: :func:`session_password`); the
    socket is closed on the way out, which alone does not end the session."""
    host, _, port = hosts_of(urls).split(",")[0].rpartition(":")
    try:
        sock = socket.create_connection((host, int(port)), timeout=timeout_s)
    except OSError as exc:
        raise ClusterError(f"cannot reach ZooKeeper {host}:{port}: {exc}") from None
    try:
        password = session_password(session_id)
        body = struct.pack(">iqiqi", 0, 0, 30_000, session_id, len(password)) + password + b"\x00"
        sock.sendall(struct.pack(">i", len(body)) + body)
        length = struct.unpack(">i", _read(sock, 4))[0]
        _version, timeout_ms, granted = struct.unpack(">iiq", _read(sock, length)[:16])
        if timeout_ms <= 0 or granted != session_id:
            raise ClusterError(f"session {session_id:#x} had already ended")
        yield AttachedSession(sock)
    except OSError as exc:
        raise ClusterError(f"session {session_id:#x}: {exc}") from None
    finally:
        sock.close()


def _read(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ClusterError("ZooKeeper closed the connection")
        data += chunk
    return data
