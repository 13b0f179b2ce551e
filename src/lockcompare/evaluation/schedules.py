"""Fault schedules as ``explore`` draws and shrinks them: text in the ``--faults`` syntax.

The schedule model itself (:mod:`lockcompare.scenario.schedule`: ``FaultStep``, ``Schedule``,
``parse_schedule``) belongs to spec; this module only needs the *text* contract
(issue 17): steps separated by ``;``, each ``KIND key=value ... [every|once]``, e.g.::

    pause worker=0 after-acquire=0 every for=1200 how=sigstop; restart nodes=holders:1 after-acquire=50 every

So a step here is its kind plus its tokens, in order (:class:`Step`), and :func:`canonical` gives
the canonical text (the text that becomes the trial setting ``faults``). Working on text keeps the
search independent of the model's Python shape: what the search generates is exactly what a user
would type after ``--faults``. Each kind draws its own tokens (``draw`` in its module of
:mod:`lockcompare.scenario.faultkinds`); the vocabulary here is derived from them.

Times are lesson-scale milliseconds (``--time-scale`` multiplies them when the trial runs), drawn
relative to the TTL and the work of the trial (:class:`Shape`): an offset lands inside the hold,
a pause or a clock jump is of the order of the TTL.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, replace

from lockcompare.errors import InvalidValueError
from lockcompare.scenario import faultkinds
from lockcompare.scenario.faultkinds.base import FLAGS, LINKS, NODES, Shape, count
from lockcompare.scenario.schedule import parse_schedule

__all__ = ["DEFAULT_KINDS", "FLAGS", "KINDS", "MAX_STEPS", "NODE_KINDS", "Shape", "Step"]

#: The fault vocabulary, in the order the docs list it.
KINDS = faultkinds.NAMES
#: What ``explore`` searches when --faults is not given (session-kill needs PostgreSQL backends).
DEFAULT_KINDS = faultkinds.names_where("explored_by_default")
#: Kinds that take ``nodes=`` (lock nodes, or the links to them); the others act on worker processes.
NODE_KINDS = frozenset(faultkinds.acting_on(NODES, LINKS))
MAX_STEPS = 4


@dataclass(frozen=True)
class Step:
    """One fault step: its kind and its tokens (``key=value`` or a bare flag), in order."""

    kind: str
    tokens: tuple[str, ...]

    @property
    def text(self) -> str:
        return " ".join((self.kind, *self.tokens))

    def get(self, key: str) -> str | None:
        prefix = key + "="
        return next((t[len(prefix) :] for t in self.tokens if t.startswith(prefix)), None)

    def has(self, flag: str) -> bool:
        return flag in self.tokens

    def with_value(self, key: str, value: str) -> Step:
        """The step with ``key=value`` in place of the old value (appended when it had none)."""
        prefix = key + "="
        if self.get(key) is None:
            return replace(self, tokens=(*self.tokens, prefix + value))
        return replace(self, tokens=tuple(prefix + value if t.startswith(prefix) else t for t in self.tokens))

    def without(self, token: str) -> Step:
        return replace(self, tokens=tuple(t for t in self.tokens if t != token))


Schedule = tuple[Step, ...]


def schedule_text(steps: Sequence[Step]) -> str:
    return "; ".join(step.text for step in steps)


def parse_text(text: str) -> Schedule:
    """The steps of a schedule's text (the CSV's ``schedule`` column, a user's --faults): split only,
    the faults package validates. An unknown kind is refused here, the rest is left to it."""
    steps = []
    for part in text.split(";"):
        words = part.split()
        if not words:
            continue
        if words[0] not in KINDS:
            raise InvalidValueError(f"unknown fault kind {words[0]!r} in {text!r} (kinds: {', '.join(KINDS)})")
        steps.append(Step(words[0], tuple(words[1:])))
    return tuple(steps)  # () is no fault at all: the shrinker's first candidate


def canonical(text: str) -> str:
    """The schedule's canonical text (spec.schedule's ``Schedule.text``, which also validates it)."""
    return parse_schedule(text).text


def parse_kinds(text: str) -> tuple[str, ...]:
    """``--faults crash,pause`` → the kinds, each checked against the vocabulary."""
    kinds = tuple(dict.fromkeys(k.strip() for k in text.split(",") if k.strip()))
    bad = [k for k in kinds if k not in KINDS]
    if bad or not kinds:
        raise InvalidValueError(f"--faults takes kinds from {', '.join(KINDS)}, got {text!r}")
    return kinds


# --- generation ---------------------------------------------------------------------------------


def random_step(rng: random.Random, *, kind: str, shape: Shape) -> Step:
    """One step of ``kind`` with its whom, when and amounts drawn in ranges relative to the TTL."""
    if kind not in faultkinds.KINDS:
        raise InvalidValueError(f"unknown fault kind {kind!r} (kinds: {', '.join(KINDS)})")
    return Step(kind, faultkinds.KINDS[kind].draw(rng, shape))


def random_schedule(rng: random.Random, *, kinds: Sequence[str], shape: Shape, max_steps: int = MAX_STEPS) -> Schedule:
    """1..``max_steps`` steps (fewer likelier), each of a kind drawn from ``kinds``."""
    if not kinds:
        raise InvalidValueError("no fault kind to draw from")
    wanted = count(rng, max_steps)
    steps: list[Step] = []
    paused: set[str | None] = set()
    while len(steps) < wanted:
        step = random_step(rng, kind=rng.choice(list(kinds)), shape=shape)
        if faultkinds.KINDS[step.kind].in_worker:  # one pause per worker (a worker has one pause point: faults/plan.py)
            if step.get("worker") in paused:
                if len(paused) >= shape.workers:
                    wanted -= 1  # every worker has its pause: draw one step fewer
                continue
            paused.add(step.get("worker"))
        steps.append(step)
    return tuple(steps)
