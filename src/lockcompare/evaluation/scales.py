"""The time scale a backend can run at: one rule for ``evaluate``, its search and ``explore``.

A backend that cannot grant every TTL (its optional ``check_ttl`` classmethod raises
InvalidValueError: python-redis-lock's whole seconds, etcd's whole-second leases) runs at the first
of the larger scales at which it can, and the command says so in one warning line. The matrix
leaves such a cell out instead (runner/plan.py ``_unfit``, the same ``check_ttl``): it runs the
scale it was asked for, where a report card runs the backend at a scale it can express.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from lockcompare.backends.base import traits_of
from lockcompare.errors import InvalidValueError
from lockcompare.scenario.experiments import get_experiment


def expressible_scale(cls: type, *, ttl_ms: float, scales: Sequence[float]) -> float | None:
    """The first of ``scales`` at which ``cls`` can express a ``ttl_ms`` (lesson-scale) TTL; None if none."""
    check_ttl = traits_of(cls).check_ttl
    for scale in scales:
        try:
            if check_ttl is not None:
                check_ttl(ttl_ms=round(ttl_ms * scale))
        except InvalidValueError:
            continue
        return scale
    return None


# --- what a card costs (issue 38: `evaluate etcd --quick` took 267 s, its help said a minute) ---------

#: A trial's time outside its rounds (its servers from the pool, workers started, the start barrier).
TRIAL_OVERHEAD_S = 1.0
#: The conformance battery's time on this 2-core machine: ~10 s for a Redis backend, ~35 s for etcd's
#: (its servers start for every property) with other runs beside it.
BATTERY_S = 20.0
#: Cells that run side by side on 2 cores (the card's trials run in one run of the default --jobs;
#: the CPU guard admits fewer on a busy machine: one at a time was seen).
CELLS_AT_ONCE = 2


def trial_seconds(*, rounds: int, scale: float, work_ms: float, pause_ms: float) -> float:
    """About how long one card trial lasts: the contend workload serialises two workers' work (and a
    pause holds its round up), so a round costs two works plus the pause. Measured at 20 rounds
    ×0.1: baseline 1.35 s (model 2.2 with the overhead), client-pause 3.6 s (4.6); the lesson's
    40 rounds ×1: 24.9 s (25) and 63.8 s (73): an estimate that errs long."""
    return TRIAL_OVERHEAD_S + rounds * scale * (2 * work_ms + pause_ms) / 1000


def quick_rounds(*, rounds: int, asked: float, scale: float, floor: int) -> int:
    """With ``--quick``: the rounds of an experiment the backend must run at a larger ``scale`` than the
    ``asked`` one, so that its trials last what they would at ``asked`` — never fewer than ``floor``
    (nor more than ``rounds``): a whole-second lease at ×5 must not cost fifty times the quick card.

    >>> quick_rounds(rounds=20, asked=0.1, scale=5.0, floor=5), quick_rounds(rounds=20, asked=0.1, scale=0.2, floor=5)
    (5, 10)
    """
    if scale <= asked:
        return rounds
    return min(rounds, max(floor, math.ceil(rounds * asked / scale)))


def card_seconds(matrices: Sequence[Sequence[float]], *, search_s: float) -> float:
    """About how long a card takes: the battery, every matrix's trials in one run (evaluate.py: their
    seconds ``CELLS_AT_ONCE`` at a time, never less than the longest), then the search's budget."""
    seconds = [s for m in matrices for s in m]
    return BATTERY_S + search_s + (max(*seconds, sum(seconds) / CELLS_AT_ONCE) if seconds else 0.0)


def moved_note(
    *,
    backend: str,
    time_scale: float,
    moved: Mapping[str, float],
    rounds: int,
    rounds_at: Mapping[float, int],
    runs: Sequence[tuple[Sequence[str], Sequence[str], float, float]],
    trials: int,
    search_s: float,
) -> str:
    """The line a card says before its battery when the backend runs some experiments at other
    scales: which, with how many rounds, and about how long the card takes. ``runs``: the card's
    matrices as (backends, experiments, scale, the work ms chosen or 0 for each experiment's own)."""
    at = ", ".join(
        f"{name} at --time-scale {scale:g}" + (f" ({rounds_at[scale]} rounds)" if rounds_at[scale] != rounds else "")
        for name, scale in moved.items()
    )
    matrices = [
        [
            trial_seconds(rounds=rounds_at[scale], scale=scale, work_ms=work or get_experiment(e).work_ms,
                          pause_ms=get_experiment(e).pause_ms)
            for e in experiments for _ in names for _ in range(trials)
        ]
        for names, experiments, scale, work in runs
    ]  # fmt: skip
    cost = card_seconds(matrices, search_s=search_s)
    took = f"{cost:.0f} s" if cost < 120 else f"{cost / 60:.0f} min"
    return (
        f"{backend} cannot express these TTLs at --time-scale {time_scale:g}: it runs {at}; "
        f"this card takes about {took}"
    )
