"""A report card as text or Markdown: its lines, the verdict, and the rows it stands on."""

from __future__ import annotations

from tabulate import tabulate

from lockcompare.errors import InvalidValueError
from lockcompare.evaluation.battery_base import Status
from lockcompare.evaluation.card_lines import SESSION_EXPERIMENT
from lockcompare.evaluation.card_totals import totals
from lockcompare.evaluation.defaults import CARD_FORMATS
from lockcompare.evaluation.evaluate import WORKLOAD, ReportCard
from lockcompare.render import table


def render_card(card: ReportCard, *, fmt: str = "text") -> str:
    """The card as Markdown (``markdown``: a table) or plain text (``text``: status, title, evidence below)."""
    if fmt not in CARD_FORMATS:
        raise InvalidValueError(f"--format takes {' or '.join(CARD_FORMATS)}, got {fmt!r}")
    failed = len(card.failed)
    verdict = (
        "every claimed property holds (exit 0)"
        if not failed
        else f"{failed} claimed propert{'y does' if failed == 1 else 'ies do'} not hold: "
        + "; ".join(line.title for line in card.failed)
        + " (exit 1)"
    )
    setting = (
        f"experiments at --time-scale {card.time_scale:g}, {card.rounds} rounds per worker "
        f"(--workload {WORKLOAD}: none runs alone), "
        f"{card.trials} trial(s) per cell"
        + (f", {' '.join(card.settings)}" if card.settings else "")
        + f"; results: {card.results_csv}"
    ) + "".join(f"; {note}" for note in card.notes)
    if card.battery_histories is not None:
        setting += f"; the battery's histories, one per check: {card.battery_histories}/ (lockcompare history FILE)"
    if fmt == "markdown":
        body = tabulate(
            [(line.title, f"**{line.status}**" if line.status is Status.FAIL else str(line.status),
              line.evidence + (f" (history: `{line.history}`)" if line.history and line.status is Status.FAIL else ""))
             for line in card.lines],
            headers=("property", "result", "evidence"),
            tablefmt="github",
        )  # fmt: skip
        return "\n".join([
            f"# Report card: `{card.backend}`", "", f"> {card.summary}", "", body, "",
            f"**Verdict:** {verdict}.", "", f"Evidence: {setting}.", "", table.render(list(card.rows), fmt="github"),
            "", f"**Recommendation:** {recommendation(card)}.",
        ])  # fmt: skip
    width = max(len(str(s)) for s in Status) + 2
    body = "\n".join(
        f"{line.status!s:<{width}}{line.title}\n{'':<{width}}{line.evidence}"
        + (f"\n{'':<{width}}history: {line.history}" if line.history is not None and line.status is Status.FAIL else "")
        for line in card.lines
    )
    return "\n".join([
        f"Report card: {card.backend}", f"  {card.summary}", "", body, "", f"Verdict: {verdict}.", "",
        f"Evidence: {setting}.", "", table.render(list(card.rows), fmt="simple"), "",
        f"Recommendation: {recommendation(card)}.",
    ])  # fmt: skip


#: Where a lock that claims what it does still loses updates, and what the user must add, worst
#: first: (experiment, what the loss happened under, the advice for a lock without fencing tokens).
_DAMAGE = (
    ("client-pause", "under a pause longer than the TTL", "unsafe without fencing at the resource"),
    ("short-ttl", "with a TTL shorter than the work", "keep the TTL above the longest critical section"),
    (SESSION_EXPERIMENT, "when the lock server ended the holder's session", "unsafe without fencing at the resource"),
)


def recommendation(card: ReportCard) -> str:
    """The card's last line: what to do with this lock, in one sentence. A claimed property that
    failed comes first; then the damage the lock does not claim to prevent but a user would meet
    (updates lost under a pause, a short TTL, a session's end), with the experiment's own numbers;
    else what holds and what the lock does not claim, so "holds" is never read as "safe for anything".
    """
    if card.failed:
        first, more = card.failed[0], len(card.failed) - 1
        return (
            f"do not rely on it: it claims {first.title} and broke it"
            + (f" (and {more} more claimed propert{'y' if more == 1 else 'ies'})" if more else "")
            + " — see the FAIL line(s) above"
        )
    fencing = any(r.get("resource_check") == "fence-all" for r in card.rows if r.get("backend") == card.backend)
    losses = []
    for experiment, how, advice in _DAMAGE:
        found = totals(card.rows, backend=card.backend, experiment=experiment, fence_all=False if fencing else None)
        if found is not None and found.lost_updates > 0 and not found.problems:
            losses.append((advice, f"{found.lost_text()} {how} ({experiment})"))
    if losses:
        advice = losses[0][0]
        if fencing:  # its tokens held, yet the write-only check let a zombie's read-modify-write through
            advice = "check the fencing token on every access (--fence all), not on the write only"
        return f"{advice}: " + "; ".join(text for _, text in losses)
    unclaimed = [line.title for line in card.lines if line.status is Status.NOT_CLAIMED]
    unchecked = [line.title for line in card.lines if line.status is Status.SKIPPED]
    return (
        "every claimed property holds"
        + (f"; not claimed: {'; '.join(unclaimed)}" if unclaimed else "; nothing left unclaimed")
        + (f"; not checked here: {'; '.join(unchecked)}" if unchecked else "")
    )
