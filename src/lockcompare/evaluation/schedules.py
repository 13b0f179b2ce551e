"""Fault schedules as ``explore`` draws and shrinks them: text in the ``--faults`` syntax.

The schedule model itself (:mod:`lockcompare.faults.steps`: ``FaultStep``, ``Schedule``,
``parse_schedule``) belongs to the faults package; this module only needs the *text* contract
(issue 17): steps separated by ``;``, each ``KIND key=value ... [every|once]``, e.g.::

    pause worker=0 after-acquire=0 every for=1200 how=sigstop; restart nodes=holders:1 after-acquire=50 every

So a step here is its kind plus its tokens, in order (:class:`Step`), and :func:`canonical` asks the
faults package for the canonical text when it is installed (the text that becomes the trial
setting ``faults``), and otherwise keeps the tokens as drawn. Working on text keeps the search
independent of the model's Python shape: what the search generates is exactly what a user would
type after ``--faults``.

Times are lesson-scale milliseconds (``--time-scale`` multiplies them when the trial runs), drawn
relative to the TTL and the work of the trial (:class:`Shape`): an offset lands inside the hold,
a pause or a clock jump is of the order of the TTL.
"""

from __future__ import annotations

import importlib
import random
from collections.abc import Sequence
from dataclasses import dataclass, replace

from lockcompare.errors import InvalidValueError

#: The fault vocabulary (issue 17), in the order the docs list it.
KINDS = ("crash", "restart", "clock-jump", "pause", "slow", "cut", "failover", "starve", "session-kill")
#: What ``explore`` searches when --faults is not given (session-kill needs PostgreSQL backends).
DEFAULT_KINDS = ("crash", "restart", "clock-jump", "pause", "slow", "cut", "failover", "starve")
#: Kinds that act on lock nodes (they take ``nodes=``); the others act on worker processes.
NODE_KINDS = frozenset({"crash", "restart", "clock-jump", "slow", "cut", "failover"})
#: Bare words of a step (the rest are key=value).
FLAGS = ("every", "once")
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
    """The schedule's canonical text: the faults package's ``Schedule.text`` when it is installed
    (which also validates it), else the steps' text with normalised spacing."""
    try:
        steps = importlib.import_module("lockcompare.faults.steps")  # the schedule model, once it exists
    except ImportError:
        return schedule_text(parse_text(text))
    return str(steps.parse_schedule(text).text)


def parse_kinds(text: str) -> tuple[str, ...]:
    """``--faults crash,pause`` → the kinds, each checked against the vocabulary."""
    kinds = tuple(dict.fromkeys(k.strip() for k in text.split(",") if k.strip()))
    bad = [k for k in kinds if k not in KINDS]
    if bad or not kinds:
        raise InvalidValueError(f"--faults takes kinds from {', '.join(KINDS)}, got {text!r}")
    return kinds


# --- generation ---------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Shape:
    """What a drawn schedule is sized against: the trial's lesson-scale timings and its cast."""

    ttl_ms: float = 1000.0
    work_ms: float = 300.0
    nodes: int = 1  # lock nodes the backend uses
    workers: int = 2
    #: Most nodes one step may hit (None: all): ``--max-nodes 2`` on a five-node quorum draws only
    #: the minority faults it claims to survive, step by step.
    max_nodes: int | None = None

    def __post_init__(self) -> None:
        if self.nodes < 1 or self.workers < 1 or self.ttl_ms <= 0 or self.work_ms <= 0:
            raise InvalidValueError(f"a schedule needs >= 1 node and worker, and positive times: {self}")
        if self.max_nodes is not None and self.max_nodes < 1:
            raise InvalidValueError(f"--max-nodes must be >= 1, got {self.max_nodes}")

    @property
    def hittable(self) -> int:
        """How many nodes one step may hit."""
        return self.nodes if self.max_nodes is None else min(self.nodes, self.max_nodes)


def _ms(value: float) -> str:
    """Times on a 10 ms grid: short to read, and few enough values for shrinking to walk."""
    return str(round(value / 10.0) * 10)


def _count(rng: random.Random, most: int) -> int:
    """1..most, small counts likelier (a minimal counterexample is found sooner among small ones)."""
    return rng.choices(range(1, most + 1), weights=[2.0**-k for k in range(most)])[0]


def _whom_nodes(rng: random.Random, shape: Shape, *, lease: bool) -> str:
    """Which nodes: relative to the current lease (``lease``: the step lands while one is held) or
    fixed; never more than ``shape.hittable``."""
    n, most = shape.nodes, shape.hittable
    choices = ["fixed"] + (["all"] if most == n else [])
    if lease:
        choices += ["holders", "holders"] + (["others"] if n > 1 else [])
    pick = rng.choice(choices)
    if pick == "all":
        return "all"
    if pick == "holders":
        return f"holders:{_count(rng, most)}"
    if pick == "others":
        return f"others:{_count(rng, min(most, n - 1))}"
    return ",".join(str(i) for i in sorted(rng.sample(range(n), _count(rng, most))))


def _when(rng: random.Random, shape: Shape, *, start_ok: bool, acquire_ok: bool = False) -> tuple[str, ...]:
    """At the start, around each acquire (link faults), or an offset inside the followed worker's
    hold, each round or once."""
    draw = rng.random()
    if start_ok and draw < 0.3:
        return ("at=start",)
    if acquire_ok and draw < 0.5:
        return ("at=acquire",)
    offset = _ms(rng.uniform(0, 0.9 * shape.work_ms))
    return (f"after-acquire={offset}", rng.choice(FLAGS))


def _worker(rng: random.Random, shape: Shape) -> str:
    return rng.choice(["holder", *map(str, range(shape.workers))])


def random_step(rng: random.Random, *, kind: str, shape: Shape) -> Step:
    """One step of ``kind`` with its whom, when and amounts drawn in ranges relative to the TTL."""
    ttl = shape.ttl_ms
    if kind == "pause":
        # A pause lands at the worker's own pause point (right after its acquire): it follows that
        # worker, by index, at offset 0 (faults.steps checks this).
        how = "sigstop" if rng.random() < 0.75 else "sleep"  # the default pause is stop-the-world
        at_own_point = (f"worker={rng.randrange(shape.workers)}", "after-acquire=0", rng.choice(FLAGS))
        return Step(kind, (*at_own_point, f"for={_ms(rng.uniform(0.5, 2.5) * ttl)}", f"how={how}"))
    if kind == "starve":
        duty = rng.choice(("0.05", "0.1", "0.2"))
        tokens = (f"worker={_worker(rng, shape)}", *_when(rng, shape, start_ok=False))
        return Step(kind, (*tokens, f"for={_ms(rng.uniform(1.0, 3.0) * ttl)}", f"duty={duty}"))
    if kind == "session-kill":
        return Step(kind, (f"worker={_worker(rng, shape)}", *_when(rng, shape, start_ok=False)))
    links = kind in ("slow", "cut")
    when = _when(rng, shape, start_ok=kind in ("crash", "slow", "cut", "failover"), acquire_ok=links)
    lease = when[0].startswith("after-acquire") and kind != "failover"  # failover: fixed nodes (from the start)
    nodes = f"nodes={_whom_nodes(rng, shape, lease=lease)}"
    if kind == "crash":
        down: tuple[str, ...] = (
            () if when[0] == "at=start" or rng.random() < 0.5 else (f"for={_ms(rng.uniform(0.5, 2.0) * ttl)}",)
        )
        return Step(kind, (nodes, *when, *down))
    if kind == "restart":
        downtime = _ms(rng.uniform(0, 1.5) * ttl) if rng.random() < 0.5 else "0"
        persistence = "aof-always" if rng.random() < 0.25 else "none"
        return Step(kind, (nodes, *when, f"for={downtime}", f"persistence={persistence}"))
    if kind == "clock-jump":
        sign = "+" if rng.random() < 0.8 else "-"  # forward expires keys early; backward keeps them
        return Step(kind, (nodes, *when, f"by={sign}{_ms(rng.uniform(0.5, 3.0) * ttl)}"))
    if kind == "slow":
        link = f"worker={rng.randrange(shape.workers)}"
        return Step(kind, (nodes, link, *when, f"delay={_ms(rng.uniform(0.5, 2.0) * ttl)}"))
    if kind == "cut":
        link = f"worker={rng.randrange(shape.workers)}"
        for_ = (f"for={_ms(rng.uniform(0.5, 2.0) * ttl)}",) if when[0].startswith("after-acquire") else ()
        return Step(kind, (nodes, link, *when, *for_))
    if kind == "failover":
        return Step(kind, (nodes, *when))
    raise InvalidValueError(f"unknown fault kind {kind!r} (kinds: {', '.join(KINDS)})")


def random_schedule(rng: random.Random, *, kinds: Sequence[str], shape: Shape, max_steps: int = MAX_STEPS) -> Schedule:
    """1..``max_steps`` steps (fewer likelier), each of a kind drawn from ``kinds``."""
    if not kinds:
        raise InvalidValueError("no fault kind to draw from")
    count = _count(rng, max_steps)
    steps: list[Step] = []
    paused: set[str | None] = set()
    while len(steps) < count:
        step = random_step(rng, kind=rng.choice(list(kinds)), shape=shape)
        if step.kind == "pause":  # one pause per worker (a worker has one pause point: faults/plan.py)
            if step.get("worker") in paused:
                if len(paused) >= shape.workers:
                    count -= 1  # every worker has its pause: draw one step fewer
                continue
            paused.add(step.get("worker"))
        steps.append(step)
    return tuple(steps)
