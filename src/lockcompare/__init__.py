"""lockcompare: measure what distributed locks really guarantee.

Real redis-server nodes, real worker processes, the same experiments for every lock backend,
and results as CSV rows from which every table is rendered. See README.md and docs/.

The public API — what a plug-in author or a script may import and rely on:

* :mod:`lockcompare.backends.base` — :class:`LockBackend` (the protocol a backend implements),
  :class:`BackendConfig`, :class:`Lease`, :class:`Refusal`; re-exported here.
* :mod:`lockcompare.infra.kinds` — :class:`ServerKind` (the interface a server kind implements),
  :class:`Server`, :class:`Capabilities`, :class:`Capability`, :class:`LockNodes`; re-exported here.
* :mod:`lockcompare.testing` — the conformance battery as pytest fixtures and the
  ``BackendContract`` test class to subclass.
* :mod:`lockcompare.errors` — the exception tree (its docstring draws it).
* The ``lockcompare`` command (and ``python -m lockcompare``); the entry-point groups through which
  built-ins and plug-ins are registered alike: ``lockcompare.backends`` (backends),
  ``lockcompare.servers`` (server kinds), ``lockcompare.resources`` (where the resource lives).
* A lock client in another language is no Python at all: a manifest and the JSON-lines protocol
  (docs/clients.md).

Everything else (``cli``, ``spec``, ``faults``, ``runner``, ``infra``, ``analysis``, ``render``,
``evaluation``) is internal and may change between versions.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (see __getattr__)
if TYPE_CHECKING:
    from typing import Any

__version__ = "0.1.0"

#: What a backend plug-in builds on (lockcompare.backends.base).
BACKEND_API = ("BackendConfig", "Lease", "LockBackend", "Refusal")
#: What a server-kind plug-in builds on (lockcompare.infra.kinds).
KIND_API = ("Capabilities", "Capability", "LockNodes", "Server", "ServerKind")

__all__ = [
    "BackendConfig",
    "Capabilities",
    "Capability",
    "Lease",
    "LockBackend",
    "LockNodes",
    "Refusal",
    "Server",
    "ServerKind",
    "__version__",
]  # fmt: skip  (BACKEND_API + KIND_API, as literal names for the tools that read __all__)


def __getattr__(name: str) -> Any:
    """The plug-in base classes, imported on first use: ``import lockcompare`` stays light enough
    for the offline commands (table, report, history), which never load redis. Light enough, too,
    for the ``lockcompare`` command to answer signals within milliseconds of its start: it imports
    nothing but this package before it does (lockcompare/__main__.py)."""
    if name in BACKEND_API:
        from lockcompare.backends import base

        return getattr(base, name)
    if name in KIND_API:
        from lockcompare.infra import kinds

        return getattr(kinds, name)
    raise AttributeError(f"module 'lockcompare' has no attribute {name!r}")
