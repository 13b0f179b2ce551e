"""Every verdict rule written down and independent of optional reports (issue 48.1, 48.4).

- The rules the checker applies (analysis/rules.py), the functions that apply them and the rules
  docs/verdicts.md lists are the same set: a rule added to the code without its line in the doc
  fails here.
- A trial that stopped being exercised (the lock never granted again after a fault, refused with
  errors only) gets no verdict about the lock, unless the backend declares that unavailability.
- The unlock rule asks only the runner's events: a ZooKeeper client that reports no session
  events is judged as one that does; a release whose request failed is no evidence.

Hand-built histories: no server.
"""

from __future__ import annotations

import re
from pathlib import Path

import lockcompare.analysis.checker  # noqa: F401 - imports every module that applies a rule
from lockcompare.analysis.checker import check
from lockcompare.analysis.counters import ResourceCounters
from lockcompare.analysis.evidence import releases_of_nothing
from lockcompare.analysis.exercised import stopped_after_fault
from lockcompare.analysis.rules import RULES, implemented
from lockcompare.analysis.sessions import SERVER_OUTAGE_FAULTS
from lockcompare.scenario import faultkinds

DOC = Path(__file__).resolve().parents[1] / "docs" / "verdicts.md"
MS = 1_000_000


def _doc_rule_ids() -> list[str]:
    """The ids of docs/verdicts.md's rule table (between ``<!-- rules -->`` and ``<!-- /rules -->``)."""
    text = DOC.read_text(encoding="utf-8")
    table = text.split("<!-- rules -->", 1)[1].split("<!-- /rules -->", 1)[0]
    return re.findall(r"^\| `([a-z-]+)` \|", table, flags=re.MULTILINE)


def test_the_doc_lists_every_rule_the_checker_applies_and_no_other() -> None:
    listed = _doc_rule_ids()
    assert len(listed) == len(set(listed)), "a rule listed twice in docs/verdicts.md"
    assert set(listed) == set(RULES), (
        f"docs/verdicts.md lacks {sorted(set(RULES) - set(listed))}, lists unknown {sorted(set(listed) - set(RULES))}"
    )
    assert listed == list(RULES)  # the same order: the doc reads as the table does


def test_every_rule_in_the_table_is_applied_somewhere() -> None:
    applied = implemented()
    assert set(applied) == set(RULES), f"rules nobody applies: {sorted(set(RULES) - set(applied))}"


def test_the_doc_names_the_faults_that_excuse_an_unlock_as_the_code_has_them() -> None:
    text = DOC.read_text(encoding="utf-8")
    line = next(line for line in text.splitlines() if line.startswith("| `unlock-during-server-outage` |"))
    named = set(re.findall(r"`([a-z-]+)`", line)) - {"unlock-during-server-outage", "released-nothing"}
    assert named == set(faultkinds.names_where("excuses_calls"))
    assert named <= SERVER_OUTAGE_FAULTS


# --- a trial that stops being exercised ----------------------------------------------------------


def _counters(entries: int) -> ResourceCounters:
    return ResourceCounters(
        entries=entries, conflicts=0, writes_accepted=entries, writes_rejected=0, final_balance=entries, occupancy=0
    )


def _round(worker: int, rnd: int, at_ms: float) -> list[dict]:
    t0 = int(at_ms * MS)
    ev = {"worker": worker, "round": rnd}
    return [
        {**ev, "kind": "acquire", "ok": True, "attempts": 1, "refusals": {}, "t_attempt": t0, "t0": t0, "t1": t0 + MS,
         "owner": f"o{worker}{rnd}", "fence": None, "valid_until": t0 + 1000 * MS},
        {**ev, "kind": "enter", "inside": 1, "t0": t0 + 2 * MS, "t1": t0 + 2 * MS},
        {**ev, "kind": "write", "value": 1, "accepted": True, "t0": t0 + 5 * MS, "t1": t0 + 5 * MS},
        {**ev, "kind": "exit", "t0": t0 + 8 * MS, "t1": t0 + 8 * MS},
        {**ev, "kind": "release", "released": True, "t0": t0 + 9 * MS, "t1": t0 + 9 * MS},
    ]  # fmt: skip


def _fault(fault: str, action: str, at_ms: float) -> dict:
    t0 = int(at_ms * MS)
    return {"worker": -1, "round": 0, "kind": "fault", "fault": fault, "action": action, "step": 0, "t0": t0,
            "t1": t0 + MS, "struck": True}  # fmt: skip


def _refused(worker: int, rnd: int, at_ms: float, refusals: dict[str, int], errors: list[str] | None = None) -> dict:
    t0 = int(at_ms * MS)
    event = {"worker": worker, "round": rnd, "kind": "acquire", "ok": False, "attempts": sum(refusals.values()),
             "refusals": refusals, "t0": t0, "t1": t0 + 200 * MS}  # fmt: skip
    return event | ({"errors": errors} if errors else {})


def _stopped(*, fault: str, heal_at_ms: float | None, tail: dict[str, int] | None = None) -> list[dict]:
    """Two granted rounds, a fault at 100 ms, then every acquire refused until both workers give up."""
    events = [*_round(0, 0, 0), *_round(1, 0, 20), _fault(fault, "inject", 100)]
    message = ["error: ConnectionError: Error 111 connecting to 127.0.0.1:7001. Connection refused."]
    events += [
        _refused(0, 1, 110, tail or {"error": 20}, errors=message),
        _refused(1, 1, 120, tail or {"error": 20}),
        _refused(0, 2, 400, tail or {"error": 20}),
        _refused(1, 2, 420, tail or {"error": 20}),
    ]
    if heal_at_ms is not None:
        events.append(_fault(fault, "heal", heal_at_ms))
    events += [
        {"worker": w, "round": 3, "kind": "gave-up", "t0": int(700 * MS), "t1": int(700 * MS), "rounds_skipped": 37}
        for w in (0, 1)
    ]
    return events


def test_a_lock_that_never_grants_again_after_a_healed_fault_is_unknown_with_its_error() -> None:
    # Issue 48.1's Sentinel trials: the failover heals, every acquire after it ends in `error`.
    metrics = check(_stopped(fault="failover", heal_at_ms=300), _counters(2), entries_planned=80)
    assert metrics.verdict == "unknown"
    assert "the lock stopped being exercised: never granted again after the failover" in metrics.problem
    assert "(healed at " in metrics.problem
    assert "ConnectionError: Error 111 connecting to 127.0.0.1:7001" in metrics.problem
    # Without the rule it would have read like a property of the lock:
    assert stopped_after_fault(_stopped(fault="failover", heal_at_ms=300)) is not None


def test_a_declared_unavailability_keeps_the_verdict_and_says_why() -> None:
    # A single-node lock whose only node crashed and stays down (healed only after the trial).
    history = _stopped(fault="crash", heal_at_ms=900)
    declared = check(history, _counters(2), entries_planned=80, unavailable_under=("crash",))
    assert declared.verdict == "degraded"
    assert "unavailable after the crash, as the backend declares" in declared.problem
    undeclared = check(history, _counters(2), entries_planned=80)  # a replicated lock should have survived it
    assert undeclared.verdict == "unknown" and "stopped being exercised" in undeclared.problem


def test_a_declared_fault_that_healed_meanwhile_is_no_excuse() -> None:
    # The node came back at 300 ms and the lock still refused: not what was declared.
    metrics = check(
        _stopped(fault="crash", heal_at_ms=300), _counters(2), entries_planned=80, unavailable_under=("crash",)
    )
    assert metrics.verdict == "unknown"


def test_refusals_other_than_errors_are_the_locks_answers() -> None:
    # "held" or "late" refusals are the lock answering (a quorum not reached, a grant too late).
    for tail in ({"error": 5, "held": 2}, {"late": 6}):
        history = _stopped(fault="crash", heal_at_ms=900, tail=tail)
        assert stopped_after_fault(history) is None
        assert check(history, _counters(2), entries_planned=80).verdict == "degraded"


def test_a_workers_first_acquire_may_straddle_the_moment_the_fault_took_effect() -> None:
    # Measured on sentinel-single x failover: the injection lasts 2 s, the master crashes inside it;
    # the first acquire after it began was refused "held" 7 times, then "error" 99 times.
    history = _stopped(fault="failover", heal_at_ms=300)
    first = next(e for e in history if e["kind"] == "acquire" and not e["ok"] and e["worker"] == 0)
    first["refusals"] = {"held": 7, "error": 99}
    assert stopped_after_fault(history) is not None
    later = [e for e in history if e["kind"] == "acquire" and not e["ok"] and e["worker"] == 0][1]
    later["refusals"] = {"held": 7, "error": 99}  # after the first: the lock answered again
    assert stopped_after_fault(history) is None


def test_workers_that_did_not_give_up_were_still_exercising_the_lock() -> None:
    history = [e for e in _stopped(fault="failover", heal_at_ms=300) if e["kind"] != "gave-up"]
    assert stopped_after_fault(history) is None


def test_a_violation_seen_before_the_lock_stopped_stands() -> None:
    history = _stopped(fault="failover", heal_at_ms=300)
    lost = ResourceCounters(entries=2, conflicts=0, writes_accepted=2, writes_rejected=0, final_balance=1, occupancy=0)
    assert check(history, lost, entries_planned=80).verdict == "lost-updates"


# --- the unlock rule asks only the runner's events -----------------------------------------------


def _zk_unlock(*, client_reports_sessions: bool, release: dict | None = None) -> list[dict]:
    """A ZooKeeper holder whose server restarts under it; it unlocks during the outage and the
    unlock finds nothing (kazoo's ``False``). Only ``client_reports_sessions`` differs."""
    fault = {"worker": -1, "round": 0, "kind": "fault", "fault": "restart", "step": 0, "nodes": [0]}
    history = [
        {"worker": 0, "round": 0, "kind": "acquire", "ok": True, "t0": 0, "t1": 5 * MS, "valid_until": None,
         "no_ttl": True, "session_timeout_ms": 1000},
        {**fault, "action": "inject", "t0": 150 * MS, "t1": 160 * MS},
        {**fault, "action": "heal", "t0": 160 * MS, "t1": 850 * MS},
        {"worker": 0, "round": 0, "kind": "release", "released": False, "t0": 400 * MS, "t1": 401 * MS,
         **(release or {})},
    ]  # fmt: skip
    if client_reports_sessions:
        history.append({"worker": 0, "round": 0, "kind": "renew", "ok": False, "reason": "suspended", "t0": 161 * MS,
                        "t1": 161 * MS})  # fmt: skip
    return history


def test_an_unlock_during_a_server_outage_is_judged_alike_with_or_without_session_events() -> None:
    with_events = releases_of_nothing(_zk_unlock(client_reports_sessions=True))
    without = releases_of_nothing(_zk_unlock(client_reports_sessions=False))
    assert with_events == without == 0


def test_an_unlock_that_released_nothing_outside_any_outage_still_counts() -> None:
    history = _zk_unlock(client_reports_sessions=False)
    history[-1] = history[-1] | {"t0": 2000 * MS, "t1": 2001 * MS}  # after the heal: the server was there
    assert releases_of_nothing(history) == 1


def test_an_unlock_whose_request_failed_is_no_evidence() -> None:
    history = _zk_unlock(client_reports_sessions=False, release={"error": "ConnectionLoss: no answer"})
    history[-1] = history[-1] | {"t0": 2000 * MS, "t1": 2001 * MS}  # outside the outage: only the error excuses it
    assert releases_of_nothing(history) == 0


# --- the run's closing lines name the cells hardly exercised -------------------------------------


def test_every_thin_cell_is_named_with_its_reason() -> None:
    from lockcompare.analysis.thin_cells import thin_cell_lines

    def row(backend: str, entries: int, verdict: str, refusals: str, problem: str = "") -> dict:
        return {"backend": backend, "experiment": "failover", "entries": entries, "entries_planned": 80,
                "verdict": verdict, "refusals": refusals, "problem": problem}  # fmt: skip

    stopped = check(_stopped(fault="failover", heal_at_ms=300), _counters(2), entries_planned=80)
    declared = check(
        _stopped(fault="crash", heal_at_ms=900), _counters(2), entries_planned=80, unavailable_under=("crash",)
    )
    rows = [
        row("sentinel-single", 2, stopped.verdict, stopped.refusals, stopped.problem),
        row("single", 2, declared.verdict, declared.refusals, declared.problem),
        row("node-redlock", 0, "unavailable", "late:6"),
        row("redlock", 41, "degraded", "no-quorum:3"),  # over half: not named
    ]
    lines = thin_cell_lines(rows)
    assert lines[0] == "cells that made under half their planned entries: 3"
    named = {line.split(" × ")[0].strip(): line for line in lines[1:]}  # cells come in registration order
    assert set(named) == {"sentinel-single", "single", "node-redlock"}  # redlock made over half: not named
    assert "2 of 80 entries: unknown in 1 of 1 trials: the lock stopped being exercised" in named["sentinel-single"]
    assert "ConnectionError" in named["sentinel-single"]
    assert named["single"].endswith(
        "2 of 80 entries: the backend's declared unavailability (unavailable after the crash)"
    )
    assert named["node-redlock"].endswith("0 of 80 entries: refused late:6")


def test_a_violation_before_the_lock_stopped_keeps_its_verdict_and_the_row_says_it_stopped() -> None:
    from lockcompare.analysis.thin_cells import thin_cell_lines

    lost = ResourceCounters(entries=2, conflicts=0, writes_accepted=2, writes_rejected=0, final_balance=1, occupancy=0)
    metrics = check(_stopped(fault="failover", heal_at_ms=300), lost, entries_planned=80)
    assert metrics.verdict == "lost-updates"
    assert "the lock stopped being exercised" in metrics.problem and "the violation was seen before" in metrics.problem
    row = {"backend": "sentinel-single", "experiment": "failover", "entries": 2, "entries_planned": 80,
           "verdict": metrics.verdict, "refusals": metrics.refusals, "problem": metrics.problem}  # fmt: skip
    [_, line] = thin_cell_lines([row])
    assert "in 1 of 1 trials the lock stopped being exercised" in line and "ConnectionError" in line


def test_the_backends_the_doc_names_declare_their_unavailability_and_sentinels_do_not() -> None:
    from lockcompare.backends import load_backend, traits_of

    def declared(name: str) -> tuple[str, ...]:
        return traits_of(load_backend(name, check_viable=False)).unavailable_under

    one_server = ["single", "fenced", "single-renew", "redis-py", "redis-lock-renew", "redis-lock-renew-checked"]
    for name in [*one_server, "pg-advisory", "pg-lease"]:
        assert declared(name) == ("crash",), name
        assert f"`{name.removesuffix('-checked')}" in DOC.read_text(encoding="utf-8")
    for name in ["sentinel-single", "sentinel-fenced", "sentinel-redis-py", "redlock", "zk-lock", "etcd"]:
        assert declared(name) == (), name  # a failover, a quorum: a crashed server is no reason to stay down


def _renewal_history(*, renewed: bool, no_ttl: bool = False) -> list[dict[str, object]]:
    """One worker's lease lapsing under work longer than its TTL, renewed (a ``renew`` event) or not."""
    grant = {"worker": 0, "round": 0, "kind": "acquire", "t0": 0, "t1": MS, "ok": True, "owner": "a", "fence": None,
             "t_attempt": 0, "attempts": 1, "refusals": {},
             "valid_until": 1000 * MS, **({"no_ttl": True} if no_ttl else {})}  # fmt: skip
    steps = [
        {"worker": 0, "round": 0, "kind": "enter", "t0": 2 * MS, "t1": 3 * MS, "inside": 1},
        {"worker": 0, "round": 0, "kind": "read", "t0": 3 * MS, "t1": 4 * MS, "fence": None, "balance": 0},
        {"worker": 0, "round": 0, "kind": "write", "t0": 3004 * MS, "t1": 3005 * MS, "value": 1, "fence": None,
         "accepted": True},
        {"worker": 0, "round": 0, "kind": "exit", "t0": 3006 * MS, "t1": 3007 * MS},
        {"worker": 0, "round": 0, "kind": "release", "t0": 3008 * MS, "t1": 3009 * MS, "released": False},
    ]  # fmt: skip
    renew = [{"worker": 0, "round": 0, "kind": "renew", "t0": 300 * MS, "t1": 301 * MS, "ok": True}]
    return [grant, *(renew if renewed else []), *steps]


def test_a_renewal_experiment_on_a_lock_that_never_renewed_is_not_judged() -> None:
    counters = ResourceCounters(entries=1, conflicts=0, writes_accepted=1, writes_rejected=0, final_balance=1,
                                occupancy=0)  # fmt: skip
    lapsed = check(_renewal_history(renewed=False), counters, entries_planned=1, rests_on_renewal=True)
    assert lapsed.verdict == "unknown" and "renewal not measured" in lapsed.problem
    # The same history judged as usual: outside a renewal experiment, with a renewal seen, or on a session lock.
    assert check(_renewal_history(renewed=False), counters, entries_planned=1).verdict != "unknown"
    renewed = check(_renewal_history(renewed=True), counters, entries_planned=1, rests_on_renewal=True)
    assert "renewal not measured" not in renewed.problem and renewed.verdict != "unknown"
    session = check(_renewal_history(renewed=False, no_ttl=True), counters, entries_planned=1, rests_on_renewal=True)
    assert "renewal not measured" not in session.problem
