"""Finding backends: built-ins and plug-ins by entry point, anything else by ``module:Class``.

Built-ins are declared in ``pyproject.toml`` under ``[project.entry-points."lockcompare.backends"]``
exactly as a third-party package declares its own, so both are listed and loaded the same way.
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points

from lockcompare.backends.base import (
    TRAIT_KINDS,
    BackendConfig,
    Lease,
    LockBackend,
    Refusal,
    Traits,
    declared_traits,
    trait_problems,
    traits_of,
)
from lockcompare.errors import BackendLoadError, BackendNotViableError, UnknownNameError

ENTRY_POINT_GROUP = "lockcompare.backends"

_REQUIRED = ("acquire", "release", "close")


@dataclass(frozen=True)
class BackendInfo:
    name: str
    target: str  # "module:Class"
    summary: str  # empty when the backend could not be loaded
    problem: str  # why it is not viable here, or ""


#: Where a ``package.module:Class`` that is not installed may live, besides the current directory.
PLUGIN_PATH_HINT = "is it installed, or importable from the current directory or a --plugin-path DIR?"


def add_plugin_paths(
    *, first: Sequence[str | os.PathLike[str]] = (), last: Sequence[str | os.PathLike[str]] = ()
) -> None:
    """Make ``package.module:Class`` plug-ins importable from directories that are not installed.

    ``first`` goes before the installed packages (``--plugin-path``: the user named it), ``last``
    after them (the current directory: a stray ``redis.py`` there must not shadow redis-py).
    Workers and the battery's backend host are *spawned* interpreters, which start with a copy of
    the runner's ``sys.path``, so a plug-in found here is found there too.
    """
    for directory in reversed([os.path.abspath(d) for d in first]):
        if directory in sys.path:
            sys.path.remove(directory)
        sys.path.insert(0, directory)
    for directory in (os.path.abspath(d) for d in last):
        if directory not in sys.path:
            sys.path.append(directory)


#: The class attributes every backend must declare (see base.LockBackend); the optional ones, when
#: given, must be of their kind too (base.TRAIT_KINDS: a has_ttl = "no" would be read as a TTL).
_REQUIRED_TRAITS = ("summary", "exclusive", "issues_fencing_tokens")


def declaration_problems(declared: object) -> list[str]:
    """What is wrong with what a backend declares about itself, one phrase per attribute ([] if
    nothing). ``declared`` is the class, or anything with the same attributes (the battery's
    ``Claims``, read in its backend host). The one rule for ``run``/``matrix`` (which refuse such
    a backend) and the battery's ``declares_the_protocol``.

    >>> class Bare:
    ...     exclusive = "yes"
    >>> for problem in declaration_problems(Bare):
    ...     print(problem)
    summary is missing (a non-empty str)
    exclusive is 'yes', expected a bool
    issues_fencing_tokens is missing (a bool)
    """
    declared_now = declared_traits(declared)
    problems = []
    for name in _REQUIRED_TRAITS:
        kind, ok = TRAIT_KINDS[name]
        value = declared_now.pop(name, None)
        if value is None:
            problems.append(f"{name} is missing ({kind})")
        elif not ok(value):
            problems.append(f"{name} is {value!r}, expected {kind}")
    problems += trait_problems(declared_now)
    return problems


def require_declarations(cls: type, *, name: str) -> None:
    """Refuse (one line, :class:`BackendLoadError`) a backend class that does not declare what it
    claims: a lock that says nothing would otherwise be measured and judged as if it were one."""
    problems = declaration_problems(cls)
    if problems:
        raise BackendLoadError(
            f"backend {name!r} does not declare itself: {'; '.join(problems)} "
            "(see lockcompare.backends.base.LockBackend)"
        )


def _registered() -> tuple[EntryPoint, ...]:
    """The group's entry points, read once per state of ``sys.path``.

    ``entry_points()`` parses every installed distribution's metadata on each call (a few ms, and
    it was called several times per trial: py-spy, issue 30). The key is each ``sys.path`` entry
    with its modification time, so a ``--plugin-path`` added, or a package installed since, is seen.
    """
    key = tuple((entry, _mtime_ns(entry)) for entry in sys.path)
    cached = _REGISTERED.get(key)
    if cached is None:
        cached = tuple(entry_points(group=ENTRY_POINT_GROUP))
        _REGISTERED.clear()  # one state of sys.path at a time
        _REGISTERED[key] = cached
    return cached


_REGISTERED: dict[tuple[tuple[str, int], ...], tuple[EntryPoint, ...]] = {}


def _mtime_ns(path: str) -> int:
    try:
        return os.stat(path or ".").st_mtime_ns
    except OSError:
        return -1


def registered_names() -> list[str]:
    """Names registered under the entry-point group, sorted."""
    return sorted({ep.name for ep in _registered()})


def load_backend(spec: str, *, check_viable: bool = True) -> type[LockBackend]:
    """The backend class for a registered name, a ``package.module:Class`` spec, or the path of an
    external client's manifest (``*.toml``: see :mod:`lockcompare.backends.external`).

    Raises :class:`UnknownNameError` for an unknown name, :class:`BackendLoadError` for a spec that
    does not resolve to a backend, :class:`BackendNotViableError` when its library is missing.
    ``check_viable=False`` is for planning, which reads a backend's declarations but runs nothing:
    a committed file's cells can be planned on a machine that lacks their clients (planning is not
    running). A registered backend whose module cannot be imported here is not viable either way.
    """
    spec = spec.strip()
    cls: type[LockBackend]
    if spec.endswith(".toml"):  # an external client's manifest (docs/clients.md)
        from lockcompare.backends.external import manifest_backend

        cls = manifest_backend(spec)
    elif ":" in spec:
        cls = _import_target(spec)
    else:
        from lockcompare.backends.external import manifest_backend
        from lockcompare.backends.external.named import manifest_path

        matches = [ep for ep in _registered() if ep.name == spec]
        path = None if matches else manifest_path(spec)  # a manifest this run knows by its name
        if matches:
            cls = _import_target(matches[0].value, name=spec)
        elif path is not None:
            cls = manifest_backend(path)
        else:
            known = ", ".join(registered_names()) or "none registered"
            raise UnknownNameError(f"unknown backend {spec!r} (known: {known}; or give package.module:Class)")
    missing = [attr for attr in _REQUIRED if not callable(getattr(cls, attr, None))]
    if missing:
        raise BackendLoadError(f"{spec}: {cls!r} is not a lock backend (missing {', '.join(missing)})")
    check = getattr(cls, "check_viable", None)
    if check_viable and callable(check):
        check()
    if check_viable:
        _check_servers(cls)
    return cls


def backend_name(spec: str) -> tuple[str, str]:
    """The name a backend is shown and identified by (rows, tables, trial ids, history files), and
    where it loads from when the name alone does not say ("" when it does).

    A manifest given by its path is its manifest's ``name`` (backends/external/named.py), remembered
    for this run; a registered name or a ``module:Class`` is itself. A manifest whose name is not a
    plain name (letters, digits, ``.-_``) keeps its path, as does every backend before schema 10.
    """
    spec = spec.strip()
    if not spec.endswith(".toml"):
        return spec, ""
    from lockcompare.backends.external import manifest_backend
    from lockcompare.backends.external.named import plain_name, remember

    manifest = manifest_backend(spec).manifest
    if not plain_name(manifest.name):
        return spec, ""
    if manifest.name in registered_names():
        shipped = getattr(load_backend(manifest.name, check_viable=False), "manifest", None)
        if shipped is not None and shipped.path == manifest.path:
            return manifest.name, ""  # the shipped client's own manifest: the registered backend itself
        raise BackendLoadError(
            f"client manifest {manifest.path} is named {manifest.name!r}, a registered backend's name: rows could "
            "not tell them apart; give it a name of its own"
        )
    return remember(spec)


def _check_servers(cls: type[LockBackend]) -> None:
    """Refuse a backend whose lock servers cannot run here: whatever language its client is in,
    its locks live on them (a Java client on ZooKeeper still needs the harness's own ZooKeeper
    client to clean up and read holders)."""
    protocol = traits_of(cls).servers
    problem = _servers_problem(protocol)
    if problem:
        raise BackendNotViableError(f"its {protocol} servers cannot run here: {problem}")


@functools.cache
def _servers_problem(protocol: str) -> str:
    """ "" when some kind speaking ``protocol`` can run here, else the first kind's one line."""
    from lockcompare.infra.kinds import kinds_speaking

    problems = [kind.problem() for kind in kinds_speaking(protocol)]
    return "" if not problems or "" in problems else problems[0]


#: How long a plug-in's import may take in the probe (a real one takes well under a second).
PLUGIN_IMPORT_TIMEOUT_S = 15.0
#: Modules already probed by this run: spawned workers inherit it and do not probe again.
PROBED_ENV = "LOCKCOMPARE_PROBED_PLUGINS"

#: The probe: import the module, and say in the result file how that ended. Whatever the import
#: does to its process (sys.exit, os._exit, a hang, a fork) happens to the probe's, not to ours.
_PROBE = """
import importlib, json, os, sys
out, name = sys.argv[1], sys.argv[2]
sys.path[:] = json.loads(sys.argv[3])
def say(text):
    with open(out, "w") as fh:
        fh.write(text)
try:
    importlib.import_module(name)
except SystemExit as exc:
    say(f"called sys.exit({exc.code!r}) while being imported")
    os._exit(0)
except BaseException:
    say("raised")  # the real import says what
    os._exit(0)
say("ok")
os._exit(0)
"""


def probe_import(module_name: str, *, label: str, timeout_s: float = PLUGIN_IMPORT_TIMEOUT_S) -> None:
    """Import ``module_name`` first in a child process with a time limit; raise one
    :class:`BackendLoadError` line when that import exits the process, hangs, or leaves a process
    running. Only then is it imported here. A plain exception is left for the real import to report."""
    import json
    import signal
    import subprocess
    import tempfile
    import time

    probed = set(filter(None, os.environ.get(PROBED_ENV, "").split(",")))
    if module_name in probed or module_name in sys.modules:
        return
    fd, result = tempfile.mkstemp(prefix="lockcompare-probe-")
    os.close(fd)
    try:
        # No pipes: a process the import forks would hold them open. Its own session: whatever it
        # forks stays in the probe's process group, which is killed at the end.
        proc = subprocess.Popen(
            [sys.executable, "-c", _PROBE, result, module_name, json.dumps(sys.path)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        try:
            code: int | None = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            code = None
        except BaseException:
            _kill_group(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
        time.sleep(0.05)  # a child forked just before the exit gets to appear in the group
        left = _kill_group(proc.pid, signal.SIGKILL)
        if left:  # a SIGKILL is sent, not awaited: "stopped it" is said once the processes are gone
            _wait_group_gone(proc.pid)
        if code is None:
            proc.wait()
            raise BackendLoadError(
                f"backend {label!r}: importing {module_name!r} did not finish within {timeout_s:g} s (stopped it)"
            )
        with open(result, encoding="utf-8", errors="replace") as fh:
            said = fh.read()
    finally:
        os.unlink(result)
    if left:
        raise BackendLoadError(
            f"backend {label!r}: importing {module_name!r} started a process that kept running (stopped it): "
            "a plug-in must not leave processes behind"
        )
    if not said:
        how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
        raise BackendLoadError(
            f"backend {label!r}: the process importing {module_name!r} {how} before the import ended"
        )
    if said not in ("ok", "raised"):
        raise BackendLoadError(f"backend {label!r}: {module_name!r} {said} (a plug-in must not exit lockcompare)")
    os.environ[PROBED_ENV] = ",".join(sorted(probed | {module_name}))


def _wait_group_gone(pgid: int, *, timeout_s: float = 2.0) -> None:
    """Wait (at most ``timeout_s``) until no live process is left in the group ``pgid``; a zombie
    has exited. CI's bare tier once found a killed process of a probe still running after it."""
    import time

    from lockcompare.infra.procgroup import group_members, process_table

    deadline = time.monotonic() + timeout_s
    while group_members(pgid, process_table()) and time.monotonic() < deadline:
        time.sleep(0.01)


def _kill_group(pgid: int, sig: int) -> bool:
    """Signal the process group ``pgid``; True when some process was still in it."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _import_target(target: str, *, name: str | None = None) -> type[LockBackend]:
    module_name, _, attr = target.partition(":")
    label = name or target
    if not module_name or not attr:
        raise BackendLoadError(f"backend spec {target!r} must look like package.module:Class")
    if not module_name.startswith("lockcompare."):  # a plug-in: its import is probed first
        probe_import(module_name, label=label)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if name is not None:  # a registered backend whose library is not installed
            raise BackendNotViableError(f"backend {label!r} is not viable here: {exc}") from None
        raise BackendLoadError(
            f"backend {label!r}: cannot import {module_name!r}: {exc} ({PLUGIN_PATH_HINT})"
        ) from None
    except Exception as exc:  # noqa: BLE001 - a plug-in's import-time failure must not become a traceback
        raise BackendLoadError(f"backend {label!r}: importing {module_name!r} failed: {exc!r}") from None
    try:
        obj = module
        for part in attr.split("."):
            obj = getattr(obj, part)
    except AttributeError:
        raise BackendLoadError(f"backend {label!r}: {module_name!r} has no attribute {attr!r}") from None
    if not isinstance(obj, type):
        raise BackendLoadError(f"backend {label!r}: {target} is not a class")
    return obj


def describe_backends() -> list[BackendInfo]:
    """Every registered backend, with its summary or the reason it cannot be used here."""
    infos = []
    for ep in sorted(_registered(), key=lambda e: e.name):
        try:
            cls = load_backend(ep.name)
            infos.append(BackendInfo(ep.name, ep.value, traits_of(cls).summary, ""))
        except (BackendLoadError, BackendNotViableError) as exc:
            infos.append(BackendInfo(ep.name, ep.value, "", str(exc)))
    return infos


__all__ = [
    "BackendConfig",
    "BackendInfo",
    "Lease",
    "LockBackend",
    "Refusal",
    "Traits",
    "add_plugin_paths",
    "backend_name",
    "declaration_problems",
    "describe_backends",
    "load_backend",
    "registered_names",
    "require_declarations",
    "traits_of",
]
