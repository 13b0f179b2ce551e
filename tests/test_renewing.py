"""Renewing backends (a watchdog extends the lease): they keep a lock past its TTL while the holder
lives and sleeps, and they do NOT survive a stop-the-world pause (SIGSTOP freezes the watchdog too).

Real redis-server nodes, real processes: the frozen holder is a spawned child, SIGSTOPped by the test.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from itertools import pairwise
from multiprocessing.connection import Connection
from typing import Any

import pytest

from lockcompare.backends import (
    BackendConfig,
    Lease,
    LockBackend,
    Refusal,
    describe_backends,
    load_backend,
)
from lockcompare.backends.redis_lock_renew import (
    KEY_PREFIX,
    RedisLockRenew,
    expire_seconds,
)
from lockcompare.backends.renewals import RenewalLog
from lockcompare.errors import BackendNotViableError, InvalidValueError
from lockcompare.infra.lifecycle import SPAWN, die_with_parent, start_worker_process
from lockcompare.infra.redis.client import connect
from lockcompare.testing import BackendContract

TTL_MS = 1000

#: The variant with lockcompare's lease check (by class path until its entry point is installed).
CHECKED = "lockcompare.backends.redis_lock_renew:RedisLockRenewChecked"
#: The shortest TTL each backend takes: python-redis-lock works in whole seconds, minimum 1 s.
SHORT_TTL_MS = {"single-renew": 300, "redis-lock-renew": 1000, CHECKED: 1000}
#: Where each backend keeps the key for lock name ``key``.
REDIS_KEY_PREFIX = {"single-renew": "", "redis-lock-renew": KEY_PREFIX, CHECKED: KEY_PREFIX}
#: The renewing backends that report what they believe before a write (``before_write``).
RENEWING = ["single-renew", CHECKED]


class RenewingContract(BackendContract):
    """The shared contract; the two expiry tests are restated for a lock whose holder renews it.

    For a renewing lock "free again after the TTL" holds once the holder stops renewing (it died,
    froze, or its watchdog stopped), and "an expired holder" is one whose watchdog stopped:
    ``stop_renewal`` stops it without releasing, as a crashed watchdog would.
    """

    @pytest.fixture
    def make_backend(self, backend_config: BackendConfig) -> Iterator[Callable[[], Any]]:
        """In-process instances (the battery's child-process host has no stop_renewal), closed afterwards."""
        made: list[Any] = []

        def make() -> Any:
            made.append(load_backend(self.backend_name)(config=backend_config))
            return made[-1]

        yield make
        for backend in made:
            backend.close()

    def test_lock_is_free_again_after_the_ttl(self, make_backend, key: str) -> None:  # type: ignore[override]
        ttl_ms = SHORT_TTL_MS[self.backend_name]
        a, b = make_backend(), make_backend()
        lease = a.acquire(key=key, ttl_ms=ttl_ms)
        assert lease
        a.stop_renewal(lease)
        assert not b.acquire(key=key, ttl_ms=TTL_MS)
        time.sleep(ttl_ms / 1000 + 0.1)
        assert b.acquire(key=key, ttl_ms=TTL_MS)

    def test_expired_holder_cannot_release_its_successors_lock(self, make_backend, key: str) -> None:  # type: ignore[override]
        ttl_ms = SHORT_TTL_MS[self.backend_name]
        a, b, c = make_backend(), make_backend(), make_backend()
        old = a.acquire(key=key, ttl_ms=ttl_ms)
        assert old
        a.stop_renewal(old)
        time.sleep(ttl_ms / 1000 + 0.1)
        new = b.acquire(key=key, ttl_ms=TTL_MS)
        assert new
        assert a.release(old) is False  # the zombie's release must not delete b's key
        assert not c.acquire(key=key, ttl_ms=TTL_MS)  # so b still holds it
        assert b.release(new) is True


class TestSingleRenew(RenewingContract):
    backend_name = "single-renew"


class TestRedisLockRenew(RenewingContract):
    backend_name = "redis-lock-renew"

    def test_a_paused_client_is_paused(self, cluster) -> None:  # type: ignore[override]
        """The battery's short lease is 150 ms; python-redis-lock takes whole seconds: run it at 1 s."""
        from lockcompare.evaluation.conformance import Status, battery, check_property, property_named

        with battery(spec="plugins.whole_second_renew:WholeSecondRenewLock", node_urls=cluster.node_urls) as ctx:
            result = check_property(property_named("a_paused_client_is_paused"), ctx)
        assert result.status is Status.PASS, result.evidence


@pytest.fixture
def make(backend_config: BackendConfig) -> Iterator[Callable[[str], Any]]:
    """Backend instances by name, closed afterwards (which stops their watchdogs)."""
    made: list[LockBackend] = []

    def make_one(name: str) -> Any:
        backend = load_backend(name)(config=backend_config)
        made.append(backend)
        return backend

    yield make_one
    for backend in made:
        backend.close()


def _pttl(backend_config: BackendConfig, redis_key: str) -> int:
    client = connect(backend_config.node_urls[0], timeout_s=1.0)
    try:
        return int(client.pttl(redis_key))
    finally:
        client.close()


# --- renewing while the holder lives ------------------------------------------------------------


@pytest.mark.parametrize("name", RENEWING)
def test_lease_is_renewed_while_the_holder_sleeps(make, backend_config: BackendConfig, key: str, name: str) -> None:
    """The main thread sleeps for more than two TTLs; the watchdog keeps the key alive meanwhile."""
    ttl_ms = SHORT_TTL_MS[name]
    holder, rival = make(name), make(name)
    lease = holder.acquire(key=key, ttl_ms=ttl_ms)
    assert isinstance(lease, Lease)
    samples = []
    ends = time.monotonic() + 2.2 * ttl_ms / 1000
    while time.monotonic() < ends:
        samples.append(_pttl(backend_config, REDIS_KEY_PREFIX[name] + key))
        time.sleep(ttl_ms / 1000 / 20)
    assert min(samples) > 0, samples  # the key never expired (-2) and always had a TTL (not -1)
    assert any(later > earlier for earlier, later in pairwise(samples)), samples  # it was extended
    assert rival.acquire(key=key, ttl_ms=ttl_ms) == Refusal("held")  # more than two TTLs after the acquire

    believed = holder.before_write(lease)
    assert isinstance(believed, Lease) and believed.owner == lease.owner
    assert believed.valid_until_ns > lease.valid_until_ns + ttl_ms * 1_000_000  # moved by more than a TTL
    assert believed.valid_until_ns > time.monotonic_ns()

    records = holder.drain_renewals()
    assert len(records) >= 2 and all(r["ok"] and r["owner"] == lease.owner for r in records), records
    deadlines = [r["valid_until"] for r in records]
    assert deadlines == sorted(deadlines) and deadlines[-1] == believed.valid_until_ns
    assert all(r["t0"] <= r["t1"] and r["valid_until"] == r["t0"] + ttl_ms * 1_000_000 for r in records)
    assert holder.drain_renewals() == []  # drained
    assert holder.release(lease) is True
    assert holder.drain_renewals() == []  # release stopped the watchdog before it renewed again


def test_single_renew_notices_a_key_taken_from_it(make, backend_config: BackendConfig, key: str) -> None:
    """The owner-checked renewal neither extends nor resurrects a key that is no longer ours."""
    holder, rival = make("single-renew"), make("single-renew")
    lease = holder.acquire(key=key, ttl_ms=300)
    assert isinstance(lease, Lease)
    client = connect(backend_config.node_urls[0], timeout_s=1.0)
    try:
        client.delete(key)  # the key is lost (a failover, an admin) while the holder keeps running
        successor = rival.acquire(key=key, ttl_ms=5000)
        assert isinstance(successor, Lease)
        time.sleep(0.25)  # two watchdog ticks: the first one finds the key someone else's
        assert 4000 < client.pttl(key) <= 5000  # the holder's watchdog did not extend it to its TTL
    finally:
        client.close()
    assert holder.before_write(lease) == Refusal("lost")
    records = holder.drain_renewals()
    assert [(r["ok"], r["reason"]) for r in records] == [(False, "lost")]  # and then it stopped
    assert holder.release(lease) is False
    assert rival.release(successor) is True


# --- a stop-the-world pause freezes the watchdog too --------------------------------------------


def hold_then_report(name: str, config: BackendConfig, key: str, ttl_ms: int, conn: Connection) -> None:
    """Child process: acquire, wait (frozen at some point by the parent), then report the belief."""
    die_with_parent()
    backend = load_backend(name)(config=config)
    try:
        lease = backend.acquire(key=key, ttl_ms=ttl_ms)
        conn.send(("held", lease.owner) if isinstance(lease, Lease) else ("refused", repr(lease)))
        conn.recv()  # the parent has SIGSTOPped and SIGCONTed us by now
        # Right after the thaw the lease is past its last renewal's deadline: no permission to
        # write, before the watchdog has even tried again. Its wait ran out during the freeze, so its
        # next renewal is due at once; give it that moment to find the key someone else's.
        first = backend.before_write(lease)
        give_up = time.monotonic() + ttl_ms / 1000
        belief = first
        while belief != Refusal("lost") and time.monotonic() < give_up:
            time.sleep(0.01)
            belief = backend.before_write(lease)
        renewals = backend.drain_renewals()
        conn.send((first, belief, renewals, backend.release(lease)))
    finally:
        backend.close()
        conn.close()


@pytest.mark.parametrize("name", RENEWING)
def test_watchdog_does_not_survive_sigstop(make, backend_config: BackendConfig, key: str, name: str) -> None:
    ttl_ms = SHORT_TTL_MS[name]
    ours, theirs = SPAWN.Pipe()
    child = start_worker_process(target=hold_then_report, args=(name, backend_config, key, ttl_ms, theirs))
    theirs.close()
    rival = make(name)
    try:
        assert ours.poll(30), "the holder never started"
        status, owner = ours.recv()
        assert status == "held", owner
        time.sleep(ttl_ms / 1000)  # at least one renewal while the holder runs
        os.kill(child.pid, signal.SIGSTOP)
        frozen_at = time.monotonic()
        successor = rival.acquire(key=key, ttl_ms=ttl_ms)
        while not successor and time.monotonic() - frozen_at < 2 * ttl_ms / 1000:
            time.sleep(0.01)
            successor = rival.acquire(key=key, ttl_ms=ttl_ms)
        took_over_after_s = time.monotonic() - frozen_at
        assert isinstance(successor, Lease), "the frozen holder's key never expired"
        assert took_over_after_s <= ttl_ms / 1000 + 0.1  # at most one TTL after the last renewal
        os.kill(child.pid, signal.SIGCONT)
        ours.send("check")
        assert ours.poll(10), "the holder never reported"
        first, belief, renewals, released = ours.recv()

        assert first in (Refusal("expired"), Refusal("lost"))  # never the stale lease (issue 17)
        assert belief == Refusal("lost")  # the holder's watchdog found the key someone else's
        assert released is False  # and the zombie could not delete its successor's key
        assert [r["ok"] for r in renewals][-1] is False and renewals[-1]["reason"] == "lost"
        assert any(r["ok"] for r in renewals)  # it did renew before the freeze
        assert all(r["owner"] == owner for r in renewals)
        assert rival.release(successor) is True  # the successor's key survived the zombie
    finally:
        try:
            os.kill(child.pid, signal.SIGCONT)  # a stopped process would ignore SIGTERM
        except ProcessLookupError:
            pass
        child.join(5)
        if child.is_alive():
            child.terminate()
            child.join(5)
        ours.close()
    assert child.exitcode == 0


# --- units, configuration, viability -------------------------------------------------------------


def test_redis_lock_renew_gives_no_lease_check_its_checked_variant_says_what_it_adds(
    make, backend_config: BackendConfig, key: str
) -> None:
    """python-redis-lock tells its user nothing when the renewal thread dies: the plain adapter has
    no before_write (the worker writes straight away); the checked variant is lockcompare's."""
    plain = make("redis-lock-renew")
    assert not hasattr(plain, "before_write")
    checked_cls = load_backend(CHECKED)
    assert hasattr(checked_cls, "before_write") and "lockcompare adds" in checked_cls.summary
    lease = plain.acquire(key=key, ttl_ms=1000)
    assert isinstance(lease, Lease)
    time.sleep(0.8)  # one renewal at 2/3 of the expiry: still observed, for the history
    assert [r["ok"] for r in plain.drain_renewals()] == [True]
    assert plain.release(lease) is True


def test_redis_lock_renew_takes_whole_seconds_only(make, key: str) -> None:
    assert [expire_seconds(ms) for ms in (1000, 2000, 30_000)] == [1, 2, 30]
    for ms in (0, 300, 999, 1001, 1500):
        with pytest.raises(InvalidValueError, match="whole seconds"):
            RedisLockRenew.check_ttl(ttl_ms=ms)
    with pytest.raises(InvalidValueError, match="got 300 ms"):
        make("redis-lock-renew").acquire(key=key, ttl_ms=300)


def test_redis_lock_renew_key_and_ttl_on_node_0(make, backend_config: BackendConfig, key: str) -> None:
    lock = make("redis-lock-renew")
    lease = lock.acquire(key=key, ttl_ms=2000)
    assert isinstance(lease, Lease)
    client = connect(backend_config.node_urls[0], timeout_s=1.0)
    try:
        assert client.get(KEY_PREFIX + key) == lease.owner.encode()
        assert 1000 < client.pttl(KEY_PREFIX + key) <= 2000  # seconds, not milliseconds
    finally:
        client.close()
    assert lock.release(lease) is True


def test_redis_lock_renew_missing_is_reported_with_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "redis_lock", None)  # makes "import redis_lock" fail
    with pytest.raises(BackendNotViableError, match="pip install python-redis-lock"):
        load_backend("redis-lock-renew")
    listed = {info.name: info for info in describe_backends()}
    assert "pip install python-redis-lock" in listed["redis-lock-renew"].problem


def test_renewal_log_keeps_the_last_deadline_through_errors_and_reports_a_loss() -> None:
    log = RenewalLog()
    lease = Lease(key="k", owner="o", valid_until_ns=1_000)
    log.track(lease)
    log.renewed(owner="o", t0=400, t1=410, valid_until_ns=1_400)
    log.failed(owner="o", t0=800, t1=900, reason="error")  # a timeout proves nothing about ownership
    assert log.believe(lease, now_ns=950) == Lease(key="k", owner="o", valid_until_ns=1_400)
    log.failed(owner="o", t0=1_200, t1=1_210, reason="lost")
    log.renewed(owner="o", t0=1_300, t1=1_310, valid_until_ns=2_000)  # too late: a lost lease stays lost
    assert log.believe(lease, now_ns=1_350) == Refusal("lost")
    other = Lease(key="k", owner="someone else", valid_until_ns=5)
    assert log.believe(other, now_ns=1) is other  # never tracked: unchanged while valid...
    assert log.believe(other, now_ns=5) == Refusal("expired")  # ...and no permission after its deadline
    assert [(r["ok"], r["reason"], r["valid_until"]) for r in log.drain()] == [
        (True, None, 1_400),
        (False, "error", None),
        (False, "lost", None),
        (True, None, 2_000),
    ]
    log.forget("o")
    assert log.believe(lease, now_ns=999) is lease


def test_renewal_log_never_returns_a_lease_past_its_last_deadline() -> None:
    # The bug issue 17 found: a watchdog frozen with its process renews nothing, and believe()
    # answered "ok" with a deadline already in the past; the worker then wrote on it.
    log = RenewalLog()
    lease = Lease(key="k", owner="o", valid_until_ns=1_000)
    log.track(lease)
    assert log.believe(lease, now_ns=999) == lease
    assert log.believe(lease, now_ns=1_000) == Refusal("expired")  # the deadline itself is too late
    log.renewed(owner="o", t0=900, t1=910, valid_until_ns=1_900)
    assert log.believe(lease, now_ns=1_500) == Lease(key="k", owner="o", valid_until_ns=1_900)
    assert log.believe(lease, now_ns=2_500) == Refusal("expired")
    assert isinstance(log.believe(lease), Refusal)  # default now: monotonic ns, far past 1_900


def test_a_renewal_moves_the_deadline_a_write_is_judged_by_without_a_lease_check() -> None:
    """A backend without before_write (python-redis-lock) writes on renewals the history records:
    a write after the acquire's deadline but before the last renewal's is not stale; one after a
    renewal that failed is."""
    from lockcompare.analysis.checker import stale_writes

    def event(kind: str, t0: int, **fields: object) -> dict[str, object]:
        return {"worker": 0, "round": 0, "kind": kind, "t0": t0, "t1": t0, **fields}

    history = [
        event("acquire", 0, ok=True, valid_until=1_000),
        event("renew", 600, ok=True, valid_until=1_600),
        event("write", 1_200, accepted=True),  # inside the renewed lease
        event("renew", 1_300, ok=False, reason="lost", valid_until=None),
        event("write", 1_700, accepted=True),  # past the last renewal's deadline
    ]
    assert stale_writes(history) == (1, 0)
