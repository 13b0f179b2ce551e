"""Node faults: what happens to the lock nodes that hold a worker's lease.

Each fault is a small object: :meth:`inject` acts on some lock nodes of a running embedded cluster,
:meth:`heal` undoes what can be undone; the cluster a fault needs (persistence, fake clocks) is its
trial's :class:`~lockcompare.infra.cluster.ClusterShape` (matrix.cluster_shape). When the runner
injects, heals and how often is :mod:`schedule`'s business; the runner heals every active fault in
``finally``, whatever happened.

- ``node-crash``: SIGKILL the nodes; they stay down until the trial ends (a single node is a
  single point of failure; a Redlock survives a minority).
- ``node-restart``: SIGKILL the nodes and start them again on the same port after
  ``restart_delay_ms`` — empty, unless the cluster keeps an AOF with ``appendfsync always``
  (antirez's answers to Kleppmann: delayed restarts, fsync).
- ``clock-jump``: move the nodes' wall clocks forward by twice the TTL (libfaketime; the monotonic
  clock is left alone), so every key they hold expires at once (Redlock assumes bounded drift).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Protocol

from lockcompare.errors import ConfigError
from lockcompare.infra.cluster import Cluster


class NodeFault(Protocol):
    name: ClassVar[str]

    def inject(self, cluster: Cluster, nodes: list[int]) -> str:
        """Act on ``nodes``; returns a short description for the history."""
        ...

    def heal(self, cluster: Cluster, nodes: list[int]) -> str: ...


def _embedded(cluster: Cluster, fault: str) -> None:
    if not cluster.embedded:
        raise ConfigError(f"{fault} needs the embedded cluster: lockcompare cannot kill or restart external servers")


@dataclass(frozen=True)
class NodeCrash:
    """SIGKILL now; the heal starts the nodes again (the runner heals a crash when the trial ends)."""

    name: ClassVar[str] = "node-crash"

    def inject(self, cluster: Cluster, nodes: list[int]) -> str:
        _embedded(cluster, self.name)
        for i in nodes:
            cluster.node_server(i).crash()
        return "SIGKILL"

    def heal(self, cluster: Cluster, nodes: list[int]) -> str:
        kept = False
        for i in nodes:
            server = cluster.node_server(i)
            kept = kept or getattr(server, "keeps_data_across_restarts", False)
            if not server.is_running():
                server.start()  # same port, same data directory
        return self.restarted(kept=kept)

    def restarted(self, *, kept: bool = False) -> str:
        return "started again (with its data)" if kept else "started again (empty)"


@dataclass(frozen=True)
class NodeRestart(NodeCrash):
    """A crash whose heal (the restart) the runner schedules ``restart_delay_ms`` after it."""

    persistence: str = "none"
    name: ClassVar[str] = "node-restart"

    def restarted(self, *, kept: bool = False) -> str:
        if self.persistence != "none":
            return "restarted on the same port (AOF, appendfsync always)"
        return "restarted on the same port" + (
            " (with its data: the server persists on its own)" if kept else " (empty)"
        )


@dataclass(frozen=True)
class ClockJump:
    """Jump forward by ``jump_s``; a jump is not undone mid-trial (clocks reset when the trial ends)."""

    jump_s: float
    name: ClassVar[str] = "clock-jump"

    def inject(self, cluster: Cluster, nodes: list[int]) -> str:
        _embedded(cluster, self.name)
        for i in nodes:
            cluster.node_clock(i).jump(seconds=self.jump_s)
        return f"wall clock +{self.jump_s:g} s"

    def heal(self, cluster: Cluster, nodes: list[int]) -> str:
        return "clock stays ahead (reset after the trial)"
