"""The fault kinds: one module each, found here; every list of kinds is derived from them.

A module of this package that defines ``KIND`` (a :class:`~lockcompare.scenario.faultkinds.base.FaultKind`)
is a kind: adding one is adding its module (``node_freeze.py`` was added so). The schedule syntax
(scenario/schedule.py), the runner's plan (faults/plan.py), the timing sentinel's excused faults,
``explore``'s vocabulary, the CLI's help and docs/faults.md's table all read :data:`KINDS`.

Pure: importing a kind needs no server, no client library and nothing of the runner.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable

from lockcompare.errors import UnknownNameError
from lockcompare.scenario.faultkinds.base import LINKS, NODES, WORKER, FaultKind


def _discover() -> dict[str, FaultKind]:
    found: list[FaultKind] = []
    for module in pkgutil.iter_modules(__path__):
        kind = getattr(importlib.import_module(f"{__name__}.{module.name}"), "KIND", None)
        if isinstance(kind, FaultKind):
            found.append(kind)
    found.sort(key=lambda k: (k.order, k.name))
    return {k.name: k for k in found}


#: Every kind by its name, in the docs' order.
KINDS: dict[str, FaultKind] = _discover()
NAMES: tuple[str, ...] = tuple(KINDS)

#: The name an older history's event used -> the kind's one name.
_FORMER = {old: k.name for k in KINDS.values() for old in k.former_event_names}


def get(name: str) -> FaultKind:
    try:
        return KINDS[name]
    except KeyError:
        raise UnknownNameError(f"unknown kind {name!r} (kinds: {', '.join(NAMES)})") from None


def names_where(test: str) -> tuple[str, ...]:
    """The kinds whose attribute ``test`` is true, e.g. ``names_where("excuses_worker")``."""
    return tuple(k.name for k in KINDS.values() if getattr(k, test))


def acting_on(*scopes: str) -> tuple[str, ...]:
    return tuple(k.name for k in KINDS.values() if k.acts_on in scopes)


def event_fault(name: object) -> str:
    """The kind an event's ``fault`` names, also in a history written before kinds had one name
    (``node-restart`` -> ``restart``); anything else unchanged."""
    text = str(name)
    return _FORMER.get(text, text)


def with_former_names(kinds: Iterable[str]) -> frozenset[str]:
    """``kinds`` plus the names their events had in older histories."""
    wanted = set(kinds)
    return frozenset(wanted | {old for old, new in _FORMER.items() if new in wanted})


__all__ = ["KINDS", "LINKS", "NAMES", "NODES", "WORKER", "FaultKind", "acting_on", "event_fault", "get", "names_where"]
