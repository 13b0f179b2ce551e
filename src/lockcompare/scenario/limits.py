"""Bounds of the values that are not trial settings (how many trials, jobs, nodes, bench cycles),
checked before any server starts.

Each bound is what this kind of machine can run; a user with a bigger one raises it with the
environment variable the message names (``LOCKCOMPARE_MAX_<NAME>``), never by editing code.
"""

from __future__ import annotations

import os

from lockcompare.errors import InvalidValueError

#: Share of the CPUs the trials in flight may keep busy. Above it the none-lock baseline drifts
#: (a worker waiting for a core) — see the README's parallel section for the measurement.
DEFAULT_CPU_SHARE = 0.75


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask, not the machine's count)."""
    return len(os.sched_getaffinity(0))


#: name: (minimum, maximum, why the maximum). --trials x cells x seconds per trial is the run's
#: length; 1000 trials of one cell at the lesson's scale is already about 12 hours.
LIMITS: dict[str, tuple[int, int, str]] = {
    "trials": (1, 1000, "trials per cell"),
    "jobs": (1, 64, "trials at once, each with its own servers and workers"),
    "nodes": (1, 16, "lock nodes given with --nodes"),
    "iterations": (1, 1_000_000, "timed cycles per backend"),
}


#: Measured on 2 cores: a trial keeps 0.03-0.7 CPU busy at --time-scale 0.1 (mean ~0.2, pottery
#: the most) and far less at the lesson's scale, where trials mostly sleep. With 8 the lesson-scale
#: headline matrix took 4 min 6 s (serial: 26 min 51 s) with every cell matching the serial run,
#: and the README's main command 91.5 s (serial: 325.6 s); with 4 it took 83 s before pause-free
#: no-lock trials ran alone. Past 8 the runs are bounded by the solo trials and the longest
#: client-pause trials, not by slots; the CPU guard trims costly mixes (pottery) at small scales.
#: ``matrix`` and ``evaluate``'s matrices use it (evaluate ran its cells one at a time before: issue 54).
DEFAULT_JOBS = min(4 * usable_cpus(), LIMITS["jobs"][1])


def env_name(name: str) -> str:
    return f"LOCKCOMPARE_MAX_{name.upper().replace('-', '_')}"


def maximum(name: str, default: int) -> int:
    """``default``, or the larger value the user set in ``LOCKCOMPARE_MAX_<NAME>``."""
    text = os.environ.get(env_name(name), "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        raise InvalidValueError(f"{env_name(name)} must be a whole number, got {text!r}") from None
    if value < 1:
        raise InvalidValueError(f"{env_name(name)} must be >= 1, got {value}")
    return value


def check_count(name: str, value: int, *, flag: str | None = None) -> int:
    """``value`` if it lies within LIMITS[name], else one line naming the bound and how to raise it."""
    low, high, what = LIMITS[name]
    flag = flag or f"--{name}"
    if value < low:
        raise InvalidValueError(f"{flag} must be >= {low}, got {value}")
    high = maximum(name, high)
    if value > high:
        raise InvalidValueError(f"{flag} must be <= {high} ({what}), got {value}; set {env_name(name)} to raise it")
    return value
