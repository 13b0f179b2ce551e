"""No safety verdict without the fault (issue 38.1), faults aimed when they land (issue 42.4), and
session-kill aimed at the lock's holder at kill time (issue 42.6).

The rules on hand-built histories and a scheduler fed scripted holder reads; then real trials: a
fault step due after its lease was released, plug-ins whose lease lives where the harness does not
look by default (tests/plugins/lease_elsewhere.py), with and without their declaration."""

from __future__ import annotations

import csv
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from lockcompare.analysis.checker import check, released_nothing_note
from lockcompare.analysis.counters import ResourceCounters
from lockcompare.analysis.strikes import fault_strikes, strikes_line
from lockcompare.faults.plan import planned_steps
from lockcompare.faults.schedule import FaultScheduler, PlannedStep
from lockcompare.infra.cluster import Cluster
from lockcompare.runner.trial import new_run_id, run_trial
from lockcompare.scenario.experiments import get_experiment
from lockcompare.scenario.schedule import at_scale, parse_schedule
from lockcompare.scenario.trialspec import Overrides, make_spec

MS = 1_000_000
REPO = Path(__file__).resolve().parents[1]
A, B = "owner-a", "owner-b"


def _rounds(n: int) -> list[dict[str, Any]]:
    """Two workers taking turns, n rounds each, 10 ms sections: a history the checker calls exclusive."""
    events: list[dict[str, Any]] = []
    t = 0
    for rnd in range(n):
        for worker in (0, 1):
            for kind, extra in (
                ("acquire", {"ok": True, "attempts": 1, "refusals": {}, "t_attempt": t * MS, "owner": f"o{worker}{rnd}",
                             "fence": None, "valid_until": (t + 1000) * MS}),
                ("enter", {"inside": 1}), ("read", {"balance": 2 * rnd + worker}),
                ("write", {"value": 2 * rnd + worker + 1, "accepted": True, "fence": None}),
                ("exit", {}), ("release", {"released": True}),
            ):  # fmt: skip
                events.append({"worker": worker, "round": rnd, "kind": kind, "t0": t * MS, "t1": t * MS + 1, **extra})
                t += 2
    return events


def _fault(action: str, rnd: int, **fields: Any) -> dict[str, Any]:
    return {"worker": -1, "round": rnd, "kind": "fault", "fault": "restart", "step": 0, "action": action,
            "t0": (rnd * 24 + 3) * MS, "t1": (rnd * 24 + 3) * MS + 1, "nodes": [], **fields}  # fmt: skip


def _counters(n: int) -> ResourceCounters:
    return ResourceCounters(
        entries=2 * n, conflicts=0, writes_accepted=2 * n, writes_rejected=0, final_balance=2 * n, occupancy=0
    )


def test_a_trial_whose_every_step_was_skipped_has_no_safety_verdict() -> None:
    reason = "nodes=holders:1: no lease on any node"
    history = _rounds(3) + [_fault("skipped", r, reason=reason) for r in range(3)]
    m = check(sorted(history, key=lambda e: e["t0"]), _counters(3), entries_planned=6)
    assert m.verdict == "unknown"
    assert m.problem == f"no safety verdict without the fault: the fault struck 0 of 3 injections ({reason})"
    assert (m.fault_steps_planned, m.fault_steps_struck, m.fault_steps_missed) == (3, 0, 0)
    # The same history without the schedule's events is exclusive: the fault alone decides.
    assert check(_rounds(3), _counters(3), entries_planned=6).verdict == "exclusive"


def test_a_fault_that_found_nothing_to_act_on_did_not_strike() -> None:
    """session-kill's inject event with "skipped: no session held the lock" (recorded so before the
    ``struck`` field) and one with ``struck: false`` are not strikes; a partly struck trial keeps its
    verdict and says how many struck."""
    kills = [
        _fault("inject", 0, fault="session-kill", detail="skipped: no session held the lock"),
        _fault("inject", 1, fault="session-kill", detail="closed the holder's session 0x1", struck=True),
        _fault("inject", 2, fault="session-kill", detail="skipped: no session held the lock", struck=False),
    ]
    m = check(sorted(_rounds(3) + kills, key=lambda e: e["t0"]), _counters(3), entries_planned=6)
    assert m.verdict == "exclusive" and (m.fault_steps_planned, m.fault_steps_struck) == (3, 1)
    assert m.problem == "the fault struck 1 of 3 injections (no session held the lock)"


def test_a_violation_seen_without_the_fault_stands_and_says_so() -> None:
    history = _rounds(2) + [_fault("skipped", r, reason="no lease") for r in range(2)]
    lost = ResourceCounters(entries=4, conflicts=0, writes_accepted=4, writes_rejected=0, final_balance=3, occupancy=0)
    m = check(sorted(history, key=lambda e: e["t0"]), lost, entries_planned=4)
    assert m.verdict == "lost-updates"
    assert m.problem == "the fault struck 0 of 2 injections (no lease): the violation happened without the fault"


def test_missed_and_retargeted_injections_are_counted() -> None:
    events = [
        _fault("inject", 0, aim="struck"),
        _fault("inject", 1, aim="retargeted", aimed_owner=A, lease_owner=B),
        _fault("skipped", 2, aim="missed", reason="missed: the lease it was aimed at had ended when it landed"),
        _fault("skipped", 3, skipped="prepare", reason="not an injection"),
    ]
    s = fault_strikes(events)
    assert (s.planned, s.struck, s.missed, s.retargeted) == (3, 2, 1, 1)
    rows = [
        {"fault_steps_planned": 3, "fault_steps_struck": 2, "fault_steps_missed": 1},
        {"fault_steps_planned": 2, "fault_steps_struck": 0, "fault_steps_missed": 0},
        {"fault_steps_planned": -1, "fault_steps_struck": -1, "fault_steps_missed": -1},  # a row from before
    ]
    assert strikes_line(rows) == (
        "faults: 2 of 5 injections struck, 1 missed (aimed at a lease that had ended when they landed); "
        "1 trial(s) whose fault never struck"
    )


def test_the_unlock_hint_names_the_schedules_own_session_end() -> None:
    kill = _fault("inject", 4, fault="session-kill", sessions_ended=[0x10001001A370001], session_worker=1)
    assert released_nothing_note([kill], n=2, total=9) == (
        "unlock released nothing while held (2 of 9 releases): session not kept (the schedule's own "
        "session-kill ended 1 session(s), e.g. 0x10001001a370001 (worker 1's) in round 4)"
    )
    assert "transaction-pooling proxy?" in released_nothing_note([], n=1, total=9)


# -- the scheduler: aimed when it lands -----------------------------------------------------------


class _Reads:
    """Scripted holder reads; ``slow_first``: the first read takes 30 ms (a stalled machine)."""

    def __init__(self, reads: list[list[str | None]], *, slow_first: bool = False) -> None:
        self.reads, self.slow, self.pattern = reads, slow_first, "*t:lock"

    def read(self) -> list[str | None]:
        if self.slow:
            self.slow = False
            time.sleep(0.03)
        return self.reads.pop(0)

    def close(self) -> None:
        pass


class _Fault:
    def __init__(self) -> None:
        self.hits: list[list[int]] = []

    def inject(self, _cluster: object, nodes: list[int]) -> str:
        self.hits.append(nodes)
        return "hit"

    def heal(self, _cluster: object, nodes: list[int]) -> str:
        return "healed"


class _Cluster:
    def reset_clocks(self) -> None:
        pass


def _landing(reads: list[list[str | None]], *, slow_first: bool = False) -> tuple[dict[str, Any], _Fault, _Reads]:
    """One ``restart nodes=holders:1`` step triggered by worker 0's acquire of lease A, landing on ``reads``."""
    fault = _Fault()
    steps = [
        PlannedStep(index=p.index, step=p.step, build=lambda _w: fault, heal_after_ns=p.heal_after_ns)
        for p in planned_steps(
            at_scale(parse_schedule("restart nodes=holders:1 after-acquire=0 once"), scale=1), ttl_ms=1000
        )
    ]
    holders = _Reads(reads, slow_first=slow_first)
    scheduler = FaultScheduler(steps=steps, cluster=_Cluster(), node_count=5, workers=2, holders=holders)  # type: ignore[arg-type]
    scheduler.on_acquired(worker=0, round_=0, t_ns=0, owner=A)
    scheduler.run_due()
    return scheduler.events[0], fault, holders


def test_a_fault_landing_on_the_lease_it_was_aimed_at_struck_it() -> None:
    event, fault, _ = _landing([[A, None, None, None, None]])
    assert fault.hits == [[0]] and event["aim"] == "struck" and event["aimed_owner"] == A and event["struck"]


def test_a_fault_landing_after_its_lease_ended_with_none_held_is_missed_and_not_injected() -> None:
    # Some read saw a lease before (so the key pattern matches): this one sees none.
    event, _, _ = _landing([[None] * 5])
    assert event["action"] == "skipped" and "no lease" in event["reason"] and event.get("aim") is None  # never seen
    fault_seen = _Fault()
    steps = [
        PlannedStep(index=p.index, step=p.step, build=lambda _w: fault_seen, heal_after_ns=p.heal_after_ns)
        for p in planned_steps(
            at_scale(parse_schedule("restart nodes=holders:1 after-acquire=0 every"), scale=1), ttl_ms=1000
        )
    ]
    reads = _Reads([[A, None, None, None, None], [None] * 5])
    scheduler = FaultScheduler(steps=steps, cluster=_Cluster(), node_count=5, workers=2, holders=reads)  # type: ignore[arg-type]
    scheduler.on_acquired(worker=0, round_=0, t_ns=0, owner=A)
    scheduler.run_due()
    scheduler.heal_all()
    scheduler.on_acquired(worker=0, round_=1, t_ns=0, owner="owner-a2")
    scheduler.run_due()
    missed = scheduler.events[-1]
    assert fault_seen.hits == [[0]]  # the second injection was not made
    assert missed["action"] == "skipped" and missed["aim"] == "missed" and missed["aimed_owner"] == "owner-a2"
    assert missed["reason"].startswith("missed: the lease it was aimed at had ended when it landed")
    assert fault_strikes(scheduler.events).missed == 1


def test_a_fault_landing_after_its_lease_ended_on_another_lease_is_retargeted() -> None:
    event, fault, _ = _landing([[None, B, None, None, None]])
    assert fault.hits == [[1]] and event["aim"] == "retargeted"
    assert (event["aimed_owner"], event["lease_owner"]) == (A, B)


def test_a_slow_read_is_read_again_when_the_fault_lands() -> None:
    # The first read took 30 ms and saw lease A; by the second (at landing) A had gone and B was held.
    event, fault, holders = _landing([[A, None, None, None, None], [None, B, None, None, None]], slow_first=True)
    assert holders.reads == [] and fault.hits == [[1]]  # both reads made: the fault struck what the second saw
    assert event["aim"] == "retargeted" and event["holders"] == [None, B, None, None, None]
    assert event["aim_age_ms"] < 30  # the age of the read it landed on, not of the slow one


def test_a_session_kill_names_whose_session_it_ended() -> None:
    """The kill reports the identifier stored in the holder's znode (``session_owner``); the runner names
    that worker, and says retargeted when it is not the worker the step was aimed at."""
    scheduler = FaultScheduler(steps=[], cluster=_Cluster(), node_count=1, workers=2)  # type: ignore[arg-type]
    scheduler.on_acquired(worker=0, round_=0, t_ns=0, owner="aaa.10001.n0")
    scheduler.on_acquired(worker=1, round_=0, t_ns=0, owner="bbb.10002.n1")
    assert scheduler._session_aim({"session_owner": "bbb", "target_worker": 0}) == {
        "session_worker": 1,
        "aim": "retargeted",
    }
    assert scheduler._session_aim({"session_owner": "aaa", "target_worker": 0}) == {"session_worker": 0}
    # PostgreSQL: the backend pid a lease reported as its session.
    scheduler.on_acquired(worker=1, round_=1, t_ns=0, owner="ccc", session="4242")
    assert scheduler._session_aim({"sessions_ended": [4242], "target_worker": 1}) == {"session_worker": 1}
    assert scheduler._session_aim({"sessions_ended": [999], "target_worker": 1}) == {"session_worker": None}


# -- real trials -----------------------------------------------------------------------------------


@pytest.mark.full  # real servers and worker processes (conftest's full tier)
def test_a_step_due_after_the_lease_was_released_says_so_in_the_event_and_the_row(cluster: Cluster) -> None:
    """Each restart is due 1500 ms (lesson scale) after worker 0's acquire, long after its 300 ms
    section and release: when it lands, worker 0's lease has ended — it strikes worker 1's lease
    (retargeted) or, with none held, is missed; never "struck"."""
    spec = make_spec(
        backend="single", experiment=get_experiment("baseline"), trial=0,
        overrides=Overrides(time_scale=0.2, rounds=4, faults="restart nodes=holders:1 after-acquire=1500 every"),  # type: ignore[arg-type]
    )  # fmt: skip
    result = run_trial(spec=spec, cluster=cluster, run_id=new_run_id())
    landed = [e for e in result.history if e["kind"] == "fault" and e["action"] in ("inject", "skipped")]
    assert landed and {e.get("aim") for e in landed} <= {"retargeted", "missed"}, [e.get("aim") for e in landed]
    for event in landed:
        assert event["aimed_owner"] != event.get("lease_owner")
    m = result.metrics
    assert m.fault_steps_planned == len(landed)
    assert m.fault_steps_missed == sum(e.get("aim") == "missed" for e in landed)
    assert m.fault_steps_struck == sum(e.get("aim") == "retargeted" for e in landed)


def _matrix(tmp_path: Path, backend: str, experiment: str) -> tuple[subprocess.CompletedProcess[str], dict[str, str]]:
    out = tmp_path / f"{backend.rsplit(':', 1)[-1]}.csv"
    cmd = [
        sys.executable, "-m", "lockcompare", "--plugin-path", str(REPO / "tests"), "matrix", "--backends", backend,
        "--experiments", experiment, "--trials", "1", "--rounds", "8", "--time-scale", "0.2", "--out", str(out),
    ]  # fmt: skip
    run = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=300)
    (row,) = list(csv.DictReader(out.open()))
    return run, row


@pytest.mark.full  # real servers and worker processes (conftest's full tier)
def test_a_tooz_like_key_outside_the_default_pattern_is_unknown_until_declared(tmp_path: Path) -> None:
    run, row = _matrix(tmp_path, "plugins.lease_elsewhere:ToozLikeLock", "node-restart")
    assert run.returncode == 1 and "Traceback" not in run.stderr
    assert row["verdict"] == "unknown" and row["fault_steps_struck"] == "0"
    assert row["problem"].startswith("no safety verdict without the fault: the fault struck 0 of")
    assert "no read in this trial found a lease under the key pattern" in row["problem"]
    run, row = _matrix(tmp_path, "plugins.lease_elsewhere:DeclaredToozLikeLock", "node-restart")
    assert row["verdict"] != "unknown" and int(row["fault_steps_struck"]) > 0, row["problem"]


def _zookeeper_missing() -> str:
    from lockcompare.backends.zk_lock import ZkLock
    from lockcompare.errors import BackendNotViableError

    try:
        ZkLock.check_viable()
    except BackendNotViableError as exc:
        return str(exc)
    return ""


@pytest.mark.full  # real servers and worker processes (conftest's full tier)
def test_a_semaphore_like_zookeeper_lease_is_unknown_under_session_kill_until_declared(tmp_path: Path) -> None:
    if missing := _zookeeper_missing():
        pytest.skip(f"needs ZooKeeper and kazoo (apt-get install zookeeper; pip install kazoo): {missing}")
    run, row = _matrix(tmp_path, "plugins.lease_elsewhere:SemaphoreLikeLock", "session-kill")
    assert run.returncode == 1 and "Traceback" not in run.stderr
    assert row["verdict"] == "unknown" and "no session held the lock" in row["problem"]
    assert "none a kazoo Lock contender: a backend whose lease lives elsewhere declares lease_znodes" in row["problem"]
    run, row = _matrix(tmp_path, "plugins.lease_elsewhere:DeclaredSemaphoreLikeLock", "session-kill")
    assert row["verdict"] != "unknown" and int(row["fault_steps_struck"]) > 0, row["problem"]


@pytest.mark.full  # real servers and worker processes (conftest's full tier)
def test_a_step_that_lands_when_no_lease_is_held_is_missed_in_the_event_and_the_row(cluster: Cluster) -> None:
    """One worker, a long think time: every restart is due 1500 ms (lesson scale) after the acquire,
    when the lease was released and nobody holds another — missed, never injected, and a trial whose
    fault never struck has no safety verdict."""
    spec = make_spec(
        backend="single", experiment=get_experiment("baseline"), trial=0,
        overrides=Overrides(time_scale=0.2, rounds=3, workers=1, think_ms=2000,  # type: ignore[arg-type]
                            faults="restart nodes=holders:1 after-acquire=1500 every"),
    )  # fmt: skip
    result = run_trial(spec=spec, cluster=cluster, run_id=new_run_id())
    landed = [e for e in result.history if e["kind"] == "fault" and e["action"] in ("inject", "skipped")]
    assert landed and all(e["action"] == "skipped" and e["aim"] == "missed" for e in landed), landed
    m = result.metrics
    assert (m.fault_steps_planned, m.fault_steps_struck, m.fault_steps_missed) == (len(landed), 0, len(landed))
    assert m.verdict == "unknown" and f"{len(landed)} missed (the lease it was aimed at had ended)" in m.problem
