"""``fenced``: the single-node lock plus a fencing token (lesson 10, section 10.4).

The token comes from INCR of a counter on the lock node, in the SAME Lua script as the
``SET NX PX``: Redis runs a script atomically, so token order is acquisition order. With two
separate round trips (SET, then INCR) a holder that stalled between them could take its token
after its successor took one, and hold a *higher* token than the holder that followed it: the
resource would then reject the successor's writes and accept the stale holder's.

The lock alone still lets a paused holder back in; the token lets the resource refuse its stale
write. The counter lives on the lock node, so it is only as durable as that node: a node restarted
empty, or a replica promoted before the counter's last increments reached it (the failover
experiment), hands out tokens again from an older value — tokens that go backwards, whose holder's
writes the resource then refuses although it holds the lock.
"""

from __future__ import annotations

import time
from typing import ClassVar

import redis

from lockcompare.backends.base import BackendConfig, Lease, Refusal
from lockcompare.backends.single import SingleNodeLock, new_owner_token

#: KEYS[1] lock key, KEYS[2] fence counter; ARGV[1] owner token, ARGV[2] TTL in ms.
#: The token, or nil when the lock is held (SET NX returns false to Lua when it did not set). The
#: token goes back as the counter's string, not INCR's result: Lua holds that as a double, exact
#: only up to 2**53, and a counter is a 64-bit integer.
ACQUIRE_SCRIPT = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  redis.call('INCR', KEYS[2])
  redis.call('EXPIRE', KEYS[2], ARGV[3])
  return redis.call('GET', KEYS[2])
end
return false
"""

#: The fence counter outlives every lease by far, but not forever: a run killed before it cleaned
#: up must not leave counters on a server it does not own (each acquire pushes the expiry out).
FENCE_COUNTER_TTL_S = 24 * 3600


def fence_counter_key(lock_key: str) -> str:
    return f"{lock_key}:fence-seq"


class FencedLock(SingleNodeLock):
    """``single`` + a strictly increasing fencing token, issued in one script with the SET NX PX."""

    summary: ClassVar[str] = "single + fencing token (SET NX PX and INCR in one Lua script), checked by the resource"
    issues_fencing_tokens: ClassVar[bool] = True
    #: Its acquire is one script call through redis-py: no point between the request and its reply.
    pauses_inside_acquire: ClassVar[bool] = False

    def __init__(self, *, config: BackendConfig) -> None:
        super().__init__(config=config)
        self._acquire = self._client.register_script(ACQUIRE_SCRIPT)

    def acquire(self, *, key: str, ttl_ms: int) -> Lease | Refusal:
        owner = new_owner_token()
        started_ns = time.monotonic_ns()  # the TTL starts no earlier than the request is sent
        try:
            keys, args = [key, fence_counter_key(key)], [owner, str(ttl_ms), str(FENCE_COUNTER_TTL_S)]
            token = self._direct.script(self._acquire, keys, args)  # see SingleNodeLock.__init__
        except redis.RedisError as exc:
            # The script may have run before the error (e.g. a reply that timed out): delete
            # what this owner may hold, so the key does not sit there for a whole TTL.
            self.release(Lease(key=key, owner=owner))
            return Refusal.failed(exc)
        if token is None:
            return Refusal("held")
        lease = Lease(key=key, owner=owner, valid_until_ns=started_ns + ttl_ms * 1_000_000, fencing_token=int(token))
        return self.replicated(lease, ttl_ms=ttl_ms)  # WAIT, with --wait-replicas (see single.py)
