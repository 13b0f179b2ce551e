"""The verdict on one trial: pure functions over the history and the resource's counters.

No Redis here, so every rule can be tested on hand-built histories. Conflicts are measured twice,
independently: by the resource (its INCR of the occupancy counter returned more than 1) and from
the workers' critical-section intervals on the shared monotonic clock (an entry that falls inside
another worker's interval: critical_sections.py). Each step's instant is taken as the midpoint of its ``t0``/``t1``
(the request took effect somewhere between send and reply, a loopback round trip of ~0.15 ms).

A checker that cannot make sense of a history says ``unknown``, never ``exclusive``. Nor is a
trial ``exclusive`` when the history itself shows the lock breaking its promise although the
resource saw no overlap (a lease granted over a valid one, a write accepted after its writer's
deadline or under a token that went backwards: ``lease-violated``), or when the resource refused
a worker holding a valid lease more often than it let it work (``starved``: progress.py).

Extra rounds (the ``contend`` workload, contend.py: events marked ``"extra": true``) exist only to
keep the rivals contending. Exclusion and progress are judged on the planned sections: ``entries``
counts planned sections; a conflict is an entry that found another worker inside, counted when
planned work is involved (a planned entry, or an extra entry into another worker's planned
section), by both measures alike; acquire counts, timeouts, refusals and latencies are the planned
rounds'. Damage is counted over every section, because the resource cannot tell whose increment a
stale write erased and an extra section's write is real work under the same lock: writes, lost
updates, stale writes, and the lock's own symptoms (most workers inside, overlap time, failed
releases, tokens going backwards). ``extra_entries`` says how many extra sections ran. A history
without extra events is judged exactly as before.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import asdict, dataclass

from lockcompare.analysis.counters import ResourceCounters
from lockcompare.analysis.critical_sections import (
    Interval,
    concurrency_profile,
    cs_intervals,
    entry_conflicts,
    overlap_conflicts,
)
from lockcompare.analysis.duplicates import double_applications
from lockcompare.analysis.evidence import (
    backwards_writes_accepted,
    deepest_grant_ms,
    foreign_releases,
    grants_while_held,
    releases_of_nothing,
    stale_writes,
    tokens_backwards,
)
from lockcompare.analysis.exercised import stopped_after_fault
from lockcompare.analysis.history import Event
from lockcompare.analysis.progress import (
    format_progress,
    least_progress,
    rounds_denied,
    starved,
    worker_progress,
    writes_skipped,
)
from lockcompare.analysis.renewal_measured import renewal_not_measured
from lockcompare.analysis.rules import implements
from lockcompare.analysis.stats import percentile
from lockcompare.analysis.strikes import FaultStrikes, fault_strikes
from lockcompare.analysis.verdicts import MEANINGS

#: Every verdict, with what it means (one vocabulary, worst first: analysis/verdicts.py). Safety is
#: judged first (a violation observed is a violation whatever else happened: an overlap or a loss at
#: the resource, or the lock breaking its promise in the history), then progress; a trial is
#: ``exclusive`` only if every planned round ran and no worker holding a valid lease was mostly
#: refused by the resource.
VERDICT_MEANINGS = MEANINGS

__all__ = [  # re-exported: defined here before evidence.py and critical_sections.py
    "VERDICT_MEANINGS", "Interval", "TrialMetrics", "backwards_writes_accepted", "check",
    "concurrency_profile", "cs_intervals", "entry_conflicts", "foreign_releases", "format_refusals",
    "grants_while_held", "overlap_conflicts", "parse_refusals", "refusal_counts", "stale_writes",
    "tokens_backwards", "unknown", "verdict_for",
]  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class TrialMetrics:
    entries: int
    entries_planned: int  # workers x rounds
    conflicts: int  # counted by the resource
    conflicts_overlap: int  # from the workers' CS intervals
    conflict_measures_agree: bool
    max_concurrency: int
    overlap_ms: float
    writes_accepted: int
    writes_rejected: int
    reads_rejected: int  # fenced reads refused (fence-all): the holder was known to be stale
    cs_retries: int  # optimistic updates redone because the balance changed under them
    stale_writes_accepted: int
    stale_writes_rejected: int
    lost_updates: int
    final_balance: int
    acquires: int
    acquire_timeouts: int  # rounds that gave up acquiring at the acquire deadline
    refusals: str  # every refused attempt by reason, e.g. "held:120;no-quorum:3"
    refused_validity: int
    acquire_p50_ms: float
    acquire_p99_ms: float
    releases_failed: int
    tokens_backwards: int  # granted fencing tokens not above one granted before (counter lost: restart, failover)
    verdict: str
    extra_entries: int = 0  # sections of extra rounds (the contend workload), not in ``entries``
    grants_while_held: int = 0  # leases granted while another worker's lease was valid and unreleased
    # How far inside another's valid lease the deepest grant came (ms; 0: none), counted or within
    # evidence.LEASE_TOLERANCE_MS: the size behind grants_while_held. NaN in rows from before.
    deepest_grant_ms: float = 0.0
    foreign_releases: int = 0  # releases reported done while the lock was another worker's (deleted its key)
    backwards_writes_accepted: int = 0  # writes accepted under a fencing token not above an earlier grant's
    writes_skipped: int = 0  # writes a holder did not make: its lease deadline had passed, or it was lost
    rounds_progressed: int = 0  # planned rounds with an accepted write (useful work), over all workers
    writes_accepted_min_worker: int = 0  # the fewest planned rounds any worker made progress in
    progress_by_worker: str = ""  # "w0:39/40 w1:1/20": rounds with an accepted write / rounds holding the lock
    rounds_denied: int = 0  # planned rounds in which the resource refused a holder whose lease was valid
    workers_starved: int = 0  # workers denied in more rounds than they progressed ("safe but no progress")
    # The runner's fault injections (analysis/strikes.py): planned, struck (acted on their target),
    # missed (aimed at a lease that had ended when they landed). -1: not counted (rows from before).
    fault_steps_planned: int = 0
    fault_steps_struck: int = 0
    fault_steps_missed: int = 0
    #: Requests the resource applied more than once (a lost reply retried without an idempotency key:
    #: analysis/duplicates.py). 0 in rows from before it was counted.
    double_applications: int = 0
    problem: str = ""  # why the verdict is unknown; or what went wrong that no column names (RELEASED_NOTHING)

    def as_row(self) -> dict[str, object]:
        return asdict(self)


#: Verdicts that claim the lock held (in full or over what ran): never given to a trial whose fault
#: never struck — it measured the lock without the fault it was about.
SAFE_VERDICTS = ("exclusive", "degraded", "starved")


def unstruck_problem(strikes: FaultStrikes) -> str:
    """The ``problem`` of a trial whose schedule planned injections and struck with none."""
    return f"no safety verdict without the fault: {strikes.summary()}"


#: The ``problem`` of a trial whose session lock was not where its holder believed (sessions.py).
RELEASED_NOTHING = (
    "unlock released nothing while held ({n} of {total} releases): session not kept "
    "(a transaction-pooling proxy? a lock that expires?)"
)
#: ...when the schedule itself ended sessions: its own session end is the first suspect, not a proxy.
RELEASED_NOTHING_BY_SCHEDULE = (
    "unlock released nothing while held ({n} of {total} releases): session not kept "
    "(the schedule's own {fault} ended {ended} session(s), e.g. {example} in round {round})"
)


def released_nothing_note(history: Sequence[Event], *, n: int, total: int) -> str:
    """The hint for unlocks that released nothing: the schedule's own session end when it had one
    (a session-kill that ended sessions), else the causes outside the schedule."""
    kills = [
        e for e in history
        if e.get("worker") == -1 and e.get("kind") == "fault" and e.get("action") == "inject"
        and e.get("sessions_ended")
    ]  # fmt: skip
    if not kills:
        return RELEASED_NOTHING.format(n=n, total=total)
    first = kills[0]
    session = first["sessions_ended"][0]
    example = f"{session:#x}" if isinstance(session, int) and session > 2**32 else str(session)
    whose = first.get("session_worker")
    example += f" (worker {whose}'s)" if isinstance(whose, int) else ""
    return RELEASED_NOTHING_BY_SCHEDULE.format(
        n=n, total=total, fault=first.get("fault", "fault"), ended=sum(len(e["sessions_ended"]) for e in kills),
        example=example, round=first.get("round"),
    )  # fmt: skip


@implements("lost-updates", "double-applied", "conflicts", "unavailable", "starved", "degraded")
def verdict_for(
    *,
    conflicts: int,
    lost_updates: int,
    entries: int,
    entries_planned: int,
    violations: int = 0,
    starved_workers: int = 0,
    double_applied: int = 0,
) -> str:
    """Safety first, then progress: see :data:`VERDICT_MEANINGS`. ``violations`` is the history's
    own safety evidence (grants over a valid lease, stale or backwards-token writes accepted);
    ``starved_workers`` how many workers the resource refused, while their lease was valid, more
    often than it let them work (see :mod:`lockcompare.analysis.progress`).

    >>> verdict_for(conflicts=0, lost_updates=0, entries=0, entries_planned=80)
    'unavailable'
    >>> verdict_for(conflicts=0, lost_updates=0, entries=50, entries_planned=80)
    'degraded'
    >>> verdict_for(conflicts=0, lost_updates=0, entries=80, entries_planned=80, violations=1)
    'lease-violated'
    >>> verdict_for(conflicts=0, lost_updates=0, entries=80, entries_planned=80, starved_workers=1)
    'starved'
    >>> verdict_for(conflicts=40, lost_updates=0, entries=80, entries_planned=80, double_applied=40)
    'double-applied'
    """
    if lost_updates > 0:
        return "lost-updates"
    if double_applied > 0:  # damage too: the balance holds more than the workers made
        return "double-applied"
    if conflicts > 0:
        return "conflicts-no-damage"
    if violations > 0:
        return "lease-violated"
    if entries == 0:
        return "unavailable"
    if starved_workers > 0:
        return "starved"
    return "exclusive" if entries >= entries_planned else "degraded"


def refusal_counts(acquires: Sequence[Event]) -> dict[str, int]:
    """Refused attempts by reason over every acquire event."""
    totals: dict[str, int] = {}
    for event in acquires:
        for reason, count in (event.get("refusals") or {}).items():
            totals[reason] = totals.get(reason, 0) + int(count)
    return dict(sorted(totals.items()))


def format_refusals(counts: dict[str, int]) -> str:
    """``{"held": 3, "no-quorum": 1}`` → ``"held:3;no-quorum:1"`` (the CSV's text form)."""
    return ";".join(f"{reason}:{n}" for reason, n in counts.items())


def parse_refusals(text: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for part in filter(None, (text or "").split(";")):
        reason, _, n = part.rpartition(":")
        counts[reason] = counts.get(reason, 0) + int(n)
    return counts


def check(
    history: Sequence[Event],
    counters: ResourceCounters,
    *,
    entries_planned: int,
    unavailable_under: Collection[str] = (),
    rests_on_renewal: bool = False,
) -> TrialMetrics:
    """Compute every metric of a trial; any inconsistency makes the verdict ``unknown``.

    ``unavailable_under``: the fault kinds the backend declares leave it unavailable (its trait of
    that name): a lock that stops being exercised after one of them keeps its verdict
    (analysis/exercised.py). ``rests_on_renewal``: the experiment's work outlasts the TTL; a trial
    whose lock never renewed is not judged (analysis/renewal_measured.py)."""
    try:
        not_measured = renewal_not_measured(history, rests_on_renewal=rests_on_renewal)
        if not_measured:
            return unknown(counters, problem=not_measured, entries_planned=entries_planned)
        return _check(history, counters, entries_planned=entries_planned, unavailable_under=unavailable_under)
    except (ValueError, KeyError, TypeError) as exc:
        return unknown(counters, problem=f"history unusable: {exc}", entries_planned=entries_planned)


@implements("counts-agree", "no-verdict-without-fault", "planned-rounds")
def _check(
    history: Sequence[Event], counters: ResourceCounters, *, entries_planned: int, unavailable_under: Collection[str]
) -> TrialMetrics:
    problems = []
    errors = [e for e in history if e["kind"] == "error"]
    if errors:
        problems.append(errors[0].get("message", "a worker failed"))
    intervals = cs_intervals(history)
    extra_entries = sum(1 for i in intervals if i.extra)
    if len(intervals) != counters.entries:
        problems.append(f"{len(intervals)} entries in the history but {counters.entries} at the resource")
    if counters.occupancy != 0:
        problems.append(f"occupancy counter ended at {counters.occupancy}, not 0")
    history_conflicts = sum(1 for e in history if e["kind"] == "enter" and e["inside"] > 1)
    if history_conflicts != counters.conflicts:
        problems.append(f"workers saw {history_conflicts} conflicts, the resource counted {counters.conflicts}")
    conflicts = entry_conflicts(history) if extra_entries else counters.conflicts
    entries = counters.entries - extra_entries
    conflicts_overlap = overlap_conflicts(intervals)
    peak, overlap_ms = concurrency_profile(intervals)
    stale_accepted, stale_rejected = stale_writes(history)
    acquires = [e for e in history if e["kind"] == "acquire" and not e.get("extra")]
    granted = [e for e in acquires if e.get("ok")]
    latencies_ms = [(e["t1"] - e["t_attempt"]) / 1e6 for e in granted]
    lost = counters.writes_accepted - counters.final_balance
    grants_over = grants_while_held(history)
    backwards_accepted = backwards_writes_accepted(history)
    released_nothing = releases_of_nothing(history)
    progress = worker_progress(history)
    no_progress = starved(progress)
    verdict = verdict_for(
        conflicts=conflicts,
        lost_updates=lost,
        entries=entries,
        entries_planned=entries_planned,
        violations=grants_over + stale_accepted + backwards_accepted + released_nothing,
        starved_workers=len(no_progress),
        double_applied=double_applications(history),
    )
    # Named, not judged unknown: the verdict stands, and the row says what no column counts.
    releases = sum(1 for e in history if e["kind"] == "release")
    notes = [released_nothing_note(history, n=released_nothing, total=releases)] if released_nothing else []
    strikes = fault_strikes(history)
    if strikes.none_struck:
        # A violation seen without the fault is still one (the lock broke by itself); a safe verdict is not
        # earned by a trial that never met its fault.
        if verdict in SAFE_VERDICTS:
            problems.append(unstruck_problem(strikes))
        else:
            notes.append(f"{strikes.summary()}: the violation happened without the fault")
    elif strikes.struck < strikes.planned:
        notes.append(strikes.summary())
    stop = stopped_after_fault(history)
    if stop is not None:
        # What ran after the fault was requests failing, not the lock: no verdict about the lock,
        # unless the backend declares that unavailability its own (and the fault was not healed).
        # A violation seen before it stands, and the row still says the lock stopped being exercised.
        if stop.fault in unavailable_under and not stop.healed:
            notes.append(stop.declared_note())
        elif verdict in (*SAFE_VERDICTS, "unavailable"):
            problems.append(stop.problem(origin_ns=min(int(e["t0"]) for e in history)))
        else:
            notes.append(stop.problem(origin_ns=min(int(e["t0"]) for e in history), violation=True))
    return TrialMetrics(
        entries=entries,
        entries_planned=entries_planned,
        conflicts=conflicts,
        conflicts_overlap=conflicts_overlap,
        conflict_measures_agree=conflicts_overlap == conflicts,
        max_concurrency=peak,
        overlap_ms=round(overlap_ms, 3),
        writes_accepted=counters.writes_accepted,
        writes_rejected=counters.writes_rejected,
        reads_rejected=counters.reads_rejected,
        cs_retries=sum(1 for e in history if e["kind"] == "retry"),
        stale_writes_accepted=stale_accepted,
        stale_writes_rejected=stale_rejected,
        lost_updates=lost,
        final_balance=counters.final_balance,
        acquires=len(granted),
        acquire_timeouts=len(acquires) - len(granted),
        refusals=format_refusals(refusal_counts(acquires)),
        refused_validity=refusal_counts(acquires).get("validity", 0),
        acquire_p50_ms=round(percentile(latencies_ms, 50), 4),
        acquire_p99_ms=round(percentile(latencies_ms, 99), 4),
        releases_failed=sum(1 for e in history if e["kind"] == "release" and not e.get("released")),
        tokens_backwards=tokens_backwards([e for e in history if e["kind"] == "acquire" and e.get("ok")]),
        verdict="unknown" if problems else verdict,
        problem="; ".join(problems + notes),
        extra_entries=extra_entries,
        grants_while_held=grants_over,
        deepest_grant_ms=deepest_grant_ms(history),
        foreign_releases=foreign_releases(history),
        backwards_writes_accepted=backwards_accepted,
        writes_skipped=writes_skipped(history),
        rounds_progressed=sum(p.progressed for p in progress),
        writes_accepted_min_worker=least_progress(progress),
        progress_by_worker=format_progress(progress),
        rounds_denied=rounds_denied(progress),
        workers_starved=len(no_progress),
        fault_steps_planned=strikes.planned,
        fault_steps_struck=strikes.struck,
        fault_steps_missed=strikes.missed,
        double_applications=double_applications(history),
    )


@implements("trial-failed")
def unknown(counters: ResourceCounters | None, *, problem: str, entries_planned: int) -> TrialMetrics:
    """Metrics for a trial whose history cannot be judged: counters kept, verdict ``unknown``."""
    c = counters or ResourceCounters(
        entries=0, conflicts=0, writes_accepted=0, writes_rejected=0, final_balance=0, occupancy=0
    )
    nan = float("nan")
    return TrialMetrics(
        entries=c.entries,
        entries_planned=entries_planned,
        conflicts=c.conflicts,
        conflicts_overlap=-1,
        conflict_measures_agree=False,
        max_concurrency=-1,
        overlap_ms=nan,
        writes_accepted=c.writes_accepted,
        writes_rejected=c.writes_rejected,
        reads_rejected=c.reads_rejected,
        cs_retries=-1,
        stale_writes_accepted=-1,
        stale_writes_rejected=-1,
        lost_updates=c.writes_accepted - c.final_balance,
        final_balance=c.final_balance,
        acquires=-1,
        acquire_timeouts=-1,
        refusals="",
        refused_validity=-1,
        acquire_p50_ms=nan,
        acquire_p99_ms=nan,
        releases_failed=-1,
        tokens_backwards=-1,
        verdict="unknown",
        problem=problem,
        extra_entries=-1,
        grants_while_held=-1,
        deepest_grant_ms=nan,
        foreign_releases=-1,
        backwards_writes_accepted=-1,
        writes_skipped=-1,
        rounds_progressed=-1,
        writes_accepted_min_worker=-1,
        progress_by_worker="",
        rounds_denied=-1,
        workers_starved=-1,
        fault_steps_planned=-1,
        fault_steps_struck=-1,
        fault_steps_missed=-1,
        double_applications=-1,
    )
