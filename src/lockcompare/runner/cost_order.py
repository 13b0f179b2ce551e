"""Expensive trials first, within each round of the matrix.

A run ends when its last trial does. Started last, a 36 s client-pause trial of a Node client keeps
the run going alone long after the 14 s baselines beside it are done; started first, it runs beside
them (longest-processing-time-first, the classic bound for filling parallel slots). The matrix keeps
its interleaving (round 0 of every cell, then round 1, ...: slow drifts of the machine spread
over all cells, matrix.py), and orders each round by expected trial wall time, longest first.

A trial's expected wall time is its cell's mean measured so far; a cell not yet measured takes a
prior from its settings (the critical sections its workers queue for, the pauses it sleeps through)
times what its backend's measured trials took over their own priors (a Node client or a ZooKeeper
session costs several times its nominal work). The order is recomputed as trials finish.

>>> from types import SimpleNamespace as T
>>> cheap = T(backend="single", experiment="baseline", trial=0, rounds=10, workers=2, work_ms=10.0, think_ms=0.0,
...           pause_ms=0.0, ttl_ms=100)
>>> costly = T(backend="single", experiment="client-pause", trial=0, rounds=10, workers=2, work_ms=10.0,
...            think_ms=0.0, pause_ms=300.0, ttl_ms=100)
>>> later = T(backend="single", experiment="client-pause", trial=1, rounds=10, workers=2, work_ms=10.0,
...           think_ms=0.0, pause_ms=300.0, ttl_ms=100)
>>> order = CostOrder()
>>> [(s.experiment, s.trial) for s in order([later, cheap, costly])]
[('client-pause', 0), ('baseline', 0), ('client-pause', 1)]
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any, TypeVar

S = TypeVar("S")


def prior_s(spec: Any) -> float:
    """Seconds a trial should take from its settings alone: every worker's rounds queue for the
    critical section (work), each round thinks, and a pausing experiment sleeps through its pause."""
    per_round = float(spec.work_ms) * int(spec.workers) + float(spec.think_ms) + float(spec.pause_ms)
    return max(0.001, int(spec.rounds) * per_round / 1000)


def cell_key(spec: Any) -> tuple[Hashable, ...]:
    """The trial's cell, as far as its cost goes: backend, experiment and the settings the prior reads."""
    return (spec.backend, spec.experiment, spec.rounds, spec.workers, spec.work_ms, spec.pause_ms, spec.ttl_ms)


class CostOrder:
    """Orders pending trials: by round, then by expected wall time, longest first (see the docstring)."""

    def __init__(self) -> None:
        self._cells: dict[tuple[Hashable, ...], list[float]] = {}
        self._backend_ratio: dict[str, list[float]] = {}

    def record(self, spec: Any, *, wall_s: float) -> None:
        """A trial of ``spec``'s cell took ``wall_s``."""
        self._cells.setdefault(cell_key(spec), []).append(wall_s)
        self._backend_ratio.setdefault(spec.backend, []).append(wall_s / prior_s(spec))

    def expected_s(self, spec: Any) -> float:
        seen = self._cells.get(cell_key(spec))
        if seen:
            return sum(seen) / len(seen)
        ratios = self._backend_ratio.get(spec.backend)
        return prior_s(spec) * (sum(ratios) / len(ratios) if ratios else 1.0)

    def __call__(self, pending: Sequence[S]) -> list[S]:
        """``pending`` in the order to start them (a stable sort: equal costs keep plan order)."""
        return sorted(pending, key=lambda spec: (getattr(spec, "trial", 0), -self.expected_s(spec)))
