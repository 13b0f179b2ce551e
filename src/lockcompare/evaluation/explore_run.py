"""``lockcompare explore`` as a plain function: real trials, the search, and what it shows.

:func:`run_explore` wires :class:`~lockcompare.evaluation.explore_trials.RealTrials` to the search
(:mod:`~lockcompare.evaluation.explore`), draws the timeline of one failing trial of the shrunk
schedule, and writes ``DIR/summary.txt`` (the same text the command prints). ``DIR`` then holds:

- ``summary.txt`` — the verdict, the minimal schedule, its rate, the command, the budget searched;
- ``counterexample.png`` — the timeline of one failing trial (when one was found);
- ``explored.csv`` — every trial tried: phase, schedule, rounds, seed, result, verdict, metrics;
- ``explore.json`` — the search's settings (a ``--resume`` must match them);
- ``trials.csv`` and ``trials.histories/`` — the trials' full rows and histories.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from lockcompare.errors import RenderError
from lockcompare.evaluation.explore import PROPERTIES, ExploreReport, ProgressFn, Search, explore
from lockcompare.evaluation.explore_log import CSV_NAME, ExploreLog
from lockcompare.evaluation.explore_trials import TRIALS_CSV, RealTrials
from lockcompare.files import check_output_dir, results_lock, writing
from lockcompare.render.timeline import load_history

SUMMARY_NAME = "summary.txt"
TIMELINE_NAME = "counterexample.png"


@dataclass(frozen=True, kw_only=True)
class ExploreResult:
    report: ExploreReport
    text: str  # what the command prints (also in summary.txt)
    timeline: Path | None
    exit_code: int  # 0: no counterexample within the budget; 1: one was found


def run_explore(
    *,
    trials: RealTrials,
    prop: str,
    kinds: Sequence[str],
    budget_s: float,
    rounds: int,
    seed: int,
    reruns: int,
    rate_runs: int,
    max_steps: int,
    resume: bool,
    progress: ProgressFn | None = None,
) -> ExploreResult:
    """Search ``trials.backend`` for a schedule breaking ``prop``; see the module docstring."""
    search = Search(prop=prop, kinds=tuple(kinds), shape=trials.shape(), rounds=rounds, seed=seed, budget_s=budget_s,
                    reruns=reruns, rate_runs=rate_runs, max_steps=max_steps)  # fmt: skip
    settings = {**search.settings(), "trials": trials.description, "redlock_nodes": trials.redlock_nodes}
    check_output_dir(trials.out_dir, flag="--out")
    with results_lock(trials.out_dir / CSV_NAME):  # one search per directory at a time
        log = ExploreLog(trials.out_dir, settings=settings, resume=resume)
        report = explore(runner=trials, search=search, log=log, progress=progress)
    timeline, note = None, ""
    c = report.counterexample
    if c is not None and c.failing is not None and c.failing.history:
        try:
            timeline = draw_timeline(
                Path(c.failing.history),
                out=trials.out_dir / TIMELINE_NAME,
                title=f"{trials.backend}: {c.schedule} ({c.rounds} rounds; fails in {c.rate.text()})",
                ttl_ms=trials.spec_ttl_ms(),
            )
        except RenderError as exc:  # matplotlib missing, or an unreadable history: say so, keep the result
            note = f"no timeline picture: {exc}"
    text = render_report(report, backend=trials.backend, timeline=timeline, note=note)
    with writing(trials.out_dir / SUMMARY_NAME):
        (trials.out_dir / SUMMARY_NAME).write_text(text + "\n")
    return ExploreResult(report=report, text=text, timeline=timeline, exit_code=1 if c is not None else 0)


def draw_timeline(history: Path, *, out: Path, title: str, ttl_ms: float) -> Path:
    from lockcompare.render.plots import plot_timeline  # matplotlib only when a picture is drawn

    return plot_timeline(load_history(history), out=out, title=title, ttl_ms=ttl_ms)


def render_report(report: ExploreReport, *, backend: str, timeline: Path | None = None, note: str = "") -> str:
    """The result in a few labelled lines: the counterexample (or none) and, always, the budget."""
    s = report.search
    _, promise = PROPERTIES[s.prop]
    out_dir = Path(report.csv).parent if report.csv else None
    files = f"{out_dir / CSV_NAME} (trials: {out_dir / TRIALS_CSV})" if out_dir else "not written"
    c = report.counterexample
    if c is None:
        lines = [f"No counterexample to {s.prop} ({promise}) for {backend} within this budget.",
                 f"  searched:  {report.budget_text()}"]  # fmt: skip
    else:
        cuts = "; ".join(c.moves) if c.moves else "none still failed"
        shrunk = "" if c.shrink_complete else " — stopped at the budget: a smaller one may exist"
        lines = [
            f"Counterexample to {s.prop} ({promise}) for {backend}:",
            f"  schedule:  --faults '{c.schedule}' with --rounds {c.rounds}",
            f"  rate:      fails in {c.rate.text()} reruns",
            f"  reproduce: {c.command}",
            f"  found as:  {c.found} ({c.found_rounds} rounds)",
            f"  shrunk:    {len(c.moves)} cut(s) of {c.candidates_tried} candidate(s) judged{shrunk}: {cuts}",
            f"  timeline:  {timeline if timeline is not None else note or 'none (no failing history)'}",
            f"  searched:  {report.budget_text()}",
        ]
    lines.append(f"  tried:     {files}")
    return "\n".join(lines)
