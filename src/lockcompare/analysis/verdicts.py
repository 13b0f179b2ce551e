"""The verdicts, as one ordered vocabulary: a trial's one word, what it means, how bad it is, and
whether a run says it on stderr.

Before, the meanings lived in the checker, the order (worst first) in a renderer's colour table and
the words a run explains in the matrix (issue 39): three rooms for one decision. Now the checker
gives a :class:`Verdict`'s ``name``, and every reader — tables, the glance grid, the HTML report,
the matrix's notes, docs/verdicts.md's table — asks this module.

>>> [v.name for v in worst_first(["exclusive", "lost-updates", "degraded"])]
['lost-updates', 'degraded', 'exclusive']
>>> severity("lost-updates") < severity("unknown") < severity("exclusive")
True
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Verdict:
    name: str
    meaning: str
    #: A run says it on stderr with its meaning (a result a reader may not expect, not a failure).
    noted: bool = False
    #: A safety violation: the trial counts toward its cell's violation rate (analysis/rates.py).
    violation: bool = False
    #: The trial observed the lock: it counts in the rate's denominator. A trial that could not be
    #: judged, or in which the lock was never granted, says nothing about how often it breaks.
    observed: bool = True


#: Worst first: a cell shows its worst trial's verdict. Damage first, then a broken promise, then
#: overlap that the resource absorbed, then what could not be judged or did not run.
VERDICTS: tuple[Verdict, ...] = (
    Verdict("lost-updates", "an increment a worker believed it made is missing from the final balance", violation=True),
    Verdict(
        "double-applied",
        "an update a worker made once is in the final balance twice: a request retried after its reply was "
        "lost, which the resource did not recognise as a repeat (see double_applications)",
        violation=True,
    ),
    Verdict(
        "lease-violated",
        "no overlap or loss at the resource, but the history shows the lock broke its promise: "
        "a lease granted over another's valid unreleased lease, a write accepted after its writer's lease "
        "deadline, a write accepted under a fencing token that went backwards, or an unlock that released nothing "
        "while its holder's session lease was valid (exclusion held by luck)",
        noted=True,
        violation=True,
    ),
    Verdict(
        "conflicts-no-damage",
        "two workers were inside at once, but the resource lost no update (fencing, lock-free)",
    ),
    Verdict(
        "starved",
        "safe, but the resource refused a worker holding a valid lease in more rounds than it let it "
        "work (e.g. fencing after a token rollback: the lock lets it in, the resource says no): see progress_by_worker",
        noted=True,
    ),
    Verdict(
        "unknown",
        "the trial could not be judged (a worker failed, a backend call hung, a node died, "
        "the history is inconsistent, or its fault schedule never struck: no safety verdict without the fault); "
        "see the problem column",
        observed=False,
    ),
    Verdict(
        "unavailable",
        "the lock was never granted (or nothing entered): nothing was observed, so nothing is claimed",
        noted=True,
        observed=False,
    ),
    Verdict(
        "degraded",
        "no conflict seen, but some planned rounds never entered (acquires refused or timed out): "
        "exclusion held only over what ran",
        noted=True,
    ),
    Verdict(
        "exclusive",
        "every planned critical section ran, never two at once, no update lost, no lease granted "
        "over a valid one, no expired or backwards-token write accepted, no holder starved by the resource",
    ),
)

BY_NAME = {v.name: v for v in VERDICTS}
#: What each verdict means, in the checker's order of declaration (tables, ``experiments``, docs).
MEANINGS = {v.name: v.meaning for v in VERDICTS}
#: Verdicts a run explains on stderr when it gives them.
NOTED = tuple(v.name for v in VERDICTS if v.noted)
#: Safety violations, worst first: a cell's violation rate counts the trials with one of these.
VIOLATIONS = tuple(v.name for v in VERDICTS if v.violation)
#: Verdicts of trials that did not observe the lock: left out of a rate, counted apart.
UNOBSERVED = tuple(v.name for v in VERDICTS if not v.observed)
#: Where a verdict this lockcompare does not know (a newer checker's word) ranks: just below the worst.
UNKNOWN_WORD_RANK = 0.5


def severity(name: str) -> float:
    """0 for the worst verdict, growing towards the best; an unknown word ranks just below the worst."""
    names = [v.name for v in VERDICTS]
    return float(names.index(name)) if name in names else UNKNOWN_WORD_RANK


def worst_first(names: Iterable[str]) -> list[Verdict]:
    """The known verdicts among ``names``, worst first (unknown words are left out)."""
    return sorted((BY_NAME[n] for n in set(names) if n in BY_NAME), key=lambda v: severity(v.name))


def markdown_table() -> str:
    """docs/verdicts.md's table, worst first (rendered by render.docs between ``<!-- verdicts -->``)."""
    lines = ["| verdict | when | said on stderr | in a cell's violation rate |", "| --- | --- | --- | --- |"]
    lines += [f"| `{v.name}` | {v.meaning} | {'yes' if v.noted else ''} | {_in_rate(v)} |" for v in VERDICTS]
    return "\n".join(lines)


def _in_rate(verdict: Verdict) -> str:
    if verdict.violation:
        return "a violation"
    return "a clean trial" if verdict.observed else "left out, counted apart"
