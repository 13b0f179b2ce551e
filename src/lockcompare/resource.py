"""The protected resource: a separate redis-server holding what the lock is supposed to protect.

It keeps an occupancy counter (how many workers are inside the critical section right now), an
account balance that every critical section increments by read-modify-write, and a fence
high-water mark. It counts at the source, in Lua scripts that run atomically on the server:
entries, conflicts (an entry that found someone already inside), and accepted / rejected writes.
Those counters are the resource's own account of what happened, independent of what the workers
recorded in the history.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from lockcompare.redisconn import connect

#: INCR occupancy; an entry that finds someone inside is a conflict, counted here, at the resource.
ENTER_SCRIPT = """
local inside = redis.call('INCR', KEYS[1])
redis.call('INCR', KEYS[2])
if inside > 1 then redis.call('INCR', KEYS[3]) end
return inside
"""

#: An unfenced write: always accepted (and counted, so lost updates can be computed).
PLAIN_WRITE_SCRIPT = """
redis.call('SET', KEYS[1], ARGV[1])
redis.call('INCR', KEYS[2])
return 1
"""

#: The lesson's fenced write: reject a token lower than the highest seen, count both outcomes.
FENCED_WRITE_SCRIPT = """
local seen = tonumber(redis.call('GET', KEYS[3]) or '0')
local tok = tonumber(ARGV[2])
if tok < seen then
  redis.call('INCR', KEYS[4])
  return 0
end
redis.call('SET', KEYS[3], tok)
redis.call('SET', KEYS[1], ARGV[1])
redis.call('INCR', KEYS[2])
return 1
"""


@dataclass(frozen=True, kw_only=True)
class ResourceCounters:
    """What the resource itself counted during one trial."""

    entries: int
    conflicts: int
    writes_accepted: int
    writes_rejected: int
    final_balance: int
    occupancy: int  # should be 0 after a trial: every entry was followed by an exit


@dataclass(frozen=True)
class ResourceKeys:
    """The resource's key names for one trial (all under the trial's own prefix)."""

    occupancy: str
    entries: str
    conflicts: str
    balance: str
    fence_hwm: str
    writes_accepted: str
    writes_rejected: str

    @classmethod
    def under(cls, prefix: str) -> ResourceKeys:
        return cls(**{f.name: f"{prefix}:{f.name.replace('_', '-')}" for f in fields(cls)})

    def all(self) -> list[str]:
        return [getattr(self, f.name) for f in fields(self)]


class Resource:
    """A worker's (or the runner's) handle on the resource's keys under one trial's prefix."""

    def __init__(self, *, url: str, prefix: str, timeout_s: float = 2.0) -> None:
        self.keys = ResourceKeys.under(prefix)
        self._client = connect(url, timeout_s=timeout_s)
        self._enter = self._client.register_script(ENTER_SCRIPT)
        self._plain_write = self._client.register_script(PLAIN_WRITE_SCRIPT)
        self._fenced_write = self._client.register_script(FENCED_WRITE_SCRIPT)

    def enter(self) -> int:
        """Enter the critical section; returns how many workers are inside now (>1: a conflict)."""
        k = self.keys
        return int(self._enter(keys=[k.occupancy, k.entries, k.conflicts]))

    def exit(self) -> None:
        self._client.decr(self.keys.occupancy)

    def read_balance(self) -> int:
        value = self._client.get(self.keys.balance)
        return int(value) if value is not None else 0

    def write_balance(self, value: int, *, fencing_token: int | None = None) -> bool:
        """Write the new balance; with a fencing token, the resource may reject it (False)."""
        k = self.keys
        if fencing_token is None:
            return bool(self._plain_write(keys=[k.balance, k.writes_accepted], args=[value]))
        keys = [k.balance, k.writes_accepted, k.fence_hwm, k.writes_rejected]
        return bool(self._fenced_write(keys=keys, args=[value, fencing_token]))

    def reset(self) -> None:
        """Delete this trial's keys (only ours: external servers are never flushed)."""
        self._client.delete(*self.keys.all())

    def counters(self) -> ResourceCounters:
        k = self.keys
        raw = self._client.mget([k.entries, k.conflicts, k.writes_accepted, k.writes_rejected, k.balance, k.occupancy])
        entries, conflicts, accepted, rejected, balance, occupancy = (int(v) if v is not None else 0 for v in raw)
        return ResourceCounters(
            entries=entries,
            conflicts=conflicts,
            writes_accepted=accepted,
            writes_rejected=rejected,
            final_balance=balance,
            occupancy=occupancy,
        )

    def close(self) -> None:
        self._client.close()

