"""An external client's manifest: a small TOML file that makes a command line a lockcompare backend.

The manifest says what to run, which protocol it speaks (docs/clients.md), what the lock claims,
which servers it needs and where its key lives on a node (so that ``nodes=holders:K`` fault steps
can find the holder's nodes). Everything else — the round loop, the resource, the history — stays
in the Python worker; only the lock calls cross the pipe. A complete manifest::

    protocol = 1
    name = "node-redlock"
    summary = "npm redlock 4.2.0: Lua SET PX on every node, quorum N/2+1, no extension"
    command = ["node", "redlock4.js"]     # run in this file's directory
    requires = ["node_modules/redlock"]   # paths (beside this file) that must exist, else not viable
    install = "npm ci --prefix clients/node"
    servers = "redis"                     # the lock nodes it needs
    # client_timeout_s = 2.0              # the library's own request timeout, if it has one
    # reply_timeout_s = 3.0               # how long a reply may take before it counts as late
    # min_ttl_ms = 600                    # the shortest TTL the library accepts
    # ttl_step_ms = 1000                  # TTLs must be multiples of this (etcd leases: whole seconds)
    # expiry_lag_ms = 600                 # how late after its TTL the server may end a lease
    # session_timeout_is_ttl = false      # a session lock whose server ends it after a TTL of silence
    # lease_znodes = "{path}"             # ZooKeeper: where the lease's znodes are ({path}: /lockcompare/<key>)
    # unavailable_under = ["crash"]       # fault kinds that leave the lock without a server by design
    # connects_to_every_node = false      # its client is connected to every lock node at once

    [claims]
    exclusive = true
    issues_fencing_tokens = false
    survives_minority_loss = true
    renews = false          # the library extends the lease by itself ("events" reports it)
    checks_lease = false    # the worker asks "check" right before its write
    has_ttl = true

    [key]
    pattern = "{key}"       # where the lock lives on a node; {key} is the harness's key
    type = "string"         # "string" (its value is the owner) or "hash" (its field is the owner)

Parsing is strict: an unknown field, a wrong type or a missing claim is one
:class:`~lockcompare.errors.BackendLoadError` line naming the file and the field.

>>> m = parse_manifest('''
... protocol = 1
... name = "demo"
... summary = "a demo client"
... command = ["python3", "demo.py"]
... [claims]
... exclusive = true
... issues_fencing_tokens = false
... ''', source=Path("/tmp/demo.toml"))
>>> m.name, m.command, m.claims.renews, m.key.pattern
('demo', ('python3', 'demo.py'), False, '*{key}')
"""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lockcompare.backends.base import DEFAULT_KEY_PATTERN, Traits
from lockcompare.errors import BackendLoadError
from lockcompare.files import read_capped
from lockcompare.infra.kinds import protocols_spoken

#: A manifest is a page of TOML; anything larger is not one.
MANIFEST_MAX_BYTES = 256 * 1024

#: The protocol versions this lockcompare speaks (docs/clients.md).
PROTOCOL_VERSIONS = (1,)

KEY_TYPES = ("string", "hash")


#: What the lock says of itself (``[claims]``): these fields of its traits record, each a bool with
#: the record's default; the battery checks each claim (a hypothesis, not a fact).
CLAIM_NAMES = ("exclusive", "issues_fencing_tokens", "survives_minority_loss", "renews", "checks_lease", "has_ttl")


@dataclass(frozen=True, kw_only=True)
class KeyLocation:
    """Where the lock lives on a lock node: a Redis glob with ``{key}`` standing for the harness's
    key (escaped when used), and what the key holds: ``string`` (the owner token is its value) or
    ``hash`` (the owner token is its field, Redisson-style ``HSET key <owner> 1``)."""

    pattern: str = DEFAULT_KEY_PATTERN
    type: str = "string"


@dataclass(frozen=True, kw_only=True)
class Manifest:
    path: Path
    protocol: int
    name: str
    summary: str
    command: tuple[str, ...]
    #: The ``[claims]`` table as a traits record (its other fields default; :meth:`traits` has them all).
    claims: Traits
    key: KeyLocation = field(default_factory=KeyLocation)
    servers: str = "redis"
    requires: tuple[str, ...] = ()
    install: str = ""
    client_timeout_s: float | None = None
    reply_timeout_s: float | None = None
    min_ttl_ms: int = 0
    ttl_step_ms: int = 0
    expiry_lag_ms: int = 0
    #: A session lock (``has_ttl = false``) whose client sets its session timeout to the TTL: the server
    #: ends the session, and the lock, once it has not heard from the client for that long (ZooKeeper).
    session_timeout_is_ttl: bool = False
    #: ZooKeeper: the path whose ephemeral children are the lease's znodes, with ``{key}`` or ``{path}``
    #: (``lock_path(key)``: ``/lockcompare/<key>``), as a Python backend's ``lease_znodes``; None: kazoo's
    #: Lock layout (``<path>/…__lock__<seq>``), which Curator's InterProcessMutex shares.
    lease_znodes: str | None = None
    #: The fault kinds that leave the lock without a server by design (the trait of that name).
    unavailable_under: tuple[str, ...] = ()
    #: Its client is connected to every lock node at once (the trait of that name): no ``holder-member``.
    connects_to_every_node: bool = False

    def traits(self) -> Traits:
        """Everything the manifest declares about the lock, as the record a Python backend's class gives."""
        return dataclasses.replace(
            self.claims,
            summary=self.summary,
            servers=self.servers,
            client_timeout_s=self.client_timeout_s,
            min_ttl_ms=self.min_ttl_ms,
            ttl_step_ms=self.ttl_step_ms,
            expiry_lag_ms=self.expiry_lag_ms,
            key_pattern=self.key.pattern,
            key_type=self.key.type,
            session_timeout_is_ttl=self.session_timeout_is_ttl,
            lease_znodes=self.lease_znodes,
            unavailable_under=self.unavailable_under,
            connects_to_every_node=self.connects_to_every_node,
            external=True,
        )

    @property
    def directory(self) -> Path:
        """Where the command runs and ``requires`` paths are looked up: the manifest's directory."""
        return self.path.parent


_TOP = {
    "protocol": int,
    "name": str,
    "summary": str,
    "command": list,
    "servers": str,
    "requires": list,
    "install": str,
    "client_timeout_s": float,
    "reply_timeout_s": float,
    "min_ttl_ms": int,
    "ttl_step_ms": int,
    "expiry_lag_ms": int,
    "session_timeout_is_ttl": bool,
    "lease_znodes": str,
    "unavailable_under": list,
    "connects_to_every_node": bool,
    "claims": dict,
    "key": dict,
}
_REQUIRED_TOP = ("protocol", "name", "summary", "command", "claims")
_CLAIMS = {name: bool for name in CLAIM_NAMES}
_REQUIRED_CLAIMS = ("exclusive", "issues_fencing_tokens")
_KEY = {"pattern": str, "type": str}


def load_manifest(path: str | Path) -> Manifest:
    """Read and check the manifest at ``path`` (one :class:`BackendLoadError` line if it is not one)."""
    source = Path(path).expanduser().resolve()
    # Read as bytes and decoded here: a manifest in another encoding was a UnicodeDecodeError traceback
    # (issue 38); a device or a huge file is refused by the cap.
    data = read_capped(source, limit=MANIFEST_MAX_BYTES, error=BackendLoadError)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BackendLoadError(
            f"client manifest {path}: not UTF-8 text (byte {exc.start}: {data[exc.start : exc.start + 1]!r}); "
            "a manifest is TOML, which is UTF-8"
        ) from None
    return parse_manifest(text, source=source)


def parse_manifest(text: str, *, source: Path) -> Manifest:
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise BackendLoadError(f"client manifest {source}: not TOML: {exc}") from None
    where = f"client manifest {source}"
    _check_fields(raw, _TOP, _REQUIRED_TOP, where=where)
    claims_raw = raw["claims"]
    _check_fields(claims_raw, _CLAIMS, _REQUIRED_CLAIMS, where=f"{where} [claims]")
    key_raw = raw.get("key", {})
    _check_fields(key_raw, _KEY, (), where=f"{where} [key]")
    if raw["protocol"] not in PROTOCOL_VERSIONS:
        known = ", ".join(map(str, PROTOCOL_VERSIONS))
        raise BackendLoadError(f"{where}: protocol {raw['protocol']} is not one this lockcompare speaks ({known})")
    command = raw["command"]
    if not command or not all(isinstance(part, str) and part for part in command):
        raise BackendLoadError(f"{where}: command must be a non-empty list of non-empty strings")
    requires = raw.get("requires", [])
    if not all(isinstance(part, str) for part in requires):
        raise BackendLoadError(f"{where}: requires must be a list of paths (strings)")
    key = KeyLocation(**key_raw)
    if "{key}" not in key.pattern:
        raise BackendLoadError(f"{where} [key]: pattern {key.pattern!r} must contain {{key}} (the harness's key)")
    if key.type not in KEY_TYPES:
        raise BackendLoadError(f"{where} [key]: type {key.type!r} is not one of {', '.join(KEY_TYPES)}")
    servers = raw.get("servers", "redis")
    spoken = protocols_spoken()  # the installed kinds' (a plug-in kind's own protocol too)
    if servers not in spoken:
        raise BackendLoadError(f"{where}: servers {servers!r} is not one of {', '.join(spoken)}")
    for name in ("client_timeout_s", "reply_timeout_s"):
        if name in raw and not raw[name] > 0:
            raise BackendLoadError(f"{where}: {name} must be positive, got {raw[name]}")
    for name in ("min_ttl_ms", "ttl_step_ms", "expiry_lag_ms"):
        if raw.get(name, 0) < 0:
            raise BackendLoadError(f"{where}: {name} must not be negative")
    if raw.get("session_timeout_is_ttl") and raw["claims"].get("has_ttl", True):
        raise BackendLoadError(
            f"{where}: session_timeout_is_ttl is for a session lock: it needs [claims] has_ttl = false"
        )
    lease_znodes = raw.get("lease_znodes")
    if lease_znodes is not None and servers != "zookeeper":
        raise BackendLoadError(f'{where}: lease_znodes is for a ZooKeeper lock: it needs servers = "zookeeper"')
    if lease_znodes is not None and not (lease_znodes.startswith("/") or lease_znodes.startswith("{path}")):
        raise BackendLoadError(
            f"{where}: lease_znodes {lease_znodes!r} must be a znode path (/…, with {{key}}) or begin with {{path}}"
        )
    unavailable_under = raw.get("unavailable_under", [])
    if not all(isinstance(kind, str) and kind for kind in unavailable_under):
        raise BackendLoadError(f"{where}: unavailable_under must be a list of fault kind names (strings)")
    if not raw["name"].strip() or not raw["summary"].strip():
        raise BackendLoadError(f"{where}: name and summary must not be empty")
    return Manifest(
        path=source,
        protocol=raw["protocol"],
        name=raw["name"].strip(),
        summary=raw["summary"].strip(),
        command=tuple(command),
        claims=Traits(**claims_raw),
        key=key,
        servers=servers,
        requires=tuple(requires),
        install=raw.get("install", ""),
        client_timeout_s=_float_or_none(raw.get("client_timeout_s")),
        reply_timeout_s=_float_or_none(raw.get("reply_timeout_s")),
        min_ttl_ms=raw.get("min_ttl_ms", 0),
        ttl_step_ms=raw.get("ttl_step_ms", 0),
        expiry_lag_ms=raw.get("expiry_lag_ms", 0),
        session_timeout_is_ttl=raw.get("session_timeout_is_ttl", False),
        lease_znodes=lease_znodes,
        unavailable_under=tuple(unavailable_under),
        connects_to_every_node=raw.get("connects_to_every_node", False),
    )


def _float_or_none(value: Any) -> float | None:
    return None if value is None else float(value)


def _check_fields(raw: dict[str, Any], kinds: Mapping[str, type], required: tuple[str, ...], *, where: str) -> None:
    unknown = sorted(set(raw) - set(kinds))
    if unknown:
        raise BackendLoadError(f"{where}: unknown field {unknown[0]!r} (known: {', '.join(sorted(kinds))})")
    missing = [name for name in required if name not in raw]
    if missing:
        raise BackendLoadError(f"{where}: {missing[0]!r} is missing")
    for name, value in raw.items():
        kind = kinds[name]
        # TOML's integers are fine where a float is expected; a bool is never a number here.
        ok = (
            isinstance(value, (int, float)) and not isinstance(value, bool)
            if kind is float
            else isinstance(value, kind)
        )
        if kind is int and isinstance(value, bool):
            ok = False
        if not ok:
            raise BackendLoadError(f"{where}: {name} is {value!r}, expected {_kind_name(kind)}")


def _kind_name(kind: type) -> str:
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string", list: "a list"}.get(
        kind, "a table"
    )


def is_manifest_spec(spec: str) -> bool:
    """Is this ``--backend`` value a manifest path rather than a name or ``module:Class``?"""
    return spec.endswith(".toml")
