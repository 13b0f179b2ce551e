"""What the schedule runner writes into the history for a step: the fields that name its target,
and the event of a step it skipped (a target that could not be resolved, with the reason). The
events of the actions it ran are built where they run (faults/schedule.py ``_act``), from what the
fault reported."""

from __future__ import annotations

from typing import Any

from lockcompare.analysis.history import Event, now_ns
from lockcompare.faults.steps import PlannedStep
from lockcompare.faults.targets import Resolution
from lockcompare.scenario.schedule import FaultStep


def target_fields(step: FaultStep) -> dict[str, str]:
    """Whom the step was written to hit (``target``: its nodes, ``target_worker_spec``: its worker)."""
    fields = {}
    if step.nodes is not None:
        fields["target"] = step.nodes.text
    if step.worker is not None:
        fields["target_worker_spec"] = step.worker.text
    return fields


def skipped_event(
    planned_step: PlannedStep,
    *,
    round_: int,
    planned: int,
    resolution: Resolution,
    action: str,
    holders: object | None,
    extra: dict[str, Any] | None = None,
) -> Event:
    """The event of an ``action`` of ``planned_step`` that did not run: when it was due, why not, what
    a role step read, and ``holders``: what the last read of the lock nodes found (None: no read)."""
    t = now_ns()
    return {
        "worker": -1,
        "round": round_,
        "kind": "fault",
        "fault": planned_step.step.kind,
        "action": "skipped",
        "step": planned_step.index,
        "t0": t,
        "t1": t,
        "planned_ns": planned,
        "late_ms": (t - planned) / 1e6,
        "nodes": [],
        "reason": resolution.reason,
        **({"roles": resolution.roles} if resolution.roles is not None else {}),  # what a role step read
        "skipped": action,
        **target_fields(planned_step.step),
        **({"holders": holders} if holders is not None else {}),  # what was read
        **(extra or {}),
    }
