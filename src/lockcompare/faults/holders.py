"""Who held the lock on each node at the moment a node fault struck: evidence, read by the runner.

A Redlock survives a minority of its nodes restarting only when the holder's key is on more than a
bare majority (the Redlock specification says so itself: 3 of 5, one restarts empty, and 3 nodes
are free again). Whether a lost update under a minority fault is that case or a bug cannot be told
from the workers' side: most backends do not say which nodes granted them (pottery does not).
So ahead of a node fault aimed at a lease (from when the acquire that makes it due is reported:
faults/aim.py) the runner reads the lock key on every lock node, over its own admin connections,
and the inject event carries ``holders``: one entry per node —

* the owner token the node holds for the trial's lock key (what the backend stored as the value;
  :func:`~lockcompare.render.timeline.render_timeline` names the worker whose acquire returned it),
* ``None`` when the node holds no such key,
* ``"?"`` when the node could not be read (down, or it did not answer within the read timeout).

One Lua call per node (the key's name is whatever the backend wraps the harness's key in, so it is
matched by pattern: a trial's private lock nodes hold a handful of keys). Embedded Redis clusters
only: node faults cannot act on external servers anyway, and etcd members are not read.
By default the key is any key that ENDS with the harness's key (prefixes such as pottery's
``redlock:`` are fine). A backend that stores its lock elsewhere says where (class attributes, an
external client's manifest ``[key]``): ``key_pattern``, a glob with ``{key}`` standing for the
harness's key (``mutex:{key}``, ``{key}:lock``), and ``key_type``: ``string`` (the owner token is
the value, read with GET) or ``hash`` (Redisson-style ``HSET <key> <owner> <count>``: the owner is
the hash's first field, read with HGETALL after EXISTS).
"""

from __future__ import annotations

from collections.abc import Sequence

import redis

from lockcompare.analysis.holders import UNREADABLE
from lockcompare.infra.redis.client import connect

#: How long the runner waits for one node before calling it unreadable. A node that is down
#: refuses at once, so this is spent only on a machine that stalls (a CPU-throttled run took over
#: 50 ms to connect and answer); then the injection is late by as much, as is everything else.
READ_TIMEOUT_S = 0.25

# The owner stored under the first key that matches: a string lock's value, or a hash lock's first
# field (ARGV[2] == "hash"); a key of another type is reported by its type.
_READ_SCRIPT = """
local keys = redis.call('KEYS', ARGV[1])
if #keys == 0 or redis.call('EXISTS', keys[1]) == 0 then return false end
local kind = redis.call('TYPE', keys[1])['ok']
if ARGV[2] == 'hash' and kind == 'hash' then
  local fields = redis.call('HGETALL', keys[1])
  if #fields == 0 then return false end
  return fields[1]
end
if kind ~= 'string' then return '<' .. kind .. '>' end
return redis.call('GET', keys[1])
"""

#: Where a lock lives when its backend does not say: any key ending with the harness's key.
DEFAULT_KEY_PATTERN = "*{key}"
KEY_TYPES = ("string", "hash")


def key_glob(lock_key: str, *, pattern: str = DEFAULT_KEY_PATTERN) -> str:
    """The glob for a backend's ``key_pattern`` (``{key}`` -> the harness's key, escaped).

    >>> key_glob("t:lock", pattern="mutex:{key}")
    'mutex:t:lock'
    """
    return pattern.replace("{key}", glob_escape(lock_key))


def glob_escape(text: str) -> str:
    """``text`` as a literal inside a Redis glob pattern (KEYS, SCAN MATCH)."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


class LockHolders:
    """Reads the lock key on every node; connections are opened once and reopened after a restart."""

    def __init__(self, *, node_urls: Sequence[str], key_pattern: str, key_type: str = "string") -> None:
        if key_type not in KEY_TYPES:
            raise ValueError(f"key_type {key_type!r} is not one of {', '.join(KEY_TYPES)}")
        self._urls = tuple(node_urls)
        self._pattern = key_pattern
        self._type = key_type
        self._clients: dict[int, redis.Redis] = {}

    @property
    def pattern(self) -> str:
        """The glob the lock key is read under (what a skipped step's reason names)."""
        return self._pattern

    def read(self) -> list[str | None]:
        return [self._read_node(i) for i in range(len(self._urls))]

    def _read_node(self, index: int) -> str | None:
        # Two tries: the first call after a node restarted fails on the dead connection it left.
        for _ in range(2):
            client = self._clients.get(index) or self._clients.setdefault(
                index, connect(self._urls[index], timeout_s=READ_TIMEOUT_S)
            )
            try:
                value = client.eval(_READ_SCRIPT, 0, self._pattern, self._type)
            except redis.ConnectionError:
                self._drop(index)
                continue
            except redis.RedisError:
                self._drop(index)
                return UNREADABLE
            return None if value is None else value.decode(errors="replace")
        return UNREADABLE

    def _drop(self, index: int) -> None:
        client = self._clients.pop(index, None)
        if client is not None:
            client.close()

    def close(self) -> None:
        for index in list(self._clients):
            self._drop(index)
