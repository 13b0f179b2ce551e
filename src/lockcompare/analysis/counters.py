"""What the resource counted during one trial: the checker's second witness beside the history."""

from __future__ import annotations

from collections.abc import Sequence
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

    @classmethod
    def from_values(cls, values: Sequence[int]) -> ResourceCounters:
        """From the counters in the order both resources store them: entries, conflicts, writes
        accepted and rejected, balance, occupancy, reads rejected."""
        entries, conflicts, accepted, rejected, balance, occupancy, reads_rejected = values
        return cls(
            entries=entries,
            conflicts=conflicts,
            writes_accepted=accepted,
            writes_rejected=rejected,
            final_balance=balance,
            occupancy=occupancy,
            reads_rejected=reads_rejected,
        )
