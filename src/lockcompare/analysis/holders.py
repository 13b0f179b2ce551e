"""Reading the ``holders`` an inject event carries (who held the lock on each node when a node fault
struck; faults/holders.py reads them): pure functions over the history, no server needed."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lockcompare.scenario import faultkinds

#: Unknown: the node could not be read.
UNREADABLE = "?"


def worker_of_owner(events: Sequence[dict[str, Any]]) -> dict[str, int]:
    """Owner token -> the worker whose granted acquire returned it (from the workers' own events)."""
    return {e["owner"]: e["worker"] for e in events if e.get("kind") == "acquire" and e.get("ok") and e.get("owner")}


def describe_holders(holders: Sequence[str | None], owners: dict[str, int]) -> str:
    """``[w0 w0 w1 - ?]``: per node, the worker holding the lock, ``-`` free, ``?`` unreadable."""

    def one(value: str | None) -> str:
        if value is None:
            return "-"
        if value == UNREADABLE:
            return "?"
        worker = owners.get(value)
        return f"w{worker}" if worker is not None else value[:8]

    return "[" + " ".join(one(v) for v in holders) + "]"


#: The node faults whose victims lose the lock keys they held (a jump of 2 x TTL expires them), by
#: their names in the history, older histories' included (scenario/faultkinds: ``loses_keys``).
NODE_LOSING_FAULTS = faultkinds.with_former_names(faultkinds.names_where("loses_keys"))


def majority_broken(inject: dict[str, Any]) -> bool | None:
    """Did this injection take the lock's majority away from its holder? None: no holders read.

    The holder is the owner found on the most nodes; the answer is yes when it held a majority of
    the nodes read before the fault and fewer than a majority of the nodes the fault spared — then
    a rival can gather a majority of free nodes (Redlock's bare-majority case). The majority is
    over every node read, which is right only for a backend that uses all of them.
    """
    holders = inject.get("holders")
    if not isinstance(holders, list):
        return None
    owners = [v for v in holders if v not in (None, UNREADABLE)]
    if not owners:
        return False  # the lock was free: nothing to lose
    holder = max(set(owners), key=owners.count)
    majority = len(holders) // 2 + 1
    spared = sum(1 for i, v in enumerate(holders) if v == holder and i not in inject.get("nodes", ()))
    return owners.count(holder) >= majority > spared
