"""The timing sentinel: how late the machine ran a trial, against the margin its experiment rests on.

Every experiment's claim rests on a margin: TTL 1000 ms against 300 ms of work (the lease outlives
the critical section), a 1200 ms pause against a 1000 ms lease (the lease expires while its holder
is frozen), a fault 50 ms into 300 ms of work (it lands while the lease is held). At
``--time-scale 0.1`` those margins are 70, 20 and 25 ms, and a loaded 2-core machine stalls a
process that long: then the trial measured the machine, not the lock. This module finds, from the
history alone (pure: no Redis, testable on hand-built histories), the worst *stall* — how much later
than planned a step of the trial ran — and compares it with the smallest margin:

- **sleeps**: each worker's planned gaps between consecutive recorded steps: the work between a
  read (or an atomic/optimistic section's enter) and the next step, the think time after a release
  (its largest jittered value: the draw itself is not recorded, so a stall is never overstated),
  no gap at all between back-to-back steps (acquire → enter → read, write → exit → release);
  a pause's own length beyond ``pause_ms`` (a SIGSTOP freeze includes the runner's continue, and its
  stop where the runner makes it: faults/freeze.py);
- **calls**: each loopback call (enter, read, write, exit, release, a lease check, the successful
  acquire attempt) beyond the usual time of its kind for that worker (the median in this trial;
  the first call of each kind is left out: it opens the connection, several round trips), except
  calls whose length is the lock's own (:func:`_waits_by_design`: an acquire made while another
  worker held the lock or while the worker's external client process started, a release that
  found the lock gone);
- **fault landings**: a runner event that carries its planned time (``planned_ns``) landed
  ``t0 - planned_ns`` late, less what it waited there for the read that aims it (``read_wait_ms``:
  who leads, the holder's member, the lease's nodes) when it still landed inside the lease it
  followed (:func:`aim_wait_ms`); a step that did not act (``skipped``) landed nowhere.

A worker's steps during a fault that slows *that worker on purpose* (a starve step's stops, a slow
link's late replies, a cut link's timeouts, a pause, an ended session: from the fault's inject to its
heal) are not judged: that delay is the experiment, not the machine. Nor are a worker's calls while a
fault keeps a lock server away (crash, restart, failover, node-freeze, isolate, split), from the
inject until the worker's first call to the lock servers after the heal was answered
(:func:`until_answered`): the service's recovery is the fault's too. The fault's own landing still is
judged, and so are sleeps in every such window.

A stall is a lower bound on what the machine did to the trial (the acquire's retry sleeps and a
worker's start-up offset are not recorded step by step, so they are not judged). The trial is
*timing-marked* when its worst stall reached :data:`MARK_SHARE` of its smallest margin. Half,
because the orderings the experiments rest on are races between two workers (the new holder's
write against the woken zombie's, a rival's entry against the holder's exit): each side can be
late, and the sentinel sees the worst single delay, so at half the margin two such delays together
can already flip the race. The noise floor is the sleep overshoot and loopback jitter (a sleep
overshoots by p99 0.43 ms on an idle machine): one trial at a time beside other work measured
0.7-3 ms here, under a third of the smallest default margin at ``--time-scale 0.1`` (short-ttl:
10 ms); a CPU hog beside the matrix gave 10-77 ms.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lockcompare.analysis.history import Event
from lockcompare.scenario import faultkinds

#: The share of the margin a stall must reach for the trial to be marked (see the module docstring).
MARK_SHARE = 0.5

#: The columns the sentinel adds to a results row (their values: :meth:`TimingVerdict.as_row`).
COLUMNS = ("stall_ms", "stall_at", "margin_ms", "margin_of", "timing_marked")

#: Steps a worker records from its main thread, in program order (renewals come from a watchdog
#: thread and errors end the worker: neither is a step of the schedule).
_STEPS = frozenset({"acquire", "pause", "enter", "read", "write", "lease", "exit", "release", "retry", "gave-up"})
#: Steps that are one call to a server: their duration beyond the usual is a stall.
_CALLS = ("enter", "read", "write", "exit", "release", "lease")
_NS_PER_MS = 1e6
#: What opening a connection may add to the first call of each kind (ms): on an idle 2-core machine the
#: first call exceeded the usual call by a median of 0.1-4.7 ms per backend and kind (the committed
#: reproduction's baseline trials), at most 48 ms (an etcd member's first HTTP request).
CONNECT_ALLOWANCE_MS = 5.0
#: Faults whose purpose is to delay the worker they target (``target_worker``; absent: every worker):
#: the kinds that say ``excuses_worker`` (scenario/faultkinds), by their names in the history, older
#: histories' included (``slow-link`` before it was ``slow``).
_DELAYS_ITS_WORKER = faultkinds.with_former_names(faultkinds.names_where("excuses_worker"))
#: Faults that keep a lock server away (``excuses_calls``): the workers' calls meanwhile wait on it.
_KEEPS_A_SERVER_AWAY = faultkinds.with_former_names(faultkinds.names_where("excuses_calls"))


@dataclass(frozen=True, kw_only=True)
class TimingPlan:
    """What the trial planned, in scaled milliseconds (from its settings)."""

    ttl_ms: float
    work_ms: float
    pause_ms: float = 0.0
    pause_point: str = "after-acquire"
    think_ms: float = 0.0
    jitter: float = 0.0
    #: A fault that must land while worker 0 holds its lease, this long after its acquire (None: none).
    fault_offset_ms: float | None = None
    #: Other margins the experiment rests on, by name (e.g. slow-response: the reply delay past the TTL).
    extra_margins: tuple[tuple[str, float], ...] = ()
    #: False for a design that takes no lease (none, atomic, optimistic): the TTL's margins are not
    #: its margins, and a row is judged only against the margins its backend has.
    leased: bool = True
    #: The backend declares that its acquire waits inside the call for the lock (``acquire_waits``:
    #: kazoo's recipe blocks on a watch up to its timeout): an acquire's length is the lock's.
    acquire_waits: bool = False

    @property
    def think_max_ms(self) -> float:
        """The longest think time the jitter can draw (worker.py: think × U(1 - j/2, 1 + j/2))."""
        return self.think_ms * (1 + self.jitter / 2)


def plan_from_settings(settings: Mapping[str, Any], **extra: Any) -> TimingPlan:
    """A :class:`TimingPlan` from a trial's settings (a spec's ``settings()`` or a results row)."""
    return TimingPlan(
        ttl_ms=float(settings["ttl_ms"]),
        work_ms=float(settings["work_ms"]),
        pause_ms=float(settings.get("pause_ms") or 0.0),
        pause_point=str(settings.get("pause_point") or "after-acquire"),
        think_ms=float(settings.get("think_ms") or 0.0),
        jitter=float(settings.get("jitter") or 0.0),
        **extra,
    )


@dataclass(frozen=True)
class Margin:
    ms: float
    of: str  # what it is, e.g. "pause - TTL"


def margins(plan: TimingPlan) -> list[Margin]:
    """Every margin the experiment rests on (non-negative), the first the lease's against the work.

    >>> [(m.of, m.ms) for m in margins(TimingPlan(ttl_ms=100, work_ms=30, pause_ms=120))]
    [('TTL - work', 70.0), ('pause - TTL', 20.0)]
    """
    found = []
    lease = float(plan.ttl_ms - plan.work_ms)
    if plan.leased:
        found.append(Margin(lease, "TTL - work") if lease >= 0 else Margin(-lease, "work - TTL"))
    if plan.pause_ms > 0 and plan.leased:
        # The lease must end during the pause (or, paused before the write, during work + pause).
        frozen = plan.pause_ms + (plan.work_ms if plan.pause_point == "before-write" else 0.0)
        found.append(Margin(abs(frozen - plan.ttl_ms), "pause - TTL" if frozen >= plan.ttl_ms else "TTL - pause"))
    if plan.fault_offset_ms is not None:
        found.append(Margin(max(0.0, plan.work_ms - plan.fault_offset_ms), "work - fault offset"))
    found += [Margin(max(0.0, ms), of) for of, ms in plan.extra_margins]
    return found


#: What a trial whose backend has no margin at all is judged against: nothing (never marked).
NO_MARGIN = Margin(math.nan, "none (no lease)")


def smallest_margin(plan: TimingPlan) -> Margin:
    """The smallest margin; :data:`NO_MARGIN` for a lock-free trial without a fault that has one.

    >>> smallest_margin(TimingPlan(ttl_ms=100, work_ms=30, pause_ms=120, leased=False)).of
    'none (no lease)'
    """
    return min(margins(plan), key=lambda m: m.ms, default=NO_MARGIN)


@dataclass(frozen=True)
class Stall:
    ms: float
    at: str  # where, e.g. "worker 1 round 12: work sleep"


def _where(event: Event, what: str) -> str:
    who = "runner" if event["worker"] < 0 else f"worker {event['worker']}"
    return f"{who} round {event['round']}: {what}"


def _planned_gap_ms(prev: Event, nxt: Event, plan: TimingPlan) -> tuple[float, str]:
    """How long the worker meant to wait between ``prev`` ending and ``nxt`` starting, and what that wait is."""
    kind = prev["kind"]
    if kind == "read" and prev.get("balance") is not None:
        return plan.work_ms, "work sleep"
    if kind == "enter" and nxt["kind"] != "read":
        return plan.work_ms, "work sleep"  # atomic: enter → work → write
    if kind == "release":
        return plan.think_max_ms, "think sleep"
    return 0.0, f"{kind} → {nxt['kind']}"


def deliberate_delays(history: Iterable[Event]) -> dict[int | None, list[tuple[int, int]]]:
    """The windows (inject t0 .. heal t1, ns) of faults that delay a worker on purpose, by the worker
    they target (key None: every worker). An injection never healed lasts to the end of the history."""
    open_at: dict[tuple[Any, Any, Any], tuple[int, int | None]] = {}
    windows: dict[int | None, list[tuple[int, int]]] = {}
    for e in sorted(
        (e for e in history if e["worker"] < 0 and e.get("fault") in _DELAYS_ITS_WORKER), key=lambda e: e["t0"]
    ):
        key = (e.get("fault"), e.get("step"), e.get("target_worker"))
        if e.get("action") == "inject":
            open_at[key] = (e["t0"], e.get("target_worker"))
        elif e.get("action") == "heal" and key in open_at:
            start, worker = open_at.pop(key)
            windows.setdefault(worker, []).append((start, e["t1"]))
    for start, worker in open_at.values():
        windows.setdefault(worker, []).append((start, math.inf))  # type: ignore[arg-type]
    return windows


def server_outages(history: Iterable[Event], *, ttl_ms: float) -> list[tuple[int, float]]:
    """When a fault kept a lock server away (ns): each ``excuses_calls`` injection to its heal, or
    to one TTL later when it is never healed (a crash: the clients move on within their session)."""
    open_at: dict[tuple[Any, Any], int] = {}
    windows: list[tuple[int, float]] = []
    for e in sorted(
        (e for e in history if e["worker"] < 0 and e.get("fault") in _KEEPS_A_SERVER_AWAY), key=lambda e: e["t0"]
    ):
        key = (e.get("fault"), e.get("step"))
        if e.get("action") == "inject":
            open_at[key] = e["t0"]
        elif e.get("action") == "heal" and key in open_at:
            windows.append((open_at.pop(key), e["t1"]))
    windows += [(start, start + ttl_ms * _NS_PER_MS) for start in open_at.values()]
    return windows


#: Steps that are a call to the lock servers (enter, read, write and exit go to the resource).
_LOCK_CALLS = frozenset({"acquire", "release", "lease"})


def _answered_by_the_lock(event: Event) -> bool:
    """A lock server answered this step: a granted acquire, a release, a lease check."""
    return event["kind"] in _LOCK_CALLS and (event["kind"] != "acquire" or bool(event.get("ok")))


def until_answered(outages: Sequence[tuple[int, float]], events: Sequence[Event]) -> list[tuple[int, float]]:
    """Each outage (:func:`server_outages`) as one worker saw it: from the inject to the end of the
    worker's first call to the lock servers that started after the heal and was answered. A heal
    ends the fault, not the service's recovery: a woken or reconnected leader that bumped its term
    forces an election, a ZooKeeper member rejoins "not serving", a client reconnects to the member
    it lost. The first answer the worker gets after the heal is the history's own sign that the
    service is back (its length is the recovery, not judged); every later call is judged.
    ``events``: the worker's steps, in order."""
    answered = []
    for start, end in outages:
        first = next((e for e in events if _answered_by_the_lock(e) and e["t0"] >= end), None)
        answered.append((start, end if first is None else max(end, first["t1"])))
    return answered


def worker_stalls(history: Sequence[Event], plan: TimingPlan) -> list[Stall]:
    """Every late step of the workers: sleeps and gaps past their plan, calls past their usual time,
    except while a fault delays that worker on purpose (:func:`deliberate_delays`), and calls while
    a fault keeps a lock server away until the worker is answered again (:func:`until_answered`)."""
    by_worker: dict[int, list[Event]] = {}
    for event in history:
        if event["worker"] >= 0 and event["kind"] in _STEPS:
            by_worker.setdefault(event["worker"], []).append(event)
    delays = deliberate_delays(history)
    outages = server_outages(history, ttl_ms=plan.ttl_ms)
    for events in by_worker.values():
        events.sort(key=lambda e: (e["t0"], e["t1"]))
    holding = {worker: holding_windows(events) for worker, events in by_worker.items()}
    client_starts: dict[int, list[tuple[int, int]]] = {}  # an external client's process (re)started
    for event in history:
        if event["worker"] >= 0 and event["kind"] == "client":
            client_starts.setdefault(event["worker"], []).append((event["t0"], event["t1"]))
    stalls: list[Stall] = []
    for worker, events in by_worker.items():
        # A pause inside an acquire (its requests out, no reply read) is the experiment, not a slow call:
        # the acquire that holds it and the steps around it are not judged across it.
        in_acquire = [(e["t0"], e["t1"]) for e in events if e["kind"] == "pause" and e.get("point") == "in-acquire"]
        windows = delays.get(worker, []) + delays.get(None, []) + in_acquire
        for prev, nxt in itertools.pairwise(events):
            if bool(prev.get("extra")) != bool(nxt.get("extra")):
                continue  # the contend workload's wait for the runner's answer, not a planned gap
            if _overlaps(windows, prev["t1"], nxt["t0"]):
                continue
            planned, what = _planned_gap_ms(prev, nxt, plan)
            late = (nxt["t0"] - prev["t1"]) / _NS_PER_MS - planned
            stalls.append(Stall(late, _where(prev, what)))
        stalls += [
            Stall((e["t1"] - e["t0"]) / _NS_PER_MS - plan.pause_ms, _where(e, "pause length"))
            for e in events
            if e["kind"] == "pause"
        ]
        rivals = [w for other, held in holding.items() if other != worker for w in held]
        starts = client_starts.get(worker, [])
        kept_away = until_answered(outages, events)
        stalls += _call_stalls(
            [
                e
                for e in events
                if not _overlaps(windows, e["t0"], e["t1"])
                and not _overlaps(kept_away, e["t0"], e["t1"])
                and not _waits_by_design(e, rivals=rivals, starts=starts, acquire_waits=plan.acquire_waits)
            ]
        )
    return stalls


def holding_windows(events: Sequence[Event]) -> list[tuple[int, float]]:
    """When one worker held the lock: each granted acquire's end to its next release's end (ns; a
    lease never released lasts to the end of the history). ``events``: that worker's steps, in order."""
    windows: list[tuple[int, float]] = []
    since: int | None = None
    for e in events:
        if e["kind"] == "acquire" and e.get("ok") and since is None:
            since = e["t1"]
        elif e["kind"] == "release" and since is not None:
            windows.append((since, e["t1"]))
            since = None
    if since is not None:
        windows.append((since, math.inf))
    return windows


def _waits_by_design(
    event: Event,
    *,
    rivals: Sequence[tuple[int, float]],
    starts: Sequence[tuple[int, int]] = (),
    acquire_waits: bool = False,
) -> bool:
    """A call whose length is the lock's behaviour, not the machine's, so no stall can be read from it:

    - an acquire attempt made while another worker held the lock ends when that worker lets go or
      its lease ends — at once for a client that tries once and retries itself (the runner's loop),
      a whole lease later for one that blocks inside the call (kazoo's recipe, redis-semaphore);
    - an acquire during which the worker's external client process started (the first, or a new one
      after a client that exits on a lost lock, as redis-semaphore's does: 0.8-1.5 s of Node start-up
      measured inside one acquire);
    - a release that found the lock no longer the caller's (``released=False``): clients retry it
      (sesame's Redlock for its retryCount × retryDelay, 2 s measured), others return at once;
    - any acquire of a backend that declares ``acquire_waits`` (it waits inside the call: kazoo's
      recipe on a watch). The rival's hold is not always in the history: under slow-response the
      rival's znode exists while its slowed acquire has not returned yet (11 ZooKeeper marks).

    Judging them marked many Node and ZooKeeper trials with "stalls" of up to a lease or a retry
    budget, and each such mark halved the matrix's parallelism (StallGovernor)."""
    if event["kind"] == "release":
        return event.get("released") is False
    if event["kind"] == "acquire" and acquire_waits:
        return True
    if event["kind"] == "acquire" and event.get("t_attempt") is not None:
        return _overlaps(rivals, event["t_attempt"], event["t1"]) or _overlaps(starts, event["t0"], event["t1"])
    return False


def _overlaps(windows: Sequence[tuple[float, float]], t_from: float, t_to: float) -> bool:
    """True when [t_from, t_to] meets one of ``windows``."""
    return any(start <= t_to and t_from <= end for start, end in windows)


def _call_stalls(events: Sequence[Event]) -> list[Stall]:
    durations: dict[str, list[tuple[float, Event]]] = {}
    for event in events:
        if event["kind"] in _CALLS:
            durations.setdefault(event["kind"], []).append(((event["t1"] - event["t0"]) / _NS_PER_MS, event))
        elif event["kind"] == "acquire" and event.get("ok") and event.get("t_attempt") is not None:
            durations.setdefault("acquire", []).append(((event["t1"] - event["t_attempt"]) / _NS_PER_MS, event))
    stalls = []
    for kind, all_timed in durations.items():
        (first_ms, first), timed = all_timed[0], all_timed[1:]
        if not timed:
            continue
        usual = statistics.median(ms for ms, _ in timed)
        stalls += [Stall(ms - usual, _where(event, f"{kind} call")) for ms, event in timed]
        # The first call of a kind opens its connection: a handshake beside the call, allowed
        # CONNECT_ALLOWANCE_MS. Past that it is a stall like any other — it runs inside the lease
        # it just took (measured: a first acquire of 316 ms under a load of 30 took a fenced
        # lease past its deadline, and excusing the first call left that row unmarked).
        stalls.append(Stall(first_ms - usual - CONNECT_ALLOWANCE_MS, _where(first, f"{kind} call (first)")))
    return stalls


def fault_stalls(history: Iterable[Event]) -> list[Stall]:
    """Runner events (faults) that carry their planned time: how late each landed, counted from when
    its aim was resolved when it still struck the lease it followed (:func:`aim_wait_ms`). A step
    that did not act (``skipped``) landed nowhere: not judged."""
    events = list(history)
    return [
        Stall(
            (e["t0"] - e["planned_ns"]) / _NS_PER_MS - aim_wait_ms(e, events),
            _where(e, f"{e.get('fault', e['kind'])} {e.get('action', '')}".strip()),
        )
        for e in events
        if e["worker"] < 0 and isinstance(e.get("planned_ns"), int | float) and e.get("action") != "skipped"
    ]


def aim_wait_ms(event: Event, history: Sequence[Event]) -> float:
    """What a fault step waited at its planned moment for the read that aims it (``read_wait_ms``:
    who leads, which member the holder's client is on, which nodes hold the lease; faults/aim.py),
    when it still landed inside the lease it followed: the wait is the step's design, and what the
    experiment needs of its timing — a strike inside that lease — is in the history. 0 when it did
    not wait, or landed outside that lease (a landing that missed its lease is the machine's doing:
    judged whole), or the history cannot show where it landed. Inside: the event's own ``lease_held``
    (a lease-aimed step), else the followed worker's (``lease_worker``, ``follow``, else worker 0)
    acquire of the event's round ended before the step acted and its release had not begun."""
    wait = event.get("read_wait_ms")
    if not isinstance(wait, int | float) or wait <= 0:
        return 0.0
    if "lease_held" in event:
        return float(wait) if event["lease_held"] is True else 0.0
    worker, round_ = event.get("lease_worker", event.get("follow", 0)), event["round"]
    steps = [e for e in history if e["worker"] == worker and e["round"] == round_]
    granted = [e["t1"] for e in steps if e["kind"] == "acquire" and e.get("ok")]
    releasing = [e["t0"] for e in steps if e["kind"] == "release"]
    inside = bool(granted) and granted[-1] <= event["t0"] <= min(releasing, default=math.inf)
    return float(wait) if inside else 0.0


def worst_stall(history: Sequence[Event], plan: TimingPlan) -> Stall:
    """The latest any step ran (0 ms when nothing ran late or nothing was recorded)."""
    return max([Stall(0.0, ""), *worker_stalls(history, plan), *fault_stalls(history)], key=lambda s: s.ms)


@dataclass(frozen=True, kw_only=True)
class TimingVerdict:
    stall: Stall
    margin: Margin
    share: float = MARK_SHARE

    @property
    def marked(self) -> bool:
        return self.stall.ms >= self.share * self.margin.ms

    @property
    def eaten(self) -> float:
        """The share of the margin the worst stall ate (inf for a zero margin with a stall, NaN for none)."""
        if math.isnan(self.margin.ms):
            return math.nan
        if self.margin.ms > 0:
            return self.stall.ms / self.margin.ms
        return math.inf if self.stall.ms > 0 else 0.0

    def as_row(self) -> dict[str, Any]:
        return {
            "stall_ms": round(self.stall.ms, 3),
            "stall_at": self.stall.at,
            "margin_ms": round(self.margin.ms, 3),
            "margin_of": self.margin.of,
            "timing_marked": self.marked,
        }


def judge_timing(history: Sequence[Event], plan: TimingPlan, *, share: float = MARK_SHARE) -> TimingVerdict:
    """The trial's worst stall against its smallest margin; see the module docstring."""
    return TimingVerdict(stall=worst_stall(history, plan), margin=smallest_margin(plan), share=share)


def eaten_share(row: Mapping[str, Any]) -> float:
    """How much of its margin a results row's worst stall ate (NaN for a row without the columns)."""
    stall, margin = row.get("stall_ms"), row.get("margin_ms")
    if not isinstance(stall, int | float) or not isinstance(margin, int | float) or math.isnan(stall):
        return math.nan
    if math.isnan(margin):
        return math.nan
    return stall / margin if margin > 0 else (math.inf if stall > 0 else 0.0)


def is_marked(row: Mapping[str, Any]) -> bool:
    """True for a results row the sentinel marked (False for rows from before it existed)."""
    return row.get("timing_marked") is True or str(row.get("timing_marked")).lower() == "true"
