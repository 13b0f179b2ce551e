"""What a fault kind is: the interface every module of :mod:`lockcompare.scenario.faultkinds` fills in.

A kind has ONE name — the word that starts its step (``crash nodes=holders:1 ...``), the ``fault``
of its events in the history, and what the catalogue's experiments and ``explore`` call it. Its
module says everything else about it: the parameters it takes and their checks, whom it acts on,
what the lock servers must offer, how it is injected and healed (:meth:`FaultKind.runtime`),
whether the timing sentinel excuses the worker it delays, and how ``explore`` draws and shrinks it.

Kinds live in spec (not in faults) because the schedule's text is a trial setting: spec and
analysis parse and canonicalise it, and neither may import the runner's side. So a kind's module
imports nothing that needs a server at import time: its fault objects act on what the schedule
runner hands them (the cluster, the links, the worker processes: faults/schedule.py's
``FaultContext``), and a kind that needs a client library imports it inside the call that uses it.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from lockcompare.errors import InvalidValueError
from lockcompare.scenario.numbers import parse_number

if TYPE_CHECKING:
    from lockcompare.infra.cluster import Cluster
    from lockcompare.infra.proxy import ProxySet
    from lockcompare.scenario.schedule import FaultStep, TrialStep

#: What a kind can act on: lock nodes (``nodes=``), one worker (``worker=``), or the links from one
#: worker to some nodes (both).
NODES, WORKER, LINKS = "nodes", "worker", "links"

#: What a kind can ask of the lock servers. The names of infra/kinds.py's ``Capability`` (what a kind
#: of server offers; the matrix matches them: runner/plan.py's FAULT_NEEDS), and the needs every
#: embedded server meets (process control, proxied links: refused up front for external servers).
PROCESS_CONTROL = "process control"  # lockcompare runs the server: it can kill, restart, stop it
PERSISTENCE = "persistence"  # an AOF kept across a restart
CLOCK_CONTROL = "clock control"  # the server's wall clock can be moved (libfaketime)
REPLICATION = "replication"  # an asynchronous replica that can be promoted
SESSION_CONTROL = "session control"  # a client's session can be ended by the server
PROXIED_LINKS = "proxied links"  # the workers reach the nodes through links lockcompare controls
PEER_LINKS = "peer links"  # the servers reach each other through links lockcompare controls (isolate, split)


#: The largest time a step's parameter or ``for=`` may take (ms), and a clock jump's (a day).
MAX_STEP_MS = 600_000
MAX_JUMP_MS = 86_400_000


@dataclass(frozen=True, kw_only=True)
class Param:
    """One ``key=value`` a kind takes beyond whom / when / for."""

    name: str
    default: str | None = None  # None: required
    choices: tuple[str, ...] = ()  # empty: a number
    signed: bool = False  # a number written with its sign, never 0 (clock-jump's by=+MS)
    shrink_floor: float | None = None  # explore may shrink it down to this (None: it is not an amount)
    high: float = MAX_STEP_MS  # a number's bound either way
    #: A time (ms): written at the lesson's scale, converted to the trial's with the step's other
    #: times (scenario/schedule.py ``at_scale``); the kind reads it converted (``TrialStep.time``).
    time: bool = False
    help: str = ""

    def canonical(self, value: str) -> str:
        if self.choices:
            if value not in self.choices:
                raise InvalidValueError(f"{self.name}= takes {' or '.join(self.choices)}, got {value!r}")
            return value
        number = parse_number(value, what=f"{self.name}=", low=-self.high, high=self.high)
        if self.signed:
            if number == 0:
                raise InvalidValueError(f"{self.name}= must not be 0 (+MS forward, -MS backward)")
            return f"{number:+g}"
        return f"{number:g}"

    @property
    def text(self) -> str:
        shown = "|".join(self.choices) if self.choices else ("+MS/-MS" if self.signed else "N")
        default = f" (default {self.default})" if self.default is not None else ""
        return f"`{self.name}={shown}`{default}"


class Stopper(Protocol):
    """Stops and continues worker processes, counting holds (faults/freeze.py's Freezer)."""

    def hold(self, pid: int) -> None: ...

    def release(self, pid: int) -> None: ...


class World(Protocol):
    """What a fault with ``scope != "nodes"`` is handed (faults/steps.py's FaultContext)."""

    @property
    def cluster(self) -> Cluster: ...

    @property
    def pids(self) -> tuple[int, ...]: ...

    @property
    def freezer(self) -> Stopper | None: ...

    def links_running(self) -> bool: ...

    def require_links(self) -> ProxySet: ...


class FaultAction(Protocol):
    """A fault object the schedule runner injects and heals; ``scope``: what it is handed —
    ``"nodes"`` the cluster, anything else the trial's FaultContext (cluster, links, worker pids)."""

    scope: ClassVar[str]

    def inject(self, target: Any, nodes: list[int]) -> str | tuple[str, dict[str, object]]:
        """Act on ``nodes``; returns a short description for the history (and, if it has them, more
        fields of its event: session-kill's ``sessions_ended``)."""
        ...

    def heal(self, target: Any, nodes: list[int]) -> str: ...


@dataclass(frozen=True, kw_only=True)
class Runtime:
    """How the schedule runner runs one step (times in the trial's ms). ``build(worker)`` makes its
    fault object for the worker the step resolved to (None: it names none)."""

    build: Callable[[int | None], FaultAction]
    heal_after_ms: float | None  # None: healed when the trial ends
    latest_ms: float | None = None  # injected then at the latest, from the start, if no acquire did
    prepares: bool = False  # its fault object has a prepare step, run at the start
    fixed_nodes: tuple[int, ...] | None = None  # the nodes a worker-aimed step acts on


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


class FaultKind:
    """One kind of fault; a module of :mod:`lockcompare.scenario.faultkinds` defines one as ``KIND``."""

    name: ClassVar[str]
    #: Where it comes in the docs' table and in error messages.
    order: ClassVar[int]
    summary: ClassVar[str]  # one line: what it does (docs/faults.md's table)
    acts_on: ClassVar[str]  # NODES, WORKER or LINKS
    #: Another key its ``nodes=`` target may be written with (split: ``minority=``); the
    #: canonical text says ``nodes=``, which explore draws and shrinks.
    target_alias: ClassVar[str] = ""
    params: ClassVar[tuple[Param, ...]] = ()
    #: What an omitted ``for=`` means: True, it lasts until the trial ends; False, healed at once.
    until_the_end: ClassVar[bool] = False
    without_for: ClassVar[str] = "healed at once"  # the same, in words for the docs
    needs: ClassVar[frozenset[str]] = frozenset()  # what the lock servers must offer
    #: The timing sentinel does not judge the worker it targets between inject and heal: delaying
    #: that worker is the experiment (analysis/sentinel.py).
    excuses_worker: ClassVar[bool] = False
    #: The sentinel does not judge the workers' *calls* (their sleeps still are) while it keeps a
    #: lock server away: from inject to heal, or one TTL past an inject that is never healed (a
    #: client finds another server, or loses its session, within its session timeout). A release
    #: blocked on a ZooKeeper server that is restarting is the fault, not the machine.
    excuses_calls: ClassVar[bool] = False
    #: Whether it can take keys off a lock node (the evidence of a broken majority: analysis/holders.py).
    loses_keys: ClassVar[bool] = False
    #: ``at=acquire`` (around each acquire of ``worker``) applies to it.
    around_acquire: ClassVar[bool] = False
    #: The worker lands it at its own pause point: the worker plans it, not the schedule runner.
    in_worker: ClassVar[bool] = False
    #: It is the worker's pause, at its pause point (faults/plan.py ``worker_pauses``): its
    #: ``after-acquire`` is no offset the runner keeps, so the trial's timing does not rest on it.
    pauses_worker: ClassVar[bool] = False
    #: The worker loses the replies to its increments in the rounds it names (``worker_lost_replies``).
    loses_replies: ClassVar[bool] = False
    #: The runner stops the worker's processes from outside while it lasts (a SIGSTOP strobe).
    freezes_worker: ClassVar[bool] = False
    #: A margin the trial's timing rests on: its name, and the time parameter whose largest value
    #: less the TTL it is (slow: a reply later than the TTL; faults/plan.py ``timing_extras``).
    ttl_margin: ClassVar[tuple[str, str] | None] = None
    #: The critical sections (resource checks) it acts on; empty: every one. A cell whose backend's
    #: section is another is left out, with the reason (runner/plan.py).
    acts_on_checks: ClassVar[tuple[str, ...]] = ()
    #: It acts on the worker's link to the resource, not to the lock nodes: the trial proxies that link.
    on_resource_link: ClassVar[bool] = False
    #: ``explore`` draws it unless ``--faults`` says otherwise.
    explored_by_default: ClassVar[bool] = True
    #: ``for=0`` does nothing: explore shrinks ``for`` to 10 ms, not 0.
    lasts: ClassVar[bool] = False
    #: Names its events had before every kind had one name (read from older histories).
    former_event_names: ClassVar[tuple[str, ...]] = ()

    def check(self, step: FaultStep) -> None:
        """Refuse, in one line, what this kind cannot do as written (beyond the generic checks)."""

    def runtime(self, step: TrialStep, *, ttl_ms: float, lock_key: str) -> Runtime:
        """How the runner runs ``step``, every time already in the trial's ms (``step``'s and
        ``ttl_ms``: a kind never scales a time); ``lock_key``: the trial's lock."""
        raise NotImplementedError(f"{self.name} is not run by the schedule runner")

    def heal_after_ms(self, step: TrialStep) -> float | None:
        """``for=`` (the trial's ms); omitted: None (until the end) or 0 (at once), as
        :attr:`until_the_end` says."""
        if step.for_ms is None and self.until_the_end:
            return None
        return step.for_ms or 0.0

    def draw(self, rng: random.Random, shape: Shape) -> tuple[str, ...]:
        """One step's tokens (whom, when, amounts), drawn relative to the TTL, for ``explore``."""
        raise NotImplementedError(f"explore cannot draw {self.name}")


# --- drawing helpers (explore's vocabulary; lesson-scale ms) -------------------------------------

#: Bare words of a step (the rest are key=value).
FLAGS = ("every", "once")


def ms(value: float) -> str:
    """Times on a 10 ms grid: short to read, and few enough values for shrinking to walk."""
    return str(round(value / 10.0) * 10)


def count(rng: random.Random, most: int) -> int:
    """1..most, small counts likelier (a minimal counterexample is found sooner among small ones)."""
    return rng.choices(range(1, most + 1), weights=[2.0**-k for k in range(most)])[0]


def whom_nodes(rng: random.Random, shape: Shape, *, lease: bool) -> str:
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
        return f"holders:{count(rng, most)}"
    if pick == "others":
        return f"others:{count(rng, min(most, n - 1))}"
    return ",".join(str(i) for i in sorted(rng.sample(range(n), count(rng, most))))


def when(rng: random.Random, shape: Shape, *, start_ok: bool, acquire_ok: bool = False) -> tuple[str, ...]:
    """At the start, around each acquire (link faults), or an offset inside the followed worker's
    hold, each round or once."""
    draw = rng.random()
    if start_ok and draw < 0.3:
        return ("at=start",)
    if acquire_ok and draw < 0.5:
        return ("at=acquire",)
    offset = ms(rng.uniform(0, 0.9 * shape.work_ms))
    return (f"after-acquire={offset}", rng.choice(FLAGS))


def nodes_and_when(
    rng: random.Random, shape: Shape, *, start_ok: bool, acquire_ok: bool = False
) -> tuple[str, tuple[str, ...]]:
    """A node step's ``nodes=`` token and its moment: the moment is drawn first (:func:`when`), and the
    nodes may be relative to the lease (:func:`whom_nodes`) only when the step lands inside a hold."""
    at = when(rng, shape, start_ok=start_ok, acquire_ok=acquire_ok)
    return f"nodes={whom_nodes(rng, shape, lease=at[0].startswith('after-acquire'))}", at


def any_worker(rng: random.Random, shape: Shape) -> str:
    return rng.choice(["holder", *map(str, range(shape.workers))])
