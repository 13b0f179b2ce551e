"""A trial's history as a text timeline, to see an interleaving rather than infer it.

Each line is one step: its start in ms after the trial's first event, how long it took, the
worker and round, and what it returned (the balance read, whether a write was accepted, ...).
"""

from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path

from lockcompare.analysis import history as history_io
from lockcompare.analysis.history import Event
from lockcompare.analysis.holders import describe_holders, worker_of_owner
from lockcompare.errors import ResultsFileError
from lockcompare.render.table import format_table

#: The fields worth showing per kind of step, in order.
_DETAILS = {
    # ``errors``: the refusal details this worker met here for the first time (runner/backend_calls.py);
    # ``ttl_ms``: a battery check's.
    "acquire": ("ok", "attempts", "fence", "granted_by", "server", "refusals", "errors", "ttl_ms"),
    "pause": ("how", "point"),
    "enter": ("inside",),
    "read": ("balance", "fence"),
    "write": ("value", "accepted", "fence"),
    "write-skipped": ("reason",),  # the lease was past its deadline or lost: no write
    "exit": (),
    "release": ("released", "error"),  # error: the unlock request failed (ReleaseFailed)
    "retry": ("attempt",),
    "error": ("message",),
    # The runner's own events (worker -1); a role-aimed step's reading of who led (issue 40); what a
    # lease-aimed step met when it landed and whose session a session-kill ended (issues 42.4, 42.6).
    "fault": (
        *("fault", "action", "target", "nodes", "detail", "holders", "roles_before", "roles"),
        *("aim", "session_worker"),
    ),
    "lease": ("ok", "reason"),
    "renew": ("ok", "reason"),
    "gave-up": ("rounds_skipped",),
    "escaped": ("target_worker", "helper"),  # a helper process outside its worker's group (runner, worker -1)
    "check": ("property", "title", "status", "evidence"),  # a battery check opening and closing (worker -1)
}


def load_history(path: Path) -> list[Event]:
    """A saved history; a missing or unreadable file is a :class:`ResultsFileError`."""
    try:
        events = history_io.load(path)
    except OSError as exc:
        raise ResultsFileError(f"cannot read {path}: {exc.strerror or exc}") from None
    except (json.JSONDecodeError, gzip.BadGzipFile, zlib.error, EOFError, UnicodeDecodeError) as exc:
        raise ResultsFileError(f"{path}: not a lockcompare history: {exc}") from None
    for number, event in enumerate(events, start=1):
        if not history_io.is_event(event):
            raise ResultsFileError(
                f"{path}: not a lockcompare history: line {number} is not an event (needs worker, round, kind, t0, t1)"
            )
    return events


def _shown(name: str, value: object, owners: dict[str, int]) -> object:
    """A detail as the timeline prints it: a fault's lock holders by worker (``[w0 w0 - w1 ?]``)."""
    if name in ("roles", "roles_before") and isinstance(value, dict):
        return describe_roles(value)
    if name != "holders":
        return value
    return describe_holders(value, owners)  # type: ignore[arg-type]  # the token list LockHolders.read() recorded


def describe_roles(roles: dict[str, object]) -> str:
    """A role reading as a line: ``leader 2 (down, follower, leader; term 3)``.

    >>> describe_roles({"leader": None, "modes": ["no leader", "follower"], "holder_nodes": [0]})
    'no leader (no leader, follower; holder on 0)'
    """
    leader = roles.get("leader")
    modes = roles.get("modes")
    inner = ", ".join(str(m) for m in modes) if isinstance(modes, list) else "?"
    if roles.get("term"):
        inner += f"; term {roles['term']}"
    holder_nodes = roles.get("holder_nodes")
    if isinstance(holder_nodes, list):
        inner += "; holder on " + (",".join(str(n) for n in holder_nodes) or "none")
    return f"{'no leader' if leader is None else f'leader {leader}'} ({inner})"


#: Every kind of step a history holds (``lockcompare history --kinds``).
STEP_KINDS = tuple(_DETAILS)


def render_timeline(
    events: list[Event], *, from_ms: float = 0, to_ms: float | None = None, kinds: set[str] | None = None
) -> str:
    """One line per step that overlaps ``from_ms``..``to_ms`` (times from the first event of the
    whole history, whatever is shown); only steps of ``kinds`` when given. Overlap, not start: an
    acquire that waited from before the window and was granted inside it is a step of the window."""
    if not events:
        return "(empty history)"
    origin = min(e["t0"] for e in events)
    owners = worker_of_owner(events)
    lines = []
    for event in sorted(events, key=lambda e: e["t0"]):
        start_ms, end_ms = (event["t0"] - origin) / 1e6, (event["t1"] - origin) / 1e6
        if end_ms < from_ms or (to_ms is not None and start_ms > to_ms):
            continue
        if kinds is not None and event["kind"] not in kinds:
            continue
        details = ", ".join(
            f"{name}={_shown(name, event[name], owners)}"
            for name in _DETAILS.get(event["kind"], ())
            if event.get(name) not in (None, {})
        )
        lines.append(
            [
                f"{start_ms:.1f}",
                f"{(event['t1'] - event['t0']) / 1e6:.1f}",
                str(event["worker"]),
                str(event["round"]),
                event["kind"],
                details,
            ]
        )
    return format_table(["t ms", "took ms", "worker", "round", "step", "details"], lines, fmt="simple")
