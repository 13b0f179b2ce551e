"""What the kinds that start servers of their own share (etcd, PostgreSQL, ZooKeeper; Redis's
start_all): a server that is started once it serves, a group started whole or not at all (retried
with new ports when a start fails), and the refusals of what such a kind cannot take.

Each kind supplies how to spawn its process and how to tell that it serves (:class:`OwnServer`),
how to build one attempt at its group (:func:`start_with_retry`), and what it needs installed
(:class:`OwnServersKind`); the loops, the cleanups and the one-line refusals are here, once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, TypeVar

from lockcompare.errors import BackendNotViableError, ConfigError, ServerStartError
from lockcompare.infra.peerlinks import PeerLinks
from lockcompare.infra.spawned import SpawnedServer

if TYPE_CHECKING:
    from lockcompare.infra.fakeclock import FakeClock
    from lockcompare.infra.kinds import Server

Started = TypeVar("Started", bound=SpawnedServer)


class OwnServer(SpawnedServer):
    """A spawned server that is ready once it serves: :meth:`wait_ready` asks :meth:`_serves` until
    it does, and kills the process if it exits or never serves within ``start_timeout_s``. A member
    of a group reached through peer links (infra/peerlinks.py) gives its proxies' ports back at cleanup.
    """

    #: The program's name in a start-up failure ("etcd", "ZooKeeper", "postgres").
    program: ClassVar[str]
    #: What a start that timed out says it never did, of ``{url}`` or ``{port}`` ("did not serve on {url}").
    never_served: ClassVar[str] = "did not serve on {url}"
    #: How long :meth:`wait_ready` sleeps between two questions.
    poll_s: ClassVar[float] = 0.02
    start_timeout_s: float
    #: Set when the server is a member of a group with peer links (the group's start sets it).
    peer_links: PeerLinks | None = None

    def _serves(self) -> bool:
        """Whether the server serves now; raises :class:`ServerStartError` (after killing it) when
        what answers cannot be it."""
        raise NotImplementedError

    @property
    def _log(self) -> Path:
        raise NotImplementedError

    def wait_ready(self) -> None:
        """Wait until it serves; kill it if it exits first or never serves within ``start_timeout_s``."""
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self._proc is None or self._proc.poll() is not None:
                self._proc = None
                raise ServerStartError(
                    f"{self.name}: {self.program} exited during start-up: {self._last_log_line(self._log)}"
                )
            if self._serves():
                return
            time.sleep(self.poll_s)
        self._kill()
        never = self.never_served.format(url=self.url, port=self.port)
        raise ServerStartError(f"{self.name}: {self.program} {never} within {self.start_timeout_s:g} s; killed it")

    def cleanup(self) -> None:
        super().cleanup()
        if self.peer_links is not None:
            self.peer_links.release(self.name)


def start_all(servers: Sequence[Started]) -> list[Started]:
    """Start each of ``servers`` in turn; if one fails (or the start is interrupted), all are removed."""
    try:
        for server in servers:
            server.start()
    except BaseException:
        for server in servers:
            server.cleanup()
        raise
    return list(servers)


@dataclass
class Attempt:
    """What one attempt at starting a group has made so far: removed whole if the attempt fails."""

    servers: Sequence[SpawnedServer] = ()
    links: PeerLinks | None = None

    def remove(self) -> None:
        for server in self.servers:
            server.cleanup()
        if self.links is not None:
            self.links.stop()


def start_with_retry(*, attempts: int, failure: str, attempt: Callable[[Attempt], list[Started]]) -> list[Started]:
    """A group of servers, started by ``attempt`` (which records in the :class:`Attempt` it is given
    what it has made). Ports are chosen free a moment before a server binds them: an attempt that
    fails with :class:`ServerStartError` (a port taken in between) is removed and tried again on new
    ports, ``attempts`` times in all; any other exception removes it and goes on. After the last
    failure: ``ServerStartError("{failure}: {why the last attempt failed}")``."""
    problem = ""
    for _ in range(attempts):
        made = Attempt()
        try:
            return attempt(made)
        except ServerStartError as exc:
            problem = str(exc)
            made.remove()
        except BaseException:
            made.remove()
            raise
    raise ServerStartError(f"{failure}: {problem}")


class OwnServersKind:
    """The part of a server kind that etcd, PostgreSQL and ZooKeeper share: servers that run with real
    clocks and persist on their own (no fake clocks, no ``--persistence``), started as a group
    (:meth:`start_servers`), and one clear line when what they need is not installed (:meth:`require`).
    """

    #: What :meth:`start_nodes` says to fake clocks or a persistence mode.
    refuses_clocks: ClassVar[str]
    #: What :meth:`new_server` says: a server of the kind is started with its group only.
    never_alone: ClassVar[str]

    def require(self) -> None:
        """Raise :class:`BackendNotViableError` naming what to install, unless all this kind needs is here."""
        raise NotImplementedError

    def start_servers(self, *, count: int) -> Sequence[Server]:
        """``count`` servers of one group, each serving; all removed if any fails."""
        raise NotImplementedError

    def problem(self, *, binary: str | None = None) -> str:
        try:
            self.require()
        except BackendNotViableError as exc:
            return str(exc)
        return ""

    def start_nodes(
        self, *, count: int, persistence: str = "none", clocks: Sequence[FakeClock] = (), binary: str | None = None
    ) -> list[Server]:
        if clocks or persistence != "none":
            raise ConfigError(self.refuses_clocks)
        return list(self.start_servers(count=count))

    def new_server(self, *, name: str, binary: str | None = None) -> Server:
        raise ConfigError(self.never_alone)
