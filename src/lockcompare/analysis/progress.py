"""Progress beside safety: the useful work each worker got done, from the history alone.

A lock can be safe and useless: after a token rollback (a fenced lock's counter restarted empty),
the resource refuses every write below its high-water mark, so the new holder holds a valid lease
round after round and changes nothing. Counts of conflicts and lost updates do not show that;
per-worker progress does.

Progress is judged on the planned rounds (events without ``"extra": true``): extra rounds of the
``contend`` workload only keep rivals contending, and counting them would flatter a worker that
happened to run longer. Per worker and round:

- *held*: its acquire was granted;
- *progressed*: one of its writes was accepted by the resource (an optimistic update may write
  several times; one accepted write is one round of progress);
- *denied*: the resource refused its write (or its fenced read) while its lease was still valid by
  its own deadline (the acquire's, or a renewal's reported before the write). A zombie refused
  after its lease ran out is fencing doing its job, not a denial; a write the holder skipped
  because its lease was over is neither.

A worker is *starved* when it was denied more rounds than it made progress in: the lock let it
in, the resource said no — fencing's denial of service under a token rollback, "safe but no
progress".

Example (pure)::

    >>> events = [
    ...     {"worker": 0, "round": 0, "kind": "acquire", "ok": True, "t0": 0, "valid_until": 100},
    ...     {"worker": 0, "round": 0, "kind": "write", "accepted": True, "t0": 10},
    ...     {"worker": 1, "round": 0, "kind": "acquire", "ok": True, "t0": 20, "valid_until": 120},
    ...     {"worker": 1, "round": 0, "kind": "write", "accepted": False, "t0": 30},
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
    denied: int = 0  # planned rounds in which the resource refused it while its lease was valid


def worker_progress(history: Sequence[Event]) -> list[WorkerProgress]:
    """Each worker's planned rounds held, made progress in and denied, by worker index.

    Every worker that recorded an acquire is listed (one that never got a lease shows ``0/0``);
    runner events (negative worker indices: faults) are not workers.
    """
    held: dict[int, set[int]] = {}
    progressed: dict[int, set[int]] = {}
    denied: dict[int, set[int]] = {}
    deadline: dict[tuple[int, int], int | None] = {}
    for event in sorted(history, key=lambda e: e["t0"]):
        worker, kind, round_ = event["worker"], event["kind"], event["round"]
        if worker < 0 or event.get("extra"):
            continue
        if kind == "acquire":
            rounds = held.setdefault(worker, set())
            if event.get("ok"):
                rounds.add(round_)
                deadline[(worker, round_)] = event.get("valid_until")
        elif kind == "lease" and event.get("ok"):
            deadline[(worker, round_)] = event.get("valid_until")  # a renewing holder's belief
        elif kind == "write" and event.get("accepted"):
            progressed.setdefault(worker, set()).add(round_)
        elif kind == "write" or (kind == "read" and "balance" in event and event["balance"] is None):
            until = deadline.get((worker, round_))
            if until is None or event["t0"] < until:
                denied.setdefault(worker, set()).add(round_)
    workers = sorted(set(held) | set(progressed) | set(denied))
    return [
        WorkerProgress(
            worker=w,
            held=len(held.get(w, ())),
            progressed=len(progressed.get(w, ())),
            denied=len(denied.get(w, set()) - progressed.get(w, set())),
        )
        for w in workers
    ]


def starved(progress: Sequence[WorkerProgress]) -> list[int]:
    """Workers the resource refused, while their lease was valid, in more rounds than it let them
    make progress: "safe but no progress" (w1 with 1 write accepted in 40 rounds held is starved)."""
    return [p.worker for p in progress if p.denied > p.progressed]


def rounds_denied(progress: Sequence[WorkerProgress]) -> int:
    return sum(p.denied for p in progress)


def format_progress(progress: Sequence[WorkerProgress]) -> str:
    """``"w0:39/40 w1:1/20"``: per worker, rounds that made progress / rounds it held the lock."""
    return " ".join(f"w{p.worker}:{p.progressed}/{p.held}" for p in progress)


def parse_progress(text: str) -> list[WorkerProgress]:
    """The CSV's ``progress_by_worker`` text back into numbers (``denied`` is not in the text: 0).

    >>> [(p.worker, p.progressed, p.held) for p in parse_progress("w0:39/40 w1:1/20")]
    [(0, 39, 40), (1, 1, 20)]
    """
    parsed = []
    for part in (text or "").split():
        worker, _, counts = part.partition(":")
        progressed, _, held = counts.partition("/")
        parsed.append(WorkerProgress(worker=int(worker.lstrip("w")), held=int(held), progressed=int(progressed)))
    return parsed


def lagging(progress: Sequence[WorkerProgress]) -> bool:
    """True when some worker made progress in fewer than half the rounds it held the lock, for
    whatever reason (refused, skipped, paused past its lease): worth a column in a table."""
    return any(p.held > 0 and 2 * p.progressed < p.held for p in progress)


def least_progress(progress: Sequence[WorkerProgress]) -> int:
    """The fewest rounds any worker made progress in (0 with no worker at all)."""
    return min((p.progressed for p in progress), default=0)


def writes_skipped(history: Sequence[Event]) -> int:
    """Writes a holder did not make because its lease was over (its own deadline had passed, or
    its backend said the lease was lost): recorded by the worker as ``write-skipped`` events."""
    return sum(1 for e in history if e["kind"] == "write-skipped")
