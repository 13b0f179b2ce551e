"""The guide's asyncio example (examples/async_redis_lock.py) runs: an event loop in a thread driven by
lockcompare's synchronous calls, against real redis-servers and worker processes."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lockcompare.analysis.results import read_results
from lockcompare.cli import app
from lockcompare.evaluation.conformance import PROPERTIES, Status, battery, check_property
from lockcompare.infra.cluster import Cluster

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def test_the_asyncio_lock_passes_the_battery_lines_it_claims(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLES))  # the spawned backend host starts with this sys.path
    with battery(spec="async_redis_lock:AsyncRedisLock", node_urls=cluster.node_urls) as ctx:
        results = {r.prop.name: r for r in (check_property(prop, ctx) for prop in PROPERTIES)}
    assert results["survives_the_loss_of_a_minority"].status is Status.NOT_CLAIMED
    assert results["fencing_tokens_strictly_increase"].status is Status.NOT_CLAIMED
    failed = {name: r.evidence for name, r in results.items() if r.status is Status.FAIL}
    assert not failed, failed
    for name in (
        "second_acquire_is_refused_while_held",
        "lock_is_free_again_after_the_ttl",
        "expired_holder_cannot_release_its_successors_lock",
        "refuses_without_a_quorum",
    ):
        assert results[name].status is Status.PASS, (name, results[name].evidence)  # fmt: skip


def test_the_renewing_asyncio_lock_holds_through_work_longer_than_its_ttl(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Work 2.5 x the TTL: only the watchdog task on the loop thread keeps the lock; the history shows it."""
    monkeypatch.syspath_prepend(str(EXAMPLES))  # spawned workers copy it
    out = tmp_path / "async.csv"
    args = ["run", "--backend", "async_redis_lock:AsyncRenewingLock", "--time-scale", "0.1", "--rounds", "2",
            "--work-ms", "2500", "--out", str(out)]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.stderr
    (row,) = read_results(out)
    assert (row["verdict"], row["conflicts"], row["entries"]) == ("exclusive", 0, 4), row
    (history,) = (tmp_path / "async.histories").iterdir()
    renewals = [e for e in map(json.loads, gzip.open(history, "rt")) if e["kind"] == "renew"]
    # 250 ms of work under a 100 ms lease renewed every ~33 ms: several renewals per section, all granted
    assert len(renewals) >= 8 and all(e["ok"] for e in renewals), renewals[:3]
