"""A run's own floor: how fast it could have gone on this host, and how far it was from that.

A matrix run cannot end sooner than its trials' work spread over its job slots (Σ trial wall /
jobs), nor sooner than the CPU it burnt spread over the cores (CPU used / cores), nor sooner than
its longest trial. Its floor is the largest of the three; the ratio wall / floor says how much of
the wall clock went to neither (issue 44: 4826 s against a 41-min floor). The first two terms are
the issue's; the third only matters on a small slice (6 trials at --jobs 8 can never take
Σ / 8), and is printed beside them so that a slice's ratio means something.

CPU used is the run's own process (RUSAGE_SELF) and every child it has waited for
(RUSAGE_CHILDREN: the workers, the servers it spawned and stopped, their own reaped children),
measured from :meth:`RunMeter.start` to :meth:`RunMeter.finish`, so read it after the servers are
stopped. The machine's idle share (/proc/stat, every process of the host) is printed beside it: on a
shared machine other work fills what this run left idle.

Where the idle time went is told by phases the run marks (:meth:`RunMeter.mark`): start-up before
the first trial (probes, warm workers, first clusters), the trials, and the stop after the last.

>>> floor = RunFloor(trials=6, wall_s=51.2, trial_wall_s=147.2, jobs=8, cpu_s=14.1, cores=2, longest_s=35.8)
>>> round(floor.floor_s, 1), round(floor.ratio, 2), round(floor.at_once, 2)
(35.8, 1.43, 2.87)
"""

from __future__ import annotations

import resource
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True, kw_only=True)
class RunFloor:
    """What a run took against what it could not have gone below (pure numbers, see the module docstring)."""

    trials: int
    wall_s: float
    trial_wall_s: float  # Σ of the trials' own wall times
    jobs: int
    cpu_s: float  # the run's CPU and its children's
    cores: float
    longest_s: float = 0.0
    machine_idle: float | None = None  # idle share of every CPU of the host over the run (/proc/stat)
    phases: tuple[tuple[str, float], ...] = ()  # (name, seconds) in order
    waited_for_clusters_s: float = 0.0  # time spent blocked on a cluster being started or reset
    waited_before_trials_s: float = 0.0  # the part of it before the first trial (the probes' clusters)
    clusters_started: int = 0  # by the pool, spares and replacements included (churn shows here)
    #: Free job-slot seconds while trials waited, by what held them (scheduler.run_scheduled's ``held``).
    held_slots: tuple[tuple[str, float], ...] = ()
    #: The floors of the runs this one sums (the rounds of --until-settled, one after another: the
    #: whole cannot end sooner than each round's floor, so its floor is at least their sum).
    part_floors_s: tuple[float, ...] = ()

    @classmethod
    def summed(cls, floors: Sequence[RunFloor]) -> RunFloor:
        """Runs made one after another (rounds) as one: times and counts added, the longest trial the
        longest, the floor the sum of theirs.

        >>> a = RunFloor(trials=4, wall_s=20.0, trial_wall_s=40.0, jobs=4, cpu_s=8.0, cores=2, longest_s=10.0)
        >>> b = RunFloor(trials=1, wall_s=12.0, trial_wall_s=10.0, jobs=4, cpu_s=2.0, cores=2, longest_s=10.0)
        >>> both = RunFloor.summed([a, b])
        >>> both.trials, both.wall_s, both.floor_s, round(both.ratio, 2)
        (5, 32.0, 20.0, 1.6)
        """
        if len(floors) == 1:
            return floors[0]
        idle = [(f.machine_idle, f.wall_s) for f in floors if f.machine_idle is not None]
        wall = sum(f.wall_s for f in floors)
        phases: dict[str, float] = {}
        held: dict[str, float] = {}
        for f in floors:
            for name, seconds in f.phases:
                phases[name] = phases.get(name, 0.0) + seconds
            for reason, seconds in f.held_slots:
                held[reason] = held.get(reason, 0.0) + seconds
        return cls(
            trials=sum(f.trials for f in floors),
            wall_s=wall,
            trial_wall_s=sum(f.trial_wall_s for f in floors),
            jobs=max(f.jobs for f in floors),
            cpu_s=sum(f.cpu_s for f in floors),
            cores=floors[0].cores,
            longest_s=max(f.longest_s for f in floors),
            machine_idle=sum(i * w for i, w in idle) / sum(w for _, w in idle) if idle and wall else None,
            phases=tuple(phases.items()),
            waited_for_clusters_s=sum(f.waited_for_clusters_s for f in floors),
            waited_before_trials_s=sum(f.waited_before_trials_s for f in floors),
            clusters_started=sum(f.clusters_started for f in floors),
            held_slots=tuple(sorted(held.items(), key=lambda item: -item[1])),
            part_floors_s=tuple(x for f in floors for x in (f.part_floors_s or (f.floor_s,))),
        )

    @property
    def by_jobs_s(self) -> float:
        return self.trial_wall_s / self.jobs if self.jobs else 0.0

    @property
    def by_cpu_s(self) -> float:
        return self.cpu_s / self.cores if self.cores else 0.0

    @property
    def floor_s(self) -> float:
        return max(self.by_jobs_s, self.by_cpu_s, self.longest_s, sum(self.part_floors_s))

    @property
    def ratio(self) -> float:
        return self.wall_s / self.floor_s if self.floor_s > 0 else float("nan")

    @property
    def at_once(self) -> float:
        """Trials in flight on average over the run (Σ trial wall / wall)."""
        return self.trial_wall_s / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def busy_share(self) -> float:
        """The share of the host's cores this run kept busy (CPU used / (cores × wall))."""
        return self.cpu_s / (self.cores * self.wall_s) if self.wall_s > 0 and self.cores else 0.0

    def lines(self) -> list[str]:
        """The run's closing lines: the floor with its terms, then where the time went."""
        first = (
            f"{self.trials} trials in {self.wall_s:.1f} s wall; floor {self.floor_s:.1f} s = max("
            f"Σ trial wall {self.trial_wall_s:.1f} s / {self.jobs} jobs = {self.by_jobs_s:.1f} s, "
            f"CPU used {self.cpu_s:.1f} s / {self.cores:g} cores = {self.by_cpu_s:.1f} s, "
            f"longest trial {self.longest_s:.1f} s"
            + (
                f", Σ of {len(self.part_floors_s)} rounds' floors {sum(self.part_floors_s):.1f} s"
                if self.part_floors_s
                else ""
            )
            + f"); wall/floor {self.ratio:.2f}"
        )
        idle = f", machine idle {self.machine_idle:.0%} (all processes)" if self.machine_idle is not None else ""
        second = (
            f"trials at once on average {self.at_once:.2f}; this run kept {self.busy_share:.0%} of "
            f"{self.cores:g} cores busy{idle}"
        )
        lines = [first, second]
        if self.phases:
            parts = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in self.phases)
            lines.append(
                f"where the wall went: {parts}; blocked on clusters {self.waited_for_clusters_s:.1f} s "
                f"({self.waited_before_trials_s:.1f} s of it before the first trial); "
                f"{self.clusters_started} cluster(s) started for {self.trials} trial(s)"
            )
        if self.held_slots:
            parts = ", ".join(f"{reason} {seconds:.0f}" for reason, seconds in self.held_slots)
            lines.append(f"free job-slot seconds while trials waited, by what held them: {parts}")
        return lines


def _cpu_s() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def idle_ticks() -> tuple[int, int] | None:
    """(idle + iowait, total) jiffies of every CPU, or None where /proc/stat is not there."""
    try:
        with open("/proc/stat") as stat:
            fields = [int(v) for v in stat.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    return fields[3] + fields[4], sum(fields)


@dataclass(kw_only=True)
class RunMeter:
    """Measures one run: call :meth:`start`, :meth:`mark` at phase ends, :meth:`trial` per
    finished trial, and :meth:`finish` after every server and worker is stopped."""

    jobs: int
    cores: float
    clock: Callable[[], float] = time.monotonic
    _start: float = 0.0
    _cpu0: float = 0.0
    _ticks0: tuple[int, int] | None = None
    _marks: list[tuple[str, float]] = field(default_factory=list)
    _walls: list[float] = field(default_factory=list)

    def start(self) -> None:
        self._start, self._cpu0, self._ticks0 = self.clock(), _cpu_s(), idle_ticks()

    def mark(self, name: str) -> None:
        """The phase ``name`` ended now (a phase is marked once: the first mark counts)."""
        if all(name != seen for seen, _ in self._marks):
            self._marks.append((name, self.clock()))

    def trial(self, wall_s: float) -> None:
        self._walls.append(wall_s)

    def finish(
        self,
        *,
        waited_for_clusters_s: float = 0.0,
        waited_before_trials_s: float = 0.0,
        held_slots: dict[str, float] | None = None,
        clusters_started: int = 0,
    ) -> RunFloor:
        end, ticks = self.clock(), idle_ticks()
        idle = None
        if self._ticks0 is not None and ticks is not None and ticks[1] > self._ticks0[1]:
            idle = (ticks[0] - self._ticks0[0]) / (ticks[1] - self._ticks0[1])
        phases, last = [], self._start
        for name, at in self._marks:
            phases.append((name, at - last))
            last = at
        phases.append(("stop", end - last))
        return RunFloor(
            trials=len(self._walls),
            wall_s=end - self._start,
            trial_wall_s=sum(self._walls),
            jobs=self.jobs,
            cpu_s=_cpu_s() - self._cpu0,
            cores=self.cores,
            longest_s=max(self._walls, default=0.0),
            machine_idle=idle,
            phases=tuple(phases),
            waited_for_clusters_s=waited_for_clusters_s,
            waited_before_trials_s=waited_before_trials_s,
            clusters_started=clusters_started,
            held_slots=tuple(sorted((held_slots or {}).items(), key=lambda item: -item[1])),
        )
