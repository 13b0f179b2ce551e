"""What the resource counted during one trial: the checker's second witness beside the history."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class ResourceCounters:
    """What the resource itself counted during one trial."""

    entries: int
    conflicts: int
    writes_accepted: int
    writes_rejected: int
    final_balance: int
    occupancy: int  # should be 0 after a trial: every entry was followed by an exit
    reads_rejected: int = 0
