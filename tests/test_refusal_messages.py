"""What failed, in the history (issue 48.1): an ``error`` refusal carries its message, and the worker
records the first of each distinct one; a release whose request failed says so (``ReleaseFailed``).

The refusals come from a real socket: a single-node lock pointed at a loopback port nobody listens
on gets the connection refused by the kernel, as it does from a crashed node.
"""

from __future__ import annotations

import random
import socket

from lockcompare.analysis.history import Recorder
from lockcompare.backends import BackendConfig, Lease, Refusal
from lockcompare.backends.single import SingleNodeLock
from lockcompare.errors import ReleaseFailed
from lockcompare.render.timeline import render_timeline
from lockcompare.runner.backend_calls import CallSlot, RefusalMessages, acquire_until_deadline, release_recorded
from lockcompare.runner.worker import WorkerPlan
from lockcompare.scenario.choices import Check, PauseHow, PausePoint


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _plan() -> WorkerPlan:
    return WorkerPlan(
        index=0, backend="single", backend_config=BackendConfig(node_urls=()), resource_url="", resource_prefix="",
        lock_key="k", rounds=2, ttl_ms=1000, work_ms=1, pause_ms=0, pause_rounds=frozenset(),
        pause_point=PausePoint.AFTER_ACQUIRE, pause_how=PauseHow.SLEEP, check=Check.PLAIN, acquire_timeout_ms=40,
        retry_delay_ms=5, think_ms=0,
    )  # fmt: skip


def test_an_error_refusal_records_its_message_once_per_worker() -> None:
    lock = SingleNodeLock(config=BackendConfig(node_urls=(f"redis://127.0.0.1:{_closed_port()}/0",)))
    rec, seen = Recorder(worker=0), RefusalMessages()
    try:
        for round_ in range(2):
            rec.round = round_
            lease = acquire_until_deadline(
                lock, _plan(), rec, slot=CallSlot([0, 0]), rng=random.Random(0), messages=seen
            )
            assert lease is None
    finally:
        lock.close()
    first, second = rec.events
    assert first["refusals"]["error"] >= 2  # several attempts, all refused by the kernel
    assert len(first["errors"]) == 1  # the same message each time: written down once
    assert first["errors"][0].startswith("error: ConnectionError: ") and "111" in first["errors"][0]
    assert "errors" not in second  # the next round met the same failure: nothing new to say
    assert "errors=['error: ConnectionError: " in render_timeline(rec.events)


def test_distinct_messages_are_each_recorded_up_to_a_bound() -> None:
    seen = RefusalMessages()
    kept = [seen.first_time(Refusal("error", f"failure {i}")) for i in range(RefusalMessages.MOST + 3)]
    assert kept[: RefusalMessages.MOST] == [f"error: failure {i}" for i in range(RefusalMessages.MOST)]
    assert kept[RefusalMessages.MOST :] == [None] * 3  # a history stays small
    assert RefusalMessages().first_time(Refusal("held")) is None  # an ordinary refusal needs no words


class _Unreachable:
    """A backend whose unlock request fails: it cannot tell whether it released."""

    def release(self, lease: Lease) -> bool:
        raise ReleaseFailed("ConnectionError: the node did not answer")


class _NotHeld:
    def release(self, lease: Lease) -> bool:
        return False


def test_a_release_that_failed_is_told_apart_from_one_that_found_nothing() -> None:
    lease = Lease(key="k", owner="o")
    failed, not_held = Recorder(worker=0), Recorder(worker=0)
    release_recorded(_Unreachable(), lease, failed, CallSlot([0, 0]))  # type: ignore[arg-type]
    release_recorded(_NotHeld(), lease, not_held, CallSlot([0, 0]))  # type: ignore[arg-type]
    assert [(e["released"], e.get("error")) for e in failed.events] == [
        (False, "ConnectionError: the node did not answer")
    ]
    assert [(e["released"], e.get("error")) for e in not_held.events] == [(False, None)]
