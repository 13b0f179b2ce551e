"""The trial spec: every setting one trial runs with (times already scaled), and its identity.

The settings themselves are declared once, in scenario/settings.py; this module turns a user's choices
and an experiment into the :class:`TrialSpec` of one trial, and names the trial.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from functools import cached_property
from typing import Any

from lockcompare.errors import InvalidValueError, UnknownNameError
from lockcompare.protocols import DEFAULT_PROTOCOL, SERVER_OPTION_PROTOCOL
from lockcompare.scenario.choices import DEFAULT_WORKLOAD, Check, PauseHow, PausePoint
from lockcompare.scenario.experiments import Experiment, get_experiment, schedule_text
from lockcompare.scenario.parsing import Overrides, Sweep
from lockcompare.scenario.schedule import Schedule, TrialSchedule, at_scale, parse_schedule
from lockcompare.scenario.setting import SERVER_SETTINGS
from lockcompare.scenario.settings import IDENTITY_SETTINGS, SETTING_COLUMNS, SETTINGS, SETTINGS_LIST

__all__ = [
    "DEFAULT_ACQUIRE_TIMEOUT_MS", "DEFAULT_ROUNDS", "IDENTITY_SETTINGS", "Overrides", "Sweep", "TrialSpec",
    "canonical", "catalogue_faults", "custom_faults", "legacy_client_timeout_ms", "legacy_faults", "make_spec",
    "trial_id_for", "trial_seed",
]  # fmt: skip

#: The lesson's 40 rounds per worker (an experiment may ask for fewer: renewal-pause's 5).
DEFAULT_ROUNDS = 40
#: How long a round waits for the lock unless the experiment or --acquire-timeout-ms says otherwise.
DEFAULT_ACQUIRE_TIMEOUT_MS = 60_000.0
#: A backend's client timeout when its class states none (lockcompare's own built-ins: 2 s, see
#: infra.redis.client.DEFAULT_TIMEOUT_S; kept here so that spec needs no import of infra).
DEFAULT_CLIENT_TIMEOUT_MS = 2000.0
#: Which workers an experiment's pause schedule freezes.
PAUSED_WORKERS = (0,)


@dataclass(frozen=True, kw_only=True)
class TrialSpec:
    """Everything one trial needs, with times already scaled (milliseconds)."""

    backend: str
    experiment: str
    trial: int
    seed: int
    workers: int
    rounds: int
    ttl_ms: int
    work_ms: float
    pause_ms: float
    time_scale: float
    acquire_timeout_ms: float
    retry_delay_ms: float
    think_ms: float = 0.0
    pause_point: PausePoint = PausePoint.AFTER_ACQUIRE
    pause_how: PauseHow = PauseHow.SLEEP
    resource_check: Check = Check.PLAIN
    node_count: int | None = None  # how many lock nodes a multi-node backend uses (None: all)
    jitter: float = 0.0
    fault_nodes: int = 0  # how many lock nodes it hits (0 without a fault)
    restart_delay_ms: float = 0.0  # node-restart: down this long before it restarts
    persistence: str = "none"  # node-restart: none, or aof-always (appendfsync always, kept across restarts)
    workload: str = DEFAULT_WORKLOAD  # contend: workers keep contending until all are done (contend.py)
    wait_replicas: int = 0  # failover: replicas that must acknowledge a lease's write (WAIT), 0: none
    resource_kind: str = DEFAULT_PROTOCOL  # where the resource lives: redis, or postgres (runner/resource_pg.py)
    idle_session_timeout_ms: float = 0.0  # PostgreSQL lock sessions: idle_session_timeout (0: off), scaled
    lock_servers: str = DEFAULT_PROTOCOL  # recorded: the backend's kind of lock servers (redis, etcd, postgres)
    #: A bound on each backend call, not a setting of the experiment (not part of the identity).
    call_timeout_ms: float = 5000.0
    #: The fault schedule, canonical text (scenario/schedule.py; lesson-scale ms, the trial's in
    #: :attr:`schedule`), "" none.
    faults: str = ""
    #: The workers' client request timeout in a trial with slow or cut links (None: not such a trial).
    client_timeout_ms: float | None = None
    #: The kind of server behind the Redis-protocol lock nodes and resource (redis, valkey; infra/kinds.py).
    server: str = SERVER_OPTION_PROTOCOL  # the kind named for the protocol
    #: Recorded: the manifest a backend given by its path was loaded from ("" for one known by name).
    backend_source: str = ""

    @property
    def entries_planned(self) -> int:
        return self.workers * self.rounds

    @cached_property
    def schedule(self) -> TrialSchedule:
        """The fault schedule in this trial's time frame: parsed once, every time converted once to
        the trial's milliseconds (its text, :attr:`faults`, stays at the lesson's scale: the identity)."""
        return at_scale(parse_schedule(self.faults), scale=self.time_scale)

    def settings(self) -> dict[str, object]:
        """Every setting that can change the trial's result, by CSV column name."""
        return {name: getattr(self, name) for name in IDENTITY_SETTINGS}

    def recorded_settings(self) -> dict[str, object]:
        """Every setting the CSV records (the identity, then settings such as the call deadline)."""
        return {name: getattr(self, name) for name in SETTING_COLUMNS}

    @property
    def trial_id(self) -> str:
        return trial_id_for(self.settings())


def canonical(value: object) -> str:
    """A setting as the text that identifies it (the same for a spec and for a row read back)."""
    if value is None:
        return ""
    if isinstance(value, StrEnum):
        return value.value
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


#: Identity settings left out of the hash at their legacy value (added later: old ids stay valid).
_OMITTED_AT = {s.name: s.legacy for s in SETTINGS_LIST if s.hash_omits_legacy}


def trial_id_for(settings: Mapping[str, object]) -> str:
    """A readable name plus a hash of every identity setting, e.g. ``single.baseline.t0.3f9a1c2e``.

    The readable part names the cell; the hash tells apart trials whose other settings (TTL, work,
    rounds, seed, ...) differ, so a results file and its histories never confuse them.
    """
    text = {name: canonical(settings.get(name)) for name in IDENTITY_SETTINGS}
    if text["faults"] and text["faults"] == legacy_faults(text):
        text["faults"] = ""  # what the trial ran before schedules: the id it had then
    if text["client_timeout_ms"] and text["client_timeout_ms"] == canonical(legacy_client_timeout_ms(text)):
        text["client_timeout_ms"] = ""  # the timeout the harness picked before backends stated theirs
    hashed = "|".join(f"{k}={v}" for k, v in text.items() if _OMITTED_AT.get(k) != v)
    digest = hashlib.sha256(hashed.encode()).hexdigest()[:8]
    safe_backend = "".join(c if c.isalnum() or c in "-_" else "_" for c in text["backend"])
    cell = f"{safe_backend}.{text['experiment']}.{text['resource_check']}"
    return f"{cell}.pause{text['pause_ms']}.t{text['trial']}.{digest}"


def legacy_faults(settings: Mapping[str, object]) -> str:
    """The schedule a trial with these settings ran before schedules existed ("" if unknown).

    Node faults hit nodes 0..K-1 then (:attr:`Experiment.legacy_faults`); a pause was worker 0's own.
    A results row from before schedules reads back with it (analysis/results.py), and a trial whose
    schedule is exactly it keeps the id it had then (:func:`trial_id_for`)."""
    return catalogue_faults(settings, legacy=True)


def legacy_client_timeout_ms(settings: Mapping[str, object]) -> float | None:
    """The client timeout the harness picked before backends stated their own (scaled ms; None: the
    runner's default): twice the delay of a slow link, so the client waited for it; one TTL for a cut."""
    try:
        scale = float(canonical(settings.get("time_scale")) or 1)
        schedule = at_scale(parse_schedule(legacy_faults(settings)), scale=scale)  # the trial's ms
        slow = schedule.of_kind("slow")
        if slow:
            return 2 * max(step.time("delay") for step in slow)
        if schedule.of_kind("cut"):
            return float(canonical(settings.get("ttl_ms")))
    except (InvalidValueError, ValueError):
        pass
    return None


#: The settings an experiment's own schedule is made from (:func:`catalogue_faults`).
_SCHEDULE_INPUTS = (
    "experiment", "time_scale", "fault_nodes", "restart_delay_ms", "persistence", "ttl_ms", "work_ms", "pause_ms",
    "pause_how", "pause_point", "lock_servers",
)  # fmt: skip


def catalogue_faults(settings: Mapping[str, object], *, legacy: bool = False) -> str:
    """The experiment's own schedule for these (stored, scaled) settings: what a trial runs without
    ``--faults`` (a reproduce command need not say it); ``legacy``: what it ran before schedules."""
    try:
        return _catalogue_faults(tuple(canonical(settings.get(name)) for name in _SCHEDULE_INPUTS), legacy=legacy)
    except (UnknownNameError, InvalidValueError, ValueError, KeyError):
        return ""


@functools.lru_cache(maxsize=4096)
def _catalogue_faults(values: tuple[str, ...], *, legacy: bool) -> str:
    """:func:`catalogue_faults` of the settings' canonical texts, made once per distinct set: every
    trial id asks for it (:func:`trial_id_for`), and building and parsing the schedule was most of
    rebuilding a committed file's ids. The catalogue is fixed, so the same texts give the same
    schedule; a refusal raises, and is not kept."""
    settings = dict(zip(_SCHEDULE_INPUTS, values, strict=True))
    experiment = get_experiment(settings["experiment"])
    scale = float(settings["time_scale"] or 1)

    def lesson(name: str) -> float:
        return float(f"{float(settings[name] or 0) / scale:.6g}")

    text = schedule_text(
        experiment,
        fault_nodes=int(settings["fault_nodes"] or 0) or 1,
        restart_delay_ms=lesson("restart_delay_ms"),
        persistence=settings["persistence"] or "none",
        ttl_ms=lesson("ttl_ms"),
        work_ms=lesson("work_ms"),
        pause_ms=lesson("pause_ms"),
        pause_how=settings["pause_how"] or "sleep",
        pause_point=settings["pause_point"] or "after-acquire",
        paused_workers=PAUSED_WORKERS,
        legacy=legacy,
        lock_servers=settings["lock_servers"] or DEFAULT_PROTOCOL,
    )
    return parse_schedule(text).text


def custom_faults(settings: Mapping[str, object]) -> bool:
    """Whether a trial ran a schedule of its own (``--faults``) instead of its experiment's, today's
    or the one it had before schedules: a table must then name the schedule, not only the experiment."""
    if canonical(settings.get("ttl_ms")) in ("", "nan"):
        return False  # no timings to fill the experiment's schedule with: nothing to compare (hand-made rows)
    faults = canonical(settings.get("faults"))
    if faults == "nan":  # an empty cell read back as a number
        faults = ""
    return faults not in (catalogue_faults(settings), catalogue_faults(settings, legacy=True))


def trial_seed(base_seed: int, *parts: object) -> int:
    """A stable per-trial seed from the run's seed and the trial's coordinates."""
    digest = hashlib.sha256(repr((base_seed, *parts)).encode()).digest()
    return int.from_bytes(digest[:4], "big")


def _experiment_value(experiment: Experiment, name: str) -> Any:
    """The experiment's own value of a setting whose table default is "the experiment's" (None)."""
    if name == "rounds":
        return experiment.rounds or DEFAULT_ROUNDS
    if name == "acquire_timeout_ms":
        return experiment.acquire_timeout_ms or DEFAULT_ACQUIRE_TIMEOUT_MS
    return getattr(experiment, name, None)


def _schedule(experiment: Experiment, chosen: dict[str, Any], *, given: str | None) -> Schedule:
    """The trial's fault schedule: the user's (``--faults``), else the experiment's filled from the
    chosen settings (lesson-scale). A user's schedule also states the pause settings (the CSV's
    pause columns say what its first pause step does). An empty one is refused for an experiment
    that has faults of its own: it would run them away and keep the experiment's name."""
    own = parse_schedule(
        schedule_text(
            experiment,
            fault_nodes=int(chosen["fault_nodes"]) or 1,
            restart_delay_ms=float(chosen["restart_delay_ms"]),
            persistence=str(chosen["persistence"]),
            ttl_ms=float(chosen["ttl_ms"]),
            work_ms=float(chosen["work_ms"]),
            pause_ms=float(chosen["pause_ms"]),
            pause_how=str(PauseHow(chosen["pause_how"]).value),
            pause_point=str(PausePoint(chosen["pause_point"]).value),
            paused_workers=PAUSED_WORKERS,
            lock_servers=str(chosen.get("lock_servers") or DEFAULT_PROTOCOL),
        )
    )
    if given is not None:
        schedule = parse_schedule(given)
        if own and not schedule:  # the row would name a fault the trial never had
            raise InvalidValueError(
                f"--faults '' removes {experiment.name}'s own fault ({own.text}): its rows would name a fault "
                "they did not have; run --experiments baseline for a trial without faults"
            )
        pause = next(iter(schedule.of_kind("pause")), None)
        chosen["pause_ms"] = (pause.for_ms or 0.0) if pause is not None else 0.0
        chosen["pause_how"] = PauseHow(pause.param("how")) if pause is not None else SETTINGS["pause_how"].neutral
        chosen["pause_point"] = (
            PausePoint(pause.param("point")) if pause is not None else SETTINGS["pause_point"].neutral
        )
        return schedule
    return own


def make_spec(
    *,
    backend: str,
    experiment: Experiment,
    trial: int,
    overrides: Overrides,
    node_count: int | None = None,
    resource_check: Check = Check.PLAIN,
    supports_wait_replicas: bool = True,
    lock_servers: str = DEFAULT_PROTOCOL,
    server_settings: frozenset[str] = frozenset(),
    backend_resource_kind: str = DEFAULT_PROTOCOL,
    backend_timeout_ms: float | None = None,
    backend_source: str = "",
) -> TrialSpec:
    """Every setting of one trial: the user's choice, else the table's default, else the
    experiment's; scaled where the table says so; neutral where it does not apply (a pause point
    without a pause is one trial, not one per point). Then the trial's seeded pause schedule.

    ``server_settings``: the settings the kind of the lock servers takes (the runner asks it:
    infra/kinds.py ``settings_taken``); a setting ``taken_by_servers`` applies only if named there."""
    scale = overrides.time_scale
    chosen: dict[str, Any] = {
        "backend": backend, "experiment": experiment.name, "trial": trial, "fault_kinds": experiment.kinds,
        "takes_fault_nodes": experiment.takes_fault_nodes, "supports_wait_replicas": supports_wait_replicas,
        "lock_servers": lock_servers, "backend_source": backend_source, SERVER_SETTINGS: server_settings,
    }  # fmt: skip
    for setting in SETTINGS_LIST:
        if not setting.flag or setting.name in chosen:
            continue
        value = overrides.given(setting.name)
        if value is None:
            value = setting.default if setting.default is not None else _experiment_value(experiment, setting.name)
        chosen[setting.name] = value
    if experiment.pause_point is not None and overrides.given("pause_point") is None:
        chosen["pause_point"] = PausePoint(experiment.pause_point)  # acquire-pause's in-acquire
    chosen["node_count"] = node_count if node_count is not None else overrides.given("node_count")
    if chosen.get("resource_kind") == "auto":  # the backend's own kind (the pg backends: postgres)
        chosen["resource_kind"] = backend_resource_kind
    for setting in SETTINGS_LIST:
        if setting.applies is not None and not setting.applies(chosen):
            chosen[setting.name] = setting.neutral
    chosen["faults"] = _schedule(experiment, chosen, given=overrides.given("faults")).text
    through_links = SETTINGS["client_timeout_ms"].applies  # known only now that the schedule is
    links = through_links is not None and through_links(chosen)
    chosen["client_timeout_ms"] = overrides.given("client_timeout_ms") if links else None
    for setting in SETTINGS_LIST:
        if setting.scaled and chosen.get(setting.name) is not None:
            chosen[setting.name] = chosen[setting.name] * scale
    for setting in SETTINGS_LIST:  # what the server accepts, after the scale (issue 38)
        value = chosen.get(setting.name)
        if setting.server_maximum is not None and value is not None and value > setting.server_maximum:
            raise InvalidValueError(
                f"{setting.flag} is {value:g} ms after --time-scale {scale:g}; the server takes at most "
                f"{setting.server_maximum:.0f} ({setting.server_maximum_hint})"
            )
    if links and chosen.get("client_timeout_ms") is None:
        # The backend's own (a library's default is a constant of the library, not scaled).
        chosen["client_timeout_ms"] = (
            backend_timeout_ms if backend_timeout_ms is not None else DEFAULT_CLIENT_TIMEOUT_MS
        )
    ttl_ms = round(chosen["ttl_ms"])
    if ttl_ms < 1:
        raise InvalidValueError(f"TTL is {ttl_ms} ms after --time-scale {scale:g}: use a larger scale")
    seed = trial_seed(chosen["seed"], backend, experiment.name, trial)  # the same for every pause length
    fields_ = {name: chosen[name] for name in SETTINGS if name in TrialSpec.__dataclass_fields__ and name in chosen}
    return TrialSpec(
        **fields_ | {"ttl_ms": ttl_ms, "seed": seed, "rounds": int(chosen["rounds"]), "resource_check": resource_check},
    )
