"""The report card's sums: one backend under one experiment, over its trials (pure: rows in, totals out).

Each card line judges a :class:`Totals` and states the sizes behind its judgement — how far inside
another's valid lease the deepest grant came (against the checker's one tolerance,
analysis/evidence.py ``LEASE_TOLERANCE_MS``), the longest overlap — and how many of its trials the
timing sentinel marked.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from lockcompare.analysis.evidence import LEASE_TOLERANCE_MS
from lockcompare.analysis.sentinel import is_marked


@dataclass(frozen=True, kw_only=True)
class Totals:
    """One backend under one experiment, summed over its trials."""

    trials: int
    entries: int
    planned: int
    conflicts: int
    lost_updates: int
    stale_writes_rejected: int
    grants_while_held: int  # leases granted while another's was valid (0 where the CSV predates it)
    foreign_releases: int  # releases that removed another worker's lock (0 where the CSV predates it)
    acquire_p50_ms: float
    problems: tuple[str, ...]  # trials the checker could not judge, and why
    deepest_grant_ms: float = 0.0  # deepest grant inside another's valid lease, over the trials (NaN: not recorded)
    longest_overlap_ms: float = 0.0  # the most time two workers were inside at once in one trial
    marked: int = 0  # trials the timing sentinel marked (analysis/sentinel.py)
    marked_conflicts: int = 0  # the conflicts of those trials
    writes_accepted: int = 0  # increments the workers believed made (0 where the rows do not say)

    def lost_text(self) -> str:
        """``20 of 40 updates lost`` (or ``20 updates lost`` where the rows do not count the writes)."""
        of = f" of {self.writes_accepted}" if self.writes_accepted >= self.lost_updates > 0 else ""
        return f"{self.lost_updates}{of} update{'' if self.lost_updates == 1 and not of else 's'} lost"

    def ratio(self) -> str:
        return f"{self.conflicts}/{self.entries}"

    def sizes(self) -> str:
        """What a card line judged, by its size, and the timing marks of the trials behind it."""
        grant = (
            "grant depth not recorded"
            if self.deepest_grant_ms != self.deepest_grant_ms
            else f"deepest grant {self.deepest_grant_ms:.1f} ms inside another's valid lease "
            f"(tolerance {LEASE_TOLERANCE_MS:g} ms)"
        )
        marks = f"{self.marked} of {self.trials} trial(s) timing-marked"
        return f" [{grant}, longest overlap {self.longest_overlap_ms:.1f} ms; {marks}]"


def _planned(row: dict[str, Any]) -> int:
    """Rounds the trial meant to enter: the CSV's ``entries_planned`` when it has one (newer schemas)."""
    try:
        planned = int(row.get("entries_planned") or 0)
    except (TypeError, ValueError):
        planned = 0
    return planned if planned > 0 else int(row["workers"]) * int(row["rounds"])


#: The resource check of a fencing backend's trials run with ``--fence all``.
FENCE_ALL = "fence-all"


def totals(
    rows: Sequence[dict[str, Any]], *, backend: str, experiment: str, fence_all: bool | None = None
) -> Totals | None:
    """One backend × experiment summed; ``fence_all`` True/False keeps only the trials whose
    resource checked the token on every access / not (None: every trial)."""
    mine = [
        r for r in rows if r["backend"] == backend and r["experiment"] == experiment
        and (fence_all is None or (r.get("resource_check") == FENCE_ALL) == fence_all)
    ]  # fmt: skip
    if not mine:
        return None
    p50s = [float(r["acquire_p50_ms"]) for r in mine if r["acquire_p50_ms"] == r["acquire_p50_ms"]]  # not NaN
    return Totals(
        trials=len(mine),
        entries=sum(int(r["entries"]) for r in mine),
        planned=sum(_planned(r) for r in mine),
        conflicts=sum(int(r["conflicts"]) for r in mine),
        lost_updates=sum(int(r["lost_updates"]) for r in mine),
        stale_writes_rejected=sum(int(r["stale_writes_rejected"]) for r in mine),
        grants_while_held=sum(max(0, int(r.get("grants_while_held") or 0)) for r in mine),
        foreign_releases=sum(max(0, int(r.get("foreign_releases") or 0)) for r in mine),
        acquire_p50_ms=statistics.median(p50s) if p50s else float("nan"),
        problems=tuple(str(r.get("problem") or r["verdict"]) for r in mine if r["verdict"] == "unknown"),
        deepest_grant_ms=max((_ms(r, "deepest_grant_ms") for r in mine), default=0.0),
        longest_overlap_ms=max((v for r in mine if (v := _ms(r, "overlap_ms")) == v), default=0.0),
        marked=sum(1 for r in mine if is_marked(r)),
        marked_conflicts=sum(int(r["conflicts"]) for r in mine if is_marked(r)),
        writes_accepted=sum(_count(r, "writes_accepted") for r in mine),
    )


def _count(row: dict[str, Any], column: str) -> int:
    """A row's count column (0 when absent or not a number: a row from before it was recorded)."""
    try:
        return max(0, int(row.get(column) or 0))
    except (TypeError, ValueError):
        return 0


def _ms(row: dict[str, Any], column: str) -> float:
    """A row's float column (NaN when absent or empty: a row from before it was recorded)."""
    try:
        return float(row.get(column))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return float("nan")
