"""The external clients lockcompare ships, registered by name like the built-ins (entry points
``node-redlock = "lockcompare.backends.external.shipped:NodeRedlock"``…).

Their manifests and code are found as :mod:`.locate` says: ``$LOCKCOMPARE_CLIENTS_DIR``, the source
tree's ``clients/``, or the per-user cache that ``lockcompare clients install`` fills (an installed
wheel carries their sources, and that command installs their dependencies and builds them). Each
class is built from its manifest on first use; where the clients are not installed, or ``node``,
``node_modules`` or a build are missing, the backend is listed as not viable with the command that
installs it.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from lockcompare.backends.external import manifest_backend
from lockcompare.backends.external.locate import ENV_CLIENTS_DIR, INSTALL_COMMAND, locate
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


def clients_dir() -> Path:
    """Where the shipped clients are looked for (the per-user cache, even when nothing is installed there)."""
    return locate().directory


def __getattr__(name: str) -> type:
    relative = SHIPPED.get(name)
    if relative is None:
        raise AttributeError(name)
    where = locate()
    path = where.directory / relative
    if where.problem:
        return _missing(name, where.problem)
    if not path.is_file():
        return _missing(name, f"{path} not found (clients from {where.origin}; run `{INSTALL_COMMAND}`)")
    return manifest_backend(str(path))


def _missing(name: str, problem: str) -> type:
    class Missing:
        summary: ClassVar[str] = f"shipped external client {name} (not installed)"
        exclusive: ClassVar[bool] = True
        issues_fencing_tokens: ClassVar[bool] = False

        @classmethod
        def check_viable(cls) -> None:
            raise BackendNotViableError(f"shipped client {name} is not viable here: {problem}")

        def acquire(self) -> None: ...
        def release(self) -> None: ...
        def close(self) -> None: ...

    return Missing


__all__ = ["ENV_CLIENTS_DIR", "SHIPPED", "clients_dir"]
