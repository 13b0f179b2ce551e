"""``matrix --until-settled``'s options and closing lines (the rounds are runner/settle.py's)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any

import typer

from lockcompare.analysis.rates import percent
from lockcompare.analysis.settle import CLEAN, DEFAULT_TARGET, UNSAFE
from lockcompare.cli.explore import parse_budget
from lockcompare.errors import InvalidValueError
from lockcompare.scenario.limits import check_count

if TYPE_CHECKING:
    from lockcompare.runner.matrix import MatrixReport
    from lockcompare.runner.settle import SettleReport

#: --max-trials when --until-settled is given without it.
DEFAULT_MAX_TRIALS = 20

UntilSettled = Annotated[
    bool,
    typer.Option(
        "--until-settled",
        help="After the first round (--trials per cell), keep adding trials to each cell whose answer is open, "
        "until it is settled: unsafe here (a safety violation seen in one observed trial settles it) or clean "
        "(no violation, and the exact 95% upper bound of its violation rate at or below --settle-below). Cells "
        "settle independently, within --max-trials and --settle-budget.",
    ),
]
MaxTrials = Annotated[
    int | None,
    typer.Option("--max-trials", help=f"With --until-settled: trials per cell at most (default {DEFAULT_MAX_TRIALS})."),
]
SettleBelow = Annotated[
    str | None,
    typer.Option(
        "--settle-below",
        help=f"With --until-settled: a clean cell is settled when the upper bound of its violation rate is at or "
        f"below this, in percent (default {DEFAULT_TARGET:.0%}; e.g. 10 or 10%).",
    ),
]
SettleBudget = Annotated[
    str | None,
    typer.Option(
        "--settle-budget",
        help="With --until-settled: no new round starts after this long (15m, 90s, 1h30m; default: none, "
        "--max-trials bounds the run).",
    ),
]


def parse_target(text: str) -> float:
    """``20``, ``20%`` or ``12.5`` (percent) → 0.2, 0.2, 0.125; one line for anything else."""
    raw = text.strip().removesuffix("%").strip()
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not 0 < value < 100:
        raise InvalidValueError(f"--settle-below takes a percentage above 0 and below 100, got {text!r}")
    return value / 100


@dataclass(kw_only=True)
class SettlePlan:
    """What --until-settled asked for; after the run, its report (for the closing lines)."""

    max_trials: int
    target: float
    budget_s: float | None
    report: SettleReport | None = field(default=None)

    def runner(self, *, on_line: Callable[[str], None]) -> Callable[..., MatrixReport]:
        """A stand-in for ``run_matrix`` (the same keyword arguments) that runs rounds until settled."""
        from lockcompare.runner.settle import run_until_settled

        def run(*, backends: Any, experiments: Any, trials: int, **matrix: Any) -> MatrixReport:
            self.report = run_until_settled(
                backends=backends, experiments=experiments, trials=trials, max_trials=self.max_trials,
                target=self.target, budget_s=self.budget_s, on_line=on_line, **matrix,
            )  # fmt: skip
            return self.report.matrix

        return run

    def closing_lines(self) -> list[str]:
        """How many cells settled and how, then every cell not settled, and why."""
        if self.report is None:
            return []
        states = self.report.states
        unsafe = sum(1 for s in states if s.status == UNSAFE)
        clean = sum(1 for s in states if s.status == CLEAN)
        lines = [
            f"settled: {unsafe + clean} of {len(states)} cells in {self.report.rounds} round(s): {unsafe} unsafe here "
            f"(a violation seen), {clean} clean (upper bound at or below {percent(self.target)})"
        ]
        lines += [f"not settled: {name}: {why}" for name, why in self.report.unsettled]
        return lines


def settle_plan(
    *,
    until_settled: bool,
    trials: int,
    max_trials: int | None,
    settle_below: str | None,
    settle_budget: str | None,
) -> SettlePlan | None:
    """The plan --until-settled asks for (None without it); its options without it are refused."""
    if not until_settled:
        given = [flag for flag, value in (("--max-trials", max_trials), ("--settle-below", settle_below),
                                          ("--settle-budget", settle_budget)) if value is not None]  # fmt: skip
        if given:
            raise InvalidValueError(f"{', '.join(given)} go(es) with --until-settled")
        return None
    most = check_count("trials", max_trials if max_trials is not None else max(DEFAULT_MAX_TRIALS, trials),
                       flag="--max-trials")  # fmt: skip
    if most < trials:
        raise InvalidValueError(f"--max-trials ({most}) is below --trials ({trials}), the first round")
    target = parse_target(settle_below) if settle_below is not None else DEFAULT_TARGET
    budget = parse_budget(settle_budget, flag="--settle-budget") if settle_budget is not None else None
    return SettlePlan(max_trials=most, target=target, budget_s=budget)
