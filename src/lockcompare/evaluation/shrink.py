"""Shrinking a failing fault schedule: smaller candidates, each judged by reruns, greedily.

A candidate is the schedule with one thing made smaller (:func:`candidates`, tried in this order,
the biggest cuts first):

0. every step dropped: the empty schedule (a lock that fails with no fault at all is reported as
   such — the schedule the search happened to draw did not break it, the lock did);
1. a step dropped;
2. fewer rounds per worker;
3. a step that fires every round fires once;
4. fewer nodes (``holders:2`` → ``holders:1``, ``others:2`` → ``others:1``, a fixed list loses one
   index, ``all`` becomes all but the last);
5. a smaller amount (``for=``, ``by=``, ``delay=``) or an earlier offset (``after-acquire=``), each
   tried at its floor, half-way there, and a quarter of the way.

A trial of a timing fault does not fail every time, so the oracle reruns a candidate (with fresh
seeds) and the candidate *still fails* when at least one rerun failed (Jepsen's and QuickCheck's
rule for flaky properties: a failure seen is a failure). The first candidate that still fails
replaces the schedule and the candidates are drawn again from it; the search ends when none does
(a local minimum: no single cut still fails) or when the oracle says the budget is spent.

Every move makes one component strictly smaller (steps, rounds, every→once, nodes, an amount on a
10 ms grid with a floor), so shrinking always ends.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from lockcompare.evaluation.schedules import Schedule, Shape, Step, schedule_text
from lockcompare.scenario import faultkinds

#: Amounts that shrink, with the floor they shrink to (lesson-scale ms, the magnitude for ``by``):
#: whom-and-when's, then every kind's parameters that declare a floor (scenario/faultkinds).
AMOUNTS = {"for": 0.0} | {
    p.name: p.shrink_floor for k in faultkinds.KINDS.values() for p in k.params if p.shrink_floor is not None
}
AMOUNTS["after-acquire"] = 0.0
#: Kinds whose ``for`` means "how long the fault lasts" and which do nothing at 0 (the floor is 10).
LASTING_AT_ZERO_IS_NOTHING = frozenset(faultkinds.names_where("lasts"))
MIN_ROUNDS = 1
#: The first cut: the empty schedule. What a counterexample without faults says about the lock.
NO_FAULT_MOVE = "dropped every step"
NO_FAULT = "fails with no fault: the lock itself"


@dataclass(frozen=True, kw_only=True)
class Rate:
    """How often a schedule failed: ``failures`` of ``runs`` judged reruns (``unknown`` not judged)."""

    failures: int
    runs: int
    unknown: int = 0
    marked: int = 0  # reruns the timing sentinel marked (the machine stalled them past half their margin)

    @property
    def fails(self) -> bool:
        return self.failures > 0

    def text(self) -> str:
        extra = f" ({self.unknown} more could not be judged)" if self.unknown else ""
        total = self.runs + self.unknown
        if self.marked and self.marked == total:
            extra += f"; all {total} timing-marked: the machine stalled each past half its margin"
        elif self.marked:
            extra += f"; {self.marked} of {total} timing-marked"
        return f"{self.failures} of {self.runs}{extra}"


#: The oracle: rerun (schedule, rounds) and say how often it failed; None when the budget is spent.
Oracle = Callable[[Schedule, int], Rate | None]


@dataclass(frozen=True, kw_only=True)
class Candidate:
    schedule: Schedule
    rounds: int
    move: str  # what was made smaller, for the report


@dataclass(kw_only=True)
class ShrinkResult:
    schedule: Schedule
    rounds: int
    rate: Rate | None  # the last rate seen for the result (None: it was never rerun here)
    moves: list[str] = field(default_factory=list)  # the cuts that kept it failing, in order
    tried: int = 0  # candidates judged
    complete: bool = True  # False: the budget ran out before a local minimum was reached


def _ladder(value: float, floor: float, *, grid: int = 10) -> list[int]:
    """Smaller values to try, smallest first, on the grid: the floor, half-way, a quarter of the way down."""
    if value <= floor:
        return []
    steps = [floor, floor + (value - floor) / 2, value - (value - floor) / 4]
    return [v for v in dict.fromkeys(int(s // grid) * grid for s in steps) if floor <= v < value]


def _fewer_nodes(whom: str, *, shape: Shape) -> list[str]:
    if whom == "all":
        return [",".join(map(str, range(shape.nodes - 1)))] if shape.nodes > 1 else []
    relative, _, k = whom.partition(":")
    if relative in ("holders", "others") and k.isdigit():
        return [f"{relative}:{int(k) - 1}"] if int(k) > 1 else []
    indices = whom.split(",")
    if len(indices) > 1:
        return [",".join(indices[:i] + indices[i + 1 :]) for i in range(len(indices))]
    return []


def _step_moves(step: Step, *, shape: Shape) -> Iterator[tuple[Step, str]]:
    if step.has("every"):
        yield _once(step), "fires once, not every round"
    whom = step.get("nodes")
    if whom is not None:
        for fewer in _fewer_nodes(whom, shape=shape):
            yield step.with_value("nodes", fewer), f"nodes {whom} → {fewer}"
    for key, least in AMOUNTS.items():
        text = step.get(key)
        if text is None:
            continue
        sign = text[0] if text[:1] in "+-" else ""
        try:
            value = float(text.lstrip("+-"))
        except ValueError:
            continue
        floor = 10.0 if key == "for" and step.kind in LASTING_AT_ZERO_IS_NOTHING else least
        for smaller in _ladder(value, floor):
            yield step.with_value(key, f"{sign}{smaller}"), f"{key} {text} → {sign}{smaller}"


def _once(step: Step) -> Step:
    return Step(step.kind, tuple("once" if t == "every" else t for t in step.tokens))


def candidates(schedule: Schedule, *, rounds: int, shape: Shape) -> Iterator[Candidate]:
    """Every schedule one cut smaller than ``schedule`` at ``rounds``, biggest cuts first: no fault
    at all before anything else (a lock that fails without one is not broken by the schedule)."""
    if schedule:
        yield Candidate(schedule=(), rounds=rounds, move=NO_FAULT_MOVE)
    if len(schedule) > 1:
        for i, step in enumerate(schedule):
            yield Candidate(schedule=schedule[:i] + schedule[i + 1 :], rounds=rounds, move=f"dropped «{step.text}»")
    for fewer in _ladder(rounds, MIN_ROUNDS, grid=1):
        yield Candidate(schedule=schedule, rounds=fewer, move=f"rounds {rounds} → {fewer}")
    for i, step in enumerate(schedule):
        for smaller, what in _step_moves(step, shape=shape):
            label = f"step {i + 1} ({step.kind}): {what}" if len(schedule) > 1 else f"{step.kind}: {what}"
            yield Candidate(schedule=(*schedule[:i], smaller, *schedule[i + 1 :]), rounds=rounds, move=label)


def shrink(schedule: Schedule, *, rounds: int, shape: Shape, oracle: Oracle, rate: Rate | None = None) -> ShrinkResult:
    """Greedy shrinking of a failing ``schedule`` (see the module docstring); ``rate``: what is known of it."""
    result = ShrinkResult(schedule=schedule, rounds=rounds, rate=rate)
    seen: set[tuple[str, int]] = {(schedule_text(schedule), rounds)}
    while True:
        for candidate in candidates(result.schedule, rounds=result.rounds, shape=shape):
            key = (schedule_text(candidate.schedule), candidate.rounds)
            if key in seen:
                continue
            seen.add(key)
            found = oracle(candidate.schedule, candidate.rounds)
            if found is None:
                result.complete = False
                return result
            result.tried += 1
            if found.fails:
                result.schedule, result.rounds, result.rate = candidate.schedule, candidate.rounds, found
                result.moves.append(candidate.move)
                break
        else:
            return result
