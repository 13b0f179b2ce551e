"""What ``@pytest.mark.needs(*names)`` asks (tests/conftest.py skips with the answer): whether a
server kind of the registry, or an extra, can be used here, and if not, the install in one line."""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Mapping

import pytest

from lockcompare.infra.kinds import ServerKind, registered

#: The extras that are not a server kind, by the module a test needs from them (pyproject.toml's
#: optional dependencies). A server kind (etcd, postgres, zookeeper, ...) says itself what it lacks.
EXTRAS = {"plot": "matplotlib", "dask": "distributed", "yaml": "yaml"}


@functools.cache
def missing(name: str) -> str:
    """Why ``name`` (a registered server kind, or an extra of :data:`EXTRAS`) cannot be used here,
    in one line naming the install; "" when it can."""
    return missing_among(name, kinds=registered())


def missing_among(name: str, *, kinds: Mapping[str, ServerKind]) -> str:
    """:func:`missing`, asking ``kinds`` (the registry's, or a test's own)."""
    if name in kinds:
        problem = kinds[name].problem()
        return f"the {name} server kind is not available here: {problem}" if problem else ""
    if name in EXTRAS:
        module = EXTRAS[name]
        if importlib.util.find_spec(module) is None:
            extra = "test" if name == "yaml" else name
            return f"needs {module}: pip install -e '.[{extra}]'"
        return ""
    raise pytest.UsageError(
        f"@pytest.mark.needs({name!r}): not a server kind ({', '.join(kinds)}) or an extra ({', '.join(EXTRAS)})"
    )
