"""Check the catalogue's claims (scenario/claims.py) against the rows of a results file.

Pure: rows in, one :class:`ClaimOutcome` per (expectation, backend) out. A cell the file does not
hold, or holds only with another schedule, is ``not in file`` — never a pass. Only rows that ran
the experiment's own schedule are read (``faults`` empty or the catalogue's: no ``--faults``) at
the default ``--fault-nodes`` 1, because the claims are about that schedule.

>>> rows = [{"backend": "single", "experiment": "baseline", "conflicts": 0, "entries": 80,
...          "lost_updates": 0, "verdict": "exclusive", "fault_nodes": 1, "faults": ""}]
>>> [o.status for o in check_claims(rows, expectations=EXPECTATIONS[:1])][:1]
['holds']
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from lockcompare.analysis.rates import damage_rate, violated, violation_rate
from lockcompare.analysis.sentinel import is_marked
from lockcompare.scenario.claims import EXPECTATIONS, RULES, Expect
from lockcompare.scenario.trialspec import custom_faults

HOLDS, CONTRADICTED, ABSENT = "holds", "contradicted", "not in file"


@dataclass(frozen=True, kw_only=True)
class ClaimOutcome:
    expect: Expect
    backend: str
    status: str
    trials: int
    #: What the rows show, in numbers (e.g. "conflicts 0,0,1,0,0").
    seen: str
    #: The cell's violation rate with its exact interval (analysis/rates.py), "" when not in the file.
    rate: str = ""


def check_claims(
    rows: Sequence[dict[str, Any]], *, expectations: Sequence[Expect] = EXPECTATIONS
) -> list[ClaimOutcome]:
    """Every expectation judged on ``rows`` (one row per trial, as read_results gives them)."""
    cells: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        # A trial the checker could not judge (a client that never started, a node that died) is
        # evidence of nothing: neither for a claim nor against it (Jepsen's :info).
        if _default_schedule(row) and str(row.get("verdict")) != "unknown":
            cells.setdefault((str(row["backend"]), str(row["experiment"])), []).append(row)
    outcomes = []
    for expect in expectations:
        if expect.rule not in RULES:
            raise ValueError(f"unknown rule {expect.rule!r} in a claim of {expect.experiment}")
        for backend in expect.backends:
            trials = cells.get((backend, expect.experiment), [])
            if not trials:
                outcomes.append(ClaimOutcome(expect=expect, backend=backend, status=ABSENT, trials=0, seen=""))
                continue
            others = cells.get((expect.than, expect.experiment), [])
            ok, seen = _judge(expect, trials, others)
            status = HOLDS if ok else CONTRADICTED
            if ok is None:
                status = ABSENT
            rate = violation_rate(trials).text()
            damage = damage_rate(trials)
            rate += f"; lost / struck fault {damage.text()}" if damage is not None else ""
            outcomes.append(
                ClaimOutcome(expect=expect, backend=backend, status=status, trials=len(trials), seen=seen, rate=rate)
            )
    return outcomes


#: Verdicts of a trial in which the lock broke its promise: damage, two inside (whether or not fencing
#: at the resource saved the balance), or a lease granted over a live one (analysis/checker.py).
BROKEN_VERDICTS = frozenset({"lost-updates", "conflicts", "conflicts-no-damage", "lease-violated"})


def _default_schedule(row: dict[str, Any]) -> bool:
    """A row that ran its experiment's own schedule at the default number of faulted nodes."""
    fault_nodes = row.get("fault_nodes")
    return fault_nodes in (None, "", 0, 1, "0", "1") and not custom_faults(row)


def _ints(trials: Sequence[dict[str, Any]], column: str) -> list[int]:
    return [int(float(t.get(column) or 0)) for t in trials]


def _judge(
    expect: Expect, trials: Sequence[dict[str, Any]], others: Sequence[dict[str, Any]]
) -> tuple[bool | None, str]:
    conflicts, entries, lost = _ints(trials, "conflicts"), _ints(trials, "entries"), _ints(trials, "lost_updates")
    shares = [c / e if e else 0.0 for c, e in zip(conflicts, entries, strict=True)]
    verdicts = [str(t.get("verdict")) for t in trials]
    show_c = f"conflicts {','.join(map(str, conflicts))} of entries {','.join(map(str, entries))}"
    show_l = f"lost updates {','.join(map(str, lost))}"
    rule, value = expect.rule, expect.value
    if rule == "no-conflicts":
        return all(c == 0 for c in conflicts), show_c
    if rule == "conflicts":
        return all(c > 0 for c in conflicts), show_c
    if rule == "some-conflicts":
        return any(c > 0 for c in conflicts), show_c
    if rule == "no-lost-updates":
        return all(v == 0 for v in lost), show_l
    if rule == "lost-updates":
        return all(v > 0 for v in lost), show_l
    if rule == "conflict-share-at-least":
        return all(s >= value for s in shares), show_c
    if rule == "conflict-share-between":
        mean = statistics.fmean(shares)
        return value <= mean <= value + 0.3, f"mean conflict share {mean:.2f} ({show_c})"
    if rule == "all-but-first-conflict":
        return all(c >= e - value for c, e in zip(conflicts, entries, strict=True)), show_c
    if rule == "lock-broken":
        return all(v in BROKEN_VERDICTS for v in verdicts), "verdicts " + ",".join(verdicts)
    if rule == "unsafe":
        # --until-settled's own rule (analysis/settle.py): one violation in a trial the machine did not
        # stall decides it; violations only in timing-marked trials do not.
        return any(violated(t) and not is_marked(t) for t in trials), "verdicts " + ",".join(verdicts)
    if rule == "no-progress-loss":
        return all(v in ("degraded", "unavailable") for v in verdicts), "verdicts " + ",".join(verdicts)
    if rule == "exclusive-mostly":
        exclusive = sum(v == "exclusive" for v in verdicts)
        ok = exclusive >= value * len(trials) and all(v <= 1 for v in lost)
        return ok, f"{exclusive} of {len(trials)} exclusive; {show_l}"
    if rule == "fewer-lost-than":
        if not others:
            return None, f"no {expect.than} trials to compare with"
        mine, theirs = statistics.fmean(lost), statistics.fmean(_ints(others, "lost_updates"))
        return mine <= value * theirs, f"mean lost {mine:g} against {expect.than}'s {theirs:g} ({show_l})"
    raise ValueError(f"unknown rule {rule!r}")


def summary(outcomes: Sequence[ClaimOutcome]) -> str:
    """One line: how many claims hold, are contradicted, or are not in the file."""
    count = {status: sum(o.status == status for o in outcomes) for status in (HOLDS, CONTRADICTED, ABSENT)}
    return (
        f"claims: {count[HOLDS]} hold, {count[CONTRADICTED]} contradicted, "
        f"{count[ABSENT]} not in this file (cells it did not run)"
    )
