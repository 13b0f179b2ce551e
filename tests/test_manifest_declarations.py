"""An external client declares what a Python plug-in declares (issue 48.4): where its ZooKeeper
lease lives (``lease_znodes``) and which faults leave it without a server (``unavailable_under``),
read through the same traits record the harness asks. No server: manifests are parsed, not run."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from lockcompare.backends import traits_of
from lockcompare.backends.external.backend import backend_class
from lockcompare.backends.external.manifest import Manifest, parse_manifest
from lockcompare.errors import BackendLoadError
from lockcompare.faults.plan import with_lease_declaration
from lockcompare.faults.steps import PlannedStep

HEAD = """
protocol = 1
name = "zk-semaphore"
summary = "a Curator semaphore of one lease"
command = ["java", "-jar", "client.jar"]
"""
CLAIMS = """
[claims]
exclusive = true
issues_fencing_tokens = false
has_ttl = false
"""


def _manifest(extra: str) -> Manifest:
    return parse_manifest(HEAD + extra + CLAIMS, source=Path("/tmp/zk-semaphore.toml"))


@dataclasses.dataclass(frozen=True)
class _Kill:
    """A fault with a ``lease_znodes`` field, as session-kill's: the plan fills it from the traits."""

    lease_znodes: object = None


def test_lease_znodes_reaches_the_traits_the_fault_steps_read() -> None:
    cls = backend_class(_manifest('servers = "zookeeper"\nlease_znodes = "{path}/leases"\n'))
    assert traits_of(cls).lease_znodes == "{path}/leases"
    step = PlannedStep(index=0, step=None, build=lambda worker: _Kill())  # type: ignore[arg-type]
    [declared] = with_lease_declaration([step], backend=cls)
    assert declared.build(None).lease_znodes == "{path}/leases"  # type: ignore[attr-defined]


def test_lease_znodes_is_refused_for_a_lock_not_on_zookeeper_and_for_a_bad_path() -> None:
    with pytest.raises(BackendLoadError, match="lease_znodes is for a ZooKeeper lock"):
        _manifest('servers = "redis"\nlease_znodes = "{path}"\n')
    with pytest.raises(BackendLoadError, match="must be a znode path"):
        _manifest('servers = "zookeeper"\nlease_znodes = "leases/{key}"\n')


def test_a_manifest_without_it_keeps_the_default_layout() -> None:
    assert traits_of(backend_class(_manifest('servers = "zookeeper"\n'))).lease_znodes is None


def test_unavailable_under_reaches_the_traits_the_checker_is_given() -> None:
    manifest = _manifest('servers = "zookeeper"\nunavailable_under = ["crash"]\n')
    assert traits_of(backend_class(manifest)).unavailable_under == ("crash",)
    with pytest.raises(BackendLoadError, match="unavailable_under must be a list of fault kind names"):
        _manifest('servers = "zookeeper"\nunavailable_under = [1]\n')


def test_connects_to_every_node_reaches_the_traits_the_plan_reads() -> None:
    assert traits_of(backend_class(_manifest('servers = "zookeeper"\n'))).connects_to_every_node is False
    manifest = _manifest('servers = "zookeeper"\nconnects_to_every_node = true\n')
    assert traits_of(backend_class(manifest)).connects_to_every_node is True
    with pytest.raises(BackendLoadError, match="connects_to_every_node"):
        _manifest('servers = "zookeeper"\nconnects_to_every_node = "yes"\n')
