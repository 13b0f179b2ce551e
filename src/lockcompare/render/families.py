"""Which backends form each lock family and which experiments each fault family, declared once.

The README's "who survives what" table (render/docs_words.py, ``<!-- words: CSV -->``) groups one
committed run's cells by these families, so a reader sees seven kinds of lock under six kinds of
fault instead of 35 backends × 20 experiments. A backend or experiment of the run that belongs to no
family is an error, not a silent omission: a new one is placed here, once, before the table renders.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class Family:
    name: str  # what the reader calls it: "Redlock and its libraries"
    members: tuple[str, ...]  # backend or experiment names, as the CSV writes them


LOCK_FAMILIES: tuple[Family, ...] = (
    # The control: what happens without exclusion (and with partitioning by key that a fifth of
    # the updates cross unlocked).
    Family(name="no lock (control)", members=("none", "partitioned-skew")),
    Family(name="single-node Redis lock", members=("single", "redis-py", "sentinel-single", "sentinel-redis-py")),
    Family(name="Redlock and its libraries", members=("redlock", "pottery", "node-redlock")),
    # A watchdog extends the lease while the holder works; the -checked ones and redis-semaphore
    # (whose client exits on a lost lock) also check before the write.
    Family(
        name="renewing Redis locks",
        members=(
            "single-renew",
            "redis-lock-renew",
            "redis-lock-renew-checked",
            "node-sesame-using",
            "node-sesame-using-checked",
            "node-semaphore-mutex",
            "node-semaphore-redlock",
        ),
    ),
    Family(
        name="fenced locks (token checked by the resource)",
        members=("fenced", "sentinel-fenced", "etcd-fenced", "etcd-go-fenced", "zk-fenced"),
    ),
    Family(
        name="consensus locks (etcd, ZooKeeper, Curator)",
        members=("etcd", "etcd-go-mutex", "zk-lock", "zk-lock-checked", "curator-mutex", "curator-mutex-checked"),
    ),
    Family(name="PostgreSQL locks (advisory, lease row)", members=("pg-advisory", "pg-lease")),
    Family(
        name="lock-free alternatives",
        members=("atomic", "optimistic", "partitioned", "pg-for-update", "pg-serializable", "idempotent"),
    ),
)

FAULT_FAMILIES: tuple[Family, ...] = (
    Family(name="no fault", members=("baseline",)),
    # A client stopped whole: after its grant, inside its acquire (replies in flight), or with the
    # resource comparing the lock's random token (antirez's answer).
    Family(name="client pause", members=("client-pause", "acquire-pause", "client-pause-token")),
    # A lease that ends while its holder still works: a TTL shorter than the work, or work of 3 × TTL
    # that only a watchdog could cover, paused (renewal-pause) or starved of CPU (cpu-starvation).
    Family(name="work outlasts the TTL", members=("short-ttl", "renewal-pause", "cpu-starvation")),
    # A clock moved (jumps, drift) on the lock's servers, with or without the token compared.
    Family(
        name="clock jump or drift",
        members=(
            "clock-jump",
            "clock-jump-back",
            "partition-clock-jump",
            "partition-clock-jump-token",
            "clock-drift-covered",
            "clock-drift",
        ),
    ),
    Family(name="node crash / restart", members=("node-crash", "node-restart", "bare-majority")),
    # The network between the parts: a cut, a slow or lost reply, a renewing holder cut off from its
    # lock service (renewal-cut), a write delayed on its way to the resource (delayed-write).
    Family(
        name="partition / slow, lost or delayed message",
        members=("partition", "slow-response", "lost-reply", "renewal-cut", "delayed-write"),
    ),
    Family(
        name="leader, failover, session",
        members=(
            "leader-crash",
            "leader-freeze",
            "leader-isolated",
            "holder-minority",
            "leader-freeze-renewing",
            "leader-isolated-renewing",
            "failover",
            "session-kill",
        ),
    ),
)
