"""Install the shipped lock clients where lockcompare finds them (``lockcompare clients install``).

The target is where :mod:`.locate` looks: ``$LOCKCOMPARE_CLIENTS_DIR``, the checkout's ``clients/``
(installed in place), else the per-user cache, into which the sources this installation carries are
copied first. Then, per client, what it needs on this machine: ``npm ci`` for Node (the committed
lock file, so every machine runs the same package versions), the Go and Java builds by their own
``build.sh`` (offline, from Debian's packages). A client whose toolchain is absent is skipped with
what to install; that is not a failure.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from lockcompare.backends.external.locate import (
    ENV_CLIENTS_DIR,
    STAMP,
    cache_dir,
    locate,
    packaged_sources,
    source_files,
    write_stamp,
)
from lockcompare.errors import BackendNotViableError, InvalidValueError, WriteError
from lockcompare.infra.child_run import run_child

CLIENTS = ("node", "go", "java", "python")
#: What each client's toolchain is, and how to get it (Debian's packages, as the manifests say).
TOOLS = {
    "node": (("node", "npm"), "apt-get install -y nodejs npm"),
    "go": (("go",), "apt-get install -y golang-go golang-etcd-server-dev"),
    "java": (("javac", "jar"), "apt-get install -y default-jdk-headless libcurator-recipes-java"),
}
STEP_TIMEOUT_S = 900.0


@dataclass(frozen=True)
class Step:
    """What was done for one client: ``status`` is "done", "skipped" (a toolchain is absent) or "failed"."""

    client: str
    status: str
    detail: str

    def line(self) -> str:
        return f"{self.client:<7}{self.status:<8} {self.detail}"


def install_target() -> tuple[Path, str]:
    where = locate()
    if where.origin in (f"${ENV_CLIENTS_DIR}", "the source tree"):
        return where.directory, where.origin
    return cache_dir(), "the per-user cache"


def install_clients(*, only: Sequence[str] = (), revision: str = "") -> tuple[Path, str, list[Step]]:
    """Copy (unless the target is the checkout itself) and install or build each client; the target,
    why it was chosen, and one :class:`Step` per client."""
    unknown = sorted(set(only) - set(CLIENTS))
    if unknown:
        raise InvalidValueError(f"unknown client(s) {', '.join(unknown)}: choose from {', '.join(CLIENTS)}")
    sources = packaged_sources()
    if sources is None:
        raise BackendNotViableError(
            "this lockcompare installation carries no client sources (a build without lockcompare/_clients): "
            f"reinstall from a wheel built by setup.py, or set {ENV_CLIENTS_DIR} to a checkout's clients/"
        )
    target, origin = install_target()
    if target.resolve() != sources.resolve():
        _copy(sources, target)
        try:
            write_stamp(target, sources=sources, revision=revision)
        except OSError as exc:
            raise WriteError(f"cannot install {target / STAMP}: {exc.strerror or exc}") from None
    steps = [_install_one(client, target / client) for client in CLIENTS if not only or client in only]
    return target, origin, steps


def _copy(sources: Path, target: Path) -> None:
    """Copy the source files over the target; what was installed there (node_modules, build/) stays for
    npm ci and the builds to refresh. Each file is written beside its destination and renamed over
    it, so a full disk leaves no half-copied file; the error names the destination (it named the
    checkout's source, issue 49)."""
    for relative in source_files(sources):
        destination = target / relative
        partial = destination.with_name(f".{destination.name}.{os.getpid()}.part")
        try:
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(sources / relative, partial)
            partial.replace(destination)
        except OSError as exc:
            with contextlib.suppress(OSError):
                partial.unlink()
            raise WriteError(f"cannot install {destination}: {exc.strerror or exc}") from None


def _install_one(client: str, directory: Path) -> Step:
    if not directory.is_dir():
        return Step(client, "skipped", f"{directory} not found")
    if client == "python":
        return Step(client, "done", f"nothing to install (stdlib only): --backend {directory / 'refclient.toml'}")
    programs, package = TOOLS[client]
    absent = [p for p in programs if shutil.which(p) is None]
    if absent:
        return Step(client, "skipped", f"{', '.join(absent)} not found: {package}")
    if client == "node":
        command = ["npm", "ci", "--no-audit", "--no-fund", "--prefer-offline"]
    else:
        command = ["bash", "build.sh"]  # run in its directory: it builds beside itself
    try:  # a Ctrl-C, SIGTERM or SIGHUP ends the step's whole process group at once (issue 49)
        done = run_child(command, cwd=directory, timeout_s=STEP_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Step(client, "failed", f"{' '.join(command)} in {directory}: {exc}")
    said = _last_line(done.stdout) if done.returncode == 0 else _last_line(done.stderr) or _last_line(done.stdout)
    if done.returncode == 0:
        return Step(client, "done", f"{' '.join(command[:2])} in {directory}: {said}")
    # build.sh names a missing Debian package with the apt-get line that installs it: a skip, not a failure.
    status = "skipped" if "apt-get install" in said else "failed"
    return Step(client, status, f"{' '.join(command[:2])} in {directory} (exit {done.returncode}): {said}")


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""
