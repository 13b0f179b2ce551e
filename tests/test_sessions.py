"""Session leases (no deadline: the lock is its holder's session) judged on hand-built histories.

A session lock's lease is valid from its grant until its holder releases it or the server is seen
ending its session (analysis/sessions.py): a grant inside that interval is a grant over a valid
lease, a write after the server ended it is a stale write, and an unlock that releases nothing
inside it is named in the row's ``problem`` (what PgBouncer's transaction pooling does).
"""

from __future__ import annotations

from typing import Any

from lockcompare.analysis.checker import check
from lockcompare.analysis.counters import ResourceCounters
from lockcompare.analysis.evidence import foreign_releases, grants_while_held, releases_of_nothing, stale_writes
from lockcompare.analysis.sessions import lease_deadlines

MS = 1_000_000  # ns


def step(worker: int, rnd: int, kind: str, at_ms: float, **fields: Any) -> dict[str, Any]:
    t0 = int(at_ms * MS)
    return {"worker": worker, "round": rnd, "kind": kind, "t0": t0, "t1": t0 + MS // 10, **fields}


def grant(worker: int, rnd: int, at_ms: float, *, attempt_ms: float | None = None, session: bool = True) -> dict:
    """A granted acquire without a deadline; ``session``: from a lock that says it has no TTL."""
    start = at_ms if attempt_ms is None else attempt_ms
    marks = {"no_ttl": True} if session else {}
    return step(worker, rnd, "acquire", at_ms, ok=True, attempts=1, refusals={}, t_attempt=int(start * MS),
                owner=f"o{worker}{rnd}", fence=None, valid_until=None, **marks)  # fmt: skip


def section(worker: int, rnd: int, at_ms: float, *, inside: int, balance: int, released: bool) -> list[dict]:
    """Enter at ``at_ms``, read, write ``balance + 1`` at +3 ms, exit at +4, release at +5."""
    return [
        step(worker, rnd, "enter", at_ms, inside=inside),
        step(worker, rnd, "read", at_ms + 1, balance=balance),
        step(worker, rnd, "write", at_ms + 3, value=balance + 1, accepted=True, fence=None),
        step(worker, rnd, "exit", at_ms + 4),
        step(worker, rnd, "release", at_ms + 5, released=released),
    ]


def fault(name: str, action: str, at_ms: float, **fields: Any) -> dict[str, Any]:
    return step(-1, 0, "fault", at_ms, fault=name, action=action, step=0, nodes=[0], **fields)


def kill(at_ms: float, *, ended: list[int]) -> dict[str, Any]:
    return fault("session-kill", "inject", at_ms, sessions_ended=ended, target_worker=0,
                 detail="pg_terminate_backend: ..." if ended else "skipped: no session held the lock")  # fmt: skip


def counters(**kw: int) -> ResourceCounters:
    base = dict(entries=0, conflicts=0, writes_accepted=0, writes_rejected=0, final_balance=0, occupancy=0)
    return ResourceCounters(**(base | kw))


def pooled() -> list[dict]:
    """What a transaction-pooling proxy does: worker 1 is granted while worker 0 holds (its lock sits on
    a pooled server session the proxy lent worker 1), and worker 0's unlock runs on another session."""
    return [
        grant(0, 0, 0),
        *section(0, 0, 1, inside=1, balance=0, released=False),  # enter 1, write 4, release 6: nothing released
        grant(1, 0, 2, attempt_ms=2),
        *section(1, 0, 3, inside=2, balance=0, released=True),  # overlaps: enters at 3, writes 1 at 6
    ]


def test_a_grant_over_a_session_lease_counts_and_an_unlock_of_nothing_is_named() -> None:
    history = pooled()
    assert grants_while_held(history) == 1
    assert releases_of_nothing(history) == 1
    assert foreign_releases(history) == 0  # worker 1 released its own (the latest grant before it)
    m = check(history, counters(entries=2, conflicts=1, writes_accepted=2, final_balance=1), entries_planned=2)
    assert m.verdict == "lost-updates"  # the verdict stands: the note is not "unknown"
    assert m.problem == (
        "unlock released nothing while held (1 of 2 releases): session not kept "
        "(a transaction-pooling proxy? a lock that expires?)"
    )
    assert m.grants_while_held == 1


def test_the_same_history_from_a_lock_that_claims_nothing_counts_nothing() -> None:
    """The no-lock baseline's leases have no deadline too, but it does not say it has no TTL."""
    history = [{**e, "no_ttl": False} if e["kind"] == "acquire" else e for e in pooled()]
    assert (grants_while_held(history), releases_of_nothing(history), foreign_releases(history)) == (0, 0, 0)
    m = check(history, counters(entries=2, conflicts=1, writes_accepted=2, final_balance=1), entries_planned=2)
    assert m.problem == ""


def test_a_session_ended_by_the_server_ends_the_lease_so_the_grant_is_legal_and_the_write_stale() -> None:
    """session-kill: worker 0's session ends at 2 ms; worker 1's grant after it is legal; worker 0, not
    told, writes at 4 ms (a stale write, accepted) and learns of it at its release (nothing released)."""
    history = [
        grant(0, 0, 0),
        kill(2, ended=[4242]),
        grant(1, 0, 3, attempt_ms=2.5),
        *section(0, 0, 1, inside=1, balance=0, released=False),
        *section(1, 0, 3.5, inside=2, balance=0, released=True),
    ]
    assert lease_deadlines(history) == {(0, 0): 2 * MS, (1, 0): None}
    assert grants_while_held(history) == 0
    assert releases_of_nothing(history) == 0  # its session was seen to end: the release has its reason
    assert stale_writes(history) == (1, 0)
    m = check(history, counters(entries=2, conflicts=1, writes_accepted=2, final_balance=1), entries_planned=2)
    assert (m.verdict, m.stale_writes_accepted, m.grants_while_held, m.problem) == ("lost-updates", 1, 0, "")


def test_a_kill_that_ended_no_session_ends_no_lease() -> None:
    history = [
        grant(0, 0, 0),
        kill(2, ended=[]),
        grant(1, 0, 3, attempt_ms=2.5),
        *section(0, 0, 1, inside=1, balance=0, released=False),
        *section(1, 0, 3.5, inside=2, balance=0, released=True),
    ]
    assert lease_deadlines(history)[(0, 0)] is None
    assert grants_while_held(history) == 1
    assert releases_of_nothing(history) == 1
    assert stale_writes(history) == (0, 0)


def test_histories_before_sessions_ended_are_read_by_the_detail_and_a_restart_ends_sessions_too() -> None:
    old = fault("session-kill", "inject", 2, detail="pg_terminate_backend: ended the holder's session (pid 7)")
    restart = fault("node-restart", "inject", 2, detail="SIGKILL, restarted")
    for ending in (old, restart):
        history = [grant(0, 0, 0), ending, grant(1, 0, 3, attempt_ms=2.5)]
        assert lease_deadlines(history)[(0, 0)] == 2 * MS
        assert grants_while_held(history) == 0
    assert lease_deadlines([grant(0, 0, 0), fault("link-cut", "inject", 2)])[(0, 0)] is None


def test_a_release_that_failed_under_a_fault_on_its_worker_proves_nothing() -> None:
    """Through a cut link the unlock may never reach the server: its False is not "released nothing"."""
    history = [
        grant(0, 0, 0),
        fault("link-cut", "inject", 5, target_worker=0),
        *section(0, 0, 1, inside=1, balance=0, released=False),  # release at 6, inside the cut
        fault("link-cut", "heal", 8, target_worker=0),
    ]
    assert releases_of_nothing(history) == 0
    other = [{**e, "target_worker": 1} if e["kind"] == "fault" else e for e in history]
    assert releases_of_nothing(other) == 1  # a fault on another worker explains nothing


def test_a_release_that_removed_a_valid_session_lease_is_a_foreign_release() -> None:
    """Worker 1 (granted over worker 0's lease) releases; the latest grant before that is its own, so
    take the pooler's other face: worker 0 is granted last, and worker 1's unlock removes its lock."""
    history = [grant(1, 0, 0), grant(0, 0, 1, attempt_ms=1), step(1, 0, "release", 3, released=True)]
    assert foreign_releases(history) == 1
    assert foreign_releases([*history[:2], kill(2, ended=[1]), history[2]]) == 0  # the server ended it first


# --- a session the server times out (ZooKeeper) ------------------------------------------------


def timed_grant(worker: int, rnd: int, at_ms: float, *, timeout_ms: float = 100) -> dict:
    """A zk-style grant: a session lease whose server times the session out after ``timeout_ms``."""
    return grant(worker, rnd, at_ms) | {"session_timeout_ms": timeout_ms}


def pause(worker: int, at_ms: float, until_ms: float) -> list[dict]:
    return [
        fault("pause", "inject", at_ms, target_worker=worker, detail="SIGSTOP"),
        fault("pause", "heal", until_ms, target_worker=worker, detail="SIGCONT"),
    ]


def test_a_timed_session_ends_a_timeout_into_a_silence_that_long_and_not_at_a_server_crash() -> None:
    # Worker 0 holds; frozen from 5 ms for 150 ms (> the 100 ms session timeout): the server ends the
    # session at 105 ms, so worker 1's grant at 120 ms is ZooKeeper doing its job, not a violation.
    history = [timed_grant(0, 0, 0), *pause(0, 5, 155), timed_grant(1, 0, 120)]
    history += [step(0, 0, "write", 160, value=1, accepted=True, fence=None)]
    history += [step(0, 0, "release", 170, released=False)]
    deadlines = lease_deadlines(history)
    assert deadlines[(0, 0)] == 105 * MS  # the pause began at 5 ms; + the 100 ms session timeout
    assert grants_while_held(history) == 0
    assert releases_of_nothing(history) == 0  # the server had ended it: its release had nothing to release
    # A shorter silence leaves the session alive: the same grant inside it is a grant over a valid lease.
    short = [timed_grant(0, 0, 0), *pause(0, 5, 85), timed_grant(1, 0, 120)]
    assert lease_deadlines(short)[(0, 0)] is None and grants_while_held(short) == 1
    # A leader crash does not end a timed session (the client reconnects to it), as it ends a database's.
    crashed = [timed_grant(0, 0, 0), fault("node-crash", "inject", 10), timed_grant(1, 0, 120)]
    assert lease_deadlines(crashed)[(0, 0)] is None and grants_while_held(crashed) == 1
    untimed = [grant(0, 0, 0), fault("node-crash", "inject", 10), grant(1, 0, 120)]
    assert lease_deadlines(untimed)[(0, 0)] == 10 * MS and grants_while_held(untimed) == 0


def test_a_session_end_while_the_grant_was_in_flight_ends_that_lease() -> None:
    # Worker 0's successful attempt starts at 10 ms; its reply arrives at 30 ms; a session-kill at
    # 20 ms may have ended the very session that granted it (the server granted it before 20 ms), so
    # worker 1's grant at 40 ms is no grant over a valid lease.
    history = [grant(0, 0, 30, attempt_ms=10), kill(20, ended=[4242]), grant(1, 0, 40)]
    assert lease_deadlines(history)[(0, 0)] == 20 * MS
    assert grants_while_held(history) == 0


def test_a_lease_that_names_its_session_ends_only_at_a_kill_of_that_session() -> None:
    # pg-advisory's leases name their backend pid: a kill of another session leaves the lease valid,
    # a kill of its own session sent while the grant was in flight ends it as soon as it was granted.
    mine = grant(0, 0, 30, attempt_ms=10) | {"session": "77"}
    other = [mine, kill(20, ended=[88]), grant(1, 0, 40)]
    assert lease_deadlines(other)[(0, 0)] is None and grants_while_held(other) == 1
    own = [mine, kill(25, ended=[77]), grant(1, 0, 40)]
    assert lease_deadlines(own)[(0, 0)] == 30 * MS + MS // 10  # its t1: ended as soon as granted
    assert grants_while_held(own) == 0


def _zk_history(*, outage_ms: float, unlock_at_ms: float) -> list[dict]:
    """A ZooKeeper holder (1 s session) whose only server restarts 150 ms into its lease and is back
    ``outage_ms`` later; its client sees the connection drop; it unlocks at ``unlock_at_ms``."""
    ms = 1_000_000
    fault = {"worker": -1, "round": 0, "kind": "fault", "fault": "restart", "step": 0, "nodes": [0]}
    return [
        {"worker": 0, "round": 0, "kind": "acquire", "ok": True, "t0": 0, "t1": 5 * ms, "valid_until": None,
         "no_ttl": True, "session_timeout_ms": 1000},
        {**fault, "action": "inject", "t0": 150 * ms, "t1": 160 * ms},
        {**fault, "action": "heal", "t0": 160 * ms, "t1": int((150 + outage_ms) * ms)},
        {"worker": 0, "round": 0, "kind": "renew", "ok": False, "reason": "suspended", "t0": 161 * ms, "t1": 161 * ms},
        {"worker": 0, "round": 0, "kind": "release", "released": False, "t0": int(unlock_at_ms * ms),
         "t1": int((unlock_at_ms + 1) * ms)},
    ]  # fmt: skip


def test_a_server_outage_longer_than_the_session_timeout_ends_the_session_and_excuses_the_unlock() -> None:
    """Issue 42: three zk-fenced x node-restart trials were lease-violated for an unlock sent while
    their server restarted (0.9-1.5 s against a 1 s session): nobody else was granted, nothing lost."""
    history = _zk_history(outage_ms=1200, unlock_at_ms=400)
    assert lease_deadlines(history) == {(0, 0): (150 + 1000) * 1_000_000}
    assert releases_of_nothing(history) == 0
    # An outage shorter than the timeout ends nothing (the client reconnects to its session)...
    short = _zk_history(outage_ms=700, unlock_at_ms=400)
    assert lease_deadlines(short) == {(0, 0): None}
    # ...and an unlock that released nothing outside any outage is still counted.
    later = _zk_history(outage_ms=700, unlock_at_ms=2000)
    assert releases_of_nothing(later) == 1
