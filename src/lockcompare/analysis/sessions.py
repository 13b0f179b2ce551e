"""When a lease without a deadline ends: a session lock is valid until its holder releases it or the
server is seen ending its session. Pure functions over a history (no server needed).

A session lock (``pg-advisory``: ``pg_try_advisory_lock`` on the worker's database session) hands out
leases with no deadline (``valid_until`` None) and the worker marks them ``no_ttl`` (the backend's
``has_ttl = False``). Such a lease promises more than a lease lock, not less: nobody else gets the
lock while the holder's session lives. So it is judged like any other lease (a grant inside it is a
grant over a valid lease; a write after it ended is a stale write), over the interval from its grant
to the first of

- its holder's release (the callers take that from the release events, as for every lease);
- the server seen ending its session: one of the runner's own fault injections (worker -1) in
  :data:`SESSION_ENDING_FAULTS` — ``session-kill`` ended the sessions it names (``sessions_ended``,
  backend pids; in histories written before that field, a ``detail`` that begins with
  ``pg_terminate_backend``), and a lock server that crashes or restarts ends every session on it.

Which leases such an event ends: every session lease granted before the event began. A working
session lock has exactly one holder then, whose session the server found and ended; should several
workers believe they hold it at once, the lock was already broken (a transaction-pooling proxy
hands one session's lock to the next client), and ending them all can only count fewer violations,
never invent one. A lease's end is the event's ``t0``: the session may have ended at any moment
after it.

A session lock whose server times the session out (ZooKeeper: the ``acquire`` event carries
``session_timeout_ms``) ends differently: the server deletes the lock once it has not heard from
the client for that long, so the lease ends ``session_timeout_ms`` into the first stretch in which
the runner silenced its holder (a stop-the-world pause, a cut link: :data:`SILENCING_FAULTS`) for
at least that long; a lock server that crashes or restarts does not end it (the client reconnects
to the same session), only a session-kill that names it (``sessions_ended``) or such silence. A
server outage (a crash, restart or failover, from its inject to its heal) silences the workers whose
client saw its connection drop inside it (a ``renew`` event with ``ok`` false: kazoo's SUSPENDED):
an outage longer than the session timeout ends the session at the outage's start plus the timeout
(the last contact was no later than the inject), and an unlock the holder sent during the outage
is not a violation — the server was not there to take it (issue 42: three ``zk-fenced ×
node-restart`` trials were ``lease-violated`` for an unlock sent while their server restarted).
That unlock rule asks only the runner's own events (issue 48.4): an unlock that failed while any
lock server was kept away — every fault kind that ``excuses_calls``: crash, restart, failover,
node-freeze, isolate, split — is not counted, whether or not the client reported its connection
dropping; nor is one whose request failed (``ReleaseFailed``).

What is not seen here cannot end a lease: a session that timed out on the client's side, or that
``idle_session_timeout`` ended, leaves no event, so a grant after it is a grant over a valid lease —
as for a lease lock whose key vanished before its deadline.

Example::

    >>> history = [
    ...     {"worker": 0, "round": 0, "kind": "acquire", "ok": True, "t0": 0, "t1": 10, "valid_until": None,
    ...      "no_ttl": True},
    ...     {"worker": -1, "round": 0, "kind": "fault", "fault": "session-kill", "action": "inject", "t0": 50,
    ...      "t1": 60, "sessions_ended": [4242]},
    ... ]
    >>> lease_deadlines(history)
    {(0, 0): 50}
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from lockcompare.analysis.history import Event
from lockcompare.analysis.rules import implements
from lockcompare.scenario import faultkinds

#: The runner's fault injections that end lock sessions on the server (by the kinds' one names, and
#: the names older histories gave their events: ``node-restart`` for ``restart``).
SESSION_ENDING_FAULTS = faultkinds.with_former_names(("session-kill", "crash", "restart"))
#: How a session-kill's detail began before events named the sessions they ended.
_KILLED_DETAIL = "pg_terminate_backend"

#: The runner's faults that act on one worker's process or link (the ``target_worker`` of their events).
WORKER_FAULTS = faultkinds.with_former_names(("slow", "cut", "starve", "pause"))
#: Of those, the ones that silence the worker completely for their whole stretch (a starved worker
#: still runs part of each period; a slowed link still carries its pings).
SILENCING_FAULTS = faultkinds.with_former_names(("cut", "pause"))
#: The runner's faults that keep a lock server away from every client on it (scenario/faultkinds:
#: ``excuses_calls``): crash, restart, failover, node-freeze, isolate, split.
SERVER_OUTAGE_FAULTS = faultkinds.with_former_names(faultkinds.names_where("excuses_calls"))

LeaseKey = tuple[int, int]


def is_session_lease(acquire: Event) -> bool:
    """A granted lease without a deadline from a lock that says it has no TTL (its session is the lease).

    A lease without a deadline from any other backend (the no-lock baseline's) claims nothing."""
    return bool(acquire.get("ok")) and acquire.get("valid_until") is None and bool(acquire.get("no_ttl"))


def ends_sessions(event: Event, *, timed_sessions: bool = False) -> bool:
    """Did this runner event end sessions on the lock server? (``timed_sessions``: sessions the
    server times out, which outlive a crash or restart of a server.)"""
    if event.get("worker") != -1 or event.get("kind") != "fault" or event.get("action") != "inject":
        return False
    fault = event.get("fault")
    if fault not in SESSION_ENDING_FAULTS:
        return False
    if fault != "session-kill":
        return not timed_sessions
    if "sessions_ended" in event:
        return bool(event["sessions_ended"])
    return str(event.get("detail") or "").startswith(_KILLED_DETAIL)


def session_ends(history: Sequence[Event], *, timed_sessions: bool = False) -> list[int]:
    """When the server was seen ending sessions (each event's ``t0``), in time order."""
    return sorted(int(e["t0"]) for e in history if ends_sessions(e, timed_sessions=timed_sessions))


def silence_ends(acquire: Event, silenced: Sequence[tuple[int, float]]) -> int | None:
    """For a lease whose server times its session out after ``session_timeout_ms`` of silence: when
    the first silencing stretch after its grant that lasted that long timed it out (None: none did).

    >>> silence_ends({"t1": 10, "session_timeout_ms": 100}, [(50, 50 + 80e6), (200, 200 + 150e6)])
    100000200
    """
    timeout_ns = int(acquire["session_timeout_ms"] * 1e6)
    for start, end in sorted(silenced):
        if end >= acquire["t1"] and end - max(start, acquire["t1"]) >= timeout_ns:
            return max(start, int(acquire["t1"])) + timeout_ns
    return None


@implements("session-lease-end")
def lease_deadlines(history: Sequence[Event]) -> dict[LeaseKey, int | None]:
    """Per granted lease (worker, round): when it stops being valid, its release aside — its own
    deadline, or for a session lease the first session end seen after its grant (None: none seen,
    the lease lasts until its holder releases it)."""
    ends = session_ends(history)
    timed_ends = session_ends(history, timed_sessions=True)
    silenced = silencing_on_workers(history)
    for worker, spans in outages_cutting_off(history).items():
        silenced.setdefault(worker, []).extend(spans)
    deadlines: dict[LeaseKey, int | None] = {}
    for event in history:
        if event.get("kind") != "acquire" or not event.get("ok"):
            continue
        deadline = event.get("valid_until")
        if is_session_lease(event):
            if event.get("session_timeout_ms"):
                candidates = [t for t in timed_ends if t > event["t1"]]
                timed_out = silence_ends(event, silenced.get(event["worker"], []))
                deadline = min([*candidates, *([timed_out] if timed_out is not None else [])], default=None)
            elif event.get("session") is not None:
                deadline = named_session_end(event, history)
            else:
                # The server granted it somewhere between the successful attempt's start and t1: a
                # session end seen after that start may have ended this very session (measured: a
                # kill 3 ms before a slow grant's t1 had ended it; counting from t1 invented a grant
                # over a valid lease), so it counts.
                granted_from = event.get("t_attempt") or event["t1"]
                deadline = next((t for t in ends if t > granted_from), None)
        deadlines[(event["worker"], event["round"])] = deadline
    return deadlines


def named_session_end(acquire: Event, history: Sequence[Event]) -> int | None:
    """For a lease that names its server session (``session``: PostgreSQL's backend pid): when the
    first session end that names that session (``sessions_ended``), or a crash or restart of the
    server after its attempt began, ended it — never before its grant: a kill sent while the
    attempt ran can end the session that was granting it (a backend ends asynchronously), and
    then the lease ended as soon as it was granted.

    >>> grant = {"t_attempt": 10, "t1": 30, "session": "77"}
    >>> kills = [{"worker": -1, "kind": "fault", "fault": "session-kill", "action": "inject", "t0": t0,
    ...           "sessions_ended": ended} for t0, ended in ((20, [88]), (25, [77]), (50, [77]))]
    >>> named_session_end(grant, kills)
    30
    """
    session = str(acquire["session"])
    found = [
        int(e["t0"])
        for e in history
        if ends_sessions(e)
        and (
            session in {str(s) for s in e.get("sessions_ended") or ()}
            or (e.get("fault") != "session-kill" and e["t0"] > (acquire.get("t_attempt") or acquire["t1"]))
        )
    ]
    named = [t for t in found if t >= (acquire.get("t_attempt") or acquire["t1"]) - _ASYNC_END_NS]
    return max(min(named), int(acquire["t1"])) if named else None


#: How long before a grant a session end naming its session may still have ended it: a backend
#: told to end finishes its current query first (the grant), then exits.
_ASYNC_END_NS = 1_000_000_000


def first_releases(history: Sequence[Event]) -> dict[LeaseKey, int]:
    """Per lease, when its holder first began to release it (the release's ``t0``)."""
    released_at: dict[LeaseKey, int] = {}
    for event in history:
        if event["kind"] == "release":
            key = (event["worker"], event["round"])
            released_at[key] = min(released_at.get(key, event["t0"]), event["t0"])
    return released_at


def server_outages(history: Sequence[Event]) -> list[tuple[int, float]]:
    """The stretches in which the runner kept a lock server away (:data:`SERVER_OUTAGE_FAULTS`):
    each injection's ``t0`` to its heal's ``t1`` (no heal: to the end).

    >>> fault = {"worker": -1, "kind": "fault", "fault": "node-freeze", "step": 0}
    >>> inject, heal = {"action": "inject", "t0": 100, "t1": 110}, {"action": "heal", "t0": 700, "t1": 710}
    >>> events = [{**fault, **inject}, {**fault, **heal}]
    >>> server_outages(events)
    [(100, 710.0)]
    """
    windows: list[tuple[int, float]] = []
    opened: dict[tuple[object, object], int] = {}
    for event in sorted(
        (e for e in history if e.get("worker") == -1 and e.get("kind") == "fault"), key=lambda e: e["t0"]
    ):
        if event.get("fault") not in SERVER_OUTAGE_FAULTS:
            continue
        key = (event.get("fault"), event.get("step"))
        if event.get("action") == "inject":
            opened[key] = int(event["t0"])
        elif event.get("action") == "heal" and key in opened:
            windows.append((opened.pop(key), float(event["t1"])))
    return windows + [(start, float("inf")) for start in opened.values()]


def outages_cutting_off(history: Sequence[Event]) -> dict[int, list[tuple[int, float]]]:
    """Per worker, the server outages (:data:`SERVER_OUTAGE_FAULTS`, inject ``t0`` to heal ``t1``;
    no heal: to the end) during which its client saw its connection drop (a ``renew`` event with
    ``ok`` false): the stretches in which that worker could not reach its lock server.

    >>> fault = {"worker": -1, "kind": "fault", "fault": "restart", "step": 0}
    >>> outage = [{**fault, "action": "inject", "t0": 100, "t1": 110},
    ...           {**fault, "action": "heal", "t0": 110, "t1": 900}]
    >>> dropped = [{"worker": 0, "kind": "renew", "ok": False, "t0": 120, "t1": 120}]
    >>> outages_cutting_off(outage + dropped)
    {0: [(100, 900.0)]}
    """
    windows = server_outages(history)
    cut_off: dict[int, list[tuple[int, float]]] = {}
    for event in history:
        if event.get("kind") != "renew" or event.get("ok") is not False or event.get("worker", -1) < 0:
            continue
        for start, end in windows:
            if start <= event["t0"] <= end and (start, end) not in cut_off.get(event["worker"], []):
                cut_off.setdefault(event["worker"], []).append((start, end))
    return cut_off


def silencing_on_workers(history: Sequence[Event]) -> dict[int, list[tuple[int, float]]]:
    """Per worker, the stretches in which a fault of :data:`SILENCING_FAULTS` silenced it."""
    return faults_on_workers(history, faults=SILENCING_FAULTS)


def faults_on_workers(
    history: Sequence[Event], *, faults: Collection[str] = WORKER_FAULTS
) -> dict[int, list[tuple[int, float]]]:
    """Per worker, the stretches (``t0`` of the injection to ``t1`` of its heal; no heal: to the end)
    in which one of the runner's ``faults`` acted on it (a cut or slowed link, a starvation strobe)."""
    spans: dict[int, list[tuple[int, float]]] = {}
    opened: dict[tuple[object, object, int], list[int]] = {}
    for event in sorted(
        (e for e in history if e.get("worker") == -1 and e.get("kind") == "fault"), key=lambda e: e["t0"]
    ):
        worker = event.get("target_worker")
        if not isinstance(worker, int) or event.get("fault") not in faults:
            continue
        key = (event.get("fault"), event.get("step"), worker)
        if event.get("action") == "inject":
            opened.setdefault(key, []).append(int(event["t0"]))
        elif event.get("action") == "heal" and opened.get(key):
            spans.setdefault(worker, []).append((opened[key].pop(0), float(event["t1"])))
    for (_, _, worker), starts in opened.items():
        spans.setdefault(worker, []).extend((t, float("inf")) for t in starts)
    return spans


@implements("released-nothing", "unlock-failed", "unlock-during-worker-fault", "unlock-during-server-outage")
def releases_of_nothing(history: Sequence[Event]) -> int:
    """Releases that released nothing (``released`` false) while the holder's session lease was
    still valid: the holder believed it held the lock, the server says its session did not. Nothing
    seen ended the session, so the lock was somewhere else all along — a transaction-pooling proxy
    (PgBouncer ``pool_mode = transaction``) runs the unlock on another server session than the lock —
    or the lock let go of it by itself (a key that expired under a lock that claims no TTL).

    Not counted, because they prove nothing of the kind:

    - a release whose request failed (its event carries ``error``: the backend raised
      :class:`~lockcompare.errors.ReleaseFailed`): released or not, it could not tell;
    - one that failed while a fault acted on its worker (the unlock may never have reached the
      server through a cut link; a starved client's call times out);
    - one that failed while the runner kept a lock server away (:func:`server_outages`: a crash,
      restart, failover, node freeze, isolation or split, from its injection to its heal), whatever
      the client reported of its session: a plug-in that reports no session events is judged as
      one that does (issue 48.4)."""
    leases = {(e["worker"], e["round"]) for e in history if e.get("kind") == "acquire" and is_session_lease(e)}
    if not leases:
        return 0
    deadlines = lease_deadlines(history)
    faulted = faults_on_workers(history)
    outages = server_outages(history)  # the server was not there to take it (or not for sure)
    count = 0
    for event in history:
        if event["kind"] != "release" or event.get("released") or event.get("error"):
            continue
        key = (event["worker"], event["round"])
        if key not in leases:
            continue
        spans = [*faulted.get(event["worker"], ()), *outages]
        if any(start <= event["t1"] and event["t0"] <= end for start, end in spans):
            continue
        end = deadlines.get(key)
        count += end is None or event["t0"] < end
    return count
