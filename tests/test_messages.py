"""infra/messages.py: a message is read back whole, and a send unwound by a signal leaves nothing for
the collector to complain about at exit (the BufferError CI saw after a Ctrl-C's last line)."""

from __future__ import annotations

import gc
import multiprocessing.connection as mpc
import sys
from collections.abc import Callable, Iterator

import pytest

from lockcompare.infra.messages import send


class InterruptedConnection(mpc.Connection):
    """A connection whose write is interrupted, as a Ctrl-C landing in ``os.write`` interrupts it."""

    def _send(self, buf: bytes, write: object = None) -> None:  # type: ignore[override]
        raise KeyboardInterrupt


@pytest.fixture
def unraisable() -> Iterator[list[BaseException]]:
    seen: list[BaseException] = []
    previous = sys.unraisablehook
    sys.unraisablehook = lambda u: seen.append(u.exc_value) if u.exc_value is not None else None
    try:
        yield seen
    finally:
        sys.unraisablehook = previous


def test_a_message_is_read_back_whole() -> None:
    reader, writer = mpc.Pipe(duplex=False)
    try:
        send(writer, ("run", {"plan": list(range(1000))}))
        assert reader.recv() == ("run", {"plan": list(range(1000))})
    finally:
        reader.close()
        writer.close()


def interrupted_send_in_a_cycle(sender: Callable[[mpc.Connection, object], None]) -> None:
    reader, writer = mpc.Pipe(duplex=False)
    conn = InterruptedConnection(writer.fileno())
    try:
        sender(conn, {"plan": list(range(100))})
    except KeyboardInterrupt as exc:
        kept = [exc]
        kept.append(kept)  # the exception caught and kept: its traceback's frames in a reference cycle
    finally:
        conn._handle = None  # type: ignore[attr-defined]  # the fd is writer's: closed once, below
        reader.close()
        writer.close()


def test_an_interrupted_send_leaves_no_buffer_export_for_the_collector(unraisable: list[BaseException]) -> None:
    interrupted_send_in_a_cycle(send)
    gc.collect()
    assert unraisable == []


@pytest.mark.skipif(sys.version_info < (3, 13), reason="before 3.13 a finalized BytesIO does not check its exports")
def test_the_standard_send_does_leave_one(unraisable: list[BaseException]) -> None:
    """What the test above guards against, shown with Connection.send itself."""
    interrupted_send_in_a_cycle(mpc.Connection.send)
    gc.collect()
    assert [type(e) for e in unraisable] == [BufferError]
