"""The bench's via-proxy rows: the same backend with its nodes reached through link proxies."""

from __future__ import annotations

import math

import pytest

from lockcompare.errors import InvalidValueError
from lockcompare.infra.cluster import Cluster
from lockcompare.runner.bench import run_bench


def test_via_proxy_row_follows_the_direct_row(cluster: Cluster) -> None:
    rows = run_bench(cluster=cluster, backends=["single"], proxied=["single"], iterations=20, warmup=5, blocks=2)
    assert [row.backend for row in rows] == ["floor", "floor-fanout", "single", "single-via-proxy"]
    proxied = rows[2]
    assert proxied.iterations == 20 and proxied.refused == 0
    assert 0 < proxied.p50_us <= proxied.p99_us and math.isfinite(proxied.ops_per_s)


def test_via_proxy_needs_the_embedded_cluster(cluster: Cluster) -> None:
    external = Cluster(
        node_urls=cluster.node_urls, resource_url=cluster.resource_url, embedded=False, server_version="x"
    )
    with pytest.raises(InvalidValueError, match="embedded"):
        run_bench(cluster=external, backends=["single"], proxied=["single"], iterations=5)
