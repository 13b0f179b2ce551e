"""Where the shipped lock clients (Node, Go, Java, the reference Python client) are found.

In this order: ``$LOCKCOMPARE_CLIENTS_DIR``; the source tree's ``clients/`` when lockcompare runs
from a checkout; the per-user cache that ``lockcompare clients install`` fills
(``$XDG_CACHE_HOME/lockcompare/clients``, else ``~/.cache/lockcompare/clients``). An installed
wheel carries the clients' sources as ``lockcompare/_clients`` but never their installed
dependencies or builds (node_modules, jars, binaries): those are made per machine, in the cache.

A cache filled by another build of lockcompare (other client sources) is not used: rows would
name this build's revision but run that build's clients.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

ENV_CLIENTS_DIR = "LOCKCOMPARE_CLIENTS_DIR"
#: Written into an installed copy by ``lockcompare clients install``: which sources it holds.
STAMP = ".lockcompare-clients.json"
#: Made per machine from the sources, never part of them (the wheel leaves them out too: setup.py).
INSTALLED_PARTS = frozenset({"node_modules", "build", "__pycache__"})
INSTALL_COMMAND = "lockcompare clients install"

_PACKAGE = Path(__file__).resolve().parents[2]  # .../lockcompare


@dataclass(frozen=True)
class Location:
    """Where the clients are looked for, why there, and why they cannot be used ("" if they can)."""

    directory: Path
    origin: str
    problem: str = ""


def source_tree() -> Path | None:
    """The checkout's ``clients/`` when this code runs from a checkout (``<repo>/src/lockcompare``)."""
    repo = _PACKAGE.parent.parent
    clients = repo / "clients"
    if _PACKAGE.parent.name == "src" and (repo / "pyproject.toml").is_file() and clients.is_dir():
        return clients
    return None


def packaged_sources() -> Path | None:
    """The clients' sources this installation carries: the wheel's copy, else the checkout's."""
    packaged = _PACKAGE / "_clients"
    return packaged if packaged.is_dir() else source_tree()


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "lockcompare" / "clients"


def locate() -> Location:
    explicit = os.environ.get(ENV_CLIENTS_DIR)
    if explicit:
        return Location(Path(explicit).expanduser().resolve(), f"${ENV_CLIENTS_DIR}")
    source = source_tree()
    if source is not None:
        return Location(source, "the source tree")
    cache = cache_dir()
    if not (cache / STAMP).is_file():
        return Location(cache, "not installed", f"the shipped clients are not installed: run `{INSTALL_COMMAND}`")
    return Location(cache, "the per-user cache", stale_problem(cache))


def stale_problem(directory: Path) -> str:
    """Why the copy in ``directory`` is not this build's clients ("" if it is)."""
    sources = packaged_sources()
    try:
        stamp = json.loads((directory / STAMP).read_text())
    except (OSError, ValueError):
        stamp = {}
    if sources is None or not isinstance(stamp, dict) or stamp.get("sources_sha256") != sources_digest(sources):
        return f"{directory} holds another lockcompare build's clients: run `{INSTALL_COMMAND}`"
    return ""


def source_files(directory: Path) -> list[Path]:
    """The clients' source files under ``directory`` (relative, sorted): not what was installed from them."""
    found = []
    for root, dirs, files in os.walk(directory):
        dirs[:] = [d for d in dirs if d not in INSTALLED_PARTS]  # never walk node_modules' thousands of files
        found += [Path(root, f).relative_to(directory) for f in files if not f.endswith(".pyc") and f != STAMP]
    return sorted(found)


def sources_digest(directory: Path) -> str:
    """One hash over the clients' source files, names and bytes."""
    digest = hashlib.sha256()
    for relative in source_files(directory):
        digest.update(relative.as_posix().encode() + b"\0" + (directory / relative).read_bytes() + b"\0")
    return digest.hexdigest()


def write_stamp(directory: Path, *, sources: Path, revision: str) -> None:
    stamp = {"sources_sha256": sources_digest(sources), "source_revision": revision}
    (directory / STAMP).write_text(json.dumps(stamp, indent=1) + "\n")
