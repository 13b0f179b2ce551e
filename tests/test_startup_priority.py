"""infra/startup_priority.py: a server a pool's starter thread spawns is born niced and gets nice 0
back, every process of its session, once it serves; one spawned elsewhere is never niced."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from lockcompare.infra.spawned import SpawnedServer
from lockcompare.infra.startup_priority import STARTUP_NICE, can_restore, yield_startups

pytestmark = pytest.mark.skipif(not can_restore(), reason="nice 0 cannot be given back here: start-ups are not niced")


def nice_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[16])


def threads_nice(pid: int) -> set[int]:
    return {nice_of(int(tid.name)) for tid in Path(f"/proc/{pid}/task").iterdir()}


class ShellServer(SpawnedServer):
    """A 'server' that is a shell with a child of its own (a postmaster's backends, say)."""

    def __init__(self) -> None:
        super().__init__(name="shell", dir_tag="startup-priority")

    @property
    def url(self) -> str:
        return "shell://"

    def start(self) -> None:
        self._popen(["sh", "-c", "sleep 30 & sleep 30"])


@contextlib.contextmanager
def spawned_on(*, thread_yields: bool) -> Iterator[ShellServer]:
    """The server, spawned on a thread that lives until the server is cleaned up (a server dies with
    the thread that spawned it, as the pool's starter threads know)."""
    server = ShellServer()
    started, done = threading.Event(), threading.Event()

    def body() -> None:
        if thread_yields:
            yield_startups()
        server.start()
        started.set()
        done.wait()

    thread = threading.Thread(target=body)
    thread.start()
    started.wait()
    try:
        yield server
    finally:
        server.cleanup()
        done.set()
        thread.join()


def session_members(server: ShellServer) -> list[int]:
    from lockcompare.infra.startup_priority import _session_members

    assert server.pid is not None
    for _ in range(100):  # the shell's child appears within milliseconds
        members = _session_members(server.pid)
        if len(members) >= 2:
            return members
        threading.Event().wait(0.01)
    return _session_members(server.pid)


def test_a_background_start_up_is_niced_until_it_serves() -> None:
    with spawned_on(thread_yields=True) as server:
        members = session_members(server)
        assert len(members) >= 2
        assert {nice_of(pid) for pid in members} == {STARTUP_NICE}
        server.now_serving()
        assert {n for pid in members for n in threads_nice(pid)} == {0}


def test_a_server_started_on_any_other_thread_is_not() -> None:
    with spawned_on(thread_yields=False) as server:
        members = session_members(server)
        assert len(members) >= 2
        assert {nice_of(pid) for pid in members} == {0}
