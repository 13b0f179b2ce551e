"""The report as HTML: a verdict grid that links to every trial, each trial a page with its timeline.

``lockcompare report`` writes it into ``<report>/html/`` beside the Markdown (render/report.py
makes one call here). Self-contained: CSS and the table-sorting script are inline in every page
(render/html_assets.py), the timelines are inline SVG (render/svg_timeline.py), and links are
relative, so the folder works from ``file://``, moved or zipped, with no network.

- ``index.html``: who survives what — the grid of render/glance.py (the same cells, colours and
  words as ``glance.png``), each cell a link to its page; the summary table of render/table.py,
  sortable by any column; the provenance of every run.
- ``cells/<cell>.html``: the cell's trials (sortable), its parameters and the ``lockcompare
  matrix`` command that reproduces it (analysis/reproduce.py).
- ``trials/<trial id>.html``: the verdict and counts, the timeline around the first incident
  (Jepsen's timeline.html, one lane per worker), the history excerpt under it, the row's settings,
  metrics and provenance, and the commands that rerun the trial and redraw it.

Everything is computed from the CSV and the histories beside it, like the Markdown report; a
missing or unreadable history is said on its trial's page, never fatal. The folder is written
whole under a temporary name and then put in place, so a rendering that fails leaves the previous
one; a folder of that name that no rendering wrote is refused.
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Sequence
from html import escape
from pathlib import Path
from typing import Any

from lockcompare.analysis.cells import Cell, group_cells, setting_text
from lockcompare.analysis.rates import DAMAGE_NOTE, RATE_NOTE, damage_rate, violation_rate
from lockcompare.analysis.reproduce import matrix_command, settings_key
from lockcompare.analysis.results import PROVENANCE_COLUMNS
from lockcompare.analysis.sentinel import is_marked
from lockcompare.analysis.verdicts import MEANINGS, VERDICTS, VIOLATIONS
from lockcompare.errors import RenderError
from lockcompare.render import table
from lockcompare.render.glance import EMPTY, VERDICT_STYLE, glance_grid
from lockcompare.render.html_assets import key_values, page, table_html
from lockcompare.render.html_trial import (
    Story,
    badge,
    best_finding,
    cell_page_name,
    read_story,
    rule_label,
    rule_of_row,
    trial_page,
    trial_page_name,
)
from lockcompare.render.pool import run_pieces
from lockcompare.scenario.settings import SETTING_COLUMNS

HTML_DIR = "html"
#: Marks a folder this module wrote (a later rendering replaces only such a folder).
MARKER = ".lockcompare-html"
#: Why the report cannot say more about a backend that has no row (said beside its name).
ABSENT_WHY = (
    "registered here, no row in the file: the run did not ask for it or could not run it, which the CSV "
    "does not record; `lockcompare backends` says which cannot run on this machine and why"
)


def grid_key(cell: Cell) -> tuple[str, str]:
    """The (row, column) labels glance.py gives ``cell`` (render/glance.py glance_grid: a resource
    check of its own makes a row, any other varying setting a column)."""
    checks = [f"{v}" for c, v in cell.conditions if c == "resource_check"]
    others = [f"{c} {v}" for c, v in cell.conditions if c != "resource_check"]
    return ", ".join([cell.backend, *checks]), ", ".join([cell.experiment, *others])


def write_html_report(*, rows: Sequence[dict[str, Any]], results: Path, out: Path, absent: Sequence[str] = ()) -> Path:
    """Write the pages into the folder ``out`` (see the module docstring) and return ``out``: a
    folder, so render/report.py lists it in its manifest as one name (its index is ``index.html``)."""
    if not rows:
        raise RenderError(f"{results}: no trials to report")
    if (out.exists() or out.is_symlink()) and not (out / MARKER).is_file():
        raise RenderError(f"{out} exists and lockcompare did not write it: move it away (the HTML was not written)")
    part = out.with_name(out.name + ".part")
    if part.exists():
        shutil.rmtree(part)
    (part / "cells").mkdir(parents=True)
    (part / "trials").mkdir()
    cells = group_cells(rows)
    run_pieces(_write_cell_pages, [(cell, results, part) for cell in cells])
    index = _index_page(rows, cells=cells, results=results, absent=absent)
    (part / "index.html").write_text(index, encoding="utf-8")
    (part / MARKER).write_text("written by lockcompare report\n", encoding="utf-8")
    if out.exists():
        old = out.with_name(out.name + ".old")
        if old.exists():
            shutil.rmtree(old)
        out.rename(old)
        part.rename(out)
        shutil.rmtree(old)
    else:
        part.rename(out)
    return out


def _write_cell_pages(cell: Cell, results: Path, part: Path) -> None:
    """A cell's page and its trials' pages, into the folder ``part`` (a piece of render/pool.py's work;
    one cell's histories in memory at a time)."""
    stories = {str(row["trial_id"]): read_story(row, results=results) for row in cell.rows}
    (part / "cells" / cell_page_name(cell)).write_text(_cell_page(cell, stories=stories), encoding="utf-8")
    for i, row in enumerate(cell.rows):
        neighbours = (cell.rows[i - 1] if i else None, cell.rows[i + 1] if i + 1 < len(cell.rows) else None)
        story = stories[str(row["trial_id"])]
        text = trial_page(row, cell=cell, results=results, story=story, neighbours=neighbours)
        (part / "trials" / trial_page_name(row)).write_text(text, encoding="utf-8")


# ---------------------------------------------------------------------------------------------
# index


def _index_page(
    rows: Sequence[dict[str, Any]], *, cells: Sequence[Cell], results: Path, absent: Sequence[str] = ()
) -> str:
    runs = sorted({str(r["run_id"]) for r in rows})
    headers, lines = table.summarize(rows, wide=True)
    body = [
        f"<h1>lockcompare report: {escape(results.name)}</h1>",
        f'<p class="note">{len(rows)} trials in {len(cells)} cells from {len(runs)} run(s). Computed from '
        f"<code>{escape(results.name)}</code> and the histories beside it; render again with "
        f"<code>lockcompare report {escape(results.name)}</code>.</p>",
        '<h2 id="grid">Who survives what</h2>',
        '<p class="note">The worst verdict per cell (as in glance.png), its violation rate (violations / observed '
        "trials [exact 95% interval]) and lost updates summed over its trials. "
        "Click a cell for its trials; each trial has its timeline. Hover a verdict for what it means.</p>",
        _verdict_legend(),
        _grid(rows, cells=cells),
        _absent(absent, results=results),
        '<h2 id="summary">Summary</h2>',
        '<p class="note">Click a column to sort. Conflicts: entries that found another worker inside, counted at '
        "the resource. Lost updates: increments the final balance does not contain.</p>",
        f'<p class="note">{escape(RATE_NOTE)}'
        + (f" {escape(DAMAGE_NOTE)}" if table.DAMAGE_HEADER in headers else "")
        + "</p>",
        table_html(headers, _linked(lines, cells=cells), raw=True),
        '<h2 id="provenance">Provenance</h2>',
        _provenance(rows),
    ]
    return page(title=f"lockcompare report: {results.name}", body="\n".join(body))


def _linked(lines: list[list[str]], *, cells: Sequence[Cell]) -> list[list[str]]:
    """The summary's lines, escaped, each backend a link to its cell's page (table.summarize lists
    the cells of analysis/cells.py in their order: one line per cell)."""
    escaped = [[escape(text) for text in line] for line in lines]
    if len(lines) != len(cells):
        return escaped
    for line, cell in zip(escaped, cells, strict=True):
        line[0] = f'<a href="cells/{escape(cell_page_name(cell))}">{line[0]}</a>'
    return escaped


def _grid(rows: Sequence[dict[str, Any]], *, cells: Sequence[Cell]) -> str:
    grid = glance_grid(rows)
    by_key = {grid_key(cell): cell for cell in cells}
    head = "".join(f'<th class="col">{escape(c)}</th>' for c in grid.columns)
    # the grid scrolls inside its own box, its headers stuck to the box's edges (33 rows × 20 columns)
    out = [f'<div class="gridbox"><table class="grid"><thead><tr><th class="corner"></th>{head}</tr></thead><tbody>']
    for row_label in grid.rows:
        tds = []
        for column in grid.columns:
            shown = grid.cells.get((row_label, column))
            cell = by_key.get((row_label, column))
            if shown is None or cell is None:
                tds.append(f'<td class="cell empty" style="background:{EMPTY}">not run</td>')
                continue
            label = "<br>".join(escape(line) for line in shown.label.splitlines())
            marked = " marked" if shown.marked else ""
            tip = (
                f"{cell.title}: {shown.verdict}: {MEANINGS.get(shown.verdict, 'a verdict this version does not know')}"
            )
            tds.append(
                f'<td class="cell{marked}" data-verdict="{escape(shown.verdict)}" style="background:{shown.colour}">'
                f'<a href="cells/{escape(cell_page_name(cell))}" title="{escape(tip)}">{label}</a></td>'
            )
        out.append(f'<tr><th class="rowhead">{escape(row_label)}</th>{"".join(tds)}</tr>')
    out.append("</tbody></table></div>")
    return "\n".join(out)


def _verdict_legend() -> str:
    """The key to the grid's colours, above it: each verdict's word, defined on hover, and the
    definitions themselves one click away."""
    items = "".join(
        f'<span class="key" title="{escape(MEANINGS[name])}"><i style="background:{colour}"></i>{escape(word)}</span>'
        for name, (colour, word) in VERDICT_STYLE.items()
    )
    marked = (
        '<span class="key" title="a stall of the machine ate at least half the experiment\'s timing margin">'
        '<i style="background:#fff;border:3px solid #54278f"></i>timing-marked</span>'
    )
    return f'<p class="legend">{items}{marked}</p>\n{verdict_definitions()}'


def verdict_definitions() -> str:
    """Every verdict with its meaning (analysis/verdicts.py), folded: the words the pages use, defined."""
    items = "".join(f"<dt>{badge(v.name)}</dt><dd>{escape(v.meaning)}</dd>" for v in VERDICTS)
    return f'<details class="verdicts"><summary>What the verdicts mean</summary><dl>{items}</dl></details>'


def _absent(absent: Sequence[str], *, results: Path) -> str:
    if not absent:
        return ""
    names = ", ".join(f"<code>{escape(name)}</code>" for name in absent)
    return f'<p class="note">Not in {escape(results.name)}: {names} ({escape(ABSENT_WHY)}).</p>'


#: A provenance cell names at most this many distinct texts; numbers are given as their range.
PROVENANCE_VALUES_SHOWN = 8


def provenance_value(values: Sequence[object]) -> str:
    """A run's values of one provenance column in one cell: the one value, the range of numbers
    (``0.4–7.9``: ~100 load averages are one range, and sort as numbers), or the distinct texts,
    at most :data:`PROVENANCE_VALUES_SHOWN` and how many more.

    >>> provenance_value([1, 12, 3, 2]), provenance_value(["a", "b", "a"]), provenance_value(list("abcdefghij"))
    ('1–12', 'a, b', 'a, b, c, d, e, f, g, h and 2 more')
    """
    present = [v for v in values if v not in (None, "") and not (isinstance(v, float) and math.isnan(v))]
    try:
        numbers = sorted({float(v) for v in present})  # type: ignore[arg-type]
    except (TypeError, ValueError):
        texts = sorted({setting_text(v) for v in present})
        shown = ", ".join(texts[:PROVENANCE_VALUES_SHOWN])
        return shown + (
            f" and {len(texts) - PROVENANCE_VALUES_SHOWN} more" if len(texts) > PROVENANCE_VALUES_SHOWN else ""
        )
    if not numbers:
        return ""
    lo, hi = setting_text(_plain(numbers[0])), setting_text(_plain(numbers[-1]))
    return lo if lo == hi else f"{lo}–{hi}"


def _plain(number: float) -> float | int:
    return int(number) if number.is_integer() else number


def _provenance(rows: Sequence[dict[str, Any]]) -> str:
    by_run: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_run.setdefault(str(row["run_id"]), []).append(row)
    present = [c for c in PROVENANCE_COLUMNS if any(str(r.get(c) or "").strip() for r in rows)]
    lines = []
    for run, group in sorted(by_run.items(), key=lambda item: min(str(r["started_at"]) for r in item[1])):
        started = sorted(str(r["started_at"]) for r in group)
        values = [provenance_value([r.get(c) for r in group]) for c in present]
        lines.append([run, str(len(group)), f"{started[0]} – {started[-1]}", *values])
    return table_html(["run_id", "trials", "started_at", *present], lines)


# ---------------------------------------------------------------------------------------------
# a cell


def _rates(cell: Cell) -> str:
    """The cell's answer in words: its violation rate, and its damage per struck fault where it has one."""
    rate = violation_rate(cell.rows)
    text = f"Violation rate: {rate.text()} (violations / trials that observed the lock [exact 95% interval])"
    if rate.unobserved:
        text += f"; {rate.unobserved} trial(s) left out (unknown or unavailable)"
    damage = damage_rate(cell.rows)
    if damage is not None:
        text += f". Lost updates per struck fault: {damage.text()}"
    return text + "."


def _mechanism(cell: Cell, *, stories: dict[str, Story]) -> str:
    """What broke the cell's trials, in words, and the trial that shows it best (with a link)."""
    violating = [r for r in cell.rows if str(r["verdict"]) in VIOLATIONS]
    if not violating:
        return ""
    rules: dict[str, int] = {}
    for row in violating:
        story = stories.get(str(row["trial_id"]))
        found = story.findings if story is not None else []
        for rule in dict.fromkeys([f.rule for f in found] or [rule_of_row(row) or str(row["verdict"])]):
            rules[rule] = rules.get(rule, 0) + 1
    counted = ", ".join(f"{rule} ({n})" for rule, n in sorted(rules.items(), key=lambda item: -item[1]))
    text = [f"<p>What broke, rule by rule (trials), in its {len(violating)} violating trial(s): {escape(counted)}.</p>"]
    best = best_finding(violating, stories)
    if best is not None:
        row, finding = best
        link = f'<a href="../trials/{escape(trial_page_name(row))}">{escape(str(row["trial_id"]))}</a>'
        text.append(f"<p>Shown best by {link}: {rule_label(finding.rule)} {escape(finding.text)}</p>")
    return '<div class="caption">' + "".join(text) + "</div>"


def _cell_page(cell: Cell, *, stories: dict[str, Story]) -> str:
    lines = []
    for row in cell.rows:
        link = f'<a href="../trials/{escape(trial_page_name(row))}">{escape(str(row["trial_id"]))}</a>'
        lines.append(
            [
                escape(str(row["trial"])),
                link,
                badge(str(row["verdict"])),
                f"{row['conflicts']}/{row['entries']}",
                escape(str(row["lost_updates"])),
                escape(f"{row.get('stale_writes_accepted')}/{row.get('stale_writes_rejected')}"),
                escape(str(row.get("writes_rejected"))),
                escape(f"{row.get('wall_s')}"),
                "yes" if is_marked(row) else "",
            ]
        )
    headers = ["trial", "trial id", "verdict", "conflicts/entries", "lost updates", "stale writes accepted/rejected",
               "writes rejected", "wall s", "timing-marked"]  # fmt: skip
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for row in cell.rows:
        groups.setdefault(settings_key(row), []).append(row)
    commands = "\n".join(matrix_command(group) for group in groups.values())
    varying = sorted({c for row in cell.rows for c in SETTING_COLUMNS if row.get(c) != cell.rows[0].get(c)})
    settings = [(c, setting_text(cell.rows[0].get(c))) for c in SETTING_COLUMNS if c not in varying and c != "seed"]
    body = [
        '<nav><a href="../index.html">index</a></nav>',
        f"<h1>{escape(cell.title)}</h1>",
        f'<p class="note">{len(cell.rows)} trial(s). Click a trial for its timeline; click a column to sort.</p>',
        f'<p class="rate">{escape(_rates(cell))}</p>',
        _mechanism(cell, stories=stories),
        table_html(headers, lines, raw=True),
        "<h2>Reproduce</h2>",
        "<p class=\"note\">From the CSV's folder; times are given at the lesson's scale with the same "
        "<code>--time-scale</code>, so the new rows' settings equal these.</p>",
        f'<pre class="cmd">{escape(commands)}</pre>',
        "<h2>Settings</h2>",
        '<p class="note">As stored in the CSV (times already multiplied by time_scale)'
        + (f"; varying between trials: {escape(', '.join(varying))}" if varying else "")
        + ".</p>",
        key_values(settings),
    ]
    return page(title=cell.title, body="\n".join(body))
