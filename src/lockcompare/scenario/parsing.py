"""Values given for the settings of scenario/settings.py: parsed and checked against the table (one line
per bad value), a user's choices (:class:`Overrides`) and the settings a comma list sweeps (:class:`Sweep`)."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from enum import StrEnum
from typing import Any

from lockcompare.errors import InvalidValueError
from lockcompare.scenario.numbers import parse_number
from lockcompare.scenario.schedule import parse_schedule
from lockcompare.scenario.setting import Setting
from lockcompare.scenario.settings import CLI_SETTINGS, SETTINGS


def setting_for_flag(flag: str) -> Setting:
    return next(s for s in CLI_SETTINGS if s.flag == flag)


def _convert(setting: Setting, text: str) -> Any:
    flag = setting.flag or setting.name
    if setting.choices is not None:
        if text not in setting.choices:
            raise InvalidValueError(f"{flag} takes {', '.join(setting.choices)}, got {text!r}")
        return setting.kind(int(text)) if setting.kind is int else setting.kind(text)
    if setting.kind is str:
        return text
    return setting.kind(parse_number(text, what=flag, whole=setting.kind is int))


def _checked_text(setting: Setting, text: str) -> str:
    """A free-text setting in its canonical form (a schedule: parsed, one line on what is wrong)."""
    if setting.name == "faults":
        return parse_schedule(text).text
    return text


def check_value(setting: Setting, value: Any) -> Any:
    """``value`` if it is within the setting's bounds; else one line saying which."""
    if value is None or setting.kind not in (int, float):
        return value
    flag = setting.flag or setting.name
    low, high = setting.minimum, setting.maximum
    if low is not None and (value <= low if setting.minimum_open else value < low):
        raise InvalidValueError(f"{flag} must be {'>' if setting.minimum_open else '>='} {low:g}, got {value:g}")
    if high is not None and (value >= high if setting.maximum_open else value > high):
        hint = f" ({setting.maximum_hint})" if setting.maximum_hint else ""
        raise InvalidValueError(f"{flag} must be {'<' if setting.maximum_open else '<='} {high:g}, got {value:g}{hint}")
    return value


def parse_values(setting: Setting, text: str) -> tuple[Any, ...]:
    """The values of ``--flag TEXT``: one, or a comma list where the setting sweeps."""
    flag = setting.flag or setting.name
    if setting.kind is str and setting.choices is None and not setting.sweeps:
        return (_checked_text(setting, str(text)),)  # free text (a fault schedule): its commas are its own
    parts = [part.strip() for part in str(text).split(",") if part.strip()]
    if not parts:
        raise InvalidValueError(f"{flag} needs a value, got {text!r}")
    if len(parts) > 1 and not setting.sweeps:
        raise InvalidValueError(f"{flag} takes one value, got {text!r}")
    values = tuple(check_value(setting, _convert(setting, part)) for part in parts)
    if len(set(values)) != len(values):
        raise InvalidValueError(f"{flag} names a value twice: {text!r}")
    return values


class Overrides:
    """The settings a user chose, one value each, at the lesson's scale (unset: the default or the
    experiment's). Names are the table's; every value is checked against its bounds."""

    def __init__(self, **values: Any) -> None:
        unknown = [name for name in values if name not in SETTINGS or not SETTINGS[name].flag]
        if unknown:
            raise InvalidValueError(f"not a setting: {unknown[0]!r} (known: {', '.join(s.name for s in CLI_SETTINGS)})")
        checked: dict[str, Any] = {}
        for name, given in values.items():
            setting = SETTINGS[name]
            value = given
            if given is not None and setting.kind is str and setting.choices is None and not setting.sweeps:
                value = _checked_text(setting, str(given))
            elif given is not None and setting.choices is not None:
                value = _convert(setting, str(given.value if isinstance(given, StrEnum) else given))
            elif value is not None and setting.kind in (int, float):
                if not isinstance(value, int | float) or not math.isfinite(value):
                    raise InvalidValueError(f"{setting.flag} must be a finite number, got {value!r}")
            checked[name] = check_value(setting, value)
        self._values = checked

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if name not in SETTINGS:
            raise AttributeError(name)
        return self._values.get(name, SETTINGS[name].default)

    def given(self, name: str) -> Any:
        """The value the user chose, or None."""
        return self._values.get(name)

    def replace(self, **values: Any) -> Overrides:
        return Overrides(**(self._values | values))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Overrides) and self._values == other._values

    def __hash__(self) -> int:
        return hash(tuple(sorted(self._values.items(), key=lambda kv: kv[0])))

    def __repr__(self) -> str:
        return "Overrides(" + ", ".join(f"{k}={v!r}" for k, v in self._values.items()) + ")"


class Sweep:
    """Swept settings: each value of each one makes a cell of its own (the cartesian product)."""

    def __init__(self, **values: tuple[Any, ...]) -> None:
        for name, options in values.items():
            setting = SETTINGS.get(name)
            if setting is None or not setting.sweeps:
                raise InvalidValueError(f"{name!r} is not a setting that sweeps")
            if not options:
                raise InvalidValueError(f"{setting.flag} sweeps no value")
        self.values: dict[str, tuple[Any, ...]] = {name: tuple(options) for name, options in values.items()}

    def cells_per_trial(self) -> int:
        """How many values the sweep has in all (more than 1: ``run`` cannot take it)."""
        count = 1
        for options in self.values.values():
            count *= len(options)
        return count

    def combinations(self) -> Iterator[dict[str, Any]]:
        """Every combination of the swept values, as {name: value}."""
        combos: list[dict[str, Any]] = [{}]
        for name, options in self.values.items():
            combos = [combo | {name: value} for combo in combos for value in options]
        yield from combos


def from_cli(given: Mapping[str, str | None]) -> tuple[Overrides, Sweep]:
    """Parse the table's CLI options (the text each was given, None when not given)."""
    scalars: dict[str, Any] = {}
    swept: dict[str, tuple[Any, ...]] = {}
    for setting in CLI_SETTINGS:
        text = given.get(setting.name)
        if text is None:
            continue
        values = parse_values(setting, text)
        if len(values) > 1:
            swept[setting.name] = values
        else:
            scalars[setting.name] = values[0]
    return Overrides(**scalars), Sweep(**swept)


def cli_text(value: Any) -> str:
    """A value as the CLI takes it (850.0 reads 850)."""
    if isinstance(value, StrEnum):
        return value.value
    if isinstance(value, float):
        text = f"{round(value, 6):.6f}".rstrip("0").rstrip(".")
        return "0" if text in ("-0", "") else text
    return str(value)
