"""The shipped conformance battery on real ZooKeeper ensembles (issue 48.3): the contract as a plug-in
author runs it, on the server kind the backends declare (it ran on Redis before, where zk-lock failed
every claim test), and what its histories show of the node-loss check."""

from __future__ import annotations

import pytest

from lockcompare.errors import BackendNotViableError

try:
    from lockcompare.infra.zookeeper.client import kazoo_client_class
    from lockcompare.infra.zookeeper.server import find_zookeeper

    find_zookeeper()
    kazoo_client_class()
except BackendNotViableError as exc:
    pytest.skip(f"ZooKeeper not available: {exc}", allow_module_level=True)

from lockcompare.evaluation.conformance import BatteryContext, Status, check_property, property_named
from lockcompare.render.timeline import load_history
from lockcompare.testing import BackendContract


class TestZkLockContract(BackendContract):
    """kazoo's recipe: its claims (has_ttl = False, renews) hold with sessions kazoo keeps alive."""

    backend_name = "zk-lock"

    def test_survives_the_loss_of_a_minority(self, lockcompare_battery: BatteryContext) -> None:
        """The contract's test, and what its history shows: two of five servers crash, the leader among
        them (node 0 leads a fresh ensemble): the client connected before is refused while no leader
        serves, then granted within the kind's allowance; the check's history holds the crash, who
        led after it (so a FAIL says whether no server led or the client did not come back) and,
        after it, the grant. (One check for both: the election and kazoo's backoff cost ~30 s a run.)"""
        result = check_property(property_named("survives_the_loss_of_a_minority"), lockcompare_battery)
        assert result.status is Status.PASS, result.evidence
        assert (
            "allowed: 20 s for an election, as long again for a client's backoff + 1 s to reconnect" in result.evidence
        )
        assert lockcompare_battery.history_dir is not None
        assert result.history == lockcompare_battery.history_dir / "survives_the_loss_of_a_minority.jsonl.gz"
        events = load_history(result.history)
        (crash,) = [e for e in events if e["kind"] == "fault" and e.get("fault") == "crash"]
        assert crash["worker"] == -1 and crash["nodes"] == [0, 1]
        before = [e for e in events if e["worker"] == 0 and e["kind"] == "acquire"]
        assert before[0]["ok"] is True and before[0]["t1"] < crash["t0"]  # connected before the crash
        after_crash = [e for e in before if e["t0"] > crash["t1"]]
        assert after_crash[-1]["ok"] is True  # granted again, by the same client...
        assert all(e["refusals"] != {"held": 1} for e in after_crash if not e["ok"])  # ...never told "held" meanwhile
        roles = [e for e in events if e["kind"] == "fault" and e.get("fault") == "roles"]
        assert roles and roles[0]["t0"] >= crash["t1"]  # who led, read through the kind right after the crash...
        assert roles[0]["roles"]["modes"][:2] == ["down", "down"]  # ...and again whenever it changed meanwhile
        assert events[-1]["kind"] == "check" and events[-1]["status"] == "PASS"


class TestCuratorMutexContract(BackendContract):
    """Curator's InterProcessMutex through its Java client (skipped where the client is not built)."""

    backend_name = "curator-mutex"
