"""The checker on hand-built histories: no Redis, every rule exercised by an exact interleaving."""

from __future__ import annotations

import math

import pytest

from lockcompare.analysis.checker import check, stale_writes
from lockcompare.analysis.counters import ResourceCounters
from lockcompare.analysis.critical_sections import Interval, concurrency_profile, cs_intervals, overlap_conflicts

MS = 1_000_000  # ns


class HistoryBuilder:
    """Builds a history the way workers record it; times are in ms, each step takes 0.1 ms."""

    def __init__(self) -> None:
        self.events: list[dict] = []

    def step(self, worker: int, rnd: int, kind: str, at_ms: float, **fields) -> None:
        t0 = int(at_ms * MS)
        self.events.append({"worker": worker, "round": rnd, "kind": kind, "t0": t0, "t1": t0 + MS // 10, **fields})

    def critical_section(
        self,
        worker: int,
        rnd: int,
        *,
        acquire_ms: float,
        enter_ms: float,
        exit_ms: float,
        inside: int,
        balance: int,
        accepted: bool = True,
        valid_until_ms: float | None = None,
        fence: int | None = None,
    ) -> None:
        valid_until = None if valid_until_ms is None else int(valid_until_ms * MS)
        self.step(worker, rnd, "acquire", acquire_ms, ok=True, attempts=1, refusals={}, t_attempt=int(acquire_ms * MS),
                  owner=f"o{worker}{rnd}", fence=fence, valid_until=valid_until)  # fmt: skip
        self.step(worker, rnd, "enter", enter_ms, inside=inside)
        self.step(worker, rnd, "read", enter_ms + 0.2, balance=balance)
        self.step(worker, rnd, "write", exit_ms - 0.4, value=balance + 1, accepted=accepted, fence=fence)
        self.step(worker, rnd, "exit", exit_ms)
        self.step(worker, rnd, "release", exit_ms + 0.2, released=True)


def counters(**kw: int) -> ResourceCounters:
    base = dict(entries=0, conflicts=0, writes_accepted=0, writes_rejected=0, final_balance=0, occupancy=0)
    return ResourceCounters(**(base | kw))


def test_sequential_critical_sections_are_exclusive() -> None:
    h = HistoryBuilder()
    h.critical_section(0, 0, acquire_ms=0, enter_ms=1, exit_ms=301, inside=1, balance=0, valid_until_ms=1000)
    h.critical_section(1, 0, acquire_ms=302, enter_ms=303, exit_ms=603, inside=1, balance=1, valid_until_ms=1302)
    m = check(h.events, counters(entries=2, writes_accepted=2, final_balance=2), entries_planned=2)
    assert (m.entries, m.conflicts, m.conflicts_overlap, m.lost_updates) == (2, 0, 0, 0)
    assert m.conflict_measures_agree and m.max_concurrency == 1 and m.overlap_ms == 0
    assert m.verdict == "exclusive" and m.problem == ""


def test_overlapping_critical_sections_conflict_and_lose_an_update() -> None:
    # Both read balance 0; both write 1: one increment is lost.
    h = HistoryBuilder()
    h.critical_section(0, 0, acquire_ms=0, enter_ms=1, exit_ms=301, inside=1, balance=0)
    h.critical_section(1, 0, acquire_ms=100, enter_ms=101, exit_ms=401, inside=2, balance=0)
    m = check(h.events, counters(entries=2, conflicts=1, writes_accepted=2, final_balance=1), entries_planned=2)
    assert (m.conflicts, m.conflicts_overlap, m.max_concurrency) == (1, 1, 2)
    assert m.conflict_measures_agree
    assert m.overlap_ms == pytest.approx(200, abs=0.5)  # 101..301 ms, both inside
    assert m.lost_updates == 1 and m.verdict == "lost-updates"


def test_fenced_zombie_write_is_rejected_and_counted_as_stale() -> None:
    # Worker 0's lease (token 1) ends at 1000 ms while paused; worker 1 (token 2) gets in at 1000;
    # worker 0 wakes at 1200, enters during worker 1's section, and its write is rejected.
    h = HistoryBuilder()
    h.critical_section(1, 0, acquire_ms=1000, enter_ms=1001, exit_ms=1301, inside=1, balance=0,
                       valid_until_ms=2000, fence=2)  # fmt: skip
    h.critical_section(0, 0, acquire_ms=0, enter_ms=1200, exit_ms=1500, inside=2, balance=0,
                       valid_until_ms=1000, fence=1, accepted=False)  # fmt: skip
    m = check(
        h.events,
        counters(entries=2, conflicts=1, writes_accepted=1, writes_rejected=1, final_balance=1),
        entries_planned=2,
    )
    assert (m.conflicts, m.conflicts_overlap) == (1, 1)
    assert (m.stale_writes_accepted, m.stale_writes_rejected) == (0, 1)
    assert m.lost_updates == 0 and m.verdict == "conflicts-no-damage"


def test_touching_intervals_do_not_overlap() -> None:
    assert overlap_conflicts([Interval(0, 0, 10), Interval(1, 10, 20)]) == 0
    assert concurrency_profile([Interval(0, 0, 10), Interval(1, 10, 20)]) == (1, 0.0)


def test_overlap_counts_only_other_workers_and_the_later_entry() -> None:
    intervals = [Interval(0, 0, 10 * MS), Interval(1, 5 * MS, 15 * MS), Interval(0, 12 * MS, 20 * MS)]
    # worker 1 entered inside worker 0's first section; worker 0's second entry inside worker 1's.
    assert overlap_conflicts(intervals) == 2
    peak, overlap_ms = concurrency_profile(intervals)
    assert peak == 2 and overlap_ms == pytest.approx(5 + 3)


def test_three_workers_inside_at_once() -> None:
    intervals = [Interval(w, w * MS, 10 * MS) for w in range(3)]
    assert overlap_conflicts(intervals) == 2
    assert concurrency_profile(intervals)[0] == 3


def test_measures_that_disagree_are_reported_not_hidden() -> None:
    # The resource says worker 1 found someone inside, but the intervals do not overlap.
    h = HistoryBuilder()
    h.critical_section(0, 0, acquire_ms=0, enter_ms=1, exit_ms=301, inside=1, balance=0)
    h.critical_section(1, 0, acquire_ms=302, enter_ms=303, exit_ms=603, inside=2, balance=1)
    m = check(h.events, counters(entries=2, conflicts=1, writes_accepted=2, final_balance=2), entries_planned=2)
    assert m.conflicts == 1 and m.conflicts_overlap == 0 and not m.conflict_measures_agree
    assert m.verdict == "conflicts-no-damage"


def test_enter_without_exit_makes_the_verdict_unknown() -> None:
    h = HistoryBuilder()
    h.step(0, 0, "enter", 1, inside=1)
    m = check(h.events, counters(entries=1, occupancy=1), entries_planned=1)
    assert m.verdict == "unknown" and "never exited" in m.problem
    assert math.isnan(m.overlap_ms)


def test_resource_and_history_disagreeing_on_entries_is_unknown() -> None:
    h = HistoryBuilder()
    h.critical_section(0, 0, acquire_ms=0, enter_ms=1, exit_ms=301, inside=1, balance=0)
    m = check(h.events, counters(entries=2, writes_accepted=1, final_balance=1), entries_planned=2)
    assert m.verdict == "unknown" and "1 entries in the history but 2" in m.problem


def test_a_worker_error_makes_the_verdict_unknown_never_exclusive() -> None:
    h = HistoryBuilder()
    h.critical_section(0, 0, acquire_ms=0, enter_ms=1, exit_ms=301, inside=1, balance=0)
    h.step(1, 0, "error", 5, message="ConnectionError: resource gone")
    m = check(h.events, counters(entries=1, writes_accepted=1, final_balance=1), entries_planned=1)
    assert m.verdict == "unknown" and "resource gone" in m.problem


def test_malformed_history_is_unknown_not_a_crash() -> None:
    m = check([{"worker": 0, "kind": "enter"}], counters(), entries_planned=1)
    assert m.verdict == "unknown" and m.problem.startswith("history unusable")


def test_acquire_statistics() -> None:
    h = HistoryBuilder()
    h.critical_section(0, 0, acquire_ms=0, enter_ms=1, exit_ms=301, inside=1, balance=0)
    h.step(1, 0, "acquire", 0, ok=False, attempts=30, refusals={"held": 29, "validity": 1})
    m = check(h.events, counters(entries=1, writes_accepted=1, final_balance=1), entries_planned=1)
    assert (m.acquires, m.acquire_timeouts, m.refused_validity) == (1, 1, 1)
    assert m.acquire_p50_ms == pytest.approx(0.1)  # t1 - t_attempt of the one granted acquire


def test_stale_writes_need_a_lease_deadline() -> None:
    h = HistoryBuilder()  # the no-lock baseline: leases never expire, so nothing is stale
    h.critical_section(0, 0, acquire_ms=0, enter_ms=1, exit_ms=5000, inside=1, balance=0)
    assert stale_writes(h.events) == (0, 0)


def test_cs_intervals_pair_enter_and_exit_per_worker() -> None:
    h = HistoryBuilder()
    h.step(0, 0, "enter", 1, inside=1)
    h.step(1, 0, "enter", 2, inside=2)
    h.step(0, 0, "exit", 3)
    h.step(1, 0, "exit", 4)
    assert [(i.worker, round(i.start_ns / MS, 2), round(i.end_ns / MS, 2)) for i in cs_intervals(h.events)] == [
        (0, 1.05, 3.05),
        (1, 2.05, 4.05),
    ]


def test_history_survives_a_save_and_load(tmp_path) -> None:
    from lockcompare.analysis import history

    h = HistoryBuilder()
    h.critical_section(0, 0, acquire_ms=0, enter_ms=1, exit_ms=301, inside=1, balance=0)
    path = tmp_path / "h.jsonl.gz"
    history.save(h.events, path)
    assert history.load(path) == h.events
    assert not list(tmp_path.glob("*.part"))


def test_timeline_shows_each_step_relative_to_the_first() -> None:
    from lockcompare.render.timeline import render_timeline

    h = HistoryBuilder()
    h.critical_section(0, 0, acquire_ms=100, enter_ms=101, exit_ms=401, inside=1, balance=7, fence=3)
    text = render_timeline(h.events, from_ms=0.5, to_ms=300.8)  # the write starts at 300.6 ms
    lines = text.splitlines()
    assert lines[0].split()[:3] == ["t", "ms", "took"]
    steps = [line.split()[4] for line in lines[2:]]
    assert steps == ["enter", "read", "write"]  # acquire at 0 ms and exit at 301 ms fall outside
    assert "balance=7" in text and "value=8, accepted=True, fence=3" in text


def test_the_starvation_that_made_think_time_necessary() -> None:
    # A real history of single x client-pause from before think time existed (its CSV row is in
    # tests/data/schema1.csv: 2/80 conflicts): worker 1 re-acquired within a millisecond of every
    # release, and worker 0, polling every 10 ms, got in only after worker 1's 40 rounds were done.
    from pathlib import Path

    from lockcompare.analysis import history

    events = history.load(Path(__file__).parent / "data" / "starved-client-pause.jsonl.gz")
    order = "".join(str(e["worker"]) for e in sorted(events, key=lambda e: e["t0"]) if e["kind"] == "enter")
    assert max(len(run) for run in order.replace("0", " ").split()) == 39


# --- the history's safety evidence decides too (issue 17, item 6) --------------------------------


def test_an_exclusive_looking_trial_with_a_grant_over_a_valid_lease_is_not_exclusive() -> None:
    # Worker 0's lease runs to 1000 ms and is released at 300.2; worker 1 is granted at 200 ms,
    # inside it (a careless lock, or a node that forgot the key). Their sections never overlap and
    # nothing is lost: the resource saw nothing, but two valid leases existed at once.
    h = HistoryBuilder()
    h.critical_section(0, 0, acquire_ms=0, enter_ms=1, exit_ms=100, inside=1, balance=0, valid_until_ms=1000)
    h.critical_section(1, 0, acquire_ms=200, enter_ms=400, exit_ms=500, inside=1, balance=1, valid_until_ms=1200)
    h.events = [e for e in h.events if not (e["worker"] == 0 and e["kind"] == "release")]
    h.step(0, 0, "release", 300, released=True)
    m = check(h.events, counters(entries=2, writes_accepted=2, final_balance=2), entries_planned=2)
    assert (m.conflicts, m.conflicts_overlap, m.lost_updates) == (0, 0, 0)
    assert m.grants_while_held == 1
    assert m.verdict == "lease-violated"


def test_a_stale_write_accepted_without_overlap_is_not_exclusive() -> None:
    # Worker 0 writes at 1100 ms on a lease that ended at 1000 ms; nobody else was there to collide.
    h = HistoryBuilder()
    h.critical_section(0, 0, acquire_ms=0, enter_ms=1, exit_ms=1100.4, inside=1, balance=0, valid_until_ms=1000)
    m = check(h.events, counters(entries=1, writes_accepted=1, final_balance=1), entries_planned=1)
    assert (m.stale_writes_accepted, m.conflicts, m.lost_updates) == (1, 0, 0)
    assert m.verdict == "lease-violated"


def test_a_backwards_token_accepted_is_not_exclusive_but_one_refused_is_only_counted() -> None:
    # The token counter restarted: worker 1 gets token 1 after worker 0's token 5.
    def trial(*, accepted: bool):
        h = HistoryBuilder()
        h.critical_section(0, 0, acquire_ms=0, enter_ms=1, exit_ms=301, inside=1, balance=0,
                           valid_until_ms=1000, fence=5)  # fmt: skip
        h.critical_section(1, 0, acquire_ms=302, enter_ms=303, exit_ms=603, inside=1, balance=1,
                           valid_until_ms=1302, fence=1, accepted=accepted)  # fmt: skip
        n = 2 if accepted else 1
        return check(h.events, counters(entries=2, writes_accepted=n, writes_rejected=2 - n, final_balance=n),
                     entries_planned=2)  # fmt: skip

    let_in = trial(accepted=True)  # nothing checked the token: two holders the resource cannot tell apart
    assert (let_in.tokens_backwards, let_in.backwards_writes_accepted, let_in.verdict) == (1, 1, "lease-violated")
    fenced = trial(accepted=False)  # the resource refused it: safe, and worker 1 got nothing done
    assert (fenced.tokens_backwards, fenced.backwards_writes_accepted) == (1, 0)
    assert fenced.verdict == "starved" and fenced.workers_starved == 1


def test_every_verdict_has_a_meaning_and_safety_comes_before_progress() -> None:
    from lockcompare.analysis.checker import VERDICT_MEANINGS, verdict_for

    seen = {
        verdict_for(conflicts=c, lost_updates=lost, entries=e, entries_planned=2, violations=v, starved_workers=s,
                    double_applied=d)
        for c in (0, 1) for lost in (0, 1) for e in (0, 1, 2) for v in (0, 1) for s in (0, 1) for d in (0, 1)
    }  # fmt: skip
    assert seen == set(VERDICT_MEANINGS) - {"unknown"}
    assert verdict_for(conflicts=0, lost_updates=0, entries=2, entries_planned=2, violations=1, starved_workers=1) == (
        "lease-violated"
    )


# --- progress beside safety (issue 17, item 8) --------------------------------------------------


def test_progress_per_worker_and_the_worker_the_resource_starved() -> None:
    # Fencing after a token rollback: worker 1 holds a valid lease in 4 rounds; its token is below
    # the resource's high-water mark, so 3 of its 4 writes are refused. It is starved, though not
    # entirely without progress; worker 0 writes every time.
    h = HistoryBuilder()
    for rnd in range(4):
        base = rnd * 1000
        h.critical_section(0, rnd, acquire_ms=base, enter_ms=base + 1, exit_ms=base + 301, inside=1,
                           balance=rnd, valid_until_ms=base + 1000, fence=100 + rnd)  # fmt: skip
        h.critical_section(1, rnd, acquire_ms=base + 400, enter_ms=base + 401, exit_ms=base + 701, inside=1,
                           balance=rnd + 1, valid_until_ms=base + 1400, fence=(1, 2, 3, 200)[rnd],
                           accepted=rnd == 3)  # fmt: skip
    m = check(h.events, counters(entries=8, writes_accepted=5, writes_rejected=3, final_balance=5), entries_planned=8)
    assert m.progress_by_worker == "w0:4/4 w1:1/4"
    assert (m.rounds_progressed, m.writes_accepted_min_worker, m.rounds_denied, m.workers_starved) == (5, 1, 3, 1)
    assert m.verdict == "starved"


def test_a_zombie_refused_after_its_lease_ran_out_is_fencing_working_not_starvation() -> None:
    # Worker 0 is paused past its lease in every round; its writes come after its deadline and the
    # resource refuses them (stale, rejected). It made no progress, but no valid holder was denied.
    h = HistoryBuilder()
    for rnd in range(2):
        base = rnd * 3000
        h.critical_section(1, rnd, acquire_ms=base + 1000, enter_ms=base + 1001, exit_ms=base + 1301, inside=1,
                           balance=rnd, valid_until_ms=base + 2000, fence=2 + 2 * rnd)  # fmt: skip
        h.critical_section(0, rnd, acquire_ms=base, enter_ms=base + 1400, exit_ms=base + 1700, inside=1,
                           balance=rnd + 1, valid_until_ms=base + 1000, fence=1 + 2 * rnd, accepted=False)  # fmt: skip
    m = check(h.events, counters(entries=4, writes_accepted=2, writes_rejected=2, final_balance=2), entries_planned=4)
    assert (m.stale_writes_rejected, m.rounds_denied, m.workers_starved) == (2, 0, 0)
    assert m.progress_by_worker == "w0:0/2 w1:2/2" and m.writes_accepted_min_worker == 0


def test_a_skipped_write_is_counted_and_is_neither_stale_nor_a_denial() -> None:
    h = HistoryBuilder()
    h.critical_section(0, 0, acquire_ms=0, enter_ms=1, exit_ms=301, inside=1, balance=0, valid_until_ms=1000)
    h.step(1, 0, "acquire", 1000, ok=True, attempts=1, refusals={}, t_attempt=1000 * MS, owner="o10",
           fence=None, valid_until=2000 * MS)  # fmt: skip
    h.step(1, 0, "enter", 1001, inside=1)
    h.step(1, 0, "read", 1001.2, balance=1)
    h.step(1, 0, "lease", 2100, ok=False, reason="expired", valid_until=2000 * MS)
    h.step(1, 0, "write-skipped", 2100.2, reason="expired")
    h.step(1, 0, "exit", 2101)
    h.step(1, 0, "release", 2101.2, released=False)
    m = check(h.events, counters(entries=2, writes_accepted=1, final_balance=1), entries_planned=2)
    assert (m.writes_skipped, m.stale_writes_accepted, m.lost_updates, m.rounds_denied) == (1, 0, 0, 0)
    assert m.progress_by_worker == "w0:1/1 w1:0/1" and m.verdict == "exclusive"
