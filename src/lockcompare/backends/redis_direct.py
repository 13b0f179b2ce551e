"""A redis-py client's commands without its per-call layers, for the workers' hot paths.

A worker at ``--time-scale 0.1`` sends a few hundred commands per trial (a waiting worker retries
its acquire every ~1 ms; each critical section is four more), and redis-py spends most of each call
outside the socket: checking a connection out of the pool and back in (with a poll for stray data),
the retry wrapper, observability hooks, encoding every argument, response callbacks. Profiled
(cProfile, CPU time, the README's backends at ``--time-scale 0.1``): ``Redis.execute_command`` was
~38 % of the workers' CPU, its socket calls a fifth of that (issue 44.4).

:class:`DirectCommands` holds ONE connection of the client's own pool (same connection class,
handshake, password, database and socket timeouts as every other call of that client) and writes
and reads it directly. What a caller sees is what redis-py gives: the raw reply (``decode_responses``
is off everywhere in lockcompare), a :class:`redis.ResponseError` for an error reply (the connection
stays in step), a :class:`redis.ConnectionError` / :class:`redis.TimeoutError` after which the
connection is handed back to the pool, closed, and the next call checks one out again — what
redis-py with retries off (infra/redis/client.py) does. Not thread-safe: one per thread that calls.

Why back to the pool rather than reconnecting the held one: the pool's check-out connects through
the connection's own ``connect()``, and a Sentinel-managed connection's ``connect()`` asks the
sentinels where the master is now. A held connection reconnected by its next command
(``send_packed_command``) dials the address it had — after a failover the dead master's port, or the
old master restarted as a replica (READONLY) — and a Sentinel lock on it was refused until its
workers gave up (issue 48.1: 1-11 entries of 80 under ``failover``). The pool also drops a returned
connection whose address is no longer the master's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import hiredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError
from redis.exceptions import TimeoutError as RedisTimeoutError

if TYPE_CHECKING:
    import redis
    from redis.commands.core import Script
    from redis.connection import Connection


class DirectCommands:
    """One held connection of ``client``'s pool, written and read without the client's layers."""

    def __init__(self, client: redis.Redis) -> None:
        self._pool = client.connection_pool
        self._conn: Connection | None = None

    def call(self, *command: str | bytes | int, after_send: Callable[..., None] | None = None) -> Any:
        """Send ``command`` and return its raw reply (the first call checks a connection out of the
        pool, which connects it, as redis-py's own first call would). ``after_send(in_flight=1)`` runs
        between the request going out and its reply being read (an acquire's pause point:
        backends/pause_point.py)."""
        conn = self._conn
        if conn is None:
            conn = self._conn = self._pool.get_connection()
        try:
            # hiredis's stub types the argument as a 1-tuple; it takes any tuple of str, bytes and numbers.
            conn.send_packed_command([hiredis.pack_command(command)], check_health=False)  # type: ignore[arg-type]
            if after_send is not None:
                after_send(in_flight=1)
            return conn.read_response()
        except (RedisConnectionError, RedisTimeoutError):
            self._drop()
            raise

    @property
    def server(self) -> str | None:
        """``host:port`` of the server the held connection is on (None before the first call and
        after a dropped one): on a Sentinel-managed client, the master the sentinels named."""
        conn = self._conn
        host, port = getattr(conn, "host", None), getattr(conn, "port", None)
        return f"{host}:{port}" if conn is not None and host and port else None

    def _drop(self) -> None:
        """Close the held connection and hand it back, so the next call checks out one that connects
        afresh (a Sentinel-managed one asking the sentinels); the pool forgets one not on the master."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.disconnect()
            self._pool.release(conn)

    def script(self, script: Script, keys: Sequence[str], args: Sequence[str | bytes | int] = ()) -> Any:
        """EVALSHA of a registered script, loaded first if the server does not know it (a node
        restarted empty): what :meth:`redis.commands.core.Script.__call__` does."""
        try:
            return self.call("EVALSHA", script.sha, len(keys), *keys, *args)
        except NoScriptError:
            text = script.script
            loaded = self.call("SCRIPT", "LOAD", text if isinstance(text, str | bytes) else bytes(text))
            script.sha = loaded.decode() if isinstance(loaded, bytes) else loaded
            return self.call("EVALSHA", script.sha, len(keys), *keys, *args)

    def close(self) -> None:
        self._drop()
