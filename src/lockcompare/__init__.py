"""lockcompare: measure what distributed locks really guarantee.

Real redis-server nodes, real worker processes, the same experiments for every lock backend,
and results as CSV rows from which every table is rendered. See README.md and docs/.

The public API — what a plug-in author or a script may import and rely on:

* :mod:`lockcompare.backends.base` — :class:`LockBackend` (the protocol a backend implements),
  :class:`BackendConfig`, :class:`Lease`, :class:`Refusal`; re-exported here.
* :mod:`lockcompare.testing` — the conformance battery as pytest fixtures and the
  ``BackendContract`` test class to subclass.
* :mod:`lockcompare.errors` — the exception tree (its docstring draws it).
* The ``lockcompare`` command (and ``python -m lockcompare``); the ``lockcompare.backends``
  entry-point group through which built-ins and plug-ins are registered alike.

Everything else (``cli``, ``spec``, ``faults``, ``runner``, ``infra``, ``analysis``, ``render``,
``evaluation``) is internal and may change between versions.
"""

from typing import Any

__version__ = "0.1.0"

__all__ = ["BackendConfig", "Lease", "LockBackend", "Refusal", "__version__"]


def __getattr__(name: str) -> Any:
    """The backend base classes, imported on first use: ``import lockcompare`` stays light enough
    for the offline commands (table, report, history), which never load redis."""
    if name in ("BackendConfig", "Lease", "LockBackend", "Refusal"):
        from lockcompare.backends import base

        return getattr(base, name)
    raise AttributeError(f"module 'lockcompare' has no attribute {name!r}")
