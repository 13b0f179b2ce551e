"""Each damage claim as a scripted interleaving against a real resource server: no timing, no luck.

Two holders of one lock are played step by step in a fixed order: a zombie (fencing token 1,
owner "zombie") whose lease expired while it was paused, and the new holder (token 2, owner
"holder"). Each critical section increments the balance once, so the final balance should be 2.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from lockcompare.infra.cluster import Cluster
from lockcompare.runner.resource import Check
from lockcompare.runner.resource_redis import RedisResource

ZOMBIE = {"fencing_token": 1, "owner": "zombie"}
HOLDER = {"fencing_token": 2, "owner": "holder"}


@pytest.fixture
def resource(cluster: Cluster) -> Iterator[RedisResource]:
    r = RedisResource(url=cluster.resource_url, prefix=f"lockcompare-test:{uuid.uuid4().hex}")
    yield r
    r.reset()
    r.close()


def rmw_step(resource: RedisResource, check: Check, who: dict, kind: str, state: dict) -> None:
    """One step of a read-modify-write section: 'read' remembers the value, 'write' writes it + 1."""
    if kind == "read":
        state[who["owner"]] = resource.read_balance(check=check, **who)
    elif state.get(who["owner"]) is not None:  # a refused read ends the section unwritten
        resource.write_balance(state[who["owner"]] + 1, check=check, **who)


def play(resource: RedisResource, check: Check, script: list[tuple[dict, str]]) -> tuple[int, int, int]:
    """Run the script; return (lost updates, rejected writes, rejected reads)."""
    state: dict = {}
    for who, kind in script:
        rmw_step(resource, check, who, kind, state)
    c = resource.counters()
    return c.writes_accepted - c.final_balance, c.writes_rejected, c.reads_rejected


# The zombie read before pausing; its write lands between the new holder's read and write
# (with TTL 1000 and work 300, a before-write pause of about 850 ms).
WRITE_BETWEEN = [(ZOMBIE, "read"), (HOLDER, "read"), (ZOMBIE, "write"), (HOLDER, "write")]
# The zombie's write lands after the new holder's write (a 1200 ms pause).
WRITE_AFTER = [(ZOMBIE, "read"), (HOLDER, "read"), (HOLDER, "write"), (ZOMBIE, "write")]
# The lesson's lab: the zombie paused right after acquiring, so it reads after the new holder did.
READ_AFTER = [(HOLDER, "read"), (ZOMBIE, "read"), (HOLDER, "write"), (ZOMBIE, "write")]


@pytest.mark.parametrize(
    "check, script, expected",
    [
        # No check: both interleavings lose the holder's or the zombie's increment.
        (Check.PLAIN, WRITE_BETWEEN, (1, 0, 0)),
        (Check.PLAIN, WRITE_AFTER, (1, 0, 0)),
        # Fencing on the write only: the zombie's write is still the newest token seen when it
        # lands between the holder's read and write, so it is accepted and an update is lost with
        # NOTHING rejected; landing after the holder's write, it is rejected.
        (Check.FENCE_WRITES, WRITE_BETWEEN, (1, 0, 0)),
        (Check.FENCE_WRITES, WRITE_AFTER, (0, 1, 0)),
        (Check.FENCE_WRITES, READ_AFTER, (0, 1, 0)),
        # Fencing every access: the holder's read raised the mark, so the zombie's write is refused.
        (Check.FENCE_ALL, WRITE_BETWEEN, (0, 1, 0)),
        (Check.FENCE_ALL, WRITE_AFTER, (0, 1, 0)),
        # ...and a zombie that reads after the holder is refused the read itself.
        (Check.FENCE_ALL, READ_AFTER, (0, 0, 1)),
        # antirez's check-and-set on the random token: the later reader's token is the stored one,
        # so the earlier reader's write is refused, whoever holds the lock.
        (Check.TOKEN_CAS, WRITE_BETWEEN, (0, 1, 0)),
        (Check.TOKEN_CAS, WRITE_AFTER, (0, 1, 0)),
        (Check.TOKEN_CAS, READ_AFTER, (0, 1, 0)),
    ],
)
def test_interleaving(resource: RedisResource, check: Check, script: list, expected: tuple[int, int, int]) -> None:
    assert play(resource, check, script) == expected


def test_token_cas_refuses_the_legitimate_holder_when_the_zombie_read_last(resource: RedisResource) -> None:
    # No update is lost, but the write that survives is the zombie's: check-and-set orders by
    # who read last, not by who holds the lock.
    state: dict = {}
    for who, kind in READ_AFTER:
        rmw_step(resource, Check.TOKEN_CAS, who, kind, state)
    assert resource.counters().final_balance == 1
    assert resource.read_balance(check=Check.TOKEN_CAS, owner="observer") == 1
    assert resource.write_balance(5, check=Check.TOKEN_CAS, owner="holder") is False


def test_optimistic_update_detects_the_concurrent_write(resource: RedisResource) -> None:
    pipe_a, seen_a = resource.watch_balance()
    pipe_b, seen_b = resource.watch_balance()
    assert resource.commit_balance(pipe_a, seen_a + 1) is True
    assert resource.commit_balance(pipe_b, seen_b + 1) is False  # WATCH saw A's write: retry
    pipe_b, seen_b = resource.watch_balance()
    assert resource.commit_balance(pipe_b, seen_b + 1) is True
    c = resource.counters()
    assert (c.final_balance, c.writes_accepted) == (2, 2)


def test_atomic_increments_cannot_be_lost(resource: RedisResource) -> None:
    for _ in range(5):
        assert resource.increment() is True
    c = resource.counters()
    assert (c.final_balance, c.writes_accepted) == (5, 5)


def test_enter_counts_conflicts_at_the_resource(resource: RedisResource) -> None:
    assert resource.enter() == 1
    assert resource.enter() == 2
    resource.exit()
    resource.exit()
    assert resource.enter() == 1
    resource.exit()
    c = resource.counters()
    assert (c.entries, c.conflicts, c.occupancy) == (3, 1, 0)


def test_a_backend_names_a_strategy_that_does_not_exist() -> None:
    from lockcompare.errors import BackendLoadError
    from lockcompare.runner.sections import check_for

    class Strange:
        resource_check = "telepathy"

    with pytest.raises(BackendLoadError, match="'telepathy' is not one of plain"):
        check_for(Strange, fence="writes")
