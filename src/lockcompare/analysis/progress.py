"""Progress beside safety: the useful work each worker got done, from the history alone.

A lock can be safe and useless: after a token rollback (a fenced lock's counter restarted empty),
the resource refuses every write below its high-water mark, so the new holder holds the lock round
after round and changes nothing. Counts of conflicts and lost updates do not show that; per-worker
progress does.

Progress is judged on the planned rounds (events without ``"extra": true``): extra rounds of the
``contend`` workload only keep rivals contending, and counting them would flatter a worker that
happened to run longer. A round *made progress* when one of its writes was accepted by the resource
(an optimistic update may write several times; one accepted write is one round of progress). A
worker *held the lock* in a round when its acquire was granted, and *tried* to write in it when it
wrote (accepted or refused), skipped its write (``write-skipped``: its lease was over) or had its
read refused (a fenced resource already knew it was stale).

Example (pure)::

    >>> events = [
    ...     {"worker": 0, "round": 0, "kind": "acquire", "ok": True},
    ...     {"worker": 0, "round": 0, "kind": "write", "accepted": True},
    ...     {"worker": 1, "round": 0, "kind": "acquire", "ok": True},
    ...     {"worker": 1, "round": 0, "kind": "write", "accepted": False},
    ... ]
    >>> p = worker_progress(events)
    >>> format_progress(p), starved(p)
    ('w0:1/1 w1:0/1', [1])
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lockcompare.analysis.history import Event


@dataclass(frozen=True, kw_only=True)
class WorkerProgress:
    worker: int
    held: int  # planned rounds in which the worker's acquire was granted
    progressed: int  # planned rounds with an accepted write (useful work done)
    tried: int  # planned rounds in which it wrote, skipped its write or had its read refused


def worker_progress(history: Sequence[Event]) -> list[WorkerProgress]:
    """Each worker's planned rounds held and rounds that made progress, by worker index.

    Every worker that recorded an acquire is listed (one that never got a lease shows ``0/0``);
    runner events (negative worker indices: faults) are not workers.
    """
    held: dict[int, set[int]] = {}
    progressed: dict[int, set[int]] = {}
    tried: dict[int, set[int]] = {}
    for event in history:
        worker, kind = event["worker"], event["kind"]
        if worker < 0 or event.get("extra"):
            continue
        if kind == "acquire":
            rounds = held.setdefault(worker, set())
            if event.get("ok"):
                rounds.add(event["round"])
        elif kind in ("write", "write-skipped") or (kind == "read" and "balance" in event and event["balance"] is None):
            tried.setdefault(worker, set()).add(event["round"])
            if kind == "write" and event.get("accepted"):
                progressed.setdefault(worker, set()).add(event["round"])
    workers = sorted(set(held) | set(tried))
    return [
        WorkerProgress(
            worker=w, held=len(held.get(w, ())), progressed=len(progressed.get(w, ())), tried=len(tried.get(w, ()))
        )
        for w in workers
    ]


def starved(progress: Sequence[WorkerProgress]) -> list[int]:
    """Workers that held the lock and tried to write in some planned round, and made progress in
    none: every write refused by the resource, or skipped because the lease was gone ("safe but no
    progress"). A hand-built history without write events claims nothing here."""
    return [p.worker for p in progress if p.held > 0 and p.tried > 0 and p.progressed == 0]


def format_progress(progress: Sequence[WorkerProgress]) -> str:
    """``"w0:39/40 w1:1/20"``: per worker, rounds that made progress / rounds it held the lock."""
    return " ".join(f"w{p.worker}:{p.progressed}/{p.held}" for p in progress)


def parse_progress(text: str) -> list[WorkerProgress]:
    """The CSV's ``progress_by_worker`` text back into numbers (``tried`` is not in the text: 0).

    >>> [(p.worker, p.progressed, p.held) for p in parse_progress("w0:39/40 w1:1/20")]
    [(0, 39, 40), (1, 1, 20)]
    """
    parsed = []
    for part in (text or "").split():
        worker, _, counts = part.partition(":")
        progressed, _, held = counts.partition("/")
        parsed.append(
            WorkerProgress(worker=int(worker.lstrip("w")), held=int(held), progressed=int(progressed), tried=0)
        )
    return parsed


def lagging(progress: Sequence[WorkerProgress]) -> bool:
    """True when some worker made progress in fewer than half the rounds it held the lock: the
    lock was granted but the work was refused (worth a column in a table; ``starved`` is the
    extreme, none at all)."""
    return any(p.held > 0 and 2 * p.progressed < p.held for p in progress)


def least_progress(progress: Sequence[WorkerProgress]) -> int:
    """The fewest rounds any worker made progress in (0 with no worker at all)."""
    return min((p.progressed for p in progress), default=0)


def writes_skipped(history: Sequence[Event]) -> int:
    """Writes a holder did not make because its lease was over (its own deadline had passed, or
    its backend said the lease was lost): recorded by the worker as ``write-skipped`` events."""
    return sum(1 for e in history if e["kind"] == "write-skipped")
