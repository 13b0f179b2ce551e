"""One time frame (issue 39.3): a trial's schedule is scaled once, at the door (scenario/schedule.py
``at_scale``, via ``TrialSpec.schedule``), and what runs it reads milliseconds it never scales.

The expected values are worked out by hand from the written times and the scale: they are the
times the runner gave before the scaling moved to the door (faults/plan.py and each kind then
multiplied by ``time_scale`` themselves), so every fault still strikes when and for as long as it did.
"""

from __future__ import annotations

import pytest

from lockcompare.faults.plan import planned_steps, timing_extras, worker_pauses
from lockcompare.faults.schedule import FaultScheduler
from lockcompare.scenario.experiments import get_experiment
from lockcompare.scenario.schedule import at_scale, parse_schedule
from lockcompare.scenario.trialspec import Overrides, make_spec

MS = 1_000_000  # ns


def _planned(text: str, *, scale: float, ttl_ms: float = 100.0):  # type: ignore[no-untyped-def]
    (step,) = planned_steps(at_scale(parse_schedule(text), scale=scale), ttl_ms=ttl_ms, lock_key="k")
    return step


def test_a_step_at_2000_ms_for_1500_ms_at_a_tenth_lands_at_200_ms_for_150_ms() -> None:
    trial = at_scale(parse_schedule("crash nodes=0 after-acquire=2000 for=1500"), scale=0.1)
    (step,) = trial.steps
    assert (step.after_ms, step.for_ms) == (200.0, 150.0)
    planned = _planned("crash nodes=0 after-acquire=2000 for=1500", scale=0.1)
    assert (planned.after_ns, planned.heal_after_ns) == (200 * MS, 150 * MS)
    assert planned.step.text == "crash nodes=0 after-acquire=2000 once for=1500"  # the written step, as recorded


def test_the_kinds_time_parameters_are_converted_with_the_step_and_the_others_are_not() -> None:
    slow = _planned("slow nodes=0 worker=0 after-acquire=50 for=3000 delay=1150", scale=0.1)
    assert (slow.after_ns, slow.heal_after_ns, slow.build(0).ms) == (5 * MS, 300 * MS, 115.0)
    jump = _planned("clock-jump nodes=holders:1 after-acquire=50 every by=+2000", scale=0.1)
    assert (jump.after_ns, jump.heal_after_ns, jump.build(None).jump_s) == (5 * MS, 0, 0.2)  # 200 ms
    starve = _planned("starve worker=holder after-acquire=0 every for=700 duty=0.3 period=70", scale=0.1)
    strobe = starve.build(0)
    assert (starve.heal_after_ns, strobe.period_s, strobe.duty) == (70 * MS, 0.007, 0.3)  # a share: not a time


def test_what_a_kind_does_without_for_and_with_the_trials_ttl_is_unchanged() -> None:
    assert _planned("crash nodes=0 after-acquire=50", scale=0.1).heal_after_ns is None  # until the end
    assert _planned("restart nodes=0 after-acquire=50", scale=0.1).heal_after_ns == 0  # restarted at once
    failover = _planned("failover nodes=0 after-acquire=50 once", scale=0.1, ttl_ms=100.0)
    assert (failover.after_ns, failover.latest_ns) == (5 * MS, 100 * MS)  # the TTL is the trial's already


def test_a_pause_lasts_its_for_at_the_trials_scale() -> None:
    pauses = worker_pauses(at_scale(parse_schedule("pause worker=0 after-acquire=0 every for=1200"), scale=0.1))
    assert pauses[0].pause_ms == 120.0 and pauses[0].every


def test_the_conversion_keeps_the_old_arithmetic_to_the_nanosecond() -> None:
    # 3 ms x 0.3 is 0.8999999999999999 ms in floating point, and the runner truncated it to ns:
    # scaling first, then to ns (never the scale times 1e6 first, never rounded) keeps that.
    assert _planned("crash nodes=0 after-acquire=3 for=3", scale=0.3).after_ns == 899_999
    assert _planned("crash nodes=0 after-acquire=3 for=3", scale=0.3).heal_after_ns == 899_999


def test_a_time_parameter_is_read_only_in_the_trials_frame() -> None:
    (step,) = at_scale(parse_schedule("slow nodes=0 worker=0 at=acquire delay=300"), scale=0.1).steps
    assert step.time("delay") == 30.0 and step.written.param("delay") == "300"
    with pytest.raises(KeyError, match="is a time"):
        step.param("delay")


def test_a_trial_carries_its_schedule_in_its_frame_and_its_text_at_the_lessons() -> None:
    spec = make_spec(
        backend="single", experiment=get_experiment("node-crash"), trial=0, overrides=Overrides(time_scale=0.1)
    )
    assert "after-acquire=50" in spec.faults  # the identity: as written
    assert spec.schedule.scale == 0.1 and [s.after_ms for s in spec.schedule.steps] == [5.0]
    assert spec.schedule is spec.schedule  # parsed and scaled once


def test_what_the_trials_timing_rests_on_is_read_in_its_frame_from_the_kinds() -> None:
    def extras(text: str) -> dict[str, object]:
        return timing_extras(at_scale(parse_schedule(text), scale=0.1), ttl_ms=100.0)

    # slow's margin (its kind's ttl_margin): the longest reply delay, 1150 x 0.1 = 115 ms, less the TTL.
    assert extras("slow nodes=all worker=0 at=acquire delay=1150") == {"extra_margins": (("reply delay - TTL", 15.0),)}
    # A worker's pause lands at its own pause point: the crash's 50 x 0.1 = 5 ms is the earliest offset.
    assert extras("pause worker=0 after-acquire=0 every for=1200; crash nodes=0 after-acquire=50") == {
        "fault_offset_ms": 5.0
    }
    assert extras("cut nodes=0 worker=0 at=start") == {}  # follows no lease


@pytest.mark.parametrize(
    ("text", "freezes"), [("starve worker=0 at=start for=700 duty=0.3", True), ("crash nodes=0", False)]
)
def test_whether_a_schedule_stops_workers_from_outside_is_its_kinds_word(text: str, freezes: bool) -> None:
    steps = planned_steps(at_scale(parse_schedule(text), scale=0.1), ttl_ms=100.0)
    scheduler = FaultScheduler(steps=steps, cluster=None, node_count=1, workers=2)  # type: ignore[arg-type]
    assert scheduler.freezes_workers() is freezes
