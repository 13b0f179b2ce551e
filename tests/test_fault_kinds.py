"""The fault kinds' registry: one module per kind, and every list of kinds derived from it."""

from __future__ import annotations

import random

import pytest

from lockcompare.analysis import sentinel
from lockcompare.evaluation import schedules
from lockcompare.faults.plan import planned_steps
from lockcompare.render.docs import fault_kinds_table
from lockcompare.scenario import faultkinds
from lockcompare.scenario.faultkinds.base import Shape
from lockcompare.scenario.schedule import at_scale, parse_schedule
from lockcompare.scenario.settings import SETTINGS


def test_every_module_with_a_kind_is_found_once_by_its_one_name() -> None:
    assert faultkinds.NAMES[:3] == ("crash", "restart", "clock-jump")
    assert "node-freeze" in faultkinds.NAMES and len(set(faultkinds.NAMES)) == len(faultkinds.NAMES)
    assert all(name == kind.name for name, kind in faultkinds.KINDS.items())


@pytest.mark.parametrize("kind", faultkinds.NAMES)
def test_each_kind_is_named_in_every_list_and_help(kind: str) -> None:
    assert kind in SETTINGS["faults"].help  # the --faults help once missed session-kill
    assert kind in schedules.KINDS and f"`{kind}`" in fault_kinds_table()
    assert (kind in schedules.DEFAULT_KINDS) == faultkinds.KINDS[kind].explored_by_default


@pytest.mark.parametrize("kind", [k for k in faultkinds.NAMES if not faultkinds.KINDS[k].in_worker])
def test_each_kind_draws_steps_the_schedule_accepts_and_its_fault_objects_carry_no_other_name(kind: str) -> None:
    rng = random.Random(7)
    for _ in range(20):
        step = schedules.random_step(rng, kind=kind, shape=Shape(nodes=5, workers=2))
        schedule = parse_schedule(step.text)
        assert schedule.steps[0].kind == kind
        (planned,) = planned_steps(at_scale(schedule, scale=0.1), ttl_ms=100.0, lock_key="k")
        fault = planned.build(0)
        assert not hasattr(fault, "name") or fault.name == kind


def test_events_of_older_histories_are_read_as_the_kinds_they_were() -> None:
    assert faultkinds.event_fault("node-restart") == "restart" and faultkinds.event_fault("link-cut") == "cut"
    assert faultkinds.event_fault("restart") == "restart" and faultkinds.event_fault("pause") == "pause"
    excused = set(faultkinds.names_where("excuses_worker"))
    assert sentinel._DELAYS_ITS_WORKER == excused | {"slow-link", "link-cut"}
    assert "crash" not in excused and {"pause", "starve", "slow", "cut", "node-freeze"} <= excused
