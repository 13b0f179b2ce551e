"""The report card's search section: a short budgeted ``explore`` after the battery and the experiments.

Which property is searched follows what the backend claims: with fencing tokens, that no update
is lost (at ``--fence all``, the check a fenced resource can make complete); otherwise, for a lock
that claims exclusion, that no lease is granted over another's valid one and no release removes
another's lock — the promise a lease lock keeps whatever a client pause does. A lock that does not
claim exclusion is not searched. The fault kinds are the client's own — pauses — which no lease
lock may answer with a second valid lease: node faults break locks that never claimed to survive
them, and the ``explore`` command is there to search those.

The line is ``PASS`` with what was searched ("searched N schedules, M trial-seconds: no
counterexample within this budget"), or ``FAIL`` with the minimal counterexample, its rate and the
command that reruns it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lockcompare.evaluation.backend_host import Claims
from lockcompare.evaluation.conformance import Status
from lockcompare.evaluation.explore import ProgressFn
from lockcompare.evaluation.explore_run import run_explore
from lockcompare.evaluation.explore_trials import RealTrials, fitting_scale
from lockcompare.evaluation.shrink import NO_FAULT
from lockcompare.runner.plan import ClusterOptions
from lockcompare.scenario.parsing import Overrides

TITLE = "no counterexample in a budgeted search of fault schedules (explore)"
#: Fault kinds the card searches (see the module docstring).
CARD_KINDS = ("pause",)
#: Short trials: a search is many trials, and a pause shows within a few rounds.
CARD_ROUNDS = 4
CARD_RERUNS = 3
CARD_RATE_RUNS = 5


@dataclass(frozen=True, kw_only=True)
class SearchLine:
    status: Status
    evidence: str


def property_for(claims: Claims) -> str | None:
    """The property the card searches for this backend; None when it claims none a search could break."""
    if claims.issues_fencing_tokens is True:
        return "no-lost-updates"
    if claims.exclusive is True:
        return "no-grant-over-valid-lease"
    return None


def search_line(
    *,
    backend: str,
    claims: Claims,
    budget_s: float,
    out_dir: Path,
    cluster_options: ClusterOptions,
    seed: int = 1,
    progress: ProgressFn | None = None,
    settings: Overrides | None = None,
    server_args: tuple[str, ...] = (),
) -> SearchLine:
    """Run the card's search (see the module docstring) and judge it."""
    prop = property_for(claims)
    if prop is None:
        return SearchLine(status=Status.NOT_CLAIMED, evidence="not exclusive: nothing for a search to break")
    fence = "all" if prop == "no-lost-updates" else "writes"
    settings = settings if settings is not None else Overrides()
    scale = fitting_scale(backend, ttl_ms=settings.given("ttl_ms"))
    trials = RealTrials(backend=backend, out_dir=out_dir, time_scale=scale, fence=fence, jobs=2,
                        cluster_options=cluster_options, settings=settings, server_args=server_args)  # fmt: skip
    result = run_explore(
        trials=trials, prop=prop, kinds=CARD_KINDS, budget_s=budget_s, rounds=CARD_ROUNDS, seed=seed,
        reruns=CARD_RERUNS, rate_runs=CARD_RATE_RUNS, max_steps=2, resume=False,
        progress=progress,
    )  # fmt: skip
    c = result.report.counterexample
    if c is None:
        return SearchLine(status=Status.PASS, evidence=f"{prop}: {result.report.verdict_text()}")
    timeline = f"; timeline {result.timeline}" if result.timeline else ""
    broken = f"--faults '{c.schedule}'" if c.schedule else f"no fault ({NO_FAULT})"
    return SearchLine(
        status=Status.FAIL,
        evidence=(
            f"{prop} broken by {broken} at --rounds {c.rounds}, failing in {c.rate.text()} reruns; "
            f"rerun: {c.command}{timeline}; {result.report.budget_text()}"
        ),
    )
