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
connection is dropped (redis-py's connection does that itself) and reconnected by the next call —
what redis-py with retries off (infra/redisconn.py) does. Not thread-safe: one per thread that calls.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import hiredis
from redis.exceptions import NoScriptError

if TYPE_CHECKING:
    import redis
    from redis.commands.core import Script
    from redis.connection import AbstractConnection


class DirectCommands:
    """One held connection of ``client``'s pool, written and read without the client's layers."""

    def __init__(self, client: redis.Redis) -> None:
        self._pool = client.connection_pool
        self._conn: AbstractConnection | None = None

    def call(self, *command: str | bytes | int) -> Any:
        """Send ``command`` and return its raw reply (the first call checks a connection out of the
        pool, which connects it, as redis-py's own first call would)."""
        conn = self._conn
        if conn is None:
            conn = self._conn = self._pool.get_connection()
        # hiredis's stub types the argument as a 1-tuple; it takes any tuple of str, bytes and numbers.
        conn.send_packed_command([hiredis.pack_command(command)], check_health=False)  # type: ignore[arg-type]
        return conn.read_response()

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
        if self._conn is not None:
            self._conn.disconnect()
