"""External lock clients: a backend that is a command line in any language, described by a manifest.

``--backend path/to/client.toml`` (anything ending in ``.toml``) builds an ordinary backend class
from the manifest (:mod:`.manifest`); the shipped Node clients are also registered by name
(``node-redlock``…, :mod:`.shipped`). The protocol the command speaks is in docs/clients.md.
"""

from __future__ import annotations

import functools
from pathlib import Path

from lockcompare.backends.external.backend import ExternalBackend, backend_class
from lockcompare.backends.external.manifest import Manifest, is_manifest_spec, load_manifest


def manifest_backend(spec: str) -> type[ExternalBackend]:
    """The backend class for the manifest at ``spec`` (one class per file and process)."""
    path = Path(spec).expanduser().resolve()
    try:
        mtime = path.stat().st_mtime_ns
    except OSError:
        mtime = 0  # load_manifest says what is wrong with it
    return _cached(str(path), mtime)


@functools.lru_cache(maxsize=64)
def _cached(path: str, mtime: int) -> type[ExternalBackend]:
    del mtime  # part of the cache key only: an edited manifest is read again
    return backend_class(load_manifest(path))


__all__ = ["ExternalBackend", "Manifest", "backend_class", "is_manifest_spec", "load_manifest", "manifest_backend"]
