"""No safety verdict without the fault (issue 38.1), faults aimed when they land (issue 42.4), and
session-kill aimed at the lock's holder at kill time (issue 42.6).

The rules on hand-built histories and a scheduler fed scripted holder reads; then real trials: a
fault step due after its lease was released, plug-ins whose lease lives where the harness does not
look by default (tests/plugins/lease_elsewhere.py), with and without their declaration."""

from __future__ import annotations

import csv
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from lockcompare.analysis.checker import check, released_nothing_note
from lockcompare.analysis.counters import ResourceCounters
from lockcompare.analysis.strikes import FaultStrikes, fault_strikes, strikes_line
from lockcompare.faults.aim import Aim, Lease, SessionGuard
from lockcompare.faults.leases import RING as LEASE_RING
from lockcompare.faults.leases import WORDS as LEASE_WORDS
from lockcompare.faults.leases import LeaseSlot
from lockcompare.faults.plan import planned_steps
from lockcompare.faults.schedule import FaultScheduler
from lockcompare.faults.steps import PlannedStep
from lockcompare.infra.cluster import Cluster
from lockcompare.render.timeline import load_history
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


def test_struck_is_counted_only_where_the_history_shows_the_lease_held_when_the_fault_acted() -> None:
    """Events that name the lease they hit (``lease_held``) count as struck only when it was held then;
    older events without the field are counted by their ``aim`` as before."""
    events = [
        _fault("inject", 0, aim="struck", lease_held=True),
        _fault("inject", 1, aim="retargeted", lease_held=True, aimed_owner=A, lease_owner=B),
        _fault("inject", 2, aim="struck", lease_held=None),  # not known to be held: not shown struck
        _fault("inject", 3, aim="raced", lease_held=False),
        _fault("inject", 4, aim="missed", struck=False, detail="skipped: the session ... not ended"),
        _fault("inject", 5, aim="struck"),  # a history from before lease_held
    ]
    strikes = fault_strikes(events)
    assert (strikes.planned, strikes.struck, strikes.missed, strikes.retargeted) == (6, 3, 1, 1)
    assert strikes.reasons[0] == "raced: the lease it struck ended while the fault acted"


def test_the_unlock_hint_names_the_schedules_own_session_end() -> None:
    kill = _fault("inject", 4, fault="session-kill", sessions_ended=[0x10001001A370001], session_worker=1)
    assert released_nothing_note([kill], n=2, total=9) == (
        "unlock released nothing while held (2 of 9 releases): session not kept (the schedule's own "
        "session-kill ended 1 session(s), e.g. 0x10001001a370001 (worker 1's) in round 4)"
    )
    assert "transaction-pooling proxy?" in released_nothing_note([], n=1, total=9)


# -- the scheduler: read ahead, confirmed when it lands (faults/aim.py) ---------------------------


class _Reads:
    """Scripted holder reads, each recording when it ran; ``slow``: each read takes that long (s)."""

    def __init__(self, reads: list[list[str | None]], *, slow: float = 0.0) -> None:
        self.reads, self.slow, self.pattern = reads, slow, "*t:lock"
        self.ran_at: list[int] = []

    def read(self) -> list[str | None]:
        self.ran_at.append(time.monotonic_ns())
        if self.slow:
            time.sleep(self.slow)
        return self.reads.pop(0)

    def close(self) -> None:
        pass


class _Fault:
    """Records the nodes it struck; ``during``: called as it acts (a lease that ends meanwhile)."""

    def __init__(self, during: Any = None) -> None:
        self.hits: list[list[int]] = []
        self.during = during

    def inject(self, _cluster: object, nodes: list[int]) -> str:
        self.hits.append(nodes)
        if self.during is not None:
            self.during()
        return "hit"

    def heal(self, _cluster: object, nodes: list[int]) -> str:
        return "healed"


class _Cluster:
    def reset_clocks(self) -> None:
        pass


def _slots(n: int = 2) -> list[LeaseSlot]:
    """Two workers' lease slots, as the workers write them (plain lists stand for the shared memory)."""
    return [LeaseSlot([0] * LEASE_WORDS, offset=0) for _ in range(n)]


def _scheduler(schedule: str, *, fault: _Fault, reads: _Reads | None, slots: list[LeaseSlot] | None) -> FaultScheduler:
    steps = [
        PlannedStep(index=p.index, step=p.step, build=lambda _w: fault, heal_after_ns=p.heal_after_ns)
        for p in planned_steps(at_scale(parse_schedule(schedule), scale=1), ttl_ms=1000)
    ]
    scheduler = FaultScheduler(steps=steps, cluster=_Cluster(), node_count=5, workers=2, holders=reads)  # type: ignore[arg-type]
    if slots is not None:
        scheduler.attach_workers(pids=(), freezer=None, leases=slots)  # type: ignore[arg-type]
    return scheduler


def _landing(
    reads: list[list[str | None]],
    *,
    hold: bool = True,
    fault: _Fault | None = None,
    slow: float = 0.0,
    slots: list[LeaseSlot] | None = None,
) -> tuple[dict[str, Any], _Fault, _Reads, list[LeaseSlot]]:
    """One ``restart nodes=holders:1`` step triggered by worker 0's acquire of lease A (round 0),
    landing with worker 0 still holding it (``hold``) or having begun its release."""
    fault = fault or _Fault()
    holders, slots = _Reads(reads, slow=slow), slots or _slots()
    scheduler = _scheduler("restart nodes=holders:1 after-acquire=0 once", fault=fault, reads=holders, slots=slots)
    slots[0].hold(round_=0, valid_until_ns=None)
    scheduler.on_acquired(worker=0, round_=0, t_ns=0, owner=A)
    if not hold:
        slots[0].end(round_=0)
    landing = time.monotonic_ns()
    scheduler.run_due()
    scheduler.heal_all()
    assert all(t < landing for t in holders.ran_at), "the servers were read at the planned moment"
    return scheduler.events[0], fault, holders, slots


def test_a_fault_landing_on_the_lease_it_was_aimed_at_struck_it_from_a_read_made_ahead() -> None:
    event, fault, holders, _ = _landing([[A, None, A, None, None]])
    assert fault.hits == [[0]] and len(holders.ran_at) == 1  # one read, made when the acquire was reported
    assert (event["aim"], event["aimed_owner"], event["lease_owner"]) == ("struck", A, A)
    assert (event["lease_worker"], event["lease_round"], event["lease_held"], event["struck"]) == (0, 0, True, True)
    assert event["holders"] == [A, None, A, None, None] and event["aim_age_ms"] >= 0
    assert fault_strikes([event]).struck == 1


def test_a_fault_whose_lease_ended_before_it_landed_is_missed_though_the_read_saw_it_held() -> None:
    """The read ahead saw lease A on node 0; by the planned moment worker 0 had begun releasing it
    (its slot says so): nothing is injected — the old aim trusted the read and struck."""
    event, fault, _, _ = _landing([[A, None, None, None, None]], hold=False)
    assert fault.hits == [] and event["action"] == "skipped" and event["aim"] == "missed"
    assert event["reason"].startswith("missed: the lease it was aimed at had ended when it landed")
    assert fault_strikes([event]) == FaultStrikes(
        planned=1, struck=0, missed=1, retargeted=0, reasons=(event["reason"],)
    )


def test_a_lease_that_ended_between_its_confirm_and_the_action_is_raced_and_not_counted_struck() -> None:
    """The confirm saw lease A held; it ended before the fault acted (the check after the action reads
    its end time in the slot): ``raced``, not struck. One that ends after the action began was struck."""
    fault, slots = _Fault(), _slots()
    reads = _Reads([[A, None, None, None, None]])
    scheduler = _scheduler("restart nodes=holders:1 after-acquire=0 once", fault=fault, reads=reads, slots=slots)
    slots[0].hold(round_=0, valid_until_ns=None)
    scheduler.on_acquired(worker=0, round_=0, t_ns=0, owner=A)
    slots[0].end(round_=0)
    scheduler._aim.holds = lambda lease: True  # type: ignore[method-assign]  # the confirm, an instant before
    scheduler.run_due()
    scheduler.heal_all()
    event = scheduler.events[0]
    assert fault.hits == [[0]]  # it acted (a node restarted) on a lease that had ended
    assert event["aim"] == "raced" and event["lease_held"] is False
    strikes = fault_strikes([event])
    assert (strikes.struck, strikes.reasons) == (0, ("raced: the lease it struck ended while the fault acted",))
    ended_after = _Fault(during=lambda: late_slots[0].end(round_=0))
    late_slots = _slots()
    event, _, _, _ = _landing([[A, None, None, None, None]], fault=ended_after, slots=late_slots)
    assert (event["aim"], event["lease_held"]) == ("struck", True)


def test_a_lease_naming_the_nodes_that_granted_it_is_struck_there_without_waiting_for_a_read() -> None:
    """Redlock's lease names its granting nodes: the step aims at them at once; the holders read made
    ahead (slow here) is evidence only, and one still running as the fault acted is none (it read
    some nodes after the fault): the event's holders are then what the grant says."""
    fault, slots, reads = _Fault(), _slots(), _Reads([[None, A, None, A, A]], slow=0.2)
    scheduler = _scheduler("restart nodes=holders:1 after-acquire=0 once", fault=fault, reads=reads, slots=slots)
    slots[0].hold(round_=0, valid_until_ns=None)
    scheduler.on_acquired(worker=0, round_=0, t_ns=0, owner=A, granted_by=[1, 3, 4])
    scheduler.run_due()
    event = scheduler.events[0]
    scheduler.heal_all()
    assert fault.hits == [[1]] and "read_wait_ms" not in event  # the lowest granting node; no wait
    assert (event["aim"], event["granted_by"], event["lease_held"]) == ("struck", [1, 3, 4], True)
    # The read began before the fault acted and ended after it: not what the nodes held as it struck.
    assert reads.ran_at[0] < event["t0"] < reads.ran_at[0] + 0.2e9
    assert event["holders"] == [None, A, None, A, A] and event["holders_from"] == "granted_by"
    assert "holders_age_ms" not in event


def test_a_slow_read_ahead_is_waited_for_and_the_wait_is_recorded() -> None:
    event, fault, _, _ = _landing([[A, None, None, None, None]], slow=0.03)
    assert fault.hits == [[0]] and event["aim"] == "struck"
    assert event["read_wait_ms"] > 0 and event["aim_age_ms"] >= 30  # the read started 30 ms before it acted


def test_a_fault_retargets_only_a_current_lease_whose_nodes_were_read_since_it_was_granted() -> None:
    """Worker 0's lease A ended; worker 1 holds B. Read after B's acquire: the fault strikes B's
    node (retargeted). Without such a read it is missed, not aimed at nodes nobody read."""
    for read_after_b, expected in ((True, "retargeted"), (False, "missed")):
        fault, slots = _Fault(), _slots()
        reads = _Reads([[A, None, None, None, None], [None, B, None, None, None]])
        scheduler = _scheduler(
            "restart nodes=holders:1 after-acquire=0 once", fault=fault, reads=reads, slots=slots
        )  # fmt: skip
        slots[0].hold(round_=0, valid_until_ns=None)
        scheduler.on_acquired(worker=0, round_=0, t_ns=0, owner=A)
        slots[0].end(round_=0)
        slots[1].hold(round_=0, valid_until_ns=None)
        if read_after_b:  # a pending step reads ahead again at every acquire reported
            scheduler.on_acquired(worker=1, round_=0, t_ns=0, owner=B)
        else:
            scheduler._aim.reported(Lease(owner=B, worker=1, round=0, reported_ns=time.monotonic_ns()))
        scheduler.run_due()
        scheduler.heal_all()
        (event,) = [e for e in scheduler.events if e["action"] in ("inject", "skipped")]
        assert event["aim"] == expected, event
        if read_after_b:
            assert fault.hits == [[1]] and (event["lease_owner"], event["lease_worker"]) == (B, 1)
            assert event["lease_held"] is True and fault_strikes([event]).retargeted == 1
        else:
            assert fault.hits == [] and "was granted after the servers were read" in event["reason"]


def test_a_lease_past_its_deadline_is_not_held() -> None:
    slot = _slots(1)[0]
    slot.hold(round_=3, valid_until_ns=time.monotonic_ns() - 1)
    assert slot.holding() is None and slot.of_round(3).held is False
    slot.hold(round_=4, valid_until_ns=time.monotonic_ns() + 10**9)
    assert slot.holding() is not None and slot.of_round(4).held
    before = time.monotonic_ns()
    slot.end(round_=4)
    assert slot.of_round(4).held_at(before) is True and slot.of_round(4).held_at(time.monotonic_ns()) is False
    slot.hold(round_=5, valid_until_ns=None)
    assert slot.of_round(4).held_at(before) is True  # still known: the ring keeps the last rounds' ends
    assert slot.of_round(4 - LEASE_RING).held_at(before) is None  # too long ago to tell


def test_a_session_kill_ends_only_a_session_that_is_a_current_lease_at_kill_time() -> None:
    """The guard a session kill asks right before ending a session: a PostgreSQL backend pid a lease
    reported as its session, or a ZooKeeper holder's identifier (which starts its owner token) — held
    now by its worker, as its slot says; a waiting worker's session is refused."""
    aim, slots = Aim(), _slots()
    aim.slots = slots
    aim.reported(Lease(owner="aaa.10001.n0", worker=0, round=0, reported_ns=1))
    aim.reported(Lease(owner="ccc", worker=1, round=0, reported_ns=2, session="4242"))
    slots[0].hold(round_=0, valid_until_ns=None)
    guard = SessionGuard(aim=aim)
    assert guard("aaa") and guard.lease is not None and guard.lease.worker == 0 and guard.confirmed_ns
    assert not guard(4242)  # worker 1's lease was reported, but worker 1 does not hold it now
    slots[1].hold(round_=0, valid_until_ns=None)
    assert guard(4242) and guard.lease is not None and guard.lease.worker == 1
    slots[1].end(round_=0)  # it began releasing: its session is about to be a waiter's
    assert not guard(4242) and not guard("unknown") and guard.asked == ["aaa", "4242", "4242", "4242", "unknown"]
    # Its next lease on the same session, granted but not yet reported (the runner was busy with the kill).
    slots[1].hold(round_=1, valid_until_ns=None)
    assert guard(4242) and guard.lease is not None and (guard.lease.worker, guard.lease.round) == (1, 1)


def test_a_session_kill_names_the_lease_whose_session_it_ended_and_the_guard_it_asked() -> None:
    """A session-kill fault that takes the guard: the event names the lease the guard confirmed;
    one whose every session was refused ended nothing and is missed."""

    class _Kill:
        takes_guard = True

        def __init__(self, slot: LeaseSlot, *, released: bool) -> None:
            self.slot, self.released = slot, released

        def inject(self, _cluster: object, nodes: list[int], *, guard: Any) -> tuple[str, dict[str, object]]:
            if self.released:  # the holder began releasing between the step's confirm and the kill's lookup
                self.slot.end(round_=0)
            if guard("4242"):
                return "ended", {"sessions_ended": [4242]}
            return "skipped: not a current lease", {"sessions_ended": []}

        def heal(self, _cluster: object, nodes: list[int]) -> str:
            return "stays ended"

    for released in (False, True):
        slots = _slots()
        kill = _Kill(slots[0], released=released)
        schedule = parse_schedule("session-kill worker=holder after-acquire=0 every")
        steps = [
            PlannedStep(index=p.index, step=p.step, build=lambda _w, kill=kill: kill, heal_after_ns=0)
            for p in planned_steps(at_scale(schedule, scale=1), ttl_ms=1000)
        ]
        scheduler = FaultScheduler(steps=steps, cluster=_Cluster(), node_count=1, workers=2)  # type: ignore[arg-type]
        scheduler.attach_workers(pids=(), freezer=None, leases=slots)  # type: ignore[arg-type]
        slots[0].hold(round_=0, valid_until_ns=None)
        scheduler.on_acquired(worker=0, round_=0, t_ns=0, owner=A, session="4242")
        scheduler.run_due()
        (event,) = [e for e in scheduler.events if e["action"] == "inject"]
        if not released:
            assert (event["aim"], event["session_worker"], event["lease_held"], event["struck"]) == (
                "struck", 0, True, True,
            )  # fmt: skip
            assert fault_strikes([event]).struck == 1
        else:
            assert (event["aim"], event["struck"], event["sessions_refused"]) == ("missed", False, ["4242"])
            assert fault_strikes([event]).struck == 0


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


def _matrix(
    tmp_path: Path, backend: str, experiment: str, *, time_scale: float = 0.2
) -> tuple[subprocess.CompletedProcess[str], dict[str, str]]:
    out = tmp_path / f"{backend.rsplit(':', 1)[-1]}.csv"
    cmd = [
        sys.executable, "-m", "lockcompare", "--plugin-path", str(REPO / "tests"), "matrix", "--backends", backend,
        "--experiments", experiment, "--trials", "1", "--rounds", "8", "--time-scale", str(time_scale),
        "--out", str(out),
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
    # x0.5: kazoo keeps no session under 500 ms alive, and zk-lock (their base) refuses shorter TTLs.
    run, row = _matrix(tmp_path, "plugins.lease_elsewhere:SemaphoreLikeLock", "session-kill", time_scale=0.5)
    assert run.returncode == 1 and "Traceback" not in run.stderr
    assert row["verdict"] == "unknown" and "no session held the lock" in row["problem"]
    assert "none a kazoo Lock contender: a backend whose lease lives elsewhere declares lease_znodes" in row["problem"]
    run, row = _matrix(tmp_path, "plugins.lease_elsewhere:DeclaredSemaphoreLikeLock", "session-kill", time_scale=0.5)
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


def _audit(csv_path: Path) -> subprocess.CompletedProcess[str]:
    """scripts/audit_strikes.py: an independent reading of the histories (its own parser)."""
    cmd = [sys.executable, str(REPO / "scripts" / "audit_strikes.py"), str(csv_path)]
    return subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=120)


@pytest.mark.full  # real servers and worker processes (conftest's full tier)
def test_every_strike_of_a_real_redlock_trial_acted_on_the_lease_current_then(tmp_path: Path) -> None:
    """bare-majority at x0.1: each restart of a node of worker 0's lease, 5 ms into it. Every
    injection names the lease it hit and whether it was held when the fault acted (the worker's lease
    slot), used a read started ahead of it, and the independent audit finds every one the history
    calls struck on a lease that was current then (granted, not released, not expired) and on nodes
    that granted it."""
    out = tmp_path / "bare.csv"
    cmd = [
        sys.executable, "-m", "lockcompare", "matrix", "--backends", "redlock", "--experiments", "bare-majority",
        "--trials", "1", "--rounds", "10", "--time-scale", "0.1", "--out", str(out),
    ]  # fmt: skip
    run = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=300)
    assert "Traceback" not in run.stderr, run.stderr
    (row,) = list(csv.DictReader(out.open()))
    events = load_history(out.parent / row["history"])
    landed = [e for e in events if e["kind"] == "fault" and e.get("target") == "holders:1" and e["action"] != "heal"]
    injects = [e for e in landed if e["action"] == "inject"]
    assert injects, landed
    for event in injects:
        assert event["aim"] in ("struck", "retargeted", "raced") and isinstance(event["lease_held"], bool), event
        assert event["acted_ns"] == event["t0"]
        # Redlock names the nodes that granted a lease: the step aims there without waiting for a read.
        assert event["nodes"][0] in event["granted_by"] and len(event["holders"]) == 5, event
        assert event.get("holders_from") == "granted_by" or event["holders"][event["nodes"][0]] == event["lease_owner"]
        granted = next(e for e in events if e["kind"] == "acquire" and e.get("owner") == event["lease_owner"])
        assert granted["granted_by"] == event["granted_by"] and granted["t1"] <= event["t0"]
    cuts = [e for e in events if e["kind"] == "fault" and e["fault"] == "cut" and e["action"] == "inject"]
    held = sum(e["aim"] != "raced" and e["lease_held"] for e in injects)
    assert int(row["fault_steps_struck"]) == held + len(cuts)  # the standing cut of nodes 3,4 struck too
    audit = _audit(out)
    assert audit.returncode == 0 and ", 0 not" in audit.stdout, audit.stdout


def test_a_role_step_uses_a_finished_older_read_rather_than_wait_for_a_running_one() -> None:
    """Who leads and which member a worker's client is attached to seldom change between two of its
    acquires: a role step does not wait for the read started at its own acquire when an older one has
    finished (the event's aim_age_ms says how old); a holders read is always the lease's own."""
    aim, release = Aim(), threading.Event()
    aim.read_ahead("roles", lambda: "older")
    assert aim.read_since("roles", 0) is not None  # finished
    since = time.monotonic_ns()
    aim.read_ahead("roles", lambda: release.wait(5) and "newer")
    fetched = aim.read_since("roles", since, older_if_running=True)
    assert fetched is not None and fetched.value == "older" and fetched.started_ns < since
    release.set()
    fetched = aim.read_since("roles", since)
    assert fetched is not None and fetched.value == "newer"
    aim.close()


def test_a_session_kill_of_a_rivals_lease_not_yet_reported_names_that_lease_not_the_aimed_one() -> None:
    """Aimed at worker 0's lease; at kill time the server's holder is worker 1's session, whose next
    lease the runner has not read the report of yet: retargeted, and the event names worker 1's round,
    with no owner token — never the aimed lease's (the audit would take it for what was struck)."""

    class _Kill:
        takes_guard = True

        def inject(self, _cluster: object, nodes: list[int], *, guard: Any) -> tuple[str, dict[str, object]]:
            return ("ended", {"sessions_ended": [4242]}) if guard("4242") else ("skipped: no", {"sessions_ended": []})

        def heal(self, _cluster: object, nodes: list[int]) -> str:
            return "stays ended"

    slots, kill = _slots(), _Kill()
    schedule = parse_schedule("session-kill worker=holder after-acquire=0 every")
    steps = [
        PlannedStep(index=p.index, step=p.step, build=lambda _w: kill, heal_after_ns=0)
        for p in planned_steps(at_scale(schedule, scale=1), ttl_ms=1000)
    ]
    scheduler = FaultScheduler(steps=steps, cluster=_Cluster(), node_count=1, workers=2)  # type: ignore[arg-type]
    scheduler.attach_workers(pids=(), freezer=None, leases=slots)  # type: ignore[arg-type]
    scheduler._aim.reported(Lease(owner=B, worker=1, round=0, reported_ns=1, session="4242"))
    slots[1].hold(round_=1, valid_until_ns=None)  # its round 1, granted, not yet reported
    slots[0].hold(round_=0, valid_until_ns=None)
    scheduler.on_acquired(worker=0, round_=0, t_ns=0, owner=A, session="7")
    scheduler.run_due()
    (event,) = [e for e in scheduler.events if e["action"] == "inject"]
    assert (event["aim"], event["lease_worker"], event["lease_round"], event["lease_owner"]) == (
        "retargeted",
        1,
        1,
        None,
    )
    assert event["lease_held"] is True and event["session_worker"] == 1 and fault_strikes([event]).struck == 1
