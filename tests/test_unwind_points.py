"""Where lifecycle's signal handler may raise: never inside a context manager's ``__enter__`` or
``__exit__`` (a lock taken there and never given back hung a matrix after SIGQUIT), everywhere else
at once; a signal held back is noted, and not sent again once the command is done. Each signal is
delivered at a chosen bytecode with the real handler: here, or in the scheduler's loop in a child
(a hang there must not hang the suite)."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import Future
from types import FrameType

import pytest

from lockcompare import interrupts
from lockcompare.errors import Terminated
from lockcompare.infra import lifecycle
from lockcompare.infra.lifecycle import sigterm_unwinds


def _main_thread_entering(lock: threading.RLock, *, main: int) -> bool:
    """True while the main thread waits for ``lock`` in ``threading.Condition.__enter__``."""
    frame: FrameType | None = sys._current_frames().get(main)
    if frame is None or frame.f_code.co_qualname != "Condition.__enter__":
        return False
    return getattr(frame.f_locals.get("self"), "_lock", None) is lock


def _hold_until_main_waits_then_signal(lock: threading.RLock, *, main: int, held: threading.Event) -> None:
    """Hold ``lock`` until the main thread blocks on it in an ``__enter__``, then signal this
    thread (not the main one, whose wait the signal would interrupt before it took the lock) and
    let go: the main thread takes the lock and meets the signal at the next bytecode, still in
    ``__enter__`` (CPython runs Python-level handlers only in the main thread, between bytecodes)."""
    with lock:
        held.set()
        deadline = time.monotonic() + 30
        while not _main_thread_entering(lock, main=main) and time.monotonic() < deadline:
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


def test_a_signal_held_back_at_the_end_of_a_command_is_noted_and_not_sent_to_the_handler_after(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Held back in an ``__enter__`` that was the command's last step: the command ends with the
    signal's exit code (noted), and the signal does not come again to the handler that was there
    before (``__main__``'s early one would end the process with a shorter line)."""
    monkeypatch.setattr(lifecycle, "_REDELIVER_AFTER_S", 1.0)  # the block below ends long before
    condition = threading.Condition(threading.RLock())
    held = threading.Event()
    holder = threading.Thread(
        target=_hold_until_main_waits_then_signal,
        kwargs={"lock": condition._lock, "main": threading.get_ident(), "held": held},  # type: ignore[attr-defined]
    )
    after: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, _frame: after.append(signum))
    try:
        holder.start()
        held.wait(timeout=30)
        with sigterm_unwinds():
            with condition:  # the signal lands in its __enter__ and is held back
                pass
            holder.join(timeout=30)
            noted = interrupts.received()
        for timer in [t for t in threading.enumerate() if isinstance(t, threading.Timer)]:
            timer.join(timeout=30)  # the redelivery's moment has come and gone
    finally:
        signal.signal(signal.SIGTERM, previous)
        interrupts.clear()
    assert noted == signal.SIGTERM
    assert after == []


#: The scheduler's real loop (runner/scheduler.py), its one trial thread holding its own future's
#: lock until the main thread blocks on it in an ``__enter__`` of concurrent.futures.wait (its
#: ``_AcquireFutures`` or the future's ``Condition``), then signalling itself. Without the rule the
#: main thread kept that lock, the trial thread waited for it forever in ``set_result``, and the
#: run waited for the trial thread forever in its executor's shutdown (py-spy showed both; 4 of 5
#: runs of this script never ended, the fifth ended although the signal was raised in
#: ``__enter__``: the tests above are the deterministic ones).
_SCHEDULER_SCRIPT = """
import signal, sys, threading, time
from lockcompare.errors import Terminated
from lockcompare.infra import lifecycle
from lockcompare.infra.lifecycle import sigterm_unwinds
from lockcompare.runner.scheduler import CpuBudget, run_scheduled

main = threading.get_ident()

class Cluster:  # what the scheduler reads of one (its processes: infra/peerlinks.py cluster_process_ids)
    servers = ()
    replication = None
    def all_servers(self):
        return []

class Clusters:
    def acquire(self, shape):
        return Cluster()
    def release(self, cluster):
        pass

def run_one(spec, cluster):
    if spec != 1:
        time.sleep(1)  # the run is still on when the signal comes again
        return None
    frame = sys._getframe()
    while not (frame.f_code.co_name == "run" and "self" in frame.f_locals):  # the executor's work item
        frame = frame.f_back
    lock = frame.f_locals["self"].future._condition._lock
    with lock:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            waiting = sys._current_frames().get(main)  # blocked on this lock in an __enter__ of wait()'s
            if waiting is not None and waiting.f_code.co_name == "__enter__":
                entered = waiting.f_locals.get("future", waiting.f_locals.get("self"))
                if getattr(getattr(entered, "_condition", entered), "_lock", None) is lock:
                    break
            time.sleep(0.001)
        signal.pthread_kill(threading.get_ident(), signal.SIGTERM)

try:
    with sigterm_unwinds():
        run_scheduled([1, 2], jobs=1, run_one=run_one, clusters=Clusters(), shape_for=lambda s: "shape",
                      kind_of=lambda s: "kind", budget=CpuBudget(cpus=2, share=1.0, prior=0.0),
                      on_start=lambda s, n: None, on_done=lambda f: None, on_cancel=lambda: None)
except Terminated as exc:
    print(exc)
"""


def test_a_signal_landing_in_the_schedulers_wait_ends_the_run_with_every_trial_thread() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _SCHEDULER_SCRIPT], capture_output=True, text=True, timeout=20, check=False
    )  # without the rule: the run never ends (the timeout fails the test)
    assert (done.returncode, done.stdout.strip()) == (0, "terminated by SIGTERM; servers and workers stopped"), (
        done.stderr
    )
