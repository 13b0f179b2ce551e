"""Pure logic: percentiles, confidence intervals, experiment scaling and the seeded pause schedule."""

from __future__ import annotations

import math

import pytest

from lockcompare.analysis.stats import mean_ci, percentile
from lockcompare.errors import InvalidValueError, UnknownNameError
from lockcompare.scenario.experiments import EXPERIMENTS, get_experiment
from lockcompare.scenario.trialspec import Overrides, make_spec


def test_percentile_interpolates() -> None:
    assert percentile([5], 99) == 5
    assert percentile([1, 2, 3, 4, 5], 50) == 3
    assert percentile([0, 10], 25) == 2.5
    assert math.isnan(percentile([], 50))


def test_mean_ci_uses_student_t() -> None:
    ci = mean_ci([10, 12, 14])
    assert ci.mean == 12 and ci.n == 3
    assert ci.half_width == pytest.approx(4.303 * 2 / math.sqrt(3), rel=1e-3)
    assert (ci.low, ci.high) == (10, 14)
    assert math.isnan(mean_ci([7]).half_width)


def test_lesson_defaults() -> None:
    spec = make_spec(backend="single", experiment=get_experiment("client-pause"), trial=0, overrides=Overrides())
    assert (spec.workers, spec.rounds, spec.ttl_ms, spec.work_ms, spec.pause_ms) == (2, 40, 1000, 300, 1200)
    assert EXPERIMENTS["short-ttl"].ttl_ms == 200


def test_time_scale_multiplies_every_time() -> None:
    o = Overrides(time_scale=0.1, work_ms=500)
    spec = make_spec(backend="single", experiment=get_experiment("client-pause"), trial=0, overrides=o)
    assert (spec.ttl_ms, spec.work_ms, spec.pause_ms) == (100, 50, 120)
    assert (spec.acquire_timeout_ms, spec.retry_delay_ms) == (6000, 1)


def test_baseline_has_no_pauses() -> None:
    spec = make_spec(backend="single", experiment=get_experiment("baseline"), trial=0, overrides=Overrides())
    assert spec.pause_ms == 0 and "pause" not in spec.faults


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"ttl_ms": 0}, "--ttl-ms must be > 0"),
        ({"work_ms": -1}, "--work-ms must be > 0"),
        ({"pause_ms": -5}, "--pause-ms must be >= 0"),
        ({"time_scale": 0}, "--time-scale must be >= 0.01"),
        ({"time_scale": 1e9}, "--time-scale must be <= 10"),
        ({"rounds": 0}, "--rounds must be >= 1"),
        ({"workers": 0}, "--workers must be >= 1"),
        ({"workers": 1000}, "--workers must be <= 16, got 1000 .*LOCKCOMPARE_MAX_WORKERS"),
        ({"paused_workers": (1,)}, "not a setting: 'paused_workers'"),
    ],
)
def test_bad_overrides_are_refused(kw: dict, message: str) -> None:
    with pytest.raises(InvalidValueError, match=message):
        Overrides(**kw)


def test_a_ttl_scaled_below_a_millisecond_is_refused() -> None:
    with pytest.raises(InvalidValueError, match="use a larger scale"):
        make_spec(backend="single", experiment=get_experiment("short-ttl"), trial=0,
                  overrides=Overrides(time_scale=0.01, ttl_ms=40))  # fmt: skip


def test_unknown_experiment() -> None:
    with pytest.raises(UnknownNameError, match="known: baseline, short-ttl, client-pause"):
        get_experiment("nope")
