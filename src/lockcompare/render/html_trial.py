"""A trial's page of the HTML report, and the story behind its verdict that the cell's page quotes.

The page opens with a caption in words: the verdict, defined, and for each rule that fired
(analysis/explain.py, ids of analysis/rules.py) its first instance with the times of the history —
the grant that came inside a valid lease and on which nodes, the fault that took them away, the
write that was lost, the fencing token that went back. The timeline under it is drawn over every
event the caption names (and the incident's live rounds), and its excerpt lists every step that
overlaps that window, not only those that started in it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import Any

from lockcompare.analysis import explain, incidents
from lockcompare.analysis.cells import Cell, setting_text, slug
from lockcompare.analysis.history import Event
from lockcompare.analysis.reproduce import matrix_command
from lockcompare.analysis.results import METRIC_COLUMNS, PROVENANCE_COLUMNS, TIMING_COLUMNS, history_file
from lockcompare.analysis.rules import RULES
from lockcompare.analysis.sentinel import is_marked
from lockcompare.analysis.verdicts import MEANINGS, VIOLATIONS, severity
from lockcompare.errors import LockcompareError
from lockcompare.render.glance import OTHER_STYLE, VERDICT_STYLE
from lockcompare.render.html_assets import key_values, page
from lockcompare.render.svg_timeline import legend_html, render_svg, story_window
from lockcompare.render.timeline import load_history, render_timeline
from lockcompare.scenario.settings import SETTING_COLUMNS

#: A trial page shows at most this many history lines (the window's); the rest: `lockcompare history`.
EXCERPT_LINES = 160
_PROVENANCE_SHOWN = ("run_id", "started_at", *PROVENANCE_COLUMNS, "history")
#: The rule behind an ``unknown`` verdict, by the start of the checker's problem text (analysis/checker.py).
_UNKNOWN_RULES = (
    ("no safety verdict without the fault", "no-verdict-without-fault"),
    ("history unusable", "history-usable"),
    ("entries in the history but", "counts-agree"),
    ("occupancy counter ended", "counts-agree"),
    ("workers saw", "counts-agree"),
    ("the lock stopped being exercised", "stopped-being-exercised"),
)
#: The rule of a verdict that no history event shows (the row's counts say it).
_ROW_RULES = {"double-applied": "double-applied", "starved": "starved", "degraded": "degraded",
              "unavailable": "unavailable", "exclusive": ""}  # fmt: skip


def verdict_colour(verdict: str) -> str:
    return VERDICT_STYLE.get(verdict, OTHER_STYLE)[0]


def badge(verdict: str) -> str:
    """A verdict's word in its colour, defined on hover (its meaning: analysis/verdicts.py)."""
    meaning = MEANINGS.get(verdict, "a verdict this version of lockcompare does not know")
    return (
        f'<abbr class="verdict" style="background:{verdict_colour(verdict)}" title="{escape(meaning)}">'
        f"{escape(verdict)}</abbr>"
    )


def trial_page_name(row: dict[str, Any]) -> str:
    return f"{slug(str(row['trial_id']))}.html"


def cell_page_name(cell: Cell) -> str:
    return f"{cell.name}.html"


@dataclass(frozen=True)
class Story:
    """A trial's history read once, and what it shows: the findings, or why there is no history."""

    history: list[Event] = field(default_factory=list)
    findings: list[explain.Finding] = field(default_factory=list)
    missing: str = ""  # why no timeline: the history is missing, unreadable, outside the folder or empty


def read_story(row: dict[str, Any], *, results: Path) -> Story:
    source = history_file(row, results=results)
    if source is None:
        return Story(missing="The history path leaves the results' folder: not read.")
    if not source.is_file():
        return Story(missing=f"The history file {row.get('history')} is missing: no timeline.")
    try:
        history = load_history(source)
    except LockcompareError as exc:
        return Story(missing=f"The history cannot be read: {exc}")
    if not history:
        return Story(missing="The history is empty: no timeline.")
    return Story(history=history, findings=explain.findings(history, nodes=_lock_nodes(row, history)))


def _lock_nodes(row: dict[str, Any], history: Sequence[Event]) -> int | None:
    """How many lock nodes the trial's lock used: as the runner read them at a fault, else the row's."""
    read = [len(e["holders"]) for e in history if e["worker"] == -1 and isinstance(e.get("holders"), list)]
    if read:
        return max(read)
    count = row.get("node_count")
    return int(count) if isinstance(count, int | float) and not math.isnan(count) and count > 0 else None


def rule_label(rule: str) -> str:
    """A rule's id, its statement on hover (analysis/rules.py; docs/verdicts.md lists them all)."""
    statement = RULES[rule].statement if rule in RULES else "a rule this version of lockcompare does not know"
    return f'<abbr class="rule" title="rule {escape(rule)}: {escape(statement)}">{escape(rule)}</abbr>'


def rule_of_row(row: dict[str, Any]) -> str:
    """The rule behind a verdict that no event of the history shows (its id, or "")."""
    verdict = str(row.get("verdict"))
    if verdict == "unknown":
        problem = str(row.get("problem") or "")
        return next((rule for start, rule in _UNKNOWN_RULES if start in problem), "trial-failed")
    if verdict == "lease-violated" and "released nothing" in str(row.get("problem") or ""):
        return "released-nothing"
    return _ROW_RULES.get(verdict, "")


def caption(row: dict[str, Any], story: Story) -> str:
    """The verdict and why, in words (see the module docstring)."""
    verdict = str(row["verdict"])
    parts = [f"<p>{badge(verdict)} {escape(MEANINGS.get(verdict, ''))}.</p>"]
    for finding in story.findings:
        parts.append(f"<p>{rule_label(finding.rule)} {escape(finding.text)}</p>")
    shown = {f.verdict for f in story.findings}
    rule = rule_of_row(row)
    if rule and (verdict not in shown or verdict == "unknown"):
        parts.append(f"<p>{rule_label(rule)} {escape(_row_evidence(row))}</p>")
    if verdict in VIOLATIONS and not story.findings and story.missing:
        parts.append(f"<p>{escape(story.missing)} The counts above are the evidence.</p>")
    return '<div class="caption">' + "".join(parts) + "</div>"


def _row_evidence(row: dict[str, Any]) -> str:
    """The row's own words for a verdict its history does not show event by event."""
    verdict = str(row["verdict"])
    problem = str(row.get("problem") or "")
    if verdict in ("unknown", "lease-violated"):
        return problem or "the checker gave no reason"
    if verdict == "double-applied":
        return f"{row.get('double_applications')} request(s) applied more than once by the resource."
    if verdict == "starved":
        return f"rounds with an accepted write / rounds holding the lock, per worker: {row.get('progress_by_worker')}."
    return (
        f"{row.get('entries')} of {row.get('entries_planned')} planned critical sections entered; "
        f"{row.get('acquire_timeouts')} acquire(s) gave up (refusals: {row.get('refusals') or 'none'})"
        + (f"; {problem}" if problem else "")
        + "."
    )


def best_finding(
    rows: Sequence[dict[str, Any]], stories: dict[str, Story]
) -> tuple[dict[str, Any], explain.Finding] | None:
    """The trial that shows a cell's damage best, and its decisive finding: among the violating
    trials with a finding, one of the worst verdict, an unmarked one first, and its first finding
    (in time order: the cause before the damage)."""
    candidates = []
    for row in rows:
        story = stories.get(str(row["trial_id"]))
        if story is None or not story.findings or str(row["verdict"]) not in VIOLATIONS:
            continue
        cause = story.findings[0]  # in time order: the cause comes before the damage
        candidates.append((severity(str(row["verdict"])), is_marked(row), row, cause))
    if not candidates:
        return None
    _, _, row, cause = min(candidates, key=lambda c: (c[0], c[1]))
    return row, cause


def page_window(story: Story) -> incidents.Window:
    """The incident's window (svg_timeline.story_window) widened over every finding's events."""
    story_part = story_window(story.history)
    cover = explain.covering_window(story.history, story.findings)
    if cover is None:
        return story_part
    if incidents.first_incident(story.history) is None:
        return cover
    lo, hi = min(story_part.from_ms, cover.from_ms), max(story_part.to_ms, cover.to_ms)
    return incidents.Window(lo, hi, f"{cover.why}; {story_part.why}")


def trial_page(
    row: dict[str, Any],
    *,
    cell: Cell,
    results: Path,
    story: Story,
    neighbours: tuple[dict[str, Any] | None, ...],
    alone: bool = False,
) -> str:
    """A trial's page. ``alone``: rendered without the rest of the report (render/docs_trials.py, a
    page a document links), so it links no other page and says which command builds them."""
    trial_id = str(row["trial_id"])
    nav = [f'<a href="../index.html">index</a> › <a href="../cells/{escape(cell_page_name(cell))}">'
           f"{escape(cell.title)}</a>"]  # fmt: skip
    for word, other in zip(("previous", "next"), neighbours, strict=True):
        if other is not None:
            nav.append(f'<a href="{escape(trial_page_name(other))}">{word} trial</a>')
    if alone:
        nav = [f"{escape(cell.title)}: one trial page of the report of {escape(results.name)}; the index, the cell "
               f"pages and every other trial: <code>lockcompare report {escape(results.name)}</code> "
               "from the CSV's folder"]  # fmt: skip
    facts = (
        f"{row['conflicts']} conflict(s) in {row['entries']} entries, {row['lost_updates']} lost update(s), "
        f"stale writes {row.get('stale_writes_accepted')} accepted / {row.get('stale_writes_rejected')} rejected, "
        f"{row.get('writes_rejected')} write(s) rejected, {row.get('grants_while_held')} lease(s) granted while "
        f"another's was valid, {row.get('tokens_backwards')} fencing token(s) not above an earlier one; "
        f"{row.get('wall_s')} s"
    )
    problem = str(row.get("problem") or "")
    marked = (
        " Timing-marked: a stall ate the experiment's margin (its numbers are the machine's as much as the lock's)."
    )
    body = [
        f"<nav>{' · '.join(nav)}</nav>",
        f"<h1>{escape(trial_id)}</h1>",
        caption(row, story),
        f'<p class="note">{escape(facts)}.</p>',
        f'<p class="note">{escape(problem)}{escape(marked) if is_marked(row) else ""}</p>'
        if problem or is_marked(row)
        else "",
        "<h2>Timeline</h2>",
        _timeline(row, story=story),
        "<h2>Reproduce</h2>",
        '<p class="note">From the CSV\'s folder: the first reruns this very trial (its settings and seed), the second '
        "its cell.</p>",
        f'<pre class="cmd">{escape(rerun_command(row, results=results))}\n{escape(matrix_command([row]))}</pre>',
        '<div class="cols"><div><h2>Settings</h2>',
        key_values([(c, setting_text(row.get(c))) for c in SETTING_COLUMNS if c in row]),
        "</div><div><h2>Metrics</h2>",
        key_values([(c, setting_text(row.get(c))) for c in (*METRIC_COLUMNS, *TIMING_COLUMNS, "wall_s") if c in row]),
        "</div><div><h2>Provenance</h2>",
        key_values([(c, setting_text(row.get(c))) for c in _PROVENANCE_SHOWN if c in row]),
        "</div></div>",
    ]
    return page(title=trial_id, body="\n".join(part for part in body if part))


def rerun_command(row: dict[str, Any], *, results: Path) -> str:
    return f"lockcompare run --from {results.name}:{row['trial_id']}"


def _timeline(row: dict[str, Any], *, story: Story) -> str:
    if story.missing:
        return f'<p class="note">{escape(story.missing)}</p>'
    history = story.history
    window = page_window(story)
    ttl = row.get("ttl_ms")
    ttl_ms = float(ttl) if isinstance(ttl, int | float) else None
    excerpt = render_timeline(history, from_ms=window.from_ms, to_ms=window.to_ms).splitlines()
    cut = len(excerpt) - EXCERPT_LINES
    if cut > 0:
        excerpt = [*excerpt[:EXCERPT_LINES], f"... {cut} more line(s) in this window"]
    redraw = f"lockcompare history {row.get('history')} --from-ms {window.from_ms:.0f} --to-ms {window.to_ms:.0f}"
    return "\n".join(
        [
            f'<p class="note">{window.from_ms:.0f}–{window.to_ms:.0f} ms shown ({escape(window.why)}); '
            + (f"TTL {ttl_ms:g} ms." if ttl_ms is not None else "TTL unknown: the key on the nodes is not drawn.")
            + " Hover a mark for its numbers.</p>",
            f'<div class="svgbox">{render_svg(history, ttl_ms=ttl_ms, window=window)}</div>',
            legend_html(),
            "<h3>History excerpt</h3>",
            f'<p class="note">Every step that overlaps the window above (times from the trial\'s first event); all '
            f"of them, from the CSV's folder: <code>{escape(redraw)}</code></p>",
            f'<pre class="history">{escape(chr(10).join(excerpt))}</pre>',
        ]
    )
