"""A manifest given by its path runs under its ``name``: ``--backends clients/my.toml`` is ``my-client``.

Progress lines, tables, trial ids and history file names show a backend's name, and a manifest's
name is what its author called the lock; its path (``/home/me/work/clients/my.toml``) is where it
happens to lie. So :func:`~lockcompare.backends.backend_name` turns a manifest's path into its name
once, where the matrix plans its trials, and the row records the path beside it (the
``backend_source`` column: ``run --from`` and the report's commands load it again from there).

Within a run the name is remembered here, in the environment (``LOCKCOMPARE_MANIFESTS``, a JSON map
of name to path), which every process the run spawns inherits (workers, probes, the battery's
host): they load the backend by its name as the runner does. A name that two different manifests
claim in one run (runner/plan.py), or that a registered backend already has, is refused in one
line: rows could not tell their trials apart. A later run in the same process (a test suite, a
notebook) may give the name another manifest: the last one named wins.
"""

from __future__ import annotations

import json
import os
import re

from lockcompare.backends.external import manifest_backend
from lockcompare.errors import BackendLoadError

ENV = "LOCKCOMPARE_MANIFESTS"

#: A name that can stand for its backend everywhere a backend is named (not a path, not module:Class).
_PLAIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def _known() -> dict[str, str]:
    try:
        known = json.loads(os.environ.get(ENV) or "{}")
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in known.items()} if isinstance(known, dict) else {}


def manifest_path(name: str) -> str | None:
    """The manifest this run knows the backend ``name`` by, or None."""
    return _known().get(name)


def plain_name(name: str) -> bool:
    """Whether a manifest's name can stand for its backend (else its path does, as before)."""
    return bool(_PLAIN.fullmatch(name)) and not name.endswith(".toml")


def remember(spec: str, *, expect: str | None = None) -> tuple[str, str]:
    """(name, path) of the manifest at ``spec``, remembered for this run and its children.

    ``expect``: the name a row recorded for it (``run --from``); a manifest renamed since is refused.
    """
    manifest = manifest_backend(spec).manifest
    name, path = manifest.name, str(manifest.path)
    if expect is not None and name != expect:
        raise BackendLoadError(f"client manifest {path} is named {name!r} now; the row's backend is {expect!r}")
    known = _known()
    if known.get(name) != path:
        os.environ[ENV] = json.dumps(known | {name: path})
    return name, path
