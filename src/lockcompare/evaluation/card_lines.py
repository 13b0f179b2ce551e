"""The report card's experiment lines: the results rows of ``lockcompare evaluate`` judged, one
line per property — mutual exclusion, client pause, short TTL, the server ending the holder's
session, progress — each with its evidence and the other backends' figures beside it (pure: rows in,
lines out; evaluate.py runs the experiments that write the rows).

A property the backend does not claim is ``NOT CLAIMED``, never ``FAIL``; a backend that claims
fencing tokens is judged under client pauses by fencing's own guarantee (analysis/fencing.py): see
evaluate.py's docstring.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lockcompare.analysis import history as history_io
from lockcompare.analysis.fencing import accepted_below_earlier_token
from lockcompare.analysis.results import history_file
from lockcompare.evaluation.backend_host import Claims
from lockcompare.evaluation.battery_base import Status
from lockcompare.evaluation.card_totals import Totals, totals

#: The experiments every card runs, for the backend and the built-ins beside it.
EXPERIMENTS = ("baseline", "client-pause", "short-ttl")
#: Run for the backend alone, when its lock nodes can end a client's session (their kind is a
#: SessionKind offering session control: PostgreSQL, ZooKeeper): the server ends the holder's session
#: (the Redis and etcd kinds have no session to end).
SESSION_EXPERIMENT = "session-kill"


@dataclass(frozen=True, kw_only=True)
class CardLine:
    title: str
    status: Status
    evidence: str
    #: The history behind a battery line (read it with ``lockcompare history``), when one was written.
    history: Path | None = None


def token_order_violations(rows: Sequence[dict[str, Any]], *, backend: str, results: Path) -> dict[str, int | None]:
    """Per client-pause trial of ``backend``: writes accepted below an earlier accepted token, from
    its history beside ``results`` (None: the history cannot be read, so nothing is claimed)."""
    found: dict[str, int | None] = {}
    for row in rows:
        if row["backend"] != backend or row["experiment"] != "client-pause":
            continue
        path = history_file(row, results=results)  # never a path outside the results' folder
        try:
            if path is None:
                raise ValueError("history outside the results' folder")
            found[row["trial_id"]] = accepted_below_earlier_token(history_io.load(path))
        except (OSError, ValueError, KeyError, TypeError):
            found[row["trial_id"]] = None
    return found


def _others(rows: Sequence[dict[str, Any]], *, backend: str, experiment: str, show: Callable[[Totals], str]) -> str:
    """The same experiment's figures for every other backend in the file, for comparison."""
    names = list(dict.fromkeys(r["backend"] for r in rows if r["backend"] != backend))
    parts = [f"{name} {show(t)}" for name in names if (t := totals(rows, backend=name, experiment=experiment))]
    return f" (beside: {', '.join(parts)})" if parts else ""


def judge_experiments(
    *,
    rows: Sequence[dict[str, Any]],
    backend: str,
    claims: Claims,
    token_order: Mapping[str, int | None] | None = None,
) -> list[CardLine]:
    """The experiment lines of the card: mutual exclusion, client pause, short TTL, progress.

    ``token_order``: per client-pause trial id, the writes accepted below an earlier accepted token
    (:func:`token_order_violations`; None where the history could not be read) — what a fencing
    backend is judged by there, with the ``--fence all`` trials' lost updates.
    """
    fencing = claims.issues_fencing_tokens is True
    runs = {
        name: totals(rows, backend=backend, experiment=name, fence_all=False if fencing else None)
        for name in EXPERIMENTS
    }
    conflicts = lambda t: f"{t.ratio()} conflicts"  # noqa: E731
    lines = []

    def line(title: str, status: Status, evidence: str, experiment: str, show: Callable[[Totals], str]) -> None:
        judged = runs.get(experiment)
        sizes = judged.sizes() if judged is not None else ""
        lines.append(CardLine(title=title, status=status, evidence=evidence + sizes + _others(
            rows, backend=backend, experiment=experiment, show=show)))  # fmt: skip

    base = runs["baseline"]
    title = "mutual exclusion with a correct TTL (baseline)"
    if base is None or base.problems:
        lines.append(CardLine(title=title, status=Status.FAIL, evidence=_missing("baseline", base)))
    else:
        evidence = f"{base.conflicts} conflicts in {base.entries} entries"
        if claims.exclusive is not True:
            line(title, Status.NOT_CLAIMED, f"not exclusive: {evidence}", "baseline", conflicts)
        elif base.conflicts == 0:
            line(title, Status.PASS if base.entries > 0 else Status.FAIL, evidence, "baseline", conflicts)
        elif base.conflicts == base.marked_conflicts and not (base.grants_while_held or base.foreign_releases):
            # No grant came inside another's valid lease: each conflict is a holder still inside after
            # its lease ended, in a trial the machine stalled for at least half its timing margin (the
            # only way a 300 ms section outlives a 1000 ms lease), even after running again alone.
            line(title, Status.SKIPPED, (
                f"{evidence}, all in timing-marked trials and none granted inside another's valid lease: "
                "the machine stalled the holder past its TTL, so they say nothing of the lock (evaluate "
                "it on a quieter machine)"), "baseline", conflicts)  # fmt: skip
        else:
            line(title, Status.FAIL, evidence, "baseline", conflicts)

    pause = runs["client-pause"]
    title = "client pause longer than the TTL (client-pause)"
    damage = lambda t: f"{t.ratio()} conflicts, {t.lost_updates} lost, {t.grants_while_held} granted while held"  # noqa: E731
    if pause is None or pause.problems:
        lines.append(CardLine(title=title, status=Status.FAIL, evidence=_missing("client-pause", pause)))
    else:
        evidence = (
            f"{pause.conflicts} conflicts in {pause.entries} entries, {pause.stale_writes_rejected} stale writes "
            f"rejected, {pause.lost_updates} lost updates, {pause.grants_while_held} leases granted while "
            f"another's was valid, {pause.foreign_releases} releases that removed another's lock"
        )
        if fencing:  # judged by fencing's own guarantee (analysis/fencing.py)
            status, verdict = _fencing_verdict(rows, backend=backend, pause=pause, token_order=token_order or {})
            line(title, status, f"{verdict}; write-only fencing: {evidence}", "client-pause", damage)
        elif claims.exclusive is not True:
            line(title, Status.NOT_CLAIMED, f"not exclusive: {evidence}", "client-pause", damage)
        elif pause.grants_while_held or pause.foreign_releases:  # the resource may not see it, the history does
            line(title, Status.FAIL, f"two valid leases at once: {evidence}", "client-pause", damage)
        elif pause.conflicts or pause.lost_updates:
            line(title, Status.NOT_CLAIMED, f"needs fencing: {evidence}", "client-pause", damage)
        else:
            line(title, Status.PASS, evidence, "client-pause", damage)

    short = runs["short-ttl"]
    title = "TTL shorter than the work (short-ttl)"
    if short is None or short.problems:
        lines.append(CardLine(title=title, status=Status.FAIL, evidence=_missing("short-ttl", short)))
    else:
        evidence = f"{short.conflicts} conflicts in {short.entries} entries, {short.lost_updates} lost updates"
        if short.conflicts == 0 and short.lost_updates == 0 and claims.exclusive is True:
            line(title, Status.PASS, evidence, "short-ttl", damage)
        else:  # no lease lock claims to survive a lease that ends mid-section
            line(title, Status.NOT_CLAIMED, f"lease expires mid-section: {evidence}", "short-ttl", damage)

    session = totals(rows, backend=backend, experiment=SESSION_EXPERIMENT)
    if session is not None:
        lines.append(_session_line(session, claims=claims))
    lines.append(_progress_line(rows, backend=backend, runs=runs))
    return lines


def _fencing_verdict(
    rows: Sequence[dict[str, Any]], *, backend: str, pause: Totals, token_order: Mapping[str, int | None]
) -> tuple[Status, str]:
    """PASS when no write was accepted below an earlier accepted token (every trial's history
    read) and, with ``--fence all``, no update was lost; the first reason otherwise."""
    trials = [r["trial_id"] for r in rows if r["backend"] == backend and r["experiment"] == "client-pause"]
    counts = [token_order.get(t) for t in trials]
    unread = sum(1 for c in counts if c is None)
    below = sum(c for c in counts if c is not None)
    every = totals(rows, backend=backend, experiment="client-pause", fence_all=True)
    if every is None:
        fence_all = "no trial with --fence all"
    elif every.problems:
        fence_all = f"--fence all: could not be judged: {'; '.join(every.problems)}"
    else:
        fence_all = f"--fence all: {every.lost_updates} lost updates in {every.entries} entries"
    order = f"{below} writes accepted below an earlier accepted token" + (
        f" ({unread} trial histories unreadable: not checked)" if unread else ""
    )
    text = f"fenced: {order}; {fence_all}"
    ok = (
        pause.entries > 0 and not unread and below == 0
        and every is not None and not every.problems and every.entries > 0 and every.lost_updates == 0
    )  # fmt: skip
    return (Status.PASS if ok else Status.FAIL), text


def _session_line(t: Totals, *, claims: Claims) -> CardLine:
    """The server ends the holder's session: a fenced design must lose nothing; a lock that *is*
    its session (an advisory lock) does not claim to outlive it, and the evidence says what it cost."""
    title = "the server ends the holder's session (session-kill)"
    if t.problems:
        return CardLine(title=title, status=Status.FAIL, evidence=_missing(SESSION_EXPERIMENT, t))
    evidence = f"{t.conflicts} conflicts in {t.entries} entries, {t.lost_updates} lost updates{t.sizes()}"
    if claims.issues_fencing_tokens is True:
        return CardLine(title=title, status=Status.PASS if t.lost_updates == 0 else Status.FAIL, evidence=evidence)
    if t.conflicts == 0 and t.lost_updates == 0:
        return CardLine(title=title, status=Status.PASS, evidence=evidence)
    return CardLine(title=title, status=Status.NOT_CLAIMED, evidence=f"the lock ends with its session: {evidence}")


def _missing(experiment: str, t: Totals | None) -> str:
    if t is None:
        return f"no {experiment} trial in the results"
    return f"{experiment}: the trial could not be judged: {'; '.join(t.problems)}"


def _progress_line(rows: Sequence[dict[str, Any]], *, backend: str, runs: dict[str, Totals | None]) -> CardLine:
    """Progress: every planned round entered, and the acquire p50 beside single's."""
    title = "progress (entries completed / planned)"
    done = {name: t for name, t in runs.items() if t is not None}
    if not done:
        return CardLine(title=title, status=Status.FAIL, evidence="no trial ran")
    parts = [f"{name} {t.entries}/{t.planned}" for name, t in done.items()]
    complete = all(t.entries == t.planned and t.planned > 0 for t in done.values())
    evidence = ", ".join(parts)
    base = runs.get("baseline")
    single = totals(rows, backend="single", experiment="baseline")
    if base is not None:
        evidence += f"; baseline acquire p50 {base.acquire_p50_ms:.2f} ms"
        if single is not None and backend != "single" and single.acquire_p50_ms > 0:
            evidence += f" (single: {single.acquire_p50_ms:.2f} ms, x{base.acquire_p50_ms / single.acquire_p50_ms:.1f})"
    return CardLine(title=title, status=Status.PASS if complete else Status.FAIL, evidence=evidence)
