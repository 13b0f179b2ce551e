"""The continuer process (faults/continuer.py): it continues a stopped process group at its deadline,
not before; a cancelled continue never lands; a continue that cannot be made says why; and it leaves
nothing running. Real processes (``sleep``), stopped and continued by real signals."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator

import pytest

from lockcompare.analysis.history import now_ns
from lockcompare.faults.continuer import Continued, Continuer
from lockcompare.infra.procgroup import any_stopped


@pytest.fixture
def continuer() -> Iterator[Continuer]:
    made = Continuer()
    yield made
    made.close()


@pytest.fixture
def stopped_group() -> Iterator[int]:
    """A ``sleep`` leading a process group of its own, stopped; ended after the test."""
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    os.killpg(proc.pid, signal.SIGSTOP)
    deadline = time.monotonic() + 5
    while not any_stopped([proc.pid]) and time.monotonic() < deadline:
        time.sleep(0.001)
    assert any_stopped([proc.pid])
    yield proc.pid
    os.killpg(proc.pid, signal.SIGKILL)
    os.killpg(proc.pid, signal.SIGCONT)
    proc.wait(timeout=5)


def _reports() -> tuple[list[tuple[int, Continued]], threading.Event, object]:
    got: list[tuple[int, Continued]] = []
    event = threading.Event()

    def on_done(ticket: int, report: Continued) -> None:
        got.append((ticket, report))
        event.set()

    return got, event, on_done


def test_it_continues_a_stopped_group_at_its_deadline_and_not_before(continuer: Continuer, stopped_group: int) -> None:
    got, event, on_done = _reports()
    deadline = now_ns() + 150_000_000
    ticket = continuer.at(deadline_ns=deadline, pgid=stopped_group, freezer=None, on_done=on_done)  # type: ignore[arg-type]
    time.sleep(0.05)
    assert any_stopped([stopped_group])  # a third of the way: still stopped
    assert event.wait(5)
    [(reported, report)] = got
    assert reported == ticket and report.error == ""
    assert report.t_ns >= deadline
    assert not any_stopped([stopped_group])
    assert continuer.scheduling in ("SCHED_FIFO", "nice -10", "default")


def test_a_cancelled_continue_never_lands(continuer: Continuer, stopped_group: int) -> None:
    got, _event, on_done = _reports()
    ticket = continuer.at(deadline_ns=now_ns() + 100_000_000, pgid=stopped_group, freezer=None, on_done=on_done)  # type: ignore[arg-type]
    assert continuer.cancel(ticket) is True
    time.sleep(0.3)
    assert any_stopped([stopped_group]) and got == []


def test_cancelling_a_continue_that_was_made_says_so_after_its_report(continuer: Continuer, stopped_group: int) -> None:
    got, event, on_done = _reports()
    ticket = continuer.at(deadline_ns=now_ns(), pgid=stopped_group, freezer=None, on_done=on_done)  # type: ignore[arg-type]
    assert event.wait(5)
    assert continuer.cancel(ticket) is False
    assert [t for t, _ in got] == [ticket]


def test_a_continue_it_cannot_make_is_reported_with_why(continuer: Continuer, tmp_path) -> None:
    proc = subprocess.Popen(["true"], start_new_session=True)
    proc.wait(timeout=5)  # reaped: neither its group nor its pid exists
    got, event, on_done = _reports()
    missing = tmp_path / "gone" / "cgroup.freeze"
    continuer.at(deadline_ns=now_ns(), pgid=proc.pid, freezer=(str(missing), "0"), on_done=on_done)  # type: ignore[arg-type]
    assert event.wait(5)
    [(_ticket, report)] = got
    assert "SIGCONT:ProcessLookupError" in report.error and "thaw:FileNotFoundError" in report.error


def test_it_writes_the_thaw_into_the_freezer_file(continuer: Continuer, stopped_group: int, tmp_path) -> None:
    freezer = tmp_path / "cgroup.freeze"
    freezer.write_text("1")
    got, event, on_done = _reports()
    continuer.at(deadline_ns=now_ns(), pgid=stopped_group, freezer=(str(freezer), "0"), on_done=on_done)  # type: ignore[arg-type]
    assert event.wait(5)
    assert freezer.read_text() == "0" and got[0][1].error == ""


def test_closing_it_ends_its_process() -> None:
    made = Continuer()
    child = made._proc  # the test's one look inside: is the process gone?
    assert child.poll() is None
    made.close()
    assert child.poll() is not None
    with pytest.raises((OSError, ValueError)):
        made.at(deadline_ns=now_ns(), pgid=1, freezer=None, on_done=lambda _t, _r: None)
