"""The protected resource on Redis: a separate redis-server holding what the lock is supposed to protect.

It keeps an occupancy counter (how many workers are inside the critical section right now), an
account balance that every critical section increments, a fence high-water mark and the owner
token last stored with the balance. It counts at the source, in Lua scripts that run atomically
on the server: entries, conflicts (an entry that found someone already inside), and accepted /
rejected reads and writes. Those counters are the resource's own account of what happened,
independent of what the workers recorded in the history.

How the balance is touched is the *resource check* (see :class:`Check`): a plain read and write,
a fencing token checked on the write only or on every access, antirez's check-and-set on the
lease's random token, or no lock at all (an atomic INCRBY, or optimistic WATCH/MULTI/EXEC).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import ClassVar

import redis

from lockcompare.analysis.counters import ResourceCounters
from lockcompare.backends.redis_direct import DirectCommands
from lockcompare.infra.redis.client import connect, is_redis_url
from lockcompare.scenario.choices import Check

#: INCR occupancy; an entry that finds someone inside is a conflict, counted here, at the resource.
ENTER_SCRIPT = """
local inside = redis.call('INCR', KEYS[1])
redis.call('INCR', KEYS[2])
if inside > 1 then redis.call('INCR', KEYS[3]) end
return inside
"""

#: An unchecked write: always accepted (and counted, so lost updates can be computed).
PLAIN_WRITE_SCRIPT = """
redis.call('SET', KEYS[1], ARGV[1], 'KEEPTTL')
redis.call('INCR', KEYS[2])
return 1
"""

#: Fencing tokens are 64-bit integers (etcd revisions, zxids, sequences, ns stamps), but a Lua
#: number is a double: above 2**53 ``tonumber`` makes neighbouring tokens equal, and a stale write
#: passes. So the scripts never turn a token into a number: the runner sends it as a decimal string
#: of TOKEN_DIGITS digits (zero-padded), and ``older`` compares two of them as two 10-digit halves,
#: each exact as a double. The mark is stored as that string ('' until the first token).
OLDER_FUNCTION = """
local function older(a, b)
  if b == '' or b == '0' then return false end
  local ah, bh = tonumber(string.sub(a, 1, 10)), tonumber(string.sub(b, 1, 10))
  if ah ~= bh then return ah < bh end
  return tonumber(string.sub(a, 11)) < tonumber(string.sub(b, 11))
end
"""

#: The width of a token as the scripts see it: 2**63 - 1 has 19 digits.
TOKEN_DIGITS = 20


def token_text(token: int) -> str:
    """A fencing token as the scripts compare it (see OLDER_FUNCTION); the range is checked by Lease.problem."""
    if not 0 <= token < 10**TOKEN_DIGITS:
        raise ValueError(f"fencing token out of range: {token}")
    return f"{token:0{TOKEN_DIGITS}d}"


#: The lesson's fenced write: reject a token lower than the highest seen, count both outcomes.
FENCED_WRITE_SCRIPT = (
    OLDER_FUNCTION
    + """
local seen = redis.call('GET', KEYS[3]) or ''
if older(ARGV[2], seen) then
  redis.call('INCR', KEYS[4])
  return 0
end
redis.call('SET', KEYS[3], ARGV[2], 'KEEPTTL')
redis.call('SET', KEYS[1], ARGV[1], 'KEEPTTL')
redis.call('INCR', KEYS[2])
return 1
"""
)

#: A fenced read: a token lower than the highest seen may not even read; a newer one raises the
#: mark, so that an older holder's later write is refused. Returns the balance, or false.
FENCED_READ_SCRIPT = (
    OLDER_FUNCTION
    + """
local seen = redis.call('GET', KEYS[2]) or ''
if older(ARGV[1], seen) then
  redis.call('INCR', KEYS[3])
  return false
end
redis.call('SET', KEYS[2], ARGV[1], 'KEEPTTL')
return redis.call('GET', KEYS[1]) or '0'
"""
)

#: antirez's check-and-set: the read stores the reader's random lease token with the balance...
TOKEN_READ_SCRIPT = """
redis.call('SET', KEYS[2], ARGV[1], 'KEEPTTL')
return tonumber(redis.call('GET', KEYS[1]) or '0')
"""

#: ...and the write is accepted only if that token is still the one stored.
TOKEN_WRITE_SCRIPT = """
if redis.call('GET', KEYS[3]) ~= ARGV[2] then
  redis.call('INCR', KEYS[4])
  return 0
end
redis.call('SET', KEYS[1], ARGV[1], 'KEEPTTL')
redis.call('INCR', KEYS[2])
return 1
"""

#: The lock-free alternative: one atomic increment (counted like an accepted write).
ATOMIC_INCREMENT_SCRIPT = """
redis.call('INCRBY', KEYS[1], 1)
redis.call('INCR', KEYS[2])
return 1
"""


#: A partition's write (``partitioned``): the partition's own key takes the value, and the balance
#: moves by the difference, so the balance stays the sum of the partitions and a lost update on any
#: partition shows as writes accepted − balance. The partition key lives as long as the balance key.
PARTITION_WRITE_SCRIPT = """
local old = tonumber(redis.call('GET', KEYS[1]) or '0')
local ttl = redis.call('PTTL', KEYS[2])
if ttl > 0 then redis.call('SET', KEYS[1], ARGV[1], 'PX', ttl) else redis.call('SET', KEYS[1], ARGV[1]) end
redis.call('INCRBY', KEYS[2], tonumber(ARGV[1]) - old)
redis.call('INCR', KEYS[3])
return 1
"""

#: An increment with a request id (``idempotent``): the resource remembers the ids it applied and
#: answers a repeated one with 2 (done before: acknowledged, not applied again) when ARGV[2] is '1'.
IDEMPOTENT_INCREMENT_SCRIPT = """
local first = redis.call('SADD', KEYS[3], ARGV[1])
local ttl = redis.call('PTTL', KEYS[1])
if ttl > 0 then redis.call('PEXPIRE', KEYS[3], ttl) end
if first == 0 and ARGV[2] == '1' then return 2 end
redis.call('INCRBY', KEYS[1], 1)
redis.call('INCR', KEYS[2])
return 1
"""


@dataclass(frozen=True)
class ResourceKeys:
    """The resource's key names for one trial (all under the trial's own prefix)."""

    occupancy: str
    entries: str
    conflicts: str
    balance: str
    fence_hwm: str
    balance_owner: str
    writes_accepted: str
    writes_rejected: str
    reads_rejected: str

    @classmethod
    def under(cls, prefix: str) -> ResourceKeys:
        return cls(**{f.name: f"{prefix}:{f.name.replace('_', '-')}" for f in fields(cls)})

    def all(self) -> list[str]:
        return [getattr(self, f.name) for f in fields(self)]


class RedisResource:
    """A worker's (or the runner's) handle on the resource's keys under one trial's prefix
    (:class:`lockcompare.runner.resource.Resource`)."""

    #: What a call raises when the resource's server fails under it (the runner reads it as a failure).
    failures: ClassVar[tuple[type[Exception], ...]] = (redis.RedisError,)
    link_proxied: ClassVar[bool] = True  # the trial puts its resource URL behind a proxy (infra/proxy.py)

    @classmethod
    def owns(cls, url: str) -> bool:
        return is_redis_url(url)

    def __init__(self, *, url: str, prefix: str, timeout_s: float = 2.0) -> None:
        self.keys = ResourceKeys.under(prefix)
        self._client = connect(url, timeout_s=timeout_s)
        script = self._client.register_script
        self._enter = script(ENTER_SCRIPT)
        self._plain_write = script(PLAIN_WRITE_SCRIPT)
        self._fenced_write = script(FENCED_WRITE_SCRIPT)
        self._fenced_read = script(FENCED_READ_SCRIPT)
        self._token_read = script(TOKEN_READ_SCRIPT)
        self._token_write = script(TOKEN_WRITE_SCRIPT)
        self._atomic_increment = script(ATOMIC_INCREMENT_SCRIPT)
        self._partition_write = script(PARTITION_WRITE_SCRIPT)
        self._idempotent_increment = script(IDEMPOTENT_INCREMENT_SCRIPT)
        # The critical section's calls (a worker's, a few hundred per trial) skip redis-py's per-call
        # layers: same connection settings and errors, a third of the CPU (backends/redis_direct.py).
        self._direct = DirectCommands(self._client)

    def enter(self) -> int:
        """Enter the critical section; returns how many workers are inside now (>1: a conflict)."""
        k = self.keys
        return int(self._direct.script(self._enter, [k.occupancy, k.entries, k.conflicts]))

    def exit(self) -> None:
        self._direct.call("DECR", self.keys.occupancy)

    def read_balance(
        self, *, check: Check = Check.PLAIN, fencing_token: int | None = None, owner: str = ""
    ) -> int | None:
        """The balance, or None when the resource refuses the read (a fenced read with a stale token)."""
        k = self.keys
        if check is Check.FENCE_ALL and fencing_token is not None:
            keys = [k.balance, k.fence_hwm, k.reads_rejected]
            value = self._direct.script(self._fenced_read, keys, [token_text(fencing_token)])
            return None if value is None else int(value)
        if check is Check.TOKEN_CAS:
            return int(self._direct.script(self._token_read, [k.balance, k.balance_owner], [owner]))
        value = self._direct.call("GET", k.balance)
        return int(value) if value is not None else 0

    def write_balance(
        self, value: int, *, check: Check = Check.FENCE_WRITES, fencing_token: int | None = None, owner: str = ""
    ) -> bool:
        """Write the new balance; a checked write may be rejected (False).

        By default a write that carries a fencing token is fenced, as in the lesson.
        """
        k = self.keys
        if check in (Check.FENCE_WRITES, Check.FENCE_ALL) and fencing_token is not None:
            keys = [k.balance, k.writes_accepted, k.fence_hwm, k.writes_rejected]
            return bool(self._direct.script(self._fenced_write, keys, [value, token_text(fencing_token)]))
        if check is Check.TOKEN_CAS:
            keys = [k.balance, k.writes_accepted, k.balance_owner, k.writes_rejected]
            return bool(self._direct.script(self._token_write, keys, [value, owner]))
        return bool(self._direct.script(self._plain_write, [k.balance, k.writes_accepted], [value]))

    def increment(self) -> bool:
        """The lock-free critical section: one atomic INCRBY."""
        return bool(self._direct.script(self._atomic_increment, [self.keys.balance, self.keys.writes_accepted]))

    def partition_key(self, partition: int) -> str:
        """The key of one worker's partition (``partitioned``): outside ResourceKeys, it expires with the balance."""
        return f"{self.keys.balance}:p{partition}"

    def read_partition(self, partition: int) -> int:
        value = self._direct.call("GET", self.partition_key(partition))
        return int(value) if value is not None else 0

    def write_partition(self, partition: int, value: int) -> bool:
        """An unchecked write of one partition; the balance follows (PARTITION_WRITE_SCRIPT)."""
        keys = [self.partition_key(partition), self.keys.balance, self.keys.writes_accepted]
        return bool(self._direct.script(self._partition_write, keys, [value]))

    def increment_once(self, request_id: str, *, dedupe: bool) -> bool:
        """An INCRBY carrying ``request_id``; with ``dedupe`` a repeated id is acknowledged and not
        applied again. True: applied now."""
        keys = [self.keys.balance, self.keys.writes_accepted, f"{self.keys.balance}:applied"]
        return int(self._direct.script(self._idempotent_increment, keys, [request_id, "1" if dedupe else "0"])) == 1

    def watch_balance(self) -> tuple[redis.client.Pipeline, int]:
        """Start an optimistic update: WATCH the balance and read it (pass the pipeline on)."""
        pipe = self._client.pipeline()
        pipe.watch(self.keys.balance)
        value = pipe.get(self.keys.balance)
        return pipe, int(value) if value is not None else 0

    def commit_balance(self, pending: redis.client.Pipeline, value: int) -> bool:
        """Finish an optimistic update (``pending``: the pipeline :meth:`watch_balance` returned):
        MULTI/SET/EXEC; False if the balance changed since the read."""
        try:
            pending.multi()
            pending.set(self.keys.balance, value, keepttl=True)
            pending.incr(self.keys.writes_accepted)
            pending.execute()
            return True
        except redis.WatchError:
            return False
        finally:
            pending.reset()

    def prepare(self, *, expire_s: float) -> None:
        """Create this trial's keys with a TTL, so that a killed run leaves nothing behind for good.

        Every script keeps a key's TTL (INCR/DECR do; SETs say KEEPTTL): the keys are gone
        ``expire_s`` after the trial started even if nobody cleans up (e.g. on an external server).
        """
        pipe = self._client.pipeline(transaction=False)
        for key in self.keys.all():
            pipe.set(key, 0 if key != self.keys.balance_owner else "", ex=max(1, round(expire_s)))
        pipe.execute()

    def reset(self) -> None:
        """Delete this trial's keys (only ours: external servers are never flushed)."""
        self._client.delete(*self.keys.all(), f"{self.keys.balance}:applied")

    def counters(self) -> ResourceCounters:
        k = self.keys
        names = [k.entries, k.conflicts, k.writes_accepted, k.writes_rejected, k.balance, k.occupancy, k.reads_rejected]
        return ResourceCounters.from_values([int(v) if v is not None else 0 for v in self._client.mget(names)])

    def close(self) -> None:
        self._direct.close()
        self._client.close()
