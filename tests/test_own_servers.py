"""infra/own_servers.py: what the etcd, PostgreSQL and ZooKeeper kinds share. The start-up wait on
real processes (a shell that exits, one that never serves, one that serves once a file appears);
the group's retry and the kind's refusals on hand-built groups and kinds."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest

from lockcompare.errors import BackendNotViableError, ConfigError, ServerStartError
from lockcompare.infra.kinds import Server
from lockcompare.infra.own_servers import Attempt, OwnServer, OwnServersKind, start_with_retry
from test_lifecycle import alive as process_exists  # a reaped or zombie process is gone

pytestmark = pytest.mark.usefixtures("private_tmp")


class ShellServer(OwnServer):
    """A shell script as the server (``{dir}``: its directory): it serves once the file ``ready`` exists there."""

    program = "shell"
    poll_s = 0.01

    def __init__(self, *, script: str, start_timeout_s: float = 5.0) -> None:
        super().__init__(name="sh0", dir_tag="own-servers-test")
        self.script = script.format(dir=self._dir)
        self.start_timeout_s = start_timeout_s

    @property
    def url(self) -> str:
        return f"shell://{self._dir}"

    @property
    def _log(self) -> Path:
        return self._dir / "shell.log"

    def start(self) -> None:
        self._popen(["/bin/sh", "-c", self.script], log=self._log)
        self.wait_ready()

    def _serves(self) -> bool:
        return (self._dir / "ready").exists()


def test_a_server_that_serves_is_ready_and_running() -> None:
    server = ShellServer(script="sleep 0.05; touch {dir}/ready; exec sleep 30")
    try:
        server.start()
        assert server.is_running()
    finally:
        server.cleanup()


def test_a_server_that_exits_during_start_up_says_its_last_log_line() -> None:
    server = ShellServer(script="echo 'bind: address in use'; exit 3")
    try:
        with pytest.raises(ServerStartError, match=r"^sh0: shell exited during start-up: bind: address in use$"):
            server.start()
        assert server.pid is None
    finally:
        server.cleanup()


def test_a_server_that_never_serves_is_killed_and_says_so() -> None:
    server = ShellServer(script="exec sleep 30", start_timeout_s=0.3)
    try:
        server._popen(["/bin/sh", "-c", server.script], log=server._log)
        pid = server.pid
        assert pid is not None
        with pytest.raises(ServerStartError) as info:
            server.wait_ready()
        assert str(info.value) == f"sh0: shell did not serve on {server.url} within 0.3 s; killed it"
        assert not process_exists(pid) and server.pid is None
    finally:
        server.cleanup()


@dataclass
class Made:
    """A hand-built member of a group: what its cleanup did."""

    name: str
    cleaned: list[str]

    def cleanup(self) -> None:
        self.cleaned.append(self.name)


class Links:
    def __init__(self, stopped: list[str]) -> None:
        self.stopped = stopped

    def stop(self) -> None:
        self.stopped.append("links")


def test_a_failed_attempt_is_removed_whole_and_the_next_one_returned() -> None:
    removed: list[str] = []
    attempts: list[int] = []

    def attempt(made: Attempt) -> list[Made]:
        attempts.append(len(attempts))
        members = [Made(f"try{len(attempts)}-{i}", removed) for i in range(2)]
        made.servers = members  # type: ignore[assignment]  # stand-ins: only cleanup() is called
        made.links = Links(removed)  # type: ignore[assignment]
        if len(attempts) == 1:
            raise ServerStartError("port 7 taken")
        return members

    started = start_with_retry(attempts=3, failure="group of 2 did not start", attempt=attempt)
    assert [m.name for m in started] == ["try2-0", "try2-1"]
    assert removed == ["try1-0", "try1-1", "links"]  # the second attempt's servers are kept


def test_the_last_failure_is_said_after_every_attempt_failed() -> None:
    calls: list[int] = []

    def attempt(made: Attempt) -> list[Made]:
        calls.append(1)
        raise ServerStartError(f"attempt {len(calls)} failed")

    with pytest.raises(ServerStartError, match=r"^group of 3 did not start: attempt 2 failed$"):
        start_with_retry(attempts=2, failure="group of 3 did not start", attempt=attempt)
    assert len(calls) == 2


def test_another_exception_removes_the_attempt_and_is_not_retried() -> None:
    removed: list[str] = []
    calls: list[int] = []

    def attempt(made: Attempt) -> list[Made]:
        calls.append(1)
        made.servers = [Made("a", removed)]  # type: ignore[list-item]
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        start_with_retry(attempts=3, failure="unused", attempt=attempt)
    assert calls == [1] and removed == ["a"]


class Needy(OwnServersKind):
    refuses_clocks: ClassVar[str] = "needy servers keep real clocks"
    never_alone: ClassVar[str] = "a needy server starts with its group"

    def __init__(self, *, installed: bool) -> None:
        self.installed = installed
        self.started: list[int] = []

    def require(self) -> None:
        if not self.installed:
            raise BackendNotViableError("pip install needy")

    def start_servers(self, *, count: int) -> Sequence[Server]:
        self.started.append(count)
        return []


def test_the_kind_refuses_clocks_persistence_and_a_lone_server_before_starting_anything() -> None:
    kind = Needy(installed=True)
    with pytest.raises(ConfigError, match=r"^needy servers keep real clocks$"):
        kind.start_nodes(count=1, clocks=[object()])  # type: ignore[list-item]
    with pytest.raises(ConfigError, match=r"^needy servers keep real clocks$"):
        kind.start_nodes(count=1, persistence="aof-always")
    with pytest.raises(ConfigError, match=r"^a needy server starts with its group$"):
        kind.new_server(name="x")
    assert kind.started == []
    assert kind.start_nodes(count=3) == [] and kind.started == [3]


def test_the_kinds_problem_is_what_it_requires() -> None:
    assert Needy(installed=False).problem() == "pip install needy"
    assert Needy(installed=True).problem() == ""
