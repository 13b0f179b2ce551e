"""The timing sentinel on hand-built histories: no Redis, every rule with an exact interleaving."""

from __future__ import annotations

import math

import pytest

from lockcompare.analysis.sentinel import (
    MARK_SHARE,
    TimingPlan,
    eaten_share,
    fault_stalls,
    judge_timing,
    margins,
    plan_from_settings,
    smallest_margin,
    worst_stall,
)

MS = 1_000_000  # ns
CALL_MS = 0.2  # every call in these histories takes 0.2 ms


def rounds(*, worker: int = 0, n: int = 5, work_ms: float = 30, think_ms: float = 2, start_ms: float = 0,
           late: dict[tuple[int, str], float] | None = None) -> list[dict]:  # fmt: skip
    """``n`` rounds of one worker run exactly to plan: acquire, enter, read, work, write, exit,
    release, think. ``late[(round, step)]`` delays that step's start by so many ms."""
    late = late or {}
    events, t = [], start_ms

    def step(rnd: int, kind: str, **fields) -> None:
        nonlocal t
        t += late.get((rnd, kind), 0.0)
        t0 = int(t * MS)
        if kind == "acquire":
            fields["t_attempt"] = t0  # the successful attempt: the only one here
        events.append({"worker": worker, "round": rnd, "kind": kind, "t0": t0, "t1": t0 + int(CALL_MS * MS), **fields})
        t += CALL_MS

    for rnd in range(n):
        step(rnd, "acquire", ok=True, attempts=1, valid_until=None)
        step(rnd, "enter", inside=1)
        step(rnd, "read", balance=rnd)
        t += work_ms
        step(rnd, "write", accepted=True, value=rnd + 1)
        step(rnd, "exit")
        step(rnd, "release", released=True)
        t += think_ms
    return events


PLAN = TimingPlan(ttl_ms=100, work_ms=30, think_ms=2)


def test_a_history_run_to_plan_has_no_stall() -> None:
    verdict = judge_timing(rounds(), PLAN)
    assert verdict.stall.ms == pytest.approx(0, abs=1e-6)
    assert not verdict.marked


def test_a_late_work_sleep_is_found_with_where_it_was() -> None:
    history = rounds(late={(3, "write"): 12.5})  # the work sleep of round 3 overslept by 12.5 ms
    stall = worst_stall(history, PLAN)
    assert stall.ms == pytest.approx(12.5)
    assert stall.at == "worker 0 round 3: work sleep"


def test_a_late_think_sleep_counts_beyond_its_largest_jittered_draw() -> None:
    plan = TimingPlan(ttl_ms=100, work_ms=30, think_ms=2, jitter=0.5)  # think up to 2.5 ms
    history = rounds(think_ms=2.4)  # a draw inside the jitter: not late
    assert worst_stall(history, plan).ms == pytest.approx(0, abs=1e-6)
    history = rounds(late={(2, "acquire"): 7.0})  # the gap after round 1's release: 2 + 7 ms
    stall = worst_stall(history, plan)
    assert stall.ms == pytest.approx(7.0 + 2.0 - 2.5)
    assert stall.at == "worker 0 round 1: think sleep"


def test_a_slow_call_counts_beyond_the_usual_of_its_kind() -> None:
    history = rounds()
    write = next(e for e in history if e["kind"] == "write" and e["round"] == 2)
    write["t1"] += 9 * MS  # the reply came 9 ms late; the next step follows the reply
    for e in history:
        if e["t0"] > write["t0"]:
            e["t0"] += 9 * MS
            e["t1"] += 9 * MS
            if "t_attempt" in e:
                e["t_attempt"] += 9 * MS
    stall = worst_stall(history, PLAN)
    assert stall.ms == pytest.approx(9.0)
    assert stall.at == "worker 0 round 2: write call"


@pytest.mark.parametrize(("extra_ms", "stall_ms"), [(4.0, 0.0), (8.0, 3.0), (316.0, 311.0)])
def test_the_first_call_of_a_kind_is_allowed_its_connection_and_judged_past_it(
    extra_ms: float, stall_ms: float
) -> None:
    history = rounds()
    first = history[0]  # round 0's acquire: connect handshake
    first["t1"] += int(extra_ms * MS)
    for e in history[1:]:
        for field in ("t0", "t1", "t_attempt"):
            if field in e:
                e[field] += int(extra_ms * MS)
    stall = worst_stall(history, PLAN)
    assert stall.ms == pytest.approx(stall_ms, abs=1e-3)
    if stall_ms:
        assert stall.at == "worker 0 round 0: acquire call (first)"


def test_a_pause_longer_than_planned_is_a_stall_and_gaps_between_back_to_back_steps_count() -> None:
    plan = TimingPlan(ttl_ms=100, work_ms=30, pause_ms=120)
    history = [
        {"worker": 0, "round": 0, "kind": "acquire", "t0": 0, "t1": MS, "ok": True, "t_attempt": 0},
        {"worker": 0, "round": 0, "kind": "pause", "t0": MS, "t1": 127 * MS, "how": "sigstop"},  # 6 ms long
        {"worker": 0, "round": 0, "kind": "enter", "t0": 131 * MS, "t1": 132 * MS, "inside": 2},  # 4 ms gap
    ]
    assert worst_stall(history, plan).ms == pytest.approx(6.0)
    assert worst_stall(history, plan).at == "worker 0 round 0: pause length"
    history[2]["t0"] += 10 * MS  # now 14 ms between the pause's end and the enter
    assert worst_stall(history, plan).ms == pytest.approx(14.0)
    assert worst_stall(history, plan).at == "worker 0 round 0: pause → enter"


def test_a_late_fault_landing_is_found_from_its_planned_time() -> None:
    history = [
        {"worker": -1, "round": 4, "kind": "fault", "fault": "node-restart", "action": "inject",
         "t0": 217 * MS, "t1": 218 * MS, "planned_ns": 200 * MS},
        {"worker": -1, "round": 4, "kind": "fault", "fault": "node-restart", "action": "heal",
         "t0": 300 * MS, "t1": 301 * MS},  # no planned time: nothing to judge
    ]  # fmt: skip
    (stall,) = fault_stalls(history)
    assert stall.ms == pytest.approx(17.0)
    assert stall.at == "runner round 4: node-restart inject"


def _delay_fault(fault: str, *, worker: int | None, start_ms: float, end_ms: float) -> list[dict]:
    target = {} if worker is None else {"target_worker": worker}
    return [
        {"worker": -1, "round": 1, "kind": "fault", "fault": fault, "action": "inject", "step": 0,
         "t0": int(start_ms * MS), "t1": int(start_ms * MS) + 1, **target},
        {"worker": -1, "round": 1, "kind": "fault", "fault": fault, "action": "heal", "step": 0,
         "t0": int(end_ms * MS), "t1": int(end_ms * MS) + 1, **target},
    ]  # fmt: skip


@pytest.mark.parametrize("fault", ["starve", "slow", "cut", "session-kill", "slow-link", "link-cut"])  # and older names
def test_a_fault_that_delays_its_worker_on_purpose_is_not_a_stall_of_that_worker(fault: str) -> None:
    w0 = rounds(late={(2, "write"): 40.0})  # round 2's work sleep: 40 ms late, as a starve step's stop makes it
    w1 = rounds(worker=1, start_ms=1000, late={(3, "write"): 6.0})
    read = next(e for e in w0 if e["kind"] == "read" and e["round"] == 2)
    fault_events = _delay_fault(fault, worker=0, start_ms=read["t0"] / MS - 1, end_ms=read["t1"] / MS + 45)
    stall = worst_stall(w0 + w1 + fault_events, PLAN)
    # Worker 0's delay is the experiment; worker 1, which the fault did not target, is still judged.
    assert stall.ms == pytest.approx(6.0)
    assert stall.at == "worker 1 round 3: work sleep"
    # The same delay outside the fault's window is a stall again.
    moved = _delay_fault(fault, worker=0, start_ms=0.5, end_ms=1.0)
    assert worst_stall(w0 + w1 + moved, PLAN).ms == pytest.approx(40.0)


def test_a_node_fault_does_not_excuse_a_worker_and_an_untargeted_delay_excuses_every_worker() -> None:
    w0 = rounds(late={(2, "write"): 40.0})
    read = next(e for e in w0 if e["kind"] == "read" and e["round"] == 2)
    window = {"start_ms": read["t0"] / MS - 1, "end_ms": read["t1"] / MS + 45}
    assert worst_stall(w0 + _delay_fault("node-restart", worker=None, **window), PLAN).ms == pytest.approx(40.0)
    assert worst_stall(w0 + _delay_fault("starve", worker=None, **window), PLAN).ms == pytest.approx(0, abs=1e-6)


def test_extra_rounds_waiting_for_the_runner_are_not_a_gap() -> None:
    planned = rounds(n=2)
    extra = rounds(n=1, start_ms=500)  # the contend workload: the answer to "done" took a while
    for e in extra:
        e["extra"] = True
        e["round"] = 2
    assert worst_stall(planned + extra, PLAN).ms == pytest.approx(0, abs=1e-6)


def test_the_margin_is_computed_from_the_settings() -> None:
    # The lesson's experiments at --time-scale 0.1 (times already scaled, as a results row has them).
    baseline = plan_from_settings({"ttl_ms": 100, "work_ms": 30.0, "pause_ms": 0.0, "think_ms": 2.0, "jitter": 0.5})
    assert (smallest_margin(baseline).of, smallest_margin(baseline).ms) == ("TTL - work", 70.0)
    short = plan_from_settings({"ttl_ms": 20, "work_ms": 30.0})
    assert (smallest_margin(short).of, smallest_margin(short).ms) == ("work - TTL", 10.0)
    pause = plan_from_settings({"ttl_ms": 100, "work_ms": 30.0, "pause_ms": 120.0})
    assert (smallest_margin(pause).of, smallest_margin(pause).ms) == pytest.approx(("pause - TTL", 20.0))
    # Paused before the write, the lease must end during work + pause: 30 + 85 - 100 = 15.
    before = plan_from_settings({"ttl_ms": 100, "work_ms": 30.0, "pause_ms": 85.0, "pause_point": "before-write"})
    assert (smallest_margin(before).of, smallest_margin(before).ms) == pytest.approx(("pause - TTL", 15.0))
    fault = TimingPlan(ttl_ms=100, work_ms=30, fault_offset_ms=5)
    assert [(m.of, m.ms) for m in margins(fault)] == [("TTL - work", 70.0), ("work - fault offset", 25.0)]


@pytest.mark.parametrize(("late_ms", "marked"), [(9.9, False), (10.0, True), (25.0, True)])
def test_a_trial_is_marked_when_its_stall_ate_the_stated_share_of_its_margin(late_ms: float, marked: bool) -> None:
    plan = TimingPlan(ttl_ms=100, work_ms=30, pause_ms=120, think_ms=2)  # margin: pause - TTL = 20 ms
    verdict = judge_timing(rounds(late={(1, "write"): late_ms}), plan)
    assert MARK_SHARE == 0.5
    assert verdict.marked is marked
    row = verdict.as_row()
    assert row["timing_marked"] is marked and row["margin_ms"] == 20.0 and row["margin_of"] == "pause - TTL"
    assert eaten_share(row) == pytest.approx(late_ms / 20)


def test_rows_from_before_the_sentinel_have_no_share() -> None:
    assert math.isnan(eaten_share({"stall_ms": math.nan, "margin_ms": math.nan}))
    assert math.isnan(eaten_share({}))


def test_the_scheduler_admits_fewer_trials_once_they_stall_and_more_once_calm() -> None:
    from lockcompare.runner.scheduler import BACK_OFF_SHARE, CALM_TO_GROW, StallGovernor

    gov = StallGovernor(jobs=8)
    gov.record(share=math.nan, concurrent=8)  # a row without a measurement changes nothing
    gov.record(share=BACK_OFF_SHARE * 0.9, concurrent=8)
    assert gov.limit == 8
    gov.record(share=BACK_OFF_SHARE, concurrent=8)
    assert (gov.limit, gov.backed_off) == (4, 1)
    gov.record(share=1.5, concurrent=8)  # it too ran beside 7 others: already answered by the 4
    assert gov.limit == 4
    gov.record(share=1.5, concurrent=4)
    assert gov.limit == 2
    gov.record(share=1.5, concurrent=3)  # it ran before the last back-off: half of 3 lowers nothing
    assert gov.limit == 2
    gov.record(share=1.5, concurrent=2)
    gov.record(share=1.5, concurrent=1)  # alone and still stalling: one at a time is the floor
    assert (gov.limit, gov.backed_off) == (1, 3)
    for _ in range(CALM_TO_GROW * 2):
        gov.record(share=0.01, concurrent=1)
    assert gov.limit == 3


def test_a_lock_free_row_is_judged_only_against_margins_its_backend_has() -> None:
    # atomic/optimistic x client-pause: no lease, so neither TTL - work nor pause - TTL is theirs.
    plan = TimingPlan(ttl_ms=100, work_ms=30, pause_ms=120, think_ms=2, leased=False)
    assert margins(plan) == []
    verdict = judge_timing(rounds(late={(1, "write"): 25.0}), plan)
    assert verdict.stall.ms == pytest.approx(25.0) and not verdict.marked and math.isnan(verdict.eaten)
    assert verdict.as_row()["margin_of"] == "none (no lease)"
    # A fault's own margin stays a margin of the lock-free trial too.
    fault = TimingPlan(ttl_ms=100, work_ms=30, fault_offset_ms=5, leased=False)
    assert [(m.of, m.ms) for m in margins(fault)] == [("work - fault offset", 25.0)]


def _shift_after(history: list[dict], t_ms: float, by_ms: float) -> None:
    for e in history:
        for field in ("t0", "t1", "t_attempt"):
            if field in e and e[field] > t_ms * MS:
                e[field] += int(by_ms * MS)


def test_a_blocking_acquire_that_waited_for_the_holder_is_the_lock_not_the_machine() -> None:
    """kazoo's recipe and redis-semaphore wait inside one acquire call until the holder lets go: a
    call as long as the rival's section, which judged as a stall marked every such trial."""
    waiter = rounds(worker=1, n=4)
    blocked = next(e for e in waiter if e["kind"] == "acquire" and e["round"] == 1)
    asked_ms = blocked["t_attempt"] / MS
    holder = rounds(worker=0, n=1, work_ms=30, start_ms=asked_ms - 1)  # holds from just before the ask
    waited_ms = (holder[-1]["t1"] - blocked["t1"]) / MS  # answered when the holder released
    _shift_after(waiter, asked_ms, waited_ms)  # the call's end and every later step
    assert worst_stall(holder + waiter, PLAN).ms < 1.0
    # The same call with nobody holding the lock is a stall of the wait's length.
    stall = worst_stall(waiter, PLAN)
    assert stall.at == "worker 1 round 1: acquire call"
    assert stall.ms == pytest.approx(waited_ms, abs=0.05)


def test_a_release_that_found_the_lock_gone_may_retry_and_is_not_judged() -> None:
    """sesame's Redlock retries a release that fails on a quorum (2 s measured): the library's
    budget, not a stall. The same call that released is judged."""
    for released, judged in ((False, False), (True, True)):
        history = rounds(n=5)
        late = next(e for e in history if e["kind"] == "release" and e["round"] == 2)
        late["released"] = released
        late["t1"] += 2000 * MS
        _shift_after(history, late["t0"] / MS + 1, 2000)
        stall = worst_stall(history, PLAN)
        assert (stall.at == "worker 0 round 2: release call") is judged
        assert (stall.ms > 1999) is judged


def test_an_acquire_that_started_the_external_client_process_is_not_judged() -> None:
    """redis-semaphore's client exits on a lost lock; the next acquire starts a new Node process
    inside the call (0.8-1.5 s measured): that start-up is the client's, not a stall of the plan."""
    history = rounds(n=5)
    slow = next(e for e in history if e["kind"] == "acquire" and e["round"] == 3)
    _shift_after(history, slow["t0"] / MS, 900)  # the call ends 900 ms later, and so does the rest
    stall = worst_stall(history, PLAN)
    assert stall.at == "worker 0 round 3: acquire call" and stall.ms == pytest.approx(900, abs=0.05)
    start = {"worker": 0, "round": 3, "kind": "client", "t0": slow["t0"] + MS, "t1": slow["t1"] - MS, "pid": 1}
    assert worst_stall([*history, start], PLAN).ms < 1.0


@pytest.mark.parametrize("fault", ["restart", "crash", "failover"])
def test_a_call_waiting_on_a_server_a_fault_keeps_away_is_not_judged_but_a_sleep_is(fault: str) -> None:
    """kazoo's release blocks while its ZooKeeper server restarts (28 marks of the reproduction,
    173-1262 ms against 250): the fault's doing. Sleeps in that window are still the machine's."""
    history = rounds(n=5)
    blocked = next(e for e in history if e["kind"] == "release" and e["round"] == 2)
    blocked["t1"] += 700 * MS
    _shift_after(history, blocked["t0"] / MS + 1, 700)
    start_ms = blocked["t0"] / MS - 5
    healed = _delay_fault(fault, worker=None, start_ms=start_ms, end_ms=blocked["t1"] / MS + 1)
    assert worst_stall(history + healed, PLAN).ms < 1.0
    never_healed = healed[:1]  # a crash that stays: its window is one TTL (100 ms) from the inject
    assert worst_stall(history + never_healed, PLAN).ms < 1.0
    # Outside every window the same call is a stall again, and so is a late sleep inside one.
    elsewhere = _delay_fault(fault, worker=None, start_ms=0.5, end_ms=1.0)
    assert worst_stall(history + elsewhere, PLAN).at == "worker 0 round 2: release call"
    sleepy = rounds(n=5, late={(3, "write"): 40.0})
    read = next(e for e in sleepy if e["kind"] == "read" and e["round"] == 3)
    window = _delay_fault(fault, worker=None, start_ms=read["t0"] / MS - 1, end_ms=read["t1"] / MS + 45)
    assert worst_stall(sleepy + window, PLAN).ms == pytest.approx(40.0)


def test_an_acquire_of_a_backend_that_declares_it_waits_is_not_judged() -> None:
    """Under slow-response the rival's znode exists while its slowed acquire has not returned: the
    waiter blocks inside kazoo's acquire with no hold in the history (11 ZooKeeper marks)."""
    history = rounds(n=5)
    slow = next(e for e in history if e["kind"] == "acquire" and e["round"] == 3)
    _shift_after(history, slow["t0"] / MS, 300)
    assert worst_stall(history, PLAN).at == "worker 0 round 3: acquire call"
    waits = TimingPlan(ttl_ms=100, work_ms=30, think_ms=2, acquire_waits=True)
    assert worst_stall(history, waits).ms < 1.0


def _role_inject(*, planned_ms: float, late_ms: float, read_wait_ms: float | None, **fields) -> dict:
    wait = {} if read_wait_ms is None else {"read_wait_ms": read_wait_ms}
    return {"worker": -1, "round": 1, "kind": "fault", "fault": "node-freeze", "action": "inject", "step": 0,
            "t0": int((planned_ms + late_ms) * MS), "t1": int((planned_ms + late_ms + 1) * MS),
            "planned_ns": int(planned_ms * MS), "target": "leader", **wait, **fields}  # fmt: skip


def test_a_role_aimed_landing_counts_from_its_aim_while_it_lands_inside_the_lease_it_followed() -> None:
    """A step aimed at the leader waits at its planned moment for the role read made ahead of it
    (faults/aim.py): 160-400 ms on the loaded partial reproduction, where the inject landed
    ~1 ms after the read. That wait is the step's design while the strike still falls in the lease
    it followed; a landing pushed past that lease is the machine's doing and is judged whole."""
    history = rounds(n=5)
    acquired = next(e for e in history if e["kind"] == "acquire" and e["round"] == 1)
    releasing = next(e for e in history if e["kind"] == "release" and e["round"] == 1)
    planned_ms = acquired["t1"] / MS + 2
    inside = _role_inject(planned_ms=planned_ms, late_ms=20.0, read_wait_ms=18.5)
    assert inside["t0"] < releasing["t0"]
    (stall,) = fault_stalls([*history, inside])
    assert stall.ms == pytest.approx(1.5)
    # Without the recorded wait the whole lateness is judged (histories from before it was recorded).
    (stall,) = fault_stalls([*history, _role_inject(planned_ms=planned_ms, late_ms=20.0, read_wait_ms=None)])
    assert stall.ms == pytest.approx(20.0)
    # The same wait that made it land after worker 0 began releasing: judged whole.
    late_ms = releasing["t0"] / MS + 1 - planned_ms
    past = _role_inject(planned_ms=planned_ms, late_ms=late_ms, read_wait_ms=late_ms - 1)
    (stall,) = fault_stalls([*history, past])
    assert stall.ms == pytest.approx(late_ms)
    # A lease-aimed step says itself whether its lease was still held as it acted.
    for held, judged_ms in ((True, 1.5), (False, 20.0)):
        aimed = _role_inject(planned_ms=planned_ms, late_ms=20.0, read_wait_ms=18.5, lease_worker=1, lease_held=held)
        (stall,) = fault_stalls([*history, aimed])  # worker 1 has no lease here: lease_held decides
        assert stall.ms == pytest.approx(judged_ms)


def test_a_skipped_step_landed_nowhere_and_is_not_judged() -> None:
    """A lease-aimed step whose lease ended while it waited for its read is skipped (it acts on
    nothing, and strikes a later lease): its 280-700 ms "lateness" marked 7 trials of the partial run."""
    skipped = {"worker": -1, "round": 0, "kind": "fault", "fault": "split", "action": "skipped", "step": 0,
               "t0": 700 * MS, "t1": 700 * MS, "planned_ns": 200 * MS, "aim": "missed"}  # fmt: skip
    assert fault_stalls([skipped]) == []
    assert fault_stalls([{**skipped, "action": "inject"}])[0].ms == pytest.approx(500.0)


def test_an_outage_lasts_for_a_worker_until_its_first_lock_call_after_the_heal_is_answered() -> None:
    """A heal ends the fault, not the service's recovery (an isolated etcd leader's higher term forces
    an election as it rejoins; a ZooKeeper member rejoins "not serving"): the worker's first call to
    the lock servers after the heal is not judged; the next one is, and so are resource calls."""
    history = rounds(n=6)
    heal_ms = next(e for e in history if e["kind"] == "acquire" and e["round"] == 2)["t1"] / MS + 0.1
    first = next(e for e in history if e["kind"] == "release" and e["round"] == 2)
    _shift_after(history, first["t0"] / MS + 0.1, 150)  # the first lock call after the heal waits 150 ms
    outage = _delay_fault("isolate", worker=None, start_ms=heal_ms - 0.3, end_ms=heal_ms)
    assert worst_stall(history + outage, PLAN).ms < 1.0
    second = next(e for e in history if e["kind"] == "release" and e["round"] == 3)
    _shift_after(history, second["t0"] / MS + 0.1, 90)
    stall = worst_stall(history + outage, PLAN)
    assert (stall.at, round(stall.ms)) == ("worker 0 round 3: release call", 90)
    # A resource call (the write before it) is no answer from the lock servers: it ends nothing.
    write = next(e for e in history if e["kind"] == "write" and e["round"] == 2)
    assert write["t0"] > heal_ms * MS and write["t0"] < first["t0"]
