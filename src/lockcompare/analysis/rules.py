"""Every rule the checker applies, by id: one table, which docs/verdicts.md must list in full.

A rule that decides a verdict and is written nowhere cannot be argued with (issue 48.4: an unlock
that failed while the holder's server was frozen decided 134 verdicts, stated in no doc). So each
function of analysis/ that applies a rule says which, with :func:`implements`, which refuses an id
this table does not hold; a test (tests/test_verdict_rules.py) compares the ids implemented, this
table and the ids docs/verdicts.md lists, in both directions. A new rule is therefore three edits:
its code, its line here, and its line in the doc.

>>> RULES["released-nothing"].verdict
'lease-violated'
>>> @implements("released-nothing")
... def counts_it() -> int:
...     return 0
>>> "released-nothing" in implemented()
True
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar


@dataclass(frozen=True)
class Rule:
    id: str
    #: The verdict it gives (or withholds: ``unknown``), or "" for a rule that shapes another's evidence.
    verdict: str
    statement: str


_RULE_LIST = (
    Rule("history-usable", "unknown", "every critical-section enter has its exit and the other way round"),
    Rule("trial-failed", "unknown", "a worker failed, hung or died; a node or the link proxy died; the run was halted"),
    Rule("counts-agree", "unknown", "the history's entries and conflicts equal the resource's; occupancy ends at 0"),
    Rule("lost-updates", "lost-updates", "writes accepted exceed the final balance"),
    Rule("double-applied", "double-applied", "the resource applied one request more than once"),
    Rule("conflicts", "conflicts-no-damage", "an entry found another worker inside, with planned work involved"),
    Rule("grant-over-valid-lease", "lease-violated", "a lease was granted inside another's valid unreleased lease"),
    Rule("stale-write-accepted", "lease-violated", "a write was accepted after its writer's own lease deadline"),
    Rule("backwards-token-write", "lease-violated", "a write was accepted under a token not above an earlier grant's"),
    Rule("released-nothing", "lease-violated", "an unlock released nothing while its holder's session lease was valid"),
    Rule("unlock-failed", "", "an unlock whose request failed (ReleaseFailed) is no evidence of where the lock was"),
    Rule("unlock-during-worker-fault", "", "an unlock that failed while a fault acted on its worker is not counted"),
    Rule("unlock-during-server-outage", "", "an unlock that failed while a lock server was kept away is not counted"),
    Rule("session-lease-end", "", "a lease without a deadline lasts until its release or its session's end seen"),
    Rule("lease-tolerance", "", "a grant within LEASE_TOLERANCE_MS of another's claimed deadline is not inside it"),
    Rule("planned-rounds", "", "exclusion and progress are judged on the planned rounds, damage on every section"),
    Rule("unavailable", "unavailable", "no planned critical section entered"),
    Rule("starved", "starved", "a worker was refused by the resource, lease valid, in more rounds than it worked"),
    Rule("degraded", "degraded", "some planned rounds never entered; otherwise exclusive"),
    Rule("no-verdict-without-fault", "unknown", "planned injections and struck none gets no safe verdict"),
    Rule(
        "renewal-not-measured",
        "unknown",
        "an experiment resting on renewal, on a lock with a TTL whose history shows no renewal, is not judged",
    ),
    Rule(
        "stopped-being-exercised",
        "unknown",
        "after a fault the lock never granted again and refused with errors only, unless the backend declares it",
    ),
)  # fmt: skip

#: Every rule by id, in the order docs/verdicts.md lists them.
RULES: dict[str, Rule] = {r.id: r for r in _RULE_LIST}

_IMPLEMENTED: dict[str, list[str]] = {}

F = TypeVar("F", bound=Callable[..., object])


def implements(*ids: str) -> Callable[[F], F]:
    """Mark a function as applying these rules; an id the table does not hold is refused at import."""
    unknown = [i for i in ids if i not in RULES]
    if unknown:
        raise KeyError(f"rules {unknown} are not in analysis/rules.py's table (and docs/verdicts.md)")

    def mark(function: F) -> F:
        for rule_id in ids:
            _IMPLEMENTED.setdefault(rule_id, []).append(getattr(function, "__qualname__", repr(function)))
        return function

    return mark


def implemented() -> dict[str, list[str]]:
    """Rule id → the functions that apply it (of the modules imported so far)."""
    return {k: list(v) for k, v in _IMPLEMENTED.items()}
