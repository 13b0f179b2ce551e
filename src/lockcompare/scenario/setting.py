"""What one trial setting is (:class:`Setting`) and the predicates the table uses to say when a
setting applies; the table itself, every setting declared once, is scenario/settings.py."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from lockcompare.errors import InvalidValueError
from lockcompare.scenario import faultkinds
from lockcompare.scenario.schedule import parse_schedule

#: A spec under construction: every setting's chosen value, by name (times still lesson-scale).
Chosen = Mapping[str, Any]


#: PostgreSQL's time settings in ms (idle_session_timeout, statement_timeout, ...) are C ints.
PG_MAX_TIMEOUT_MS = 2_147_483_647


#: The key of a spec under construction that holds the settings the kind of its lock nodes takes
#: (a frozenset of setting names: infra/kinds.py ``settings_taken``, given by the runner).
SERVER_SETTINGS = "server_settings"


def _taken_by_servers(name: str) -> Callable[[Chosen], bool]:
    """Applies where the trial's lock servers take ``name`` (their kind declares it)."""
    return lambda chosen: name in (chosen.get(SERVER_SETTINGS) or ())


def _limit(name: str, default: float) -> float:
    """An upper bound that a user with a bigger machine can raise: LOCKCOMPARE_MAX_<NAME>."""
    text = os.environ.get(f"LOCKCOMPARE_MAX_{name.upper()}")
    try:
        return float(text) if text else default
    except ValueError:
        return default


@dataclass(frozen=True, kw_only=True)
class Setting:
    """One knob of a trial. ``default`` None means "the experiment's" (its catalogue entry says)."""

    name: str  # the TrialSpec field and the CSV column
    kind: type  # int, float, str or a StrEnum
    default: Any = None
    help: str = ""
    unit: str = ""  # "ms" for times
    #: Multiplied by --time-scale (the CSV stores the scaled value; commands give it unscaled).
    scaled: bool = False
    #: The CLI flag of run and matrix; None: not an option of its own (set by the command or derived).
    flag: str | None = None
    #: A comma list makes one cell per value (matrix; run takes one value).
    sweeps: bool = False
    #: Two trials whose identity settings are equal are the same trial (--resume skips it).
    identity: bool = True
    #: The CSV column (None: a CLI input only, e.g. --fence, which the resource_check column records).
    column: str | None = None
    #: The schema that added the column, and the value every older row had (None: there from the start).
    since_schema: int = 1
    legacy: str | None = None
    #: At its legacy value the setting is left out of the identity hash, so a setting added later
    #: keeps older trial ids.
    hash_omits_legacy: bool = False
    minimum: float | None = None
    minimum_open: bool = False  # True: the value must be > minimum
    maximum: float | None = None
    maximum_open: bool = False  # True: the value must be < maximum
    maximum_hint: str = ""  # how to raise the maximum, said when it is exceeded
    #: The largest value (after --time-scale) the server it is sent to accepts, and whose limit it is:
    #: a bound no environment variable raises (issue 38: an --idle-session-timeout-ms above
    #: PostgreSQL's made ~9,000 acquires fail and the trial `unavailable`, exit 0).
    server_maximum: float | None = None
    server_maximum_hint: str = ""
    choices: tuple[str, ...] | None = None
    #: None is a value of its own (node_count: "all of the cluster's"), stored as an empty cell.
    optional: bool = False
    #: Whether the setting means anything for this spec; when not, it takes ``neutral`` (so it
    #: neither splits cells nor changes the trial id: a pause point without a pause).
    applies: Callable[[Chosen], bool] | None = None
    neutral: Any = None
    #: It acts on the lock servers (a session setting) and applies only where their kind declares
    #: that it takes it (the kind's capabilities' ``settings``, infra/kinds.py), which the runner says
    #: in the spec's ``server_settings`` (:data:`SERVER_SETTINGS`); ``applies`` is derived from it.
    taken_by_servers: bool = False

    def __post_init__(self) -> None:
        if self.taken_by_servers:
            if self.applies is not None:
                raise ValueError(f"setting {self.name}: taken_by_servers decides where it applies; no applies too")
            object.__setattr__(self, "applies", _taken_by_servers(self.name))

    @property
    def csv_column(self) -> str | None:
        return self.column if self.column is not None else (self.name if self.identity or self.flag else None)


def _choices_of(enum: type[StrEnum]) -> tuple[str, ...]:
    return tuple(member.value for member in enum)


def _pausing(chosen: Chosen) -> bool:
    return float(chosen.get("pause_ms") or 0) > 0


def _fault_is(kind: str) -> Callable[[Chosen], bool]:
    """Whether the experiment's own schedule has a step of ``kind`` (scenario/faultkinds)."""
    return lambda chosen: kind in chosen.get("fault_kinds", ())


def _through_links(chosen: Chosen) -> bool:
    """Whether the trial's schedule slows or cuts links (its workers' client timeout then matters)."""
    try:
        links = faultkinds.acting_on(faultkinds.LINKS)
        return bool(parse_schedule(str(chosen.get("faults") or "")).of_kind(*links))
    except InvalidValueError:
        return False


def _takes_fault_nodes(chosen: Chosen) -> bool:
    return bool(chosen.get("fault_kinds")) and bool(chosen.get("takes_fault_nodes", True))
