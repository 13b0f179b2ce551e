"""A cluster pool that starts and resets clusters off the main thread, and keeps warm spares.

:class:`~lockcompare.infra.pool.ClusterPool` builds a cluster in the thread that asks for it and
resets one in the thread that gives it back: the scheduler's main thread. A ZooKeeper ensemble (three
JVMs) or a PostgreSQL server takes seconds to start, and while the main thread waits for it no
finished trial is collected and no other trial starts (issue 44: the CPUs a third idle, 6.4 trials
at once out of 16 in the ZooKeeper cells). Here:

- builds and resets run on a few long-lived *starter* threads (``starters``, bounded: on 2 cores a
  dozen JVMs starting at once would only slow each other and the trials beside them). A server dies
  with the thread that spawned it (PR_SET_PDEATHSIG follows the thread), and a starter thread lives
  until :meth:`WarmPool.close` has stopped every cluster, so that is safe;
- :meth:`WarmPool.expect` tells the pool the shapes of the trials still to run, in the order they
  will start. The pool keeps one cluster ready (idle, being reset, or being built) for each of the
  next ``limit - busy`` of them, and stops at once an idle cluster whose shape no trial still needs
  (its memory goes to the JVMs of the shapes to come);
- a cluster given back is checked and emptied on a starter thread (``Cluster.reset``: FLUSHALL,
  every etcd key and lease, every znode under lockcompare's path, lockcompare's tables) before any
  trial sees it; one that fails is stopped and counted in ``replaced``, as in ClusterPool;
- a cluster a trial waits for that fails to start is started afresh, as in ClusterPool
  (:func:`~lockcompare.infra.pool.start_retrying`, bounded); a spare that fails is tried once and
  its shape is then built on demand only, so a shape that cannot start is no loop of failing spares.

``acquire`` may block (when nothing of its shape is ready it waits for one being built or reset),
so call it from the thread that runs the trial or from the main thread; every method is thread-safe.
``waited_s`` is the time callers spent blocked in ``acquire``: the part of the idle time that is the
servers' start-up (the run prints it beside its floor, runner/floor.py).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from types import TracebackType

from lockcompare.errors import ClusterError, ClusterStartFailed
from lockcompare.infra.cluster import Cluster, ClusterShape
from lockcompare.infra.pool import START_ATTEMPTS, start_retrying

log = logging.getLogger("lockcompare")

#: Starter threads: builds and resets at once. Two keep a JVM ensemble and a reset in flight together
#: without a start-up storm on a 2-core machine.
DEFAULT_STARTERS = 2


@dataclass(kw_only=True)
class _Pending:
    """A cluster on its way: being built or being reset, maybe already promised to a caller."""

    shape: ClusterShape
    future: Future[Cluster | None] = field(default_factory=Future)
    claimed: bool = False


class WarmPool:
    """Idle clusters by shape, built and reset on starter threads (see the module docstring).

    ``limit``: clusters alive at once (busy, idle and on their way), counted for warm spares; a
    trial that finds nothing of its shape ready still gets one (an idle one of a shape not needed
    soon is stopped first).
    """

    def __init__(
        self,
        *,
        build: Callable[[ClusterShape], Cluster],
        limit: int,
        starters: int = DEFAULT_STARTERS,
    ) -> None:
        self._build = build
        self._limit = max(1, limit)
        self._lock = threading.RLock()  # a done-callback may run in the thread that holds it
        self._idle: dict[ClusterShape, list[Cluster]] = {}
        self._busy: list[Cluster] = []
        self._pending: list[_Pending] = []
        self._upcoming: list[ClusterShape] = []
        self._expecting = False  # expect() was called: idle clusters of shapes not to come are stopped
        self._unbuildable: set[ClusterShape] = set()  # a spare of this shape failed: built on demand only
        self._closed = False
        self._executor = ThreadPoolExecutor(max_workers=max(1, starters), thread_name_prefix="cluster-starter")
        self.built = 0  # clusters started (spares and replacements included)
        self.replaced: list[str] = []  # why each discarded cluster was discarded
        self.waited_s = 0.0  # time callers spent blocked in acquire
        self.warm_hits = 0  # acquires served by a cluster that was ready or already on its way

    # -- the ClusterSource interface (runner/scheduler.py) -------------------------------------

    def acquire(self, shape: ClusterShape) -> Cluster:
        """A ready cluster of ``shape``: an idle one, one on its way, or a new one (waited for)."""
        with self._lock:
            self._take_upcoming(shape)
            idle = self._idle.get(shape)
            if idle:
                cluster = idle.pop()
                self._busy.append(cluster)
                self.warm_hits += 1
                self._top_up()
                return cluster
            pending = next((p for p in self._pending if p.shape == shape and not p.claimed), None)
            if pending is not None:
                self.warm_hits += 1
            else:
                self._make_room()
                pending = self._submit_build(shape, attempts=START_ATTEMPTS)
            pending.claimed = True
            self._top_up()
        try:
            ready = self._take(pending)
        except ClusterStartFailed:
            raise  # an on-demand build: it was started afresh START_ATTEMPTS times already
        except ClusterError as exc:  # a spare that failed to start: replaced like a broken one
            with self._lock:
                self.replaced.append(f"could not start: {exc}")
            log.warning("a cluster failed to start (%s); starting a fresh one", exc)
            ready = None
        if ready is None:  # a reset found it broken (counted in replaced): build one for this caller
            return self.acquire_new(shape)
        return ready

    def acquire_new(self, shape: ClusterShape) -> Cluster:
        """A newly built cluster of ``shape`` (after a reset found the promised one broken, or a
        spare failed to start), started afresh if it fails to start (bounded)."""
        with self._lock:
            self._make_room()
            pending = self._submit_build(shape, attempts=START_ATTEMPTS)
            pending.claimed = True
        cluster = self._take(pending)
        assert cluster is not None  # a build raises or returns a cluster
        return cluster

    def release(self, cluster: Cluster) -> None:
        """Take a cluster back: checked and emptied on a starter thread, stopped if broken."""
        with self._lock:
            if cluster in self._busy:  # close() may have taken it already (an interrupt)
                self._busy.remove(cluster)
            if self._closed:
                cluster.stop()
                return
            pending = _Pending(shape=_shape_of(cluster))
            self._pending.append(pending)
        pending.future.add_done_callback(lambda _f: self._arrived(pending))
        self._run(pending, lambda: self._recycle(cluster))

    def expect(self, shapes: Sequence[ClusterShape]) -> None:
        """The shapes of the trials still to start, in order: what to keep warm, what to stop."""
        with self._lock:
            self._upcoming = list(shapes)
            self._expecting = True
            self._top_up()

    def close(self) -> None:
        """Stop every cluster (idle, busy, on its way), then the starter threads."""
        with self._lock:
            self._closed = True
            pending = list(self._pending)
        for waiting in pending:  # a build in flight ends with a cluster that must be stopped too
            try:
                waiting.future.result(timeout=120)
            except Exception:  # noqa: BLE001 - a build that failed has nothing to stop
                pass
        with self._lock:
            clusters = [c for idle in self._idle.values() for c in idle] + self._busy
            clusters += [c for p in pending if p.claimed and (c := _result(p)) is not None and c not in clusters]
            self._idle.clear()
            self._busy.clear()
        for cluster in clusters:  # side by side: a JVM ensemble takes a while to stop
            self._run_stop(cluster)
        self._executor.shutdown(wait=True)  # every queued stop runs before this returns

    def __enter__(self) -> WarmPool:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _take(self, pending: _Pending) -> Cluster | None:
        """Wait for a claimed cluster, then move it from on-its-way to busy in one step.

        Until then it stays in ``_pending``, so it is counted among the clusters alive: counted as
        neither (finished, not yet busy), it let another arrival's top-up start a cluster beyond
        ``limit`` (seen in CI: four built for three trials)."""
        started = time.monotonic()
        try:
            cluster = pending.future.result()
        except Exception:
            with self._lock:
                self.waited_s += time.monotonic() - started
                self._pending.remove(pending)
            raise
        # An interrupt (BaseException) leaves it in _pending: close() waits for it and stops it.
        with self._lock:
            self.waited_s += time.monotonic() - started
            self._pending.remove(pending)
            if cluster is not None:
                self._busy.append(cluster)
        return cluster

    # -- inside: every method below runs with self._lock held, except the starter-thread work ---

    def _take_upcoming(self, shape: ClusterShape) -> None:
        if shape in self._upcoming:
            self._upcoming.remove(shape)

    def _alive(self) -> int:
        return len(self._busy) + len(self._pending) + sum(len(idle) for idle in self._idle.values())

    def _top_up(self) -> None:
        """Stop idle clusters no trial still needs; start one for each of the next trials' shapes
        that has nothing ready or on its way, within ``limit``."""
        if self._closed:
            return
        still = set(self._upcoming)
        for shape in [s for s in self._idle if self._expecting and s not in still]:
            for cluster in self._idle.pop(shape):
                self._run_stop(cluster)
        window = Counter(self._upcoming[: max(0, self._limit - len(self._busy))])
        for shape, wanted in window.items():
            if shape in self._unbuildable:
                continue  # its trial builds it and says why it fails; no loop of failing spares
            ready = len(self._idle.get(shape, ())) + sum(1 for p in self._pending if p.shape == shape and not p.claimed)
            for _ in range(wanted - ready):
                if self._alive() >= self._limit and not self._evict(keep=set(window)):
                    return
                self._submit_build(shape)

    def _make_room(self) -> None:
        if self._alive() >= self._limit:
            self._evict(keep=set(self._upcoming[: self._limit]))

    def _evict(self, *, keep: set[ClusterShape]) -> bool:
        """Stop one idle cluster whose shape is not in ``keep`` (False: none to stop): of those, the
        one whose shape the trials to come need last (Belady's rule: with the matrix's shapes
        interleaved, stopping the first idle one found stopped clusters needed a few trials later)."""
        candidates = [shape for shape, idle in self._idle.items() if idle and shape not in keep]
        if not candidates:
            return False
        first_use: dict[ClusterShape, int] = {}
        for index, shape in enumerate(self._upcoming):
            first_use.setdefault(shape, index)
        victim = max(candidates, key=lambda shape: first_use.get(shape, len(self._upcoming)))
        self._run_stop(self._idle[victim].pop())
        return True

    def _submit_build(self, shape: ClusterShape, *, attempts: int = 1) -> _Pending:
        """Start building a cluster of ``shape`` on a starter thread: a spare once (``attempts=1``),
        one a caller waits for up to ``attempts`` times (start_retrying)."""
        pending = _Pending(shape=shape)
        self._pending.append(pending)
        self.built += 1
        pending.future.add_done_callback(lambda _f: self._arrived(pending))
        if attempts == 1:
            self._run(pending, lambda: self._build(shape))
        else:
            self._run(pending, lambda: start_retrying(self._build, shape, failures=self.replaced, attempts=attempts))
        return pending

    def _run(self, pending: _Pending, work: Callable[[], Cluster | None]) -> None:
        def job() -> None:
            try:
                pending.future.set_result(work())
            except BaseException as exc:  # noqa: BLE001 - handed to whoever waits for it
                pending.future.set_exception(exc)

        self._executor.submit(job)

    def _run_stop(self, cluster: Cluster) -> None:
        try:
            self._executor.submit(cluster.stop)  # stopping a JVM takes a while too
        except RuntimeError:  # the starter threads are shutting down (close): stop it here
            cluster.stop()

    def _arrived(self, pending: _Pending) -> None:
        """A build or reset finished: an unpromised cluster becomes idle (a failed one is dropped)."""
        with self._lock:
            if pending.claimed:
                return  # its caller moves it from _pending to _busy (_take)
            self._pending.remove(pending)
            cluster = _result(pending)
            if cluster is None:
                if pending.future.exception() is not None:
                    self._unbuildable.add(pending.shape)
                self._top_up()
                return
            if self._closed:
                self._run_stop(cluster)
                return
            self._idle.setdefault(pending.shape, []).append(cluster)
            self._top_up()  # stops it again at once if no trial still needs its shape

    def _recycle(self, cluster: Cluster) -> Cluster | None:
        """Runs on a starter thread: the cluster checked and emptied, or stopped (None) if broken."""
        problem = cluster.problem()
        if not problem:
            cluster.reset()
            # A failed emptying marks the cluster broken; one that worked had every server answer
            # (FLUSHALL, etcd's delete, a query): no second round of pings.
            problem = cluster.problem(ask_servers=False)
        if problem:
            with self._lock:
                self.replaced.append(problem)
            cluster.stop()
            return None
        return cluster


def _result(pending: _Pending) -> Cluster | None:
    if not pending.future.done() or pending.future.exception() is not None:
        if pending.future.done():
            log.warning("a warm cluster could not be started: %s", pending.future.exception())
        return None
    return pending.future.result()


def _shape_of(cluster: Cluster) -> ClusterShape:
    return cluster.shape if cluster.shape is not None else ClusterShape(node_count=len(cluster.node_urls))
