"""Which process owns a loopback TCP connection, read from /proc (Linux): no root, no tools.

Two questions of the role-aimed faults need it:

- a peer link's proxy must know which server a connection comes from (infra/peerlinks.py): an etcd
  member dials its peers from a port the kernel picks, and the proxy sees only that port. The
  connection's two ports name a line of ``/proc/net/tcp`` and its socket inode; the server whose
  ``/proc/PID/fd`` holds that inode is the source.
- ``nodes=holder-member`` asks which lock node the holder's client is connected to
  (faults/roles.py): the remote ports of the worker process's established connections.

>>> line = "   0: 0100007F:9C40 0100007F:1F90 01 00000000:00000000 00:00000000 00000000  1000 0 4242 1"
>>> parse_line(line)
TcpSocket(local_port=40000, remote_port=8080, established=True, inode=4242)
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

_TABLES = (Path("/proc/net/tcp"), Path("/proc/net/tcp6"))
_ESTABLISHED = "01"


@dataclass(frozen=True)
class TcpSocket:
    local_port: int
    remote_port: int
    established: bool
    inode: int


def parse_line(line: str) -> TcpSocket | None:
    """One row of /proc/net/tcp (or tcp6); None for the header or a row it cannot read."""
    fields = line.split()
    if len(fields) < 10 or ":" not in fields[1]:
        return None
    try:
        return TcpSocket(
            local_port=int(fields[1].rsplit(":", 1)[1], 16),
            remote_port=int(fields[2].rsplit(":", 1)[1], 16),
            established=fields[3] == _ESTABLISHED,
            inode=int(fields[9]),
        )
    except ValueError:
        return None


def tcp_sockets(*, remote_ports: Iterable[int] = ()) -> list[TcpSocket]:
    """Every TCP socket of this network namespace; only those connected to ``remote_ports`` when given
    (the rows are filtered as text first: a busy machine has thousands, ~10 µs each to parse)."""
    wanted = {f":{port:04X} " for port in remote_ports}
    found = []
    for table in _TABLES:
        try:
            lines = table.read_text().splitlines()[1:]
        except OSError:
            continue
        if wanted:
            lines = [line for line in lines if any(port in line for port in wanted)]
        found += [s for s in map(parse_line, lines) if s is not None]
    return found


def socket_inodes(pid: int) -> set[int]:
    """The socket inodes process ``pid`` holds open (empty when it is gone or not ours to read)."""
    inodes: set[int] = set()
    fd_dir = f"/proc/{pid}/fd"
    try:
        names = os.listdir(fd_dir)
    except OSError:
        return inodes
    for name in names:
        try:
            target = os.readlink(f"{fd_dir}/{name}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[8:-1]))
    return inodes


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it (an external lock client is a child of its worker)."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        try:
            tasks = os.listdir(f"/proc/{current}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                todo += [int(c) for c in Path(f"/proc/{current}/task/{task}/children").read_text().split()]
            except (OSError, ValueError):
                continue
    return found


def owner_of(*, local_port: int, remote_port: int, pids: Iterable[int]) -> int | None:
    """Which of ``pids`` holds the connection from ``local_port`` to ``remote_port`` (None: none of them)."""
    found = tcp_sockets(remote_ports=(remote_port,))
    inodes = {s.inode for s in found if s.local_port == local_port and s.remote_port == remote_port}
    inodes.discard(0)
    if not inodes:
        return None
    for pid in pids:
        if socket_inodes(pid) & inodes:
            return pid
    return None


def sources_by_link(ports: Iterable[int], pids: Mapping[int, int]) -> dict[int, dict[int, int]]:
    """For each listening ``port`` (a peer link's proxy), its current connections' client ports ->
    the server (``pids``: pid -> server) that opened each, from one reading of the tables."""
    wanted = set(ports)
    held = {inode: server for pid, server in pids.items() for inode in socket_inodes(pid)}
    found: dict[int, dict[int, int]] = {port: {} for port in wanted}
    for s in tcp_sockets(remote_ports=wanted):
        if s.remote_port in wanted and s.inode in held:
            found[s.remote_port][s.local_port] = held[s.inode]
    return found


def remote_ports(pid: int) -> set[int]:
    """The remote ports of the established TCP connections of ``pid`` and its descendants."""
    inodes: set[int] = set()
    for each in descendants(pid):
        inodes |= socket_inodes(each)
    return {s.remote_port for s in tcp_sockets() if s.established and s.inode in inodes}
