"""Where lifecycle's signal handler may raise: never inside a context manager's ``__enter__`` or
``__exit__`` (a lock taken there and never given back hung a matrix after SIGQUIT), everywhere else
at once. Each signal is delivered at a chosen bytecode, in this process, with the real handler."""

from __future__ import annotations

import signal
import sys
import threading
import time
from concurrent.futures import Future
from types import FrameType

import pytest

from lockcompare import interrupts
from lockcompare.errors import Terminated
from lockcompare.infra.lifecycle import sigterm_unwinds


def _main_thread_in(function: str, *, main: int) -> bool:
    frame: FrameType | None = sys._current_frames().get(main)
    return frame is not None and frame.f_code.co_name == function


def _hold_until_main_waits_then_signal(lock: threading.RLock, *, main: int, held: threading.Event) -> None:
    """Hold ``lock`` until the main thread blocks on it in an ``__enter__``, then signal this
    thread (not the main one, whose wait the signal would interrupt before it took the lock) and
    let go: the main thread takes the lock and meets the signal at the next bytecode, still in
    ``__enter__`` (CPython runs Python-level handlers only in the main thread, between bytecodes)."""
    with lock:
        held.set()
        deadline = time.monotonic() + 30
        while not _main_thread_in("__enter__", main=main) and time.monotonic() < deadline:
            time.sleep(0.001)
        signal.pthread_kill(threading.get_ident(), signal.SIGTERM)


def _free_to_another_thread(lock: threading.RLock) -> bool:
    """True if a thread other than this one can take ``lock`` (and then gives it back)."""
    taken: list[bool] = []

    def take() -> None:
        taken.append(lock.acquire(timeout=10))
        if taken[0]:
            lock.release()

    other = threading.Thread(target=take)
    other.start()
    other.join()
    return taken == [True]


@pytest.mark.parametrize("waited_on", ["condition", "future"])
def test_a_signal_landing_in_a_locks_enter_is_raised_inside_the_block_and_the_lock_is_given_back(
    waited_on: str,
) -> None:
    future: Future[None] = Future()
    condition = future._condition if waited_on == "future" else threading.Condition(threading.RLock())  # type: ignore[attr-defined]
    lock = condition._lock  # type: ignore[attr-defined]
    held = threading.Event()
    holder = threading.Thread(
        target=_hold_until_main_waits_then_signal, kwargs={"lock": lock, "main": threading.get_ident(), "held": held}
    )
    inside: list[bool] = []
    holder.start()
    held.wait(timeout=30)
    try:
        with sigterm_unwinds(), pytest.raises(Terminated):
            if waited_on == "future":
                future.result(timeout=30)  # enters its Condition; the signal then lands in its wait
            else:
                with condition:
                    inside.append(True)
                    for _ in range(600):  # the signal, delivered again, lands here
                        time.sleep(0.05)
    finally:
        interrupts.clear()
        holder.join(timeout=30)
    if waited_on == "condition":
        assert inside == [True]  # not raised in __enter__: the block ran, and its __exit__ with it
    # The lock is free: the thread that finishes the future is not blocked forever behind it.
    assert _free_to_another_thread(lock)
    finisher = threading.Thread(target=future.set_result, args=(None,))
    finisher.start()
    finisher.join(timeout=10)
    assert not finisher.is_alive() and future.done()
