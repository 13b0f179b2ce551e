"""Shared fixtures: one embedded cluster of real redis-server processes for the whole session."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from lockcompare.backends import BackendConfig
from lockcompare.infra import provenance
from lockcompare.infra.cluster import Cluster, open_cluster
from lockcompare.infra.kinds import server_for


@pytest.fixture(scope="session", autouse=True)
def private_runs_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The suite's own runs register in a private directory, so a lockcompare measurement running
    elsewhere on the machine cannot add its "another run is active" warning to the one-line errors
    the tests count; the suite itself is registered in the machine-wide one, so such a measurement
    still records that it ran beside the tests (provenance.concurrent_runs)."""
    with provenance.registered_run("pytest"):
        before = os.environ.get(provenance.RUNS_DIR_ENV)
        os.environ[provenance.RUNS_DIR_ENV] = str(tmp_path_factory.mktemp("runs"))
        try:
            yield
        finally:
            if before is None:
                del os.environ[provenance.RUNS_DIR_ENV]
            else:
                os.environ[provenance.RUNS_DIR_ENV] = before


@pytest.fixture(scope="session", autouse=True)
def embedded_default_said_once() -> None:
    """``--server auto`` is resolved once per process, saying so in one line where it is not Redis
    (Python >= 3.13: Valkey); resolved here, before any test counts the lines a command prints."""
    server_for("redis")


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    """5 lock nodes + 1 resource, spawned once; tests must leave every node running."""
    with open_cluster() as c:
        yield c


@pytest.fixture
def fresh_cluster() -> Iterator[Cluster]:
    """A private cluster for tests that crash or restart nodes."""
    with open_cluster() as c:
        yield c


@pytest.fixture
def backend_config(cluster: Cluster) -> BackendConfig:
    return BackendConfig(node_urls=cluster.node_urls, request_timeout_s=0.5)


@pytest.fixture
def key() -> str:
    """A lock key no other test uses."""
    return f"lockcompare-test:{uuid.uuid4().hex}"
