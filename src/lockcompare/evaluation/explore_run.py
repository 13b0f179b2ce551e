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

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from lockcompare.analysis import incidents
from lockcompare.analysis.history import Event
from lockcompare.errors import RenderError
from lockcompare.evaluation.explore import PROPERTIES, Counterexample, ExploreReport, ProgressFn, Search, explore
from lockcompare.evaluation.explore_log import CSV_NAME, ExploreLog
from lockcompare.evaluation.explore_trials import TRIALS_CSV, RealTrials
from lockcompare.evaluation.shrink import NO_FAULT
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
    max_nodes: int | None = None,
    progress: ProgressFn | None = None,
) -> ExploreResult:
    """Search ``trials.backend`` for a schedule breaking ``prop``; see the module docstring."""
    shape = replace(trials.shape(), max_nodes=max_nodes)
    search = Search(prop=prop, kinds=tuple(kinds), shape=shape, rounds=rounds, seed=seed, budget_s=budget_s,
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
                title=picture_title(backend=trials.backend, schedule=c.schedule, rounds=c.rounds, rate=c.rate.text()),
                ttl_ms=trials.spec_ttl_ms(),
            )
        except RenderError as exc:  # matplotlib missing, or an unreadable history: say so, keep the result
            note = f"no timeline picture: {exc}"
    text = render_report(report, backend=trials.backend, timeline=timeline, note=note)
    with writing(trials.out_dir / SUMMARY_NAME):
        (trials.out_dir / SUMMARY_NAME).write_text(text + "\n")
    return ExploreResult(report=report, text=text, timeline=timeline, exit_code=1 if c is not None else 0)


def draw_timeline(history: Path, *, out: Path, title: str, ttl_ms: float) -> Path:
    """The failing trial's picture, from the fault step that preceded its first incident to the
    incident (the plot's default window shows the incident only, and the cause is the point)."""
    from lockcompare.render.plots import plot_timeline  # matplotlib only when a picture is drawn

    events = load_history(history)
    from_ms, to_ms = fault_window(events)
    return plot_timeline(events, out=out, title=title, ttl_ms=ttl_ms, from_ms=from_ms, to_ms=to_ms)


def fault_window(events: Sequence[Event]) -> tuple[float | None, float | None]:
    """(from, to) in ms widening the default window back to the last injection before the first
    incident; (None, None) to keep the default (no incident, or the injection is already shown or
    too long before it to draw readably)."""
    incident = incidents.first_incident(events)
    if incident is None:
        return None, None
    window = incidents.default_window(events)
    origin = incidents.origin_ns(events)
    injected = [
        at for e in events
        if e.get("kind") == "fault" and e.get("action") == "inject"
        and (at := incidents.ms(e["t0"], origin)) <= incident.at_ms
    ]  # fmt: skip
    if not injected:
        return None, None
    last = max(injected)
    if last >= window.from_ms or incident.at_ms - last > incidents.MAX_BEFORE_MS:
        return None, None
    pad = 0.05 * (window.to_ms - last)  # room for the markers drawn at either edge
    return max(0.0, last - pad), window.to_ms + pad


def picture_title(*, backend: str, schedule: str, rounds: int, rate: str) -> str:
    """Two lines: the picture is narrow, and the schedule is the point of it."""
    wrapped = textwrap.wrap(f"--faults '{schedule}'" if schedule else NO_FAULT, width=95, break_on_hyphens=False)
    return "\n".join([f"explore {backend}: fails in {rate} reruns at {rounds} round(s)", *wrapped[:2]])


def _broken(c: Counterexample, *, prop: str) -> str:
    """What the failing trial shows, in the property's metrics (and its verdict)."""
    if c.failing is None:
        return "no failing trial kept"
    metrics, _ = PROPERTIES[prop]
    shown = ", ".join(f"{m} {c.failing.metrics.get(m, 0)}" for m in metrics)
    return f"{shown} in one failing trial (verdict {c.failing.verdict}; {c.failing.trial_id or 'no trial id'})"


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
        schedule = f"--faults '{c.schedule}'" if c.schedule else f"none — {NO_FAULT}"
        lines = [
            f"Counterexample to {s.prop} ({promise}) for {backend}:",
            f"  schedule:  {schedule} with --rounds {c.rounds}",
            f"  rate:      fails in {c.rate.text()} reruns",
            f"  broke:     {_broken(c, prop=s.prop)}",
            f"  reproduce: {c.command}",
            f"  found as:  {c.found} ({c.found_rounds} rounds)",
            f"  shrunk:    {len(c.moves)} cut(s) of {c.candidates_tried} candidate(s) judged{shrunk}: {cuts}",
            f"  timeline:  {timeline if timeline is not None else note or 'none (no failing history)'}",
            f"  searched:  {report.budget_text()}",
        ]
    lines.append(f"  tried:     {files}")
    return "\n".join(lines)
