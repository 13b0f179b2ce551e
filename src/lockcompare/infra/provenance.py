"""What produced a row: lockcompare's version and source revision, the host, the servers, and who else was running.

Two measurements on a 2-core machine distort each other's timing, so every run registers itself
in a small directory of live runs (one file per process, mode 0600, holding its pid, start and
output file only, removed at the end; a file whose process is gone is stale and removed). A run
that finds another one warns, and every row records how many other runs were active when its
trial started, so results from overlapping runs stay recognisable.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lockcompare.infra.kinds import ServerKind

log = logging.getLogger("lockcompare")

RUNS_DIR_ENV = "LOCKCOMPARE_RUNS_DIR"


def runs_dir() -> Path:
    return Path(os.environ.get(RUNS_DIR_ENV) or Path(tempfile.gettempdir()) / "lockcompare-runs")


@functools.cache
def lockcompare_version() -> str:
    try:
        return version("lockcompare")
    except PackageNotFoundError:
        return "unknown"


#: Written into an installed build's package by setup.py: {"revision": commit, "dirty": bool}.
BUILD_INFO = "_build_info.json"


@functools.cache
def source_revision() -> str:
    """The git commit the running code comes from, ``+dirty`` if its code differs; "" if unknown.

    An installed build (a wheel) is in no checkout: it says the revision it was built from
    (:func:`build_revision`). That record is read first, so a wheel installed into a venv that sits
    inside some checkout does not take that checkout's revision."""
    package = Path(__file__).resolve().parent.parent
    built = build_revision(package)
    return built if built is not None else revision_of(package)


def build_revision(package: Path) -> str | None:
    """The revision recorded in ``package`` when it was built, ``+dirty`` if built from a changed
    checkout; None when the package holds no record (it runs from a checkout); "" if unreadable."""
    try:
        info = json.loads((package / BUILD_INFO).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return ""
    revision = str(info.get("revision") or "") if isinstance(info, dict) else ""
    return revision + ("+dirty" if revision and info.get("dirty") else "")


def revision_of(package: Path) -> str:
    """The commit of the checkout holding ``package`` (``src/<name>``), ``+dirty`` if a tracked file
    of the package or of the shipped lock clients beside it (``clients/``, run by the external
    backends) differs from it; "" outside git. Only code that decides what a trial does counts:
    results, docs and tests may change under a run without making its rows another revision's."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(package), *args], capture_output=True, text=True, timeout=5, check=True
        ).stdout.strip()

    try:
        commit = git("rev-parse", "HEAD")
        top = Path(git("rev-parse", "--show-toplevel"))
        code = [str(package)] + [str(top / "clients")] * (top / "clients").is_dir()
        dirty = git("status", "--porcelain", "--untracked-files=no", "--", *code)
    except (OSError, subprocess.SubprocessError):
        return ""
    return commit + ("+dirty" if dirty else "")


def host_facts() -> dict[str, object]:
    return {
        "lockcompare_version": lockcompare_version(),
        "source_revision": source_revision(),
        "host": socket.gethostname(),
        "cpu_count": os.cpu_count() or 0,
    }


def server_version(
    *, node_url: str, resource_url: str, node_kind: ServerKind | None = None, resource_kind: ServerKind | None = None
) -> str:
    """What the CSV's ``server_version`` records, as the servers' kinds read it from the servers
    themselves: "valkey 9.1.2", "postgresql 18.6", or "etcd 3.5.1 + redis 6.2.14" when the
    resource is of another kind than the lock nodes. ``node_kind``/``resource_kind``: the kinds that
    started them (else the kind owning each URL's scheme)."""
    from lockcompare.infra.kinds import kind_of_url  # the server modules load only where servers run

    nodes = (node_kind or kind_of_url(node_url)).version(node_url)
    resource = (resource_kind or kind_of_url(resource_url)).version(resource_url)
    if resource.split(" ", 1)[0] == nodes.split(" ", 1)[0]:
        return nodes
    return f"{nodes} + {resource}"


def active_runs() -> list[dict[str, object]]:
    """The registered runs whose process is still alive, other than this process."""
    # Here, not at the top: setup.py loads this module alone (no lockcompare package) for the revision.
    from lockcompare.processes import process_alive

    found = []
    directory = runs_dir()
    for path in directory.glob("*.json") if directory.is_dir() else ():
        try:
            info = json.loads(path.read_text())
            pid = int(info["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if pid == os.getpid():
            continue
        if process_alive(pid):
            found.append(info)
        else:
            with contextlib.suppress(OSError):
                path.unlink()
    return found


def other_runs() -> int:
    return len(active_runs())


def _entry(what: str, out: Path | None) -> bytes:
    """What the registry keeps of a run: who, since when, which file it writes. Never the command
    line: it can hold a password (``redis://:secret@...``), and the directory is shared."""
    entry = {"pid": os.getpid(), "what": what, "since": time.strftime("%H:%M:%S"), "out": str(out or "")}
    return json.dumps(entry).encode()


@contextlib.contextmanager
def registered_run(what: str, *, out: Path | None = None) -> Iterator[None]:
    """Register this process as a running measurement for the duration; warn about others.

    The entry is a file of mode 0600 holding pid, start and output file only (see :func:`_entry`)."""
    directory = runs_dir()
    path: Path | None = directory / f"{os.getpid()}.json"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        assert path is not None
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # a file left by an earlier process with our pid: never reuse its mode
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, _entry(what, out))
        finally:
            os.close(fd)
    except OSError:
        path = None  # an unwritable temp dir must not stop a run
    others = active_runs()
    if others:
        desc = ", ".join(f"pid {o['pid']} ({o.get('what', '?')} since {o.get('since', '?')})" for o in others)
        log.warning(
            "another lockcompare run is active: %s; both runs' timings are distorted (rows record concurrent_runs)",
            desc,
        )
    try:
        yield
    finally:
        if path is not None:
            with contextlib.suppress(OSError):
                path.unlink()
