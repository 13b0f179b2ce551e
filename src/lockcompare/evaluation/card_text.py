"""A report card as text or Markdown: its lines, the verdict, and the rows it stands on."""

from __future__ import annotations

from tabulate import tabulate

from lockcompare.errors import InvalidValueError
from lockcompare.evaluation.battery_base import Status
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
        ])  # fmt: skip
    width = max(len(str(s)) for s in Status) + 2
    body = "\n".join(
        f"{line.status!s:<{width}}{line.title}\n{'':<{width}}{line.evidence}"
        + (f"\n{'':<{width}}history: {line.history}" if line.history is not None and line.status is Status.FAIL else "")
        for line in card.lines
    )
    return "\n".join([
        f"Report card: {card.backend}", f"  {card.summary}", "", body, "", f"Verdict: {verdict}.", "",
        f"Evidence: {setting}.", "", table.render(list(card.rows), fmt="simple"),
    ])  # fmt: skip
