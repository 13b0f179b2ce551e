"""The external clients lockcompare ships, registered by name like the built-ins (entry points
``node-redlock = "lockcompare.backends.external.shipped:NodeRedlock"``…).

Their manifests and code live in the source tree's ``clients/`` directory (``clients/node/``, with
its committed package-lock.json), or in ``$LOCKCOMPARE_CLIENTS_DIR``. Each class is built from its
manifest on first use; where the directory, ``node`` or the installed ``node_modules`` are missing,
the backend is listed as not viable with the one command that installs it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import ClassVar

from lockcompare.backends.external import manifest_backend
from lockcompare.errors import BackendNotViableError

#: Entry-point attribute -> manifest, relative to the clients directory.
SHIPPED = {
    "NodeRedlock": "node/redlock.toml",
    "NodeSesameUsing": "node/sesame-using.toml",
    "NodeSesameUsingChecked": "node/sesame-using-checked.toml",
    "NodeSemaphoreMutex": "node/semaphore-mutex.toml",
    "NodeSemaphoreRedlock": "node/semaphore-redlock.toml",
    "EtcdGoMutex": "go/etcd-go-mutex.toml",
    "EtcdGoFenced": "go/etcd-go-fenced.toml",
    "CuratorMutex": "java/curator-mutex.toml",
    "CuratorMutexChecked": "java/curator-mutex-checked.toml",
}

ENV_CLIENTS_DIR = "LOCKCOMPARE_CLIENTS_DIR"


def clients_dir() -> Path:
    explicit = os.environ.get(ENV_CLIENTS_DIR)
    if explicit:
        return Path(explicit).expanduser().resolve()
    return Path(__file__).resolve().parents[4] / "clients"  # src/lockcompare/backends/external/ -> repo


def __getattr__(name: str) -> type:
    relative = SHIPPED.get(name)
    if relative is None:
        raise AttributeError(name)
    path = clients_dir() / relative
    if not path.is_file():
        return _missing(name, path)
    return manifest_backend(str(path))


def _missing(name: str, path: Path) -> type:
    class Missing:
        summary: ClassVar[str] = f"shipped external client {name} (manifest not found)"
        exclusive: ClassVar[bool] = True
        issues_fencing_tokens: ClassVar[bool] = False

        @classmethod
        def check_viable(cls) -> None:
            raise BackendNotViableError(
                f"shipped client {name} is not viable here: {path} not found (the clients live in lockcompare's "
                f"source tree; set {ENV_CLIENTS_DIR} to its clients/ directory)"
            )

        def acquire(self) -> None: ...
        def release(self) -> None: ...
        def close(self) -> None: ...

    return Missing
