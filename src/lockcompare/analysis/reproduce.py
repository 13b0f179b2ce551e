"""Reproducing a results row: the ``lockcompare matrix`` command line for its cell, built from its
settings, and the exact trial (:func:`spec_from_row`) that ``lockcompare run --from`` reruns.

The CSV stores times already multiplied by ``time_scale``; the command gives them at the lesson's
scale (divided back) with the same ``--time-scale``, so a rerun writes rows whose every setting
column, ``time_scale`` included, equals the original's. Every setting of the settings table
(scenario/settings.py) is written out, in the table's order, even where it equals today's default, so the
command still means the same when a default changes; a setting that does not apply to the trial (a
pause point without a pause, fault settings without a fault) is left out, and so is a setting the lock
servers take (``--idle-session-timeout-ms``) at its neutral value: which kind takes it is the kind's to
say, and no kind is loaded here.

The CSV keeps each trial's derived seed, not the run's ``--seed``: the command says ``--seed 1``
when seed 1 derives the stored one (the default, checked), and says the seed is unknown otherwise.

>>> row = {"backend": "single", "experiment": "client-pause", "trial": 0, "seed": 912100329,
...        "workers": 2, "rounds": 3, "ttl_ms": 100, "work_ms": 30.0, "pause_ms": 120.0,
...        "time_scale": 0.1, "acquire_timeout_ms": 6000.0, "retry_delay_ms": 1.0, "think_ms": 2.0,
...        "node_count": "", "pause_point": "after-acquire", "pause_how": "sleep",
...        "resource_check": "plain", "cluster": "embedded"}
>>> print(matrix_command([row]))  # doctest: +NORMALIZE_WHITESPACE
lockcompare matrix --backends single --experiments client-pause --trials 1 --workers 2 --rounds 3
  --ttl-ms 1000 --work-ms 300 --pause-ms 1200 --time-scale 0.1 --acquire-timeout-ms 60000
  --retry-delay-ms 10 --think-ms 20 --pause-point after-acquire --pause-how sleep --seed 1
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import math
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any, get_args, get_type_hints

from lockcompare.errors import UnknownNameError
from lockcompare.scenario.experiments import get_experiment
from lockcompare.scenario.parsing import cli_text
from lockcompare.scenario.setting import SERVER_SETTINGS
from lockcompare.scenario.settings import CLI_SETTINGS, SETTINGS
from lockcompare.scenario.trialspec import IDENTITY_SETTINGS, TrialSpec, catalogue_faults, trial_seed

#: resource_check → the --fence value that produces it (the others come from the backend itself).
FENCE_FOR_CHECK = {"fence-writes": "writes", "fence-all": "all", "token-cas": "token"}


def number(value: float) -> str:
    """A plain decimal with at most 6 decimals: 300.00000000000006 reads 300, never 3e+02."""
    text = f"{round(float(value), 6):.6f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def unscaled(row: dict[str, Any], column: str) -> str:
    return number(float(row[column]) / float(row["time_scale"]))


def settings_key(row: dict[str, Any]) -> tuple[str, ...]:
    """Everything the command says except the trial count: rows with equal keys share a command."""
    return tuple(_arguments(row))


def matrix_command(rows: Sequence[dict[str, Any]]) -> str:
    """One command for ``rows`` (trials of one cell with equal settings; see :func:`settings_key`)."""
    if not rows:
        raise ValueError("no rows")
    keys = {settings_key(r) for r in rows}
    if len(keys) > 1:
        raise ValueError("rows with different settings need one command each (group them by settings_key)")
    trials = max(int(r["trial"]) for r in rows) + 1  # trial numbers run 0..K-1 in a matrix of K trials
    row = rows[0]
    directory = plugin_dir(str(row["backend"]))
    head = ["lockcompare", *(["--plugin-path", directory] if directory else []), "matrix"]
    # A backend known by its manifest's name loads from its manifest (backend_source); others by their name.
    head += ["--backends", str(row.get("backend_source") or row["backend"]), "--experiments", row["experiment"]]
    command = " ".join(shlex.quote(a) for a in [*head, "--trials", str(trials), *_arguments(row)])
    notes = []
    if not _seed_is(row, base=1):
        notes.append("base --seed unknown (the CSV keeps only each trial's derived seed)")
    if row.get("cluster") == "external":
        notes.append("ran against external servers: add --nodes URL,... --resource URL")
    return command + "".join(f"  # {note}" for note in notes)


def run_command(*, backend: str, experiment: str, settings: Mapping[str, Any], extra: Sequence[str] = ()) -> str:
    """``lockcompare run`` for one trial of ``backend`` × ``experiment`` with ``settings`` (lesson-scale
    values by setting name, as chosen): every setting that differs from the settings table's default,
    in the table's order, and ``--plugin-path`` where the backend is a plug-in that is not installed —
    so the command reruns the trial as printed, in a fresh shell (``extra``: server options).

    >>> run_command(backend="single", experiment="baseline", settings={"seed": 7, "retry_delay_ms": 10.0,
    ...             "time_scale": 0.5, "think_ms": 2})  # a retry delay of 10: the default
    'lockcompare run --backend single --experiment baseline --seed 7 --time-scale 0.5 --think-ms 2'
    """
    directory = plugin_dir(backend)
    head = ["lockcompare", *(["--plugin-path", directory] if directory else []), "run"]
    args = [*head, "--backend", backend, "--experiment", experiment]
    for setting in CLI_SETTINGS:
        value = settings.get(setting.name)
        if value is None or (setting.name == "faults" and value == ""):
            continue  # not chosen; an empty schedule is the one of an experiment without faults
        if setting.default is not None and cli_text(value) == cli_text(setting.default):
            continue
        args += [setting.flag or "", cli_text(value)]
    return " ".join(shlex.quote(a) for a in [*args, *extra])


def plugin_dir(backend: str) -> str | None:
    """The directory a ``package.module:Class`` plug-in was found in when no installed distribution
    provides it (from --plugin-path, LOCKCOMPARE_PLUGIN_PATH or the current directory); None otherwise."""
    module, colon, _ = backend.partition(":")
    if not colon:
        return None  # a registered name: an entry point of an installed distribution
    top = module.split(".")[0]
    if top in importlib.metadata.packages_distributions():
        return None
    try:
        found = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if found is None or not found.origin or found.origin in ("built-in", "frozen"):
        return None
    origin = Path(found.origin)
    where = origin.parent.parent if origin.name == "__init__.py" else origin.parent
    return str(where.resolve())


def _arguments(row: dict[str, Any]) -> list[str]:
    """Every CLI setting of the row, in the settings table's order (scenario/settings.py): times given
    at the lesson's scale, a setting that does not apply to the trial (a pause point without a
    pause) left out, the fence mode from the row's resource_check, the base seed when it is known."""
    try:
        experiment = get_experiment(str(row["experiment"]))
        context = {"fault_kinds": experiment.kinds, "takes_fault_nodes": experiment.takes_fault_nodes}
    except UnknownNameError:
        context = {}
    context |= {"supports_wait_replicas": True} | {k: v for k, v in row.items() if k in SETTINGS}
    context[SERVER_SETTINGS] = _server_settings_recorded(row)
    args: list[str] = []
    for setting in CLI_SETTINGS:
        if setting.name == "seed":
            continue  # the row keeps the derived seed: said last, when known
        if setting.name == "fence":
            fence = FENCE_FOR_CHECK.get(str(row.get("resource_check")))
            args += ["--fence", fence] if fence is not None else []
            continue
        value = row.get(setting.name)
        if value is None or value == "" or (isinstance(value, float) and math.isnan(value)):
            continue  # not recorded (an optional setting left at "all", or a row older than the column)
        if setting.applies is not None and not setting.applies(context):
            continue
        if setting.name == "faults" and value == catalogue_faults(row):
            continue  # the experiment's own schedule for these settings: nothing to say
        if setting.scaled:
            args += [setting.flag or "", unscaled(row, setting.name)]
        else:
            args += [setting.flag or "", cli_text(setting.kind(value) if setting.kind is int else value)]
    if _seed_is(row, base=1):
        args += ["--seed", "1"]
    return args


def _server_settings_recorded(row: Mapping[str, Any]) -> frozenset[str]:
    """The settings taken by the lock servers (``taken_by_servers``) that the row recorded at another
    value than their neutral one. Which kind takes which is the kind's to declare (infra/kinds.py),
    and no kind is loaded here (analysis imports no infra): a setting at its neutral value is left
    out of the command, which then plans the same trial (the runner gives it that value where the
    kind does not take it, and it equals the default where the kind does)."""
    taken = set()
    for setting in SETTINGS.values():
        value = row.get(setting.name)
        if not setting.taken_by_servers or value is None or value == "":
            continue
        try:
            if float(value) != float(setting.neutral):
                taken.add(setting.name)
        except (TypeError, ValueError):
            taken.add(setting.name)  # not a number: not the neutral 0 either, said as recorded
    return frozenset(taken)


def _seed_is(row: dict[str, Any], *, base: int) -> bool:
    try:
        return trial_seed(base, row["backend"], row["experiment"], int(row["trial"])) == int(row["seed"])
    except (KeyError, TypeError, ValueError):
        return False


@functools.cache
def _spec_field_types() -> Mapping[str, Any]:
    """TrialSpec's field types, resolved once: ``get_type_hints`` evaluates every string annotation
    again on each call, and was 45 % of rebuilding the committed files' 11,128 rows (7.2 of 16 s)."""
    return MappingProxyType(get_type_hints(TrialSpec))


def spec_from_row(row: dict[str, Any]) -> TrialSpec:
    """The trial a results row describes, rebuilt with exactly its settings and seed (``run --from``).

    Every identity setting is taken from the row as it was stored (times already scaled, the
    trial's derived seed), the pause schedule is derived from that seed as the matrix derived it,
    and the rebuilt trial's id must equal the row's: a row this version cannot rebuild exactly
    (a setting it does not know, a changed derivation) is refused rather than rerun approximately.
    """
    from lockcompare.errors import InvalidValueError

    hints = _spec_field_types()
    values: dict[str, Any] = {}
    for name in IDENTITY_SETTINGS:
        empty_is_none = name == "faults" and not row.get(name)  # "" is no schedule, not a missing cell
        values[name] = "" if empty_is_none else _setting(name, row.get(name), hints[name])
    get_experiment(str(row["experiment"]))  # a row of an experiment this version lacks is refused
    # Not identity, but what loads a backend known by its manifest's name (backends/external/named.py).
    spec = TrialSpec(**values, backend_source=str(row.get("backend_source") or ""))
    if spec.trial_id != row.get("trial_id"):
        raise InvalidValueError(
            f"cannot rebuild trial {row.get('trial_id')} exactly (rebuilt {spec.trial_id}): it was written by "
            f"lockcompare {row.get('lockcompare_version') or '?'} with settings this version derives differently"
        )
    return spec


def _setting(name: str, value: Any, hint: Any) -> Any:
    """A row's value as the TrialSpec field's type (an empty cell is None where None is allowed)."""
    if value is None or (isinstance(value, float) and math.isnan(value)) or value == "":
        if type(None) in get_args(hint):
            return None
        raise ValueError(f"the row has no {name}")
    kinds = [k for k in (get_args(hint) or (hint,)) if k is not type(None)]
    kind = kinds[0]
    if kind is int:
        return int(float(value))
    if kind is float:
        return float(value)
    return kind(str(value))  # str, or a StrEnum (pause_point, pause_how, resource_check)


def find_row(rows: Sequence[dict[str, Any]], selector: str) -> dict[str, Any]:
    """The row ``selector`` names: a trial id, or a data row's number (1 = the first row)."""
    from lockcompare.errors import InvalidValueError

    if selector.isascii() and selector.isdigit():
        from lockcompare.scenario.numbers import parse_number

        number_ = int(parse_number(selector, what="the row number", whole=True))
        if not 1 <= number_ <= len(rows):
            raise InvalidValueError(f"row {number_} does not exist: the file has {len(rows)} rows (1..{len(rows)})")
        return rows[number_ - 1]
    matches = [row for row in rows if row.get("trial_id") == selector]
    if not matches:
        raise InvalidValueError(f"no row with trial id {selector!r} (give a trial id or a row number, 1 = first)")
    return matches[-1]
