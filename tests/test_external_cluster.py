"""External servers (--nodes / --resource): used as given, only our own keys touched, never flushed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lockcompare.cli import app
from lockcompare.infra.cluster import Cluster
from lockcompare.infra.redis.client import connect

ROOT = Path(__file__).resolve().parents[1]


def test_external_servers_keep_their_data(cluster: Cluster, tmp_path: Path) -> None:
    # The session cluster plays "somebody else's servers" here.
    for url in (*cluster.node_urls, cluster.resource_url):
        connect(url).set("someone-elses-key", "precious")
    result = CliRunner().invoke(
        app,
        [
            "run", "--backend", "fenced", "--experiment", "client-pause", "--rounds", "3", "--time-scale", "0.1",
            "--nodes", ",".join(cluster.node_urls), "--resource", cluster.resource_url,
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    for url in (*cluster.node_urls, cluster.resource_url):
        client = connect(url)
        assert client.get("someone-elses-key") == b"precious"
        assert [k for k in client.scan_iter("lockcompare:*")] == []  # the trial's own keys are gone
        client.delete("someone-elses-key")


@pytest.mark.needs("yaml")
def test_docker_compose_matches_the_documented_command() -> None:
    import yaml

    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert set(services) == {"resource", "node1", "node2", "node3", "node4", "node5"}
    ports = {name: svc["ports"][0] for name, svc in services.items()}
    assert all(p.startswith("127.0.0.1:") for p in ports.values()), "servers must listen on loopback only"
    host_port = {name: int(p.split(":")[1]) for name, p in ports.items()}
    readme = (ROOT / "docs" / "cli.md").read_text()  # the external-servers section
    nodes = re.search(r"--nodes (\S+)", readme).group(1).split(",")
    resource = re.search(r"--resource (\S+)", readme).group(1)
    assert [int(re.search(r":(\d+)/", u).group(1)) for u in nodes] == [host_port[f"node{i}"] for i in range(1, 6)]
    assert int(re.search(r":(\d+)/", resource).group(1)) == host_port["resource"]
