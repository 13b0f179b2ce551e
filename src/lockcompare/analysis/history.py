"""The history: an append-only record of what every worker did, on the shared monotonic clock.

An event is a flat JSON object::

    {"worker": 0, "round": 3, "kind": "enter", "t0": 123456789, "t1": 123459876, "inside": 2}

``t0`` is ``time.monotonic_ns()`` just before the step started (before the request was sent) and
``t1`` just after it ended (after the reply arrived); the step took effect somewhere in between.
CLOCK_MONOTONIC is one clock for every process on the machine, so workers' events can be compared.

Kinds (the extra fields each carries):

- ``acquire``: ``ok``, ``attempts``, ``refusals`` ({reason: count}), ``t_attempt`` (start of the
  successful attempt), ``owner``, ``fence`` (fencing token or null), ``valid_until`` (ns or null),
  ``granted_by`` (the lock nodes that granted it, when a multi-node backend says so), ``errors``
  (``reason: detail`` of the refusals met here that this worker had not recorded before: the
  first of each distinct one, e.g. ``error: ConnectionError: Error 111 connecting to ...``)
- ``pause``: ``how`` (``sleep``)
- ``enter``: ``inside`` (workers inside, counted by the resource, including this one)
- ``read``: ``balance``;  ``write``: ``value``, ``accepted``, ``fence``
- ``exit``;  ``release``: ``released`` (and ``error`` when its request failed: released or not,
  unknown);  ``error``: ``message``
"""

from __future__ import annotations

import gzip
import json
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

from lockcompare.errors import ResultsFileError
from lockcompare.files import MAX_INPUT_ENV, input_cap_bytes, replace_atomically, writing

Event = dict[str, Any]
T = TypeVar("T")


def now_ns() -> int:
    return time.monotonic_ns()


class Recorder:
    """Collects one worker's events in memory (sent to the runner when the worker ends)."""

    def __init__(self, *, worker: int) -> None:
        self.worker = worker
        self.round = -1
        self.events: list[Event] = []

    def add(self, kind: str, *, t0: int, t1: int | None = None, **fields: Any) -> Event:
        event: Event = {
            "worker": self.worker,
            "round": self.round,
            "kind": kind,
            "t0": t0,
            "t1": t0 if t1 is None else t1,
        }
        event.update(fields)
        self.events.append(event)
        return event

    def timed(self, kind: str, step: Callable[[], T], *, result_as: str | None = None, **fields: Any) -> T:
        """Run ``step`` and record it with its start and end; ``result_as`` names a field for its result."""
        t0 = now_ns()
        result = step()
        event = self.add(kind, t0=t0, t1=now_ns(), **fields)
        if result_as is not None:
            event[result_as] = result
        return result


def is_event(value: object) -> bool:
    """True for a dict with the fields every event has, of the right types."""
    if not isinstance(value, dict):
        return False
    return (
        isinstance(value.get("worker"), int)
        and isinstance(value.get("round"), int)
        and isinstance(value.get("kind"), str)
        and isinstance(value.get("t0"), int | float)
        and isinstance(value.get("t1"), int | float)
    )


def merge(per_worker: Iterable[list[Event]]) -> list[Event]:
    """One history from the workers' own lists, ordered by start time."""
    return sorted((e for events in per_worker for e in events), key=lambda e: (e["t0"], e["worker"]))


def save(events: list[Event], path: Path) -> None:
    """Write the history as gzipped JSON lines (written to a temporary name, then renamed)."""

    def write(tmp: Path) -> None:
        with gzip.open(tmp, "wt", encoding="utf-8") as fh:
            for event in events:
                fh.write(json.dumps(event, separators=(",", ":")) + "\n")

    with writing(path.parent):
        path.parent.mkdir(parents=True, exist_ok=True)
    replace_atomically(path, write)  # a full disk leaves no .part file and no half history


def load(path: Path) -> list[Event]:
    """A saved history; one larger than the input cap (uncompressed) is refused, not read whole."""
    cap = input_cap_bytes()
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as fh:
        data = fh.read(cap + 1)
    if len(data) > cap:
        raise ResultsFileError(f"{path} holds more than {cap // (1024 * 1024)} MB: set {MAX_INPUT_ENV} to read it")
    return [json.loads(line) for line in data.decode("utf-8").splitlines() if line.strip()]
