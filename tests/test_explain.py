"""Why a trial got its verdict (analysis/explain.py): each rule's first instance in words, with the
times of the history and the span of its events, on hand-built histories; and the excerpt that
lists every step overlapping a window (render/timeline.py)."""

from __future__ import annotations

import pytest

from lockcompare.analysis import explain, incidents
from lockcompare.analysis.evidence import grants_while_held, stale_writes
from lockcompare.render.timeline import render_timeline

MS = 1_000_000


def _event(worker: int, rnd: int, kind: str, t0_ms: float, t1_ms: float | None = None, **fields: object) -> dict:
    t1 = t0_ms if t1_ms is None else t1_ms
    return {"worker": worker, "round": rnd, "kind": kind, "t0": int(t0_ms * MS), "t1": int(t1 * MS), **fields}


def _grant(worker: int, rnd: int, t0: float, t1: float, *, attempt: float, until: float, **fields: object) -> dict:
    return _event(worker, rnd, "acquire", t0, t1, ok=True, attempts=1, t_attempt=int(attempt * MS),
                  valid_until=int(until * MS), owner=f"o{worker}{rnd}", **fields)  # fmt: skip


def _bare_majority() -> list[dict]:
    """Redlock's bare majority: w0 holds nodes 2, 3, 4; node 2 restarts empty; w1 gathers 0, 1, 2
    with an acquire that began waiting long before it was granted (the excerpt must still show it)."""
    holders = [None, None, "o00", "o00", "o00"]
    return [
        _event(0, 0, "start", 0),
        _grant(0, 0, 100, 102, attempt=101, until=1101, granted_by=[2, 3, 4]),
        _event(0, 0, "enter", 103, inside=1),
        _event(1, 0, "acquire", 110, 180, ok=False, attempts=3),  # refused while w0 held it
        _event(
            -1, 0, "fault", 150, 151, fault="restart", action="inject", nodes=[2], detail="SIGKILL", holders=holders
        ),
        _event(-1, 0, "fault", 151, 160, fault="restart", action="heal", nodes=[2], detail="restarted (empty)"),
        _grant(1, 1, 120, 170, attempt=168, until=1168, granted_by=[0, 1, 2]),
        _event(1, 1, "enter", 171, inside=2),
        _event(0, 0, "exit", 400),
        _event(1, 1, "exit", 420),
    ]


def test_a_grant_inside_a_bare_majority_is_said_with_its_nodes_the_fault_and_the_times() -> None:
    history = _bare_majority()
    (grant,) = [f for f in explain.findings(history, nodes=5) if f.rule == "grant-over-valid-lease"]
    assert grant.verdict == "lease-violated"
    assert grant.text.startswith(
        "w1 was granted by nodes 0, 1, 2 at 170.0 ms while w0's lease, granted at 102.0 ms by nodes 2, 3, 4 — then "
        "restart of node 2 at 150.0 ms (SIGKILL; restarted (empty))"
    )
    assert "the nodes held [- - w0 w0 w0]" in grant.text
    assert "was valid until 1101.0 ms (its deadline)" in grant.text
    assert grant.text.endswith("a bare majority (3 of 5 nodes) lost one, and w1 gathered a majority of its own.")
    assert (grant.from_ms, grant.to_ms) == (102.0, 170.0)  # from the holder's grant to the rival's
    assert grants_while_held(history) == 1  # the checker's count stands on the same pairs


def test_without_the_node_count_or_a_fault_no_bare_majority_is_claimed() -> None:
    history = [e for e in _bare_majority() if e["worker"] != -1]
    (grant,) = [f for f in explain.findings(history, nodes=5) if f.rule == "grant-over-valid-lease"]
    assert "bare majority" not in grant.text and grant.text.endswith(": two valid leases at once.")
    (unknown_nodes,) = [f for f in explain.findings(_bare_majority()) if f.rule == "grant-over-valid-lease"]
    assert "bare majority" not in unknown_nodes.text


def test_the_window_covers_every_event_behind_the_verdict_and_the_excerpt_lists_steps_by_overlap() -> None:
    history = _bare_majority()
    found = explain.findings(history, nodes=5)
    assert [f.rule for f in found] == ["grant-over-valid-lease", "conflicts"]  # in time order: cause first
    window = explain.covering_window(history, found)
    assert window is not None and window.from_ms <= 102.0 and window.to_ms >= 171.0
    excerpt = render_timeline(history, from_ms=160, to_ms=window.to_ms)
    # w1's acquire waited from 120 ms and was granted at 170 ms: it overlaps a window that starts at 160
    assert any(line.split()[:5] == ["120.0", "50.0", "1", "1", "acquire"] for line in excerpt.splitlines()), excerpt
    assert "103.0" not in excerpt  # w0's enter ended before the window: not a step of it
    assert explain.covering_window(history, []) is None


def test_a_fencing_token_that_went_back_is_said_with_both_grants_the_fault_between_and_the_write() -> None:
    history = [
        _event(0, 0, "start", 0),  # the trial's first event: the times below are after it
        _event(0, 0, "acquire", 200, 211, ok=True, attempts=1, t_attempt=200 * MS, valid_until=1200 * MS, fence=1),
        _event(0, 0, "write", 500, 501, value=1, accepted=True, fence=1),
        _event(-1, 0, "fault", 272, 2210, fault="failover", action="inject", nodes=[0], detail="master crashed"),
        _event(-1, 0, "fault", 2210, 3260, fault="failover", action="heal", nodes=[0], detail="fresh replica"),
        _event(1, 0, "acquire", 300, 2063, ok=True, attempts=9, t_attempt=2060 * MS, valid_until=3060 * MS, fence=1),
        _event(1, 0, "write", 2364, 2365, value=2, accepted=True, fence=1),
        _event(1, 1, "acquire", 2380, 2381, ok=True, attempts=1, t_attempt=2380 * MS, valid_until=3380 * MS, fence=2),
    ]
    (token,) = explain.findings(history)
    assert token.rule == "backwards-token-write" and token.verdict == "lease-violated"
    assert token.text == (
        "w1 was granted fencing token 1 at 2063.0 ms, not above token 1 granted to w0 at 211.0 ms (the token counter "
        "went back) — between the two grants: failover of node 0 at 272.0 ms (master crashed; fresh replica); the "
        "resource accepted w1's write under token 1 at 2364.0 ms: two holders it could not tell apart."
    )
    assert (token.from_ms, token.to_ms) == (200.0, 2365.0)


def test_a_write_accepted_after_its_lease_and_the_update_it_erased() -> None:
    history = [
        _grant(0, 0, 0, 1, attempt=0, until=100),
        _event(0, 0, "enter", 2, inside=1),
        _event(0, 0, "read", 3, balance=0),
        _grant(1, 0, 50, 110, attempt=105, until=300),
        _event(1, 0, "enter", 111, inside=2),
        _event(1, 0, "read", 112, balance=0),
        _event(1, 0, "write", 115, value=1, accepted=True),
        _event(1, 0, "exit", 116),
        _event(0, 0, "write", 150, value=1, accepted=True),  # stale: its lease ended at 100 ms
        _event(0, 0, "exit", 151),
    ]
    by_rule = {f.rule: f for f in explain.findings(history)}
    assert set(by_rule) == {"stale-write-accepted", "lost-updates", "conflicts"}
    assert by_rule["stale-write-accepted"].text == (
        "w0's write of 1 at 150.0 ms was accepted 50.0 ms after its own lease ended (100.0 ms): a lease is "
        "permission to write only until its deadline."
    )
    assert stale_writes(history) == (1, 0)
    assert by_rule["lost-updates"].text == (
        "w0 wrote 1 at 150.0 ms from the balance 0 it read at 3.0 ms; w1 had written 1 at 115.0 ms, so one "
        "increment is lost."
    )
    assert by_rule["lost-updates"].from_ms == 3.0  # from the read it came from
    assert by_rule["conflicts"].text == "w1 entered the critical section at 111.0 ms and found 2 inside " \
        "(w0 inside since 2.0 ms until 151.0 ms)."  # fmt: skip


def test_a_clean_history_has_no_finding() -> None:
    history = [_grant(0, 0, 0, 1, attempt=0, until=100), _event(0, 0, "enter", 2, inside=1),
               _event(0, 0, "write", 3, value=1, accepted=True), _event(0, 0, "exit", 4)]  # fmt: skip
    assert explain.findings(history) == [] and explain.findings([]) == []
    assert incidents.first_incident(history) is None


def test_every_rule_a_page_names_is_one_of_the_checker_s_rules() -> None:
    from lockcompare.analysis.rules import RULES
    from lockcompare.render import html_trial

    named = [*explain.EXPLAINED, *(rule for _, rule in html_trial._UNKNOWN_RULES), *html_trial._ROW_RULES.values()]
    assert {rule for rule in named if rule} - set(RULES) == set()
    assert {RULES[rule].verdict for rule in explain.EXPLAINED} == {
        "lease-violated",
        "lost-updates",
        "conflicts-no-damage",
    }
    with pytest.raises(KeyError, match=r"not in analysis/rules\.py"):
        explain.Finding("a-rule-no-doc-lists", "text", 0.0, 1.0)
