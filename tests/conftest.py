"""Shared fixtures: one embedded cluster of real redis-server processes for the whole session."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from lockcompare.backends import BackendConfig
from lockcompare.cluster import Cluster, open_cluster


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
