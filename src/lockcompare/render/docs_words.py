"""Who survives what, in words: one committed run's cells grouped into lock families × fault
families (render/families.py), each cell a word for the worst damage its trials saw and its
violation rate with the exact 95% interval (analysis/rates.py). Pure: rows in, Markdown out
(render/docs.py fills ``<!-- words: results/reproduction.csv -->`` blocks with it).

A cell pools every trial of its family's backends under its family's experiments, one row per trial
as the tables count them. Its word follows Jepsen's rule: no trial at all is "not run", trials that
never observed the lock (``unknown``, ``unavailable``) are "unknown", never "held".

>>> rows = [{"backend": "a", "experiment": "x", "verdict": "lost-updates"},
...         {"backend": "a", "experiment": "x", "verdict": "exclusive"},
...         {"backend": "b", "experiment": "x", "verdict": "unknown"}]
>>> locks, faults = (Family(name="A and B", members=("a", "b")),), (Family(name="X", members=("x", "y")),)
>>> print(words_table(rows, locks=locks, faults=faults).splitlines()[2])
| A and B | **loses updates**<br>1/2 50% [1.3–98.7%] (+1 unknown) |
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from lockcompare.analysis.rates import violated, violation_rate
from lockcompare.render.families import FAULT_FAMILIES, LOCK_FAMILIES, Family

Row = Mapping[str, Any]

#: The word for a cell whose trials violated safety, by the worst verdict among them: damage to the
#: data first, then a broken exclusion that cost no update.
VIOLATION_WORDS = (
    ("lost-updates", "loses updates"),
    ("double-applied", "applies updates twice"),
    ("lease-violated", "breaks its lease"),
)


def cell_words(rows: Sequence[Row]) -> str:
    """One cell: its word and, on a line of its own (a narrow column), its violation rate.

    >>> cell_words([])
    '*not run*'
    >>> cell_words([{"verdict": "unavailable"}] * 2)
    '*unknown* (2 trials, none observed the lock)'
    >>> cell_words([{"verdict": "exclusive"}, {"verdict": "lease-violated"}, {"verdict": "degraded"}])
    '**breaks its lease**<br>1/3 33.3% [0.8–90.6%]'
    >>> cell_words([{"verdict": "conflicts-no-damage"}] * 5)
    '**held**<br>0/5 0% [0–52.2%]'
    """
    if not rows:
        return "*not run*"
    rate = violation_rate(rows)
    if not rate.observed:
        return f"*unknown* ({rate.unobserved} trials, none observed the lock)"
    seen = {str(row.get("verdict")) for row in rows if violated(row)}
    word = next((text for verdict, text in VIOLATION_WORDS if verdict in seen), "held")
    unknown = f" (+{rate.unobserved} unknown)" if rate.unobserved else ""
    return f"**{word}**<br>{rate.text()}{unknown}"


def _family_of(name: str, families: Sequence[Family], *, what: str) -> Family:
    found = [family for family in families if name in family.members]
    if len(found) != 1:
        where = "no family" if not found else f"{len(found)} families"
        raise ValueError(f"{what} {name!r} is in {where} (render/families.py declares each in exactly one)")
    return found[0]


def words_table(
    rows: Sequence[Row],
    *,
    locks: Sequence[Family] = LOCK_FAMILIES,
    faults: Sequence[Family] = FAULT_FAMILIES,
) -> str:
    """The table: a row per lock family, a column per fault family, in their declared order."""
    cells: dict[tuple[str, str], list[Row]] = {}
    for row in rows:
        lock = _family_of(str(row.get("backend")), locks, what="backend")
        fault = _family_of(str(row.get("experiment")), faults, what="experiment")
        cells.setdefault((lock.name, fault.name), []).append(row)
    lines = ["| lock family | " + " | ".join(f.name for f in faults) + " |", "|---" * (len(faults) + 1) + "|"]
    for lock in locks:
        words = (cell_words(cells.get((lock.name, fault.name), [])) for fault in faults)
        lines.append(f"| {lock.name} | " + " | ".join(words) + " |")
    return "\n".join(lines) + "\n"


def families_text(*, locks: Sequence[Family] = LOCK_FAMILIES, faults: Sequence[Family] = FAULT_FAMILIES) -> str:
    """Which backends and experiments each family holds, one list item per family (wrapped).

    >>> print(families_text(locks=(Family(name="A", members=("a", "b")),), faults=()))
    - A: `a`, `b`
    """
    items = (f"- {f.name}: " + ", ".join(f"`{m}`" for m in f.members) for f in (*locks, *faults))
    return "\n".join(_wrapped(item, indent="  ") for item in items)


def _wrapped(text: str, *, indent: str = "") -> str:
    """``text`` in lines of at most 100 characters, never breaking a word or a code span."""
    import textwrap

    return textwrap.fill(text, width=100, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False)


def words_block(rows: Sequence[Row]) -> str:
    """What a ``words`` block holds: the table, how to read a cell, and the families' members."""
    note = (
        "Each cell pools the family's trials: its word names the worst damage any of them saw, then "
        "violating trials / trials that observed the lock, and the exact 95% interval of that share "
        "(Clopper–Pearson, for the pool, not for any one lock in it). *held*: no trial violated "
        "safety (the interval says how much that rules out); *unknown*: trials that never observed "
        "the lock; *not run*: no trial, the family's backends cannot take those faults (such cells are left "
        "out before a run starts, each with its reason). The families:"
    )
    return f"{words_table(rows)}\n{_wrapped(note)}\n\n{families_text()}\n"
