"""What a row records of the code its trial ran besides lockcompare: the lock's libraries and Python.

A published library is judged by its version, so every row says which it measured
(``client_versions``: ``"pottery 3.0.0; redis 5.2.1"``). Where each part comes from:

- a Python backend declares the distributions it runs (its ``libraries`` trait, read once per class);
  their versions are read here by distribution name (``importlib.metadata``), once per process:
  the workers run in the runner's environment;
- an external client says its own in its ``hello`` reply (docs/clients.md: ``versions``, a map of
  package to version, else its ``library`` and ``version``; and its ``runtime``); the runner reads
  them from the trial's history, where each client start is a ``client`` event. A client that sent
  none is recorded as ``<library> unknown``: never guessed.

``none`` means the lock runs no library of its own (lockcompare's code: ``lockcompare_version`` says
which); an empty cell (rows from before schema 10) is unknown.

>>> client_versions(libraries=(), external=False)
'none'
>>> reported_versions([{"kind": "client", "library": "redlock", "version": "4.2.0", "runtime": "node v20.1.0"}])
['redlock 4.2.0', 'node v20.1.0']
>>> reported_versions([{"kind": "client", "versions": {"redlock": "4.2.0", "ioredis": "5.4.1"}, "runtime": "node v20"}])
['redlock 4.2.0', 'ioredis 5.4.1', 'node v20']
>>> reported_versions([{"kind": "client", "library": "old-client"}])
['old-client unknown']
"""

from __future__ import annotations

import functools
import platform
from collections.abc import Iterable, Mapping, Sequence
from importlib.metadata import PackageNotFoundError, version

UNKNOWN = "unknown"
#: The lock runs no library of its own (a built-in on lockcompare's own client, the no-lock baseline).
NO_LIBRARY = "none"
#: Between two parts of ``client_versions``.
SEPARATOR = "; "
#: A hello is a client's say: its parts are cut to this length and count (a row is not its dump).
_MAX_PART = 80
_MAX_PARTS = 12


def python_version() -> str:
    """The Python the trial's workers ran (they are spawned from this interpreter)."""
    return platform.python_version()


@functools.cache
def distribution_version(name: str) -> str:
    """The installed version of the distribution ``name``, or ``unknown``."""
    try:
        return version(name)
    except PackageNotFoundError:
        return UNKNOWN


def library_versions(libraries: Sequence[str]) -> list[str]:
    """``name version`` of each Python distribution a backend declares."""
    return [f"{name} {distribution_version(name)}" for name in libraries]


def _part(text: object) -> str:
    return " ".join(str(text).replace(";", ",").split())[:_MAX_PART]


def reported_versions(history: Iterable[Mapping[str, object]]) -> list[str]:
    """What the external clients of a trial said of themselves in ``hello`` (its ``client`` events), each part once."""
    parts: list[str] = []
    for event in history:
        if event.get("kind") != "client":
            continue
        versions = event.get("versions")
        if isinstance(versions, Mapping) and versions:
            parts += [f"{_part(name)} {_part(value) or UNKNOWN}" for name, value in versions.items()]
        else:
            library = _part(event.get("library") or "") or "client"
            parts.append(f"{library} {_part(event.get('version') or '') or UNKNOWN}")
        runtime = _part(event.get("runtime") or "")
        if runtime:
            parts.append(runtime)
    return list(dict.fromkeys(parts))[:_MAX_PARTS]


def no_client_started(cell: str) -> bool:
    """Whether a ``client_versions`` cell says its trial's external client never started (a bare
    ``unknown`` part: a library not found reads ``<name> unknown``). Such a trial ran no client, so
    its row says nothing of which version a cell measured.

    >>> no_client_started("unknown"), no_client_started("redis 5.2.1; unknown"), no_client_started("redlock unknown")
    (True, True, False)
    """
    return UNKNOWN in cell.split(SEPARATOR)


def client_versions(*, libraries: Sequence[str], external: bool, history: Iterable[Mapping[str, object]] = ()) -> str:
    """The ``client_versions`` cell of a trial of a backend with these traits: its Python libraries,
    then what its external clients reported (``unknown`` when none started), or ``none``."""
    parts = library_versions(libraries)
    if external:
        parts += reported_versions(history) or [UNKNOWN]
    return SEPARATOR.join(parts) or NO_LIBRARY
