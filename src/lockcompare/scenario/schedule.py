"""Fault schedules as text: what happens, to whom, when and for how long (issue 17).

A schedule is steps separated by ``;``; a step is ``KIND key=value ...`` plus the flags ``every``
or ``once`` (the default)::

    restart nodes=holders:1 after-acquire=50 every for=0 persistence=none
    cut nodes=3,4 worker=0 at=start; restart nodes=holders:1 after-acquire=50 every

Kinds: one module each in :mod:`lockcompare.scenario.faultkinds` (docs/faults.md's table lists them
with their parameters).

Whom — ``nodes=``: fixed indices (``0,1``), ``holders:K`` (K of the nodes holding the current
lease, read from the nodes at injection time), ``others:K`` (K nodes not holding it), ``all``, or
a role read from the servers at injection time by their kind (infra/kinds.py ``RoleKind``):
``leader`` (``primary`` and ``master`` are the same role in a database's or Redis's words),
``followers:K`` (K nodes that do not lead) or ``holder-member`` (the node the current holder's
client is connected to); ``worker=``: an index, or ``holder`` (the worker whose lease is current).

When — ``at=start`` (as the workers are released), ``after-acquire=MS`` (MS after an acquire of
the followed worker: ``follow=W``, default 0; ``by=W`` is accepted for it on a kind that has no
``by`` parameter of its own) or ``at=acquire`` (around each of ``worker``'s acquires from its second
round: a link fault on the acquire only).  How long — ``for=MS``; omitted: healed at once, or (a
crash, say) at the end of the trial, as the kind says.  Times are written at the lesson's scale
(milliseconds): a trial converts them to its own once, at the door (:func:`at_scale`, called by
``TrialSpec.schedule``), and everything that runs a step reads a :class:`TrialStep`'s times.

:func:`parse_schedule` checks everything and says what is wrong in one line;
:attr:`Schedule.text` is the canonical form (it parses back to the same schedule), which is the
trial setting ``faults`` and part of the trial identity. This module is pure: no servers.
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from lockcompare.errors import ConfigError, InvalidValueError
from lockcompare.scenario import faultkinds
from lockcompare.scenario.faultkinds.base import LINKS, MAX_STEP_MS, NODES, WORKER
from lockcompare.scenario.numbers import parse_number


@dataclass(frozen=True)
class NodeTarget:
    """``nodes=``: fixed indices, ``holders:K``, ``others:K``, ``all``, or a role (:data:`ROLES`)."""

    mode: str  # "fixed", "holders", "others", "all", or a role (ROLES: "leader", "followers", ...)
    indices: tuple[int, ...] = ()  # fixed
    count: int = 0  # holders / others / followers; 1 for the one-node roles

    @property
    def text(self) -> str:
        if self.mode == "fixed":
            return ",".join(str(i) for i in self.indices)
        if self.mode in ("all", *LEADER_WORDS, HOLDER_MEMBER):
            return self.mode
        return f"{self.mode}:{self.count}"

    @property
    def from_lease(self) -> bool:
        """Read from the lease at injection time (so there is none ``at=start``)."""
        return self.mode in ("holders", "others", HOLDER_MEMBER)

    @property
    def by_role(self) -> bool:
        """Resolved by the servers' kind from their roles (it must offer readable roles)."""
        return self.mode in ROLES


#: The leading node, in each kind's words (one role: etcd and ZooKeeper lead, PostgreSQL has a
#: primary, Redis a master).
LEADER_WORDS = ("leader", "primary", "master")
HOLDER_MEMBER = "holder-member"
#: Every ``nodes=`` role.
ROLES = (*LEADER_WORDS, "followers", HOLDER_MEMBER)


@dataclass(frozen=True)
class WorkerTarget:
    """``worker=``: an index, or ``holder`` (whoever holds the current lease)."""

    index: int | None  # None: the holder

    @property
    def text(self) -> str:
        return "holder" if self.index is None else str(self.index)


@dataclass(frozen=True, kw_only=True)
class FaultStep:
    """One step of a schedule as written: times at the lesson's scale (milliseconds; a trial's
    are its :class:`TrialStep`'s)."""

    kind: str
    nodes: NodeTarget | None = None
    worker: WorkerTarget | None = None
    at: str = "after-acquire"  # "start", "after-acquire" or "acquire"
    after_ms: float = 0.0  # at == "after-acquire": this long after the followed worker's acquire
    follow: int = 0  # whose acquires an after-acquire step follows
    every: bool = False  # False: once
    for_ms: float | None = None  # None: healed at once (a crash: at the end of the trial)
    params: tuple[tuple[str, str], ...] = ()  # canonical, in the kind's order, defaults included

    def param(self, name: str) -> str:
        return dict(self.params)[name]

    def number(self, name: str) -> float:
        return float(self.param(name))

    @property
    def text(self) -> str:
        words = [self.kind]
        if self.nodes is not None:
            words.append(f"nodes={self.nodes.text}")
        if self.worker is not None:
            words.append(f"worker={self.worker.text}")
        if self.at == "after-acquire":
            words.append(f"after-acquire={_ms(self.after_ms)}")
            if self.follow:
                words.append(f"follow={self.follow}")
            words.append("every" if self.every else "once")
        else:
            words.append(f"at={self.at}")
        if self.for_ms is not None:
            words.append(f"for={_ms(self.for_ms)}")
        words += [f"{k}={v}" for k, v in self.params]
        return " ".join(words)


@dataclass(frozen=True)
class Schedule:
    steps: tuple[FaultStep, ...] = field(default_factory=tuple)

    @property
    def text(self) -> str:
        """The canonical text: ``parse_schedule(s.text) == s``."""
        return "; ".join(step.text for step in self.steps)

    def __bool__(self) -> bool:
        return bool(self.steps)

    def kinds(self) -> set[str]:
        return {step.kind for step in self.steps}

    def of_kind(self, *kinds: str) -> list[FaultStep]:
        return [step for step in self.steps if step.kind in kinds]


def _ms(value: float) -> str:
    return f"{value:g}"


@dataclass(frozen=True, kw_only=True)
class TrialStep:
    """One step in a trial's time frame: the step as written (whom, when, its text) and its times
    in the trial's milliseconds, converted once by :func:`at_scale` (a fault kind never scales)."""

    written: FaultStep
    after_ms: float  # at == "after-acquire": this long after the followed worker's acquire
    for_ms: float | None  # None: healed at once (a crash: at the end of the trial)
    times: tuple[tuple[str, float], ...] = ()  # the kind's time parameters (Param.time), by name

    @property
    def kind(self) -> str:
        return self.written.kind

    @property
    def at(self) -> str:
        return self.written.at

    def time(self, name: str) -> float:
        """A time parameter of the kind (``slow``'s ``delay``), in the trial's ms."""
        return dict(self.times)[name]

    def param(self, name: str) -> str:
        """A parameter that is not a time (``restart``'s ``persistence``), as written."""
        if name in dict(self.times):
            raise KeyError(f"{name} is a time: read it converted, with time({name!r})")
        return self.written.param(name)

    def number(self, name: str) -> float:
        """A number that is not a time (``starve``'s ``duty``), as written."""
        return float(self.param(name))


@dataclass(frozen=True, kw_only=True)
class TrialSchedule:
    """A schedule in one trial's time frame: the written one, the scale, and its steps converted."""

    written: Schedule
    scale: float
    steps: tuple[TrialStep, ...]

    def __bool__(self) -> bool:
        return bool(self.steps)

    def of_kind(self, *kinds: str) -> list[TrialStep]:
        return [step for step in self.steps if step.kind in kinds]


def at_scale(schedule: Schedule, *, scale: float) -> TrialSchedule:
    """``schedule`` in the frame of a trial at ``scale``: every time (``after-acquire=``, ``for=``,
    and the kinds' time parameters) multiplied by ``scale`` here, and nowhere else.

    >>> trial = at_scale(parse_schedule("slow nodes=0 worker=0 after-acquire=2000 for=1500 delay=300"), scale=0.1)
    >>> (trial.steps[0].after_ms, trial.steps[0].for_ms, trial.steps[0].time("delay"))
    (200.0, 150.0, 30.0)
    """
    return TrialSchedule(written=schedule, scale=scale, steps=tuple(_at_scale(s, scale=scale) for s in schedule.steps))


def _at_scale(step: FaultStep, *, scale: float) -> TrialStep:
    timed = [param.name for param in faultkinds.KINDS[step.kind].params if param.time]
    return TrialStep(
        written=step,
        after_ms=step.after_ms * scale,
        for_ms=None if step.for_ms is None else step.for_ms * scale,
        times=tuple((name, step.number(name) * scale) for name in timed),
    )


#: A schedule's bounds, checked before it is parsed: every field lockcompare writes is bounded where
#: it is written (a schedule is a CSV cell), and no step waits longer than the longest --pause-ms.
MAX_SCHEDULE_STEPS = 64
MAX_SCHEDULE_CHARS = 8192
MAX_INDEX = 1000  # node and worker indices (the cluster's own bounds are checked where it is known)


def parse_schedule(text: str) -> Schedule:
    """Parse a schedule; an :class:`InvalidValueError` in one line says what is wrong and where."""
    if len(text) > MAX_SCHEDULE_CHARS:
        raise InvalidValueError(f"a fault schedule takes at most {MAX_SCHEDULE_CHARS} characters, got {len(text)}")
    parts = [part.strip() for part in text.replace("\n", ";").split(";")]
    if (count := sum(1 for p in parts if p)) > MAX_SCHEDULE_STEPS:
        raise InvalidValueError(f"a fault schedule takes at most {MAX_SCHEDULE_STEPS} steps, got {count}")
    steps = []
    for number, part in enumerate((p for p in parts if p), start=1):
        try:
            steps.append(_parse_step(part))
        except InvalidValueError as exc:
            shown = part if len(part) <= 80 else part[:77] + "..."
            raise InvalidValueError(f"fault step {number} ({shown!r}): {exc}") from None
    return Schedule(tuple(steps))


def _parse_step(text: str) -> FaultStep:
    kind, *words = text.split()
    if kind not in faultkinds.KINDS:
        raise InvalidValueError(f"unknown kind {kind!r} (kinds: {', '.join(faultkinds.NAMES)})")
    values: dict[str, str] = {}
    flags: set[str] = set()
    for word in words:
        if word in ("every", "once"):
            flags.add(word)
            continue
        key, eq, value = word.partition("=")
        if not eq or not value:
            raise InvalidValueError(f"{word!r} is not key=value, every or once")
        if key in values:
            raise InvalidValueError(f"{key} given twice")
        values[key] = value
    if flags == {"every", "once"}:
        raise InvalidValueError("every and once both given")
    if "by" in values and not any(p.name == "by" for p in faultkinds.KINDS[kind].params):
        values.setdefault("follow", values.pop("by"))  # the contract's by=W: whose acquire
    step = _build(kind, values, every="every" in flags)
    _check(step)
    return step


def _build(kind: str, values: dict[str, str], *, every: bool) -> FaultStep:
    alias = faultkinds.KINDS[kind].target_alias  # split names its side minority= too
    if alias and alias in values:
        if "nodes" in values:
            raise InvalidValueError(f"{kind}: nodes= and {alias}= name the same nodes: give one")
        values["nodes"] = values.pop(alias)
    nodes = _nodes(values.pop("nodes")) if "nodes" in values else None
    worker = _worker(values.pop("worker")) if "worker" in values else None
    at = values.pop("at", None)
    after = values.pop("after-acquire", None)
    if at is not None and after is not None:
        raise InvalidValueError("at= and after-acquire= both given")
    if at is not None and at not in ("start", "acquire"):
        raise InvalidValueError(f"at= takes start or acquire, got {at!r}")
    if at is not None and every:
        raise InvalidValueError(f"every repeats an after-acquire step: at={at} happens by itself")
    follow = _whole(values.pop("follow"), "follow") if "follow" in values else 0
    for_ms = _time(values.pop("for"), "for") if "for" in values else None
    params = []
    declared = faultkinds.KINDS[kind]
    for param in declared.params:
        value = values.pop(param.name, param.default)
        if value is None:
            raise InvalidValueError(f"{kind} needs {param.name}=")
        params.append((param.name, param.canonical(value)))
    if values:
        allowed = [
            "nodes" if declared.acts_on != WORKER else "worker",
            *(["worker"] if declared.acts_on == LINKS else []),
        ]
        allowed += ["at", "after-acquire", "follow", "for", *(p.name for p in declared.params)]
        raise InvalidValueError(f"{kind} takes no {next(iter(values))}= (it takes {', '.join(allowed)})")
    return FaultStep(
        kind=kind,
        nodes=nodes,
        worker=worker,
        at=at or "after-acquire",
        after_ms=_time(after, "after-acquire") if after is not None else 0.0,
        follow=follow,
        every=every,
        for_ms=for_ms,
        params=tuple(params),
    )


def _check(step: FaultStep) -> None:
    """What every kind needs: whom it acts on, and when it can land; then the kind's own checks."""
    kind = faultkinds.KINDS[step.kind]
    if kind.acts_on in (NODES, LINKS):
        if step.nodes is None:
            raise InvalidValueError(
                f"{kind.name} needs nodes= (indices, holders:K, others:K, all, leader, followers:K or holder-member)"
            )
    elif step.nodes is not None:
        raise InvalidValueError(f"{kind.name} acts on a worker: it takes worker=, not nodes=")
    if kind.acts_on in (LINKS, WORKER):
        if step.worker is None:
            raise InvalidValueError(f"{kind.name} needs worker= (an index or holder)")
    elif step.worker is not None:
        raise InvalidValueError(f"{kind.name} acts on lock nodes: it takes nodes=, not worker=")
    if step.nodes is not None and step.nodes.from_lease and step.at == "start":
        raise InvalidValueError(f"nodes={step.nodes.text} is read from a lease: there is none at=start")
    if step.worker is not None and step.worker.index is None and step.at != "after-acquire":
        raise InvalidValueError("worker=holder is read from a lease: it needs after-acquire=")
    if step.at == "acquire" and not kind.around_acquire:
        around = " and ".join(faultkinds.names_where("around_acquire"))
        raise InvalidValueError(f"at=acquire (around each acquire) applies to {around} only")
    kind.check(step)


def _nodes(value: str) -> NodeTarget:
    if value == "all":
        return NodeTarget("all")
    if value in (*LEADER_WORDS, HOLDER_MEMBER):
        return NodeTarget(value, count=1)
    mode, colon, count = value.partition(":")
    if colon:
        if mode not in ("holders", "others", "followers"):
            raise InvalidValueError(f"nodes={value}: holders:K, others:K or followers:K")
        k = _whole(count, f"nodes={mode}:")
        if k < 1:
            raise InvalidValueError(f"nodes={value}: K must be >= 1")
        return NodeTarget(mode, count=k)
    indices = tuple(_whole(v, "nodes") for v in value.split(","))
    if len(set(indices)) != len(indices):
        raise InvalidValueError(f"nodes={value}: a node given twice")
    return NodeTarget("fixed", indices=tuple(sorted(indices)))


def _worker(value: str) -> WorkerTarget:
    return WorkerTarget(None if value == "holder" else _whole(value, "worker"))


def _whole(value: str, what: str) -> int:
    if not value.isascii() or not value.isdigit():  # "+1", "1e1" and "²" are not indices
        raise InvalidValueError(f"{what}= takes a whole number >= 0, got {value[:40]!r}")
    return int(parse_number(value, what=f"{what}=", whole=True, high=MAX_INDEX))


def _time(value: str, what: str) -> float:
    return parse_number(value, what=f"{what}=", low=0, high=MAX_STEP_MS, unit=" ms")


#: A schedule file is a few lines; anything larger is not one.
SCHEDULE_FILE_MAX_BYTES = 64 * 1024


def read_schedule_file(path: Path) -> str:
    """A schedule's canonical text from a file: TOML ``steps = ["...", ...]`` or JSON ``{"steps": [...]}``.

    (A ``.json`` name is read as JSON, anything else as TOML.)"""
    from lockcompare.files import read_capped  # a schedule is a few lines: 64 KB is far more

    try:
        raw = read_capped(path, limit=SCHEDULE_FILE_MAX_BYTES, error=ConfigError).decode()
    except UnicodeDecodeError:
        raise InvalidValueError(f"--faults-file {path}: not text") from None
    try:
        data = json.loads(raw) if path.suffix == ".json" else tomllib.loads(raw)
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as exc:
        raise InvalidValueError(
            f"--faults-file {path}: not valid {'JSON' if path.suffix == '.json' else 'TOML'}: {exc}"
        ) from None
    steps = data.get("steps") if isinstance(data, dict) else None
    if not isinstance(steps, list) or not all(isinstance(s, str) for s in steps):
        raise InvalidValueError(f"--faults-file {path}: expected steps = a list of step strings")
    return parse_schedule("; ".join(steps)).text
