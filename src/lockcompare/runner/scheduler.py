"""Run trials N at a time, each on a cluster of its own, within the machine's CPU budget.

A trial's runner mostly waits on pipes (its workers are processes, its critical sections sleep),
so trials run in threads; the main thread coordinates: it takes clusters from the pool and gives
them back (servers die with the thread that spawned them), hands finished trials to ``on_done``
in completion order, and is the thread that receives Ctrl-C and SIGTERM.

Parallel trials must not change the numbers, and on a busy CPU they would: a worker that waits
for a core enters its critical section late. So beside ``jobs`` a :class:`CpuBudget` admits a
trial only while the trials in flight are expected to keep at most ``share`` of the CPUs busy.
A trial's busy fraction is measured, not guessed: CPU time (user + sys) of its workers and of its
cluster's processes (servers, and the proxies in their paths) over its wall time, kept per (backend,
experiment). Measured on 2 cores at ``--time-scale 0.1`` (the README's main command at 533010a,
warm workers, the direct Redis path): single 0.05-0.14 CPU per trial, redlock 0.13-0.35, the
lock-free rows under 0.08, pottery 0.25-0.78 (its thread pool per call); at the lesson's scale a
tenth of that (the busy part, acquire retries every ``retry_delay_ms``, scales with 1/time-scale).
A kind not measured yet is estimated from the kinds that share its backend or its experiment
(:meth:`CpuBudget.estimate`): in the main command half the trials are the first of their kind, and
the prior alone held them to 3 at once while the CPUs stood two-thirds idle.

Some numbers hang on millisecond timing whatever the CPU load: without a lock, the conflict count
measures the phase between two free-running workers, which stays in step only while neither is
delayed by more than the think time (2 ms at ``--time-scale 0.1``). Measured on 2 cores, no-lock
baseline, 10 trials each: 44.8/80 serial with fresh workers, 45.9 serial with warm ones, 56.8
with 2 trials at once, 59.9 with 8 (65.9 with 8 and fresh workers) — while lock trials matched
the serial run cell for cell. Such trials (``solo``: the matrix passes no-lock backends —
``none``, ``atomic``, ``optimistic`` — in experiments without pauses) run with nothing beside them.

Trials that stall say so themselves (analysis/sentinel.py: how late their steps ran against the
margin their experiment rests on), and a :class:`StallGovernor` listens: when a finished trial's
worst stall ate :data:`BACK_OFF_SHARE` of its margin (the share that marks its row), fewer trials
are admitted at once (half as many as ran beside it, rounded up, down to 1), and one more after
:data:`CALM_TO_GROW` calm trials in a row. The CPU budget measures average load; the governor
catches what an average hides (a burst, a neighbour process, a slow disk) in the numbers that matter.

On an interrupt (KeyboardInterrupt, :class:`~lockcompare.infra.lifecycle.Terminated`) or a failed
trial, every worker is killed, the runner threads finish (each deletes its keys), every server is
stopped, and results that arrive after that are dropped: only whole rows of whole trials exist.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from lockcompare.errors import ClusterStartFailed
from lockcompare.infra.cluster import Cluster, ClusterShape
from lockcompare.infra.peerlinks import cluster_process_ids
from lockcompare.runner.crew import cpu_meter, process_cpu_s
from lockcompare.runner.floor import idle_ticks
from lockcompare.scenario.limits import DEFAULT_CPU_SHARE, usable_cpus  # noqa: F401  (declared where the CLI reads them)

S = TypeVar("S")
R = TypeVar("R")

#: Busy-CPU fraction assumed for a kind of trial before one of its kind has been measured, at
#: ``--time-scale 1``; it scales with 1/time-scale (0.5 at 0.1: above every kind measured there but
#: pottery's baseline, see above) and gives way to the kinds related to it as soon as one is measured.
PRIOR_BUSY_AT_SCALE_1 = 0.05


def prior_busy_fraction(time_scale: float) -> float:
    """Expected busy-CPU fraction of a trial nothing is known about yet, at ``time_scale``."""
    return min(1.0, PRIOR_BUSY_AT_SCALE_1 / time_scale)


@dataclass(kw_only=True)
class CpuBudget:
    """Admission by CPU: pure bookkeeping, tested on hand-built numbers.

    >>> budget = CpuBudget(cpus=2, share=0.75, prior=0.5)
    >>> budget.admits(running=[], kind="a")          # an idle machine always takes one trial
    True
    >>> budget.admits(running=["a", "a"], kind="a")  # 3 x 0.5 = 1.5 <= 2 x 0.75
    True
    >>> budget.record(kind="b", busy=1.0)
    >>> budget.admits(running=["a", "b"], kind="a")  # 0.5 + 1.0 + 0.5 = 2.0 > 1.5
    False

    Kinds that are tuples (the matrix's ``(backend, experiment)``) share parts: one not measured yet
    takes the larger of its measured relatives' means, part by part (its backend's kinds, its
    experiment's kinds), and the prior only when it has none:

    >>> budget = CpuBudget(cpus=2, share=0.75, prior=0.5)
    >>> budget.record(kind=("single", "client-pause"), busy=0.06)
    >>> budget.record(kind=("pottery", "client-pause"), busy=0.3)
    >>> budget.record(kind=("single", "baseline"), busy=0.12)
    >>> round(budget.estimate(("redlock", "client-pause")), 2)   # its experiment: (0.06 + 0.3) / 2
    0.18
    >>> round(budget.estimate(("pottery", "baseline")), 2)       # max(pottery 0.3, baseline 0.12)
    0.3
    >>> budget.estimate(("redlock", "short-ttl"))                 # no relative measured
    0.5
    """

    cpus: float
    share: float = DEFAULT_CPU_SHARE
    prior: float = 0.5
    _measured: dict[Hashable, list[float]] = field(default_factory=dict)

    @property
    def limit(self) -> float:
        return self.cpus * self.share

    def record(self, *, kind: Hashable, busy: float) -> None:
        self._measured.setdefault(kind, []).append(busy)

    def estimate(self, kind: Hashable) -> float:
        """The mean measured busy fraction of ``kind``; until one has finished, the larger of its
        relatives' (:meth:`_relatives`), else the prior."""
        values = self._measured.get(kind)
        if values:
            return sum(values) / len(values)
        relatives = self._relatives(kind)
        return max(relatives) if relatives else self.prior

    def _relatives(self, kind: Hashable) -> list[float]:
        """For each part of a tuple ``kind``, the mean of every measured kind with that part in that
        place (a kind's mean counted once, however many trials it has): a backend's cost per trial
        carries over between its experiments, an experiment's between backends, better than a prior
        that knows neither. Replayed over the main command's trials in the order they finished (2 cores,
        ×0.1, 533010a) it fell short of a kind's first measured trial for 13 of 27 kinds: by 0.15 at
        most, but by 0.26 and 0.43 for pottery's (its thread pool is costlier than any relative); the
        stall governor covers that, and each kind's first trial replaces the estimate."""
        if not isinstance(kind, tuple):
            return []
        means = []
        for place, part in enumerate(kind):
            kin = [
                sum(values) / len(values)
                for other, values in self._measured.items()
                if isinstance(other, tuple) and len(other) == len(kind) and other[place] == part
            ]
            if kin:
                means.append(sum(kin) / len(kin))
        return means

    def admits(self, *, running: Sequence[Hashable], kind: Hashable) -> bool:
        if not running:
            return True  # however costly, one trial at a time always runs (that is --jobs 1)
        return sum(self.estimate(k) for k in running) + self.estimate(kind) <= self.limit

    def admitted_at_first(self) -> int:
        """How many trials this budget admits at once before any has been measured (each at the
        prior; at least one).

        >>> CpuBudget(cpus=2, share=0.75, prior=0.5).admitted_at_first()
        3
        """
        return max(1, math.floor(self.limit / self.prior + 1e-9))

    def estimates(self) -> dict[Hashable, float]:
        """Every measured kind's mean busy fraction."""
        return {kind: self.estimate(kind) for kind in self._measured}


#: A finished trial whose worst stall ate this share of its margin makes the scheduler back off:
#: what marks its row (sentinel.MARK_SHARE). A quarter was tried first: at --time-scale 0.1
#: short-ttl's margin is 10 ms, and 2.5 ms stalls are everyday on 2 cores with a few trials at
#: once, so it ran the main command nearly serially (5 min instead of ~1.5) without changing a cell.
BACK_OFF_SHARE = 0.5
#: Calm trials in a row (stall under BACK_OFF_SHARE) before one more trial may run at once again.
CALM_TO_GROW = 3
#: The share of the machine's CPU time that stood idle over a stalled trial above which its stall
#: does not lower the limit: the CPU budget keeps the running trials' own demand under 75% of the
#: cores, so at a quarter idle the neighbours were not what held the trial up.
IDLE_CLEARS = 0.25


@dataclass(kw_only=True)
class StallGovernor:
    """How many trials may run at once, from how late the finished ones ran (pure bookkeeping).

    >>> gov = StallGovernor(jobs=8)
    >>> gov.record(share=0.6, concurrent=8); gov.limit   # a stall of 60% of its margin beside 7 others
    4
    >>> gov.record(share=0.5, concurrent=3); gov.limit
    2
    >>> for _ in range(3): gov.record(share=0.05, concurrent=2)
    >>> gov.limit
    3
    >>> gov.record(share=0.9, concurrent=3, machine_idle=0.4); gov.limit   # idle CPUs: not the neighbours
    3
    >>> gov.record(share=0.9, concurrent=1); gov.limit   # it ran alone
    3
    """

    jobs: int
    back_off: float = BACK_OFF_SHARE
    calm_to_grow: int = CALM_TO_GROW
    limit: int = 0
    _calm: int = 0
    backed_off: int = 0  # how many times the limit was lowered

    def __post_init__(self) -> None:
        self.limit = self.limit or self.jobs

    def record(self, *, share: float, concurrent: int, machine_idle: float = 0.0) -> None:
        """A trial finished whose worst stall ate ``share`` of its margin, having run beside
        ``concurrent - 1`` others at most, while the machine's CPUs stood idle ``machine_idle`` of
        its time (NaN share: not measured, changes nothing).

        A stall in a trial that ran alone, or while the CPUs stood idle (:data:`IDLE_CLEARS`), is
        not its neighbours' doing: the trial's own fault made it (a frozen leader's clients wait; a
        fault step reads every node first). Backing off then only slowed the run: a reproduction's
        first round, with 24 leader-freeze trials marked, ran at 1-2 trials at once of 16 with the
        CPUs two-thirds idle."""
        if math.isnan(share):
            return
        if share >= self.back_off and (concurrent <= 1 or machine_idle >= IDLE_CLEARS):
            return  # neither calm nor crowded: says nothing about how many may run at once
        if share >= self.back_off:
            lowered = max(1, math.ceil(concurrent / 2))  # half of what it ran beside: a trial from
            # before an earlier back-off (more beside it than the limit now) lowers nothing twice
            if lowered < self.limit:
                self.backed_off += 1
            self.limit = min(self.limit, lowered)
            self._calm = 0
            return
        self._calm += 1
        if self._calm >= self.calm_to_grow and self.limit < self.jobs:
            self.limit += 1
            self._calm = 0


class ClusterSource(Protocol):
    def acquire(self, shape: ClusterShape) -> Cluster: ...

    def release(self, cluster: Cluster) -> None: ...


@dataclass(frozen=True, kw_only=True)
class Finished(Generic[S, R]):
    """A trial that ran to the end, as handed to ``on_done``."""

    spec: S
    result: R
    jobs_concurrent: int  # the most trials in flight at once during this one (itself included)
    busy_cpu: float  # CPU seconds of its workers and servers over its wall seconds
    finished: int  # trials finished so far, this one included


@dataclass(kw_only=True)
class _InFlight(Generic[S]):
    spec: S
    cluster: Cluster
    kind: Hashable
    solo: bool
    peak: int
    busy_cpu: float = 0.0


def run_scheduled(
    specs: Sequence[S],
    *,
    jobs: int,
    run_one: Callable[[S, Cluster], R],
    clusters: ClusterSource,
    shape_for: Callable[[S], ClusterShape],
    kind_of: Callable[[S], Hashable],
    budget: CpuBudget,
    solo: Callable[[S], bool] = lambda _spec: False,
    stall_of: Callable[[R], float] = lambda _result: math.nan,
    governor: StallGovernor | None = None,
    on_start: Callable[[S, int], None],
    on_done: Callable[[Finished[S, R]], None],
    on_cancel: Callable[[], None],
    order: Callable[[list[S]], list[S]] | None = None,
    held: dict[str, float] | None = None,
    on_unstartable: Callable[[list[S], str], None] | None = None,
    cell_of: Callable[[S], Hashable] | None = None,
) -> None:
    """Run every spec with ``run_one(spec, cluster)``, at most ``jobs`` at once within ``budget``
    and the ``governor``'s limit (fed with ``stall_of(result)``: the share of its margin a finished
    trial's worst stall ate); a spec for which ``solo`` is true runs with no other trial beside it.

    ``on_start(spec, finished_so_far)`` and ``on_done(finished)`` run in the calling (main)
    thread, in the order trials start and finish. ``on_cancel`` must make every trial in flight
    end now (kill its workers); it is called when the run stops early, before this function waits
    for the runner threads and re-raises.

    ``order`` (runner/cost_order.py) puts the pending trials in the order to start them, at the
    start and again as trials finish. A cluster source with an ``expect`` method (infra/warm_pool.py)
    is told the shapes of the trials still to start, so it can start their clusters ahead.
    ``held`` collects the seconds a job slot stood free while trials waited, by what held them
    (:func:`_holder`: the stall governor, a solo trial, the CPU budget); runner/floor.py prints it.

    A trial whose cluster could not be started (:class:`ClusterStartFailed`: the pool already
    started it afresh, infra/pool.py) is handed to ``on_unstartable`` with every pending trial of
    its cell (``cell_of``, by default ``kind_of``) and the reason, and the run goes on without them;
    without ``on_unstartable`` the error stops the run.
    """
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
    pending = order(list(specs)) if order is not None else list(specs)
    expect = getattr(clusters, "expect", None)
    shapes = [shape_for(spec) for spec in pending]  # once: a shape parses the trial's schedule
    shape_of = {id(spec): shape for spec, shape in zip(pending, shapes, strict=True)}
    governor = governor or StallGovernor(jobs=jobs)
    cell_key = cell_of or kind_of
    running: dict[Future[tuple[R, float, float]], _InFlight[S]] = {}
    finished = 0
    executor = ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="trial")
    try:
        while pending or running:
            if expect is not None:  # acquire() takes its own shape off this list
                expect([shape_of[id(spec)] for spec in pending])
            while pending and len(running) < min(jobs, governor.limit):
                flights = list(running.values())
                index = _next_admissible(pending, running=flights, solo=solo, kind_of=kind_of, budget=budget)
                if index is None:
                    break
                spec = pending.pop(index)
                on_start(spec, finished)
                try:
                    cluster = clusters.acquire(shape_of[id(spec)])
                except ClusterStartFailed as exc:
                    if on_unstartable is None:
                        raise
                    cell = cell_key(spec)
                    on_unstartable([spec, *(other for other in pending if cell_key(other) == cell)], str(exc))
                    pending = [other for other in pending if cell_key(other) != cell]
                    continue
                flight = _InFlight(
                    spec=spec, cluster=cluster, kind=kind_of(spec), solo=solo(spec), peak=len(running) + 1
                )
                running[executor.submit(_measured, run_one, spec, cluster)] = flight
                for other in running.values():
                    other.peak = max(other.peak, len(running))
            waiting_since = time.monotonic()
            done, _ = wait(running, timeout=0.5, return_when=FIRST_COMPLETED)  # a signal interrupts it
            if held is not None and pending and len(running) < jobs:
                reason = _holder(pending, running=list(running.values()), governor=governor, solo=solo)
                held[reason] = held.get(reason, 0.0) + (time.monotonic() - waiting_since) * (jobs - len(running))
            for future in done:
                flight = running.pop(future)
                clusters.release(flight.cluster)
                result, busy, idle = future.result()  # a failed trial stops the run, as a serial run does
                budget.record(kind=flight.kind, busy=busy)
                governor.record(share=stall_of(result), concurrent=flight.peak, machine_idle=idle)
                finished += 1
                on_done(
                    Finished(
                        spec=flight.spec, result=result, jobs_concurrent=flight.peak, busy_cpu=busy, finished=finished
                    )
                )
            if done and order is not None:
                pending = order(pending)
    except BaseException:
        on_cancel()
        _drain(running)
        raise
    finally:
        executor.shutdown(wait=True, cancel_futures=True)


def _next_admissible(
    pending: Sequence[S],
    *,
    running: Sequence[_InFlight[S]],
    solo: Callable[[S], bool],
    kind_of: Callable[[S], Hashable],
    budget: CpuBudget,
) -> int | None:
    """Which pending trial to start now, if any: the first in plan order when nothing runs;
    beside running trials, the first one that is not solo and fits the CPU budget (solo trials
    wait until the machine is theirs, which in a long matrix is mostly at its end)."""
    if not running:
        return 0 if pending else None
    if any(flight.solo for flight in running):
        return None
    kinds = [flight.kind for flight in running]
    for index, spec in enumerate(pending):
        if not solo(spec):
            return index if budget.admits(running=kinds, kind=kind_of(spec)) else None
    return None


def _holder(
    pending: Sequence[S], *, running: Sequence[_InFlight[S]], governor: StallGovernor, solo: Callable[[S], bool]
) -> str:
    """What kept free job slots empty while ``pending`` trials waited."""
    if len(running) >= governor.limit:
        return "stall governor"
    if any(flight.solo for flight in running) or solo(pending[0]):
        return "solo trial"
    return "CPU budget"


def _measured(run_one: Callable[[S, Cluster], R], spec: S, cluster: Cluster) -> tuple[R, float, float]:
    """Run one trial in this thread; also return its busy-CPU fraction (workers, servers and the
    proxy processes in their paths: infra/peerlinks.py cluster_process_ids) and the
    share of the machine's CPU time that stood idle meanwhile (every process: /proc/stat; 0 unread)."""
    pids = cluster_process_ids(cluster)
    servers_before = sum(process_cpu_s(pid) for pid in pids)
    cpu_meter.take()  # the crew adds its workers' CPU to this thread's meter
    ticks_before = idle_ticks()
    start = time.monotonic()
    result = run_one(spec, cluster)
    wall = time.monotonic() - start
    ticks_after = idle_ticks()
    cpu = cpu_meter.take() + sum(process_cpu_s(pid) for pid in pids) - servers_before
    idle = 0.0
    if ticks_before is not None and ticks_after is not None and ticks_after[1] > ticks_before[1]:
        idle = (ticks_after[0] - ticks_before[0]) / (ticks_after[1] - ticks_before[1])
    return result, cpu / wall if wall > 0 else 0.0, idle


def _drain(running: dict[Future[tuple[R, float, float]], _InFlight[S]]) -> None:
    """Wait for the runner threads (their workers were killed) so each deletes its keys; a second
    Ctrl-C while waiting does not stop the wait (the servers must outlive their trials)."""
    deadline = time.monotonic() + 30
    while running and time.monotonic() < deadline:
        try:
            done, _ = wait(running, timeout=0.2)
        except KeyboardInterrupt:
            continue
        for future in done:
            running.pop(future)
