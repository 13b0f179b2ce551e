"""One explore trial's question and answer: a request (schedule, rounds, seed) and its outcome.

Shared by the search (evaluation/explore.py), which asks and judges, and its log
(evaluation/explore_log.py), which writes and reads them back on resume; neither imports the other
for them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class TrialRequest:
    schedule: str  # canonical text, the --faults value
    rounds: int
    seed: int


@dataclass(frozen=True, kw_only=True)
class TrialOutcome:
    verdict: str  # the checker's (checker.VERDICTS), or "invalid": the schedule was refused before running
    metrics: Mapping[str, int]
    trial_seconds: float
    history: str = ""  # path of the saved history ("" when none)
    trial_id: str = ""
    problem: str = ""
    timing_marked: bool = False  # the timing sentinel marked it (analysis/sentinel.py)
