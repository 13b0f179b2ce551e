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

import shutil
from collections.abc import Sequence
from html import escape
from pathlib import Path
from typing import Any

from lockcompare.analysis.cells import Cell, group_cells, setting_text, slug
from lockcompare.analysis.rates import DAMAGE_NOTE, RATE_NOTE, damage_rate, violation_rate
from lockcompare.analysis.reproduce import matrix_command, settings_key
from lockcompare.analysis.results import METRIC_COLUMNS, PROVENANCE_COLUMNS, TIMING_COLUMNS, history_file
from lockcompare.analysis.sentinel import is_marked
from lockcompare.errors import LockcompareError, RenderError
from lockcompare.render import table
from lockcompare.render.glance import EMPTY, OTHER_STYLE, VERDICT_STYLE, glance_grid
from lockcompare.render.html_assets import key_values, page, table_html
from lockcompare.render.svg_timeline import legend_html, render_svg, story_window
from lockcompare.render.timeline import load_history, render_timeline
from lockcompare.scenario.settings import SETTING_COLUMNS

HTML_DIR = "html"
#: Marks a folder this module wrote (a later rendering replaces only such a folder).
MARKER = ".lockcompare-html"
#: A trial page shows at most this many history lines (the window's); the rest: `lockcompare history`.
EXCERPT_LINES = 160
_PROVENANCE_SHOWN = ("run_id", "started_at", *PROVENANCE_COLUMNS, "history")


def verdict_colour(verdict: str) -> str:
    return VERDICT_STYLE.get(verdict, OTHER_STYLE)[0]


def trial_page_name(row: dict[str, Any]) -> str:
    return f"{slug(str(row['trial_id']))}.html"


def cell_page_name(cell: Cell) -> str:
    return f"{cell.name}.html"


def grid_key(cell: Cell) -> tuple[str, str]:
    """The (row, column) labels glance.py gives ``cell`` (render/glance.py glance_grid: a resource
    check of its own makes a row, any other varying setting a column)."""
    checks = [f"{v}" for c, v in cell.conditions if c == "resource_check"]
    others = [f"{c} {v}" for c, v in cell.conditions if c != "resource_check"]
    return ", ".join([cell.backend, *checks]), ", ".join([cell.experiment, *others])


def write_html_report(*, rows: Sequence[dict[str, Any]], results: Path, out: Path) -> Path:
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
    for cell in cells:
        (part / "cells" / cell_page_name(cell)).write_text(_cell_page(cell), encoding="utf-8")
        for i, row in enumerate(cell.rows):
            neighbours = (cell.rows[i - 1] if i else None, cell.rows[i + 1] if i + 1 < len(cell.rows) else None)
            text = _trial_page(row, cell=cell, results=results, neighbours=neighbours)
            (part / "trials" / trial_page_name(row)).write_text(text, encoding="utf-8")
    (part / "index.html").write_text(_index_page(rows, cells=cells, results=results), encoding="utf-8")
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


# ---------------------------------------------------------------------------------------------
# index


def _index_page(rows: Sequence[dict[str, Any]], *, cells: Sequence[Cell], results: Path) -> str:
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
        "Click a cell for its trials; each trial has its timeline.</p>",
        _grid(rows, cells=cells),
        _verdict_legend(),
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
    out = [f'<table class="grid"><thead><tr><th></th>{head}</tr></thead><tbody>']
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
            tds.append(
                f'<td class="cell{marked}" data-verdict="{escape(shown.verdict)}" style="background:{shown.colour}">'
                f'<a href="cells/{escape(cell_page_name(cell))}" title="{escape(cell.title)}">{label}</a></td>'
            )
        out.append(f"<tr><th>{escape(row_label)}</th>{''.join(tds)}</tr>")
    out.append("</tbody></table>")
    return "\n".join(out)


def _verdict_legend() -> str:
    items = "".join(
        f'<span class="key"><i style="background:{colour}"></i>{escape(word)}</span>'
        for colour, word in VERDICT_STYLE.values()
    )
    marked = '<span class="key"><i style="background:#fff;border:3px solid #54278f"></i>timing-marked</span>'
    return f'<p class="legend">{items}{marked}</p>'


def _provenance(rows: Sequence[dict[str, Any]]) -> str:
    by_run: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_run.setdefault(str(row["run_id"]), []).append(row)
    present = [c for c in PROVENANCE_COLUMNS if any(str(r.get(c) or "").strip() for r in rows)]
    lines = []
    for run, group in sorted(by_run.items(), key=lambda item: min(str(r["started_at"]) for r in item[1])):
        started = sorted(str(r["started_at"]) for r in group)
        values = [
            ", ".join(sorted({setting_text(r.get(c)) for r in group if r.get(c) not in (None, "")})) for c in present
        ]
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


def _cell_page(cell: Cell) -> str:
    lines = []
    for row in cell.rows:
        link = f'<a href="../trials/{escape(trial_page_name(row))}">{escape(str(row["trial_id"]))}</a>'
        lines.append(
            [
                escape(str(row["trial"])),
                link,
                _badge(str(row["verdict"])),
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


def _badge(verdict: str) -> str:
    return f'<span class="verdict" style="background:{verdict_colour(verdict)}">{escape(verdict)}</span>'


# ---------------------------------------------------------------------------------------------
# a trial


def _trial_page(
    row: dict[str, Any], *, cell: Cell, results: Path, neighbours: tuple[dict[str, Any] | None, ...]
) -> str:
    trial_id = str(row["trial_id"])
    nav = [f'<a href="../index.html">index</a> › <a href="../cells/{escape(cell_page_name(cell))}">'
           f"{escape(cell.title)}</a>"]  # fmt: skip
    for word, other in zip(("previous", "next"), neighbours, strict=True):
        if other is not None:
            nav.append(f'<a href="{escape(trial_page_name(other))}">{word} trial</a>')
    facts = (
        f"{row['conflicts']} conflict(s) in {row['entries']} entries, {row['lost_updates']} lost update(s), "
        f"stale writes {row.get('stale_writes_accepted')} accepted / {row.get('stale_writes_rejected')} rejected, "
        f"{row.get('writes_rejected')} write(s) rejected; {row.get('wall_s')} s"
    )
    problem = str(row.get("problem") or "")
    marked = (
        " Timing-marked: a stall ate the experiment's margin (its numbers are the machine's as much as the lock's)."
    )
    body = [
        f"<nav>{' · '.join(nav)}</nav>",
        f"<h1>{escape(trial_id)}</h1>",
        f"<p>{_badge(str(row['verdict']))} {escape(facts)}</p>",
        f'<p class="note">{escape(problem)}{escape(marked) if is_marked(row) else ""}</p>'
        if problem or is_marked(row)
        else "",
        "<h2>Timeline</h2>",
        _timeline(row, results=results),
        "<h2>Reproduce</h2>",
        '<p class="note">From the CSV\'s folder: the first reruns this very trial (its settings and seed), the second '
        "its cell.</p>",
        f'<pre class="cmd">{escape(_rerun_command(row, results=results))}\n{escape(matrix_command([row]))}</pre>',
        '<div class="cols"><div><h2>Settings</h2>',
        key_values([(c, setting_text(row.get(c))) for c in SETTING_COLUMNS if c in row]),
        "</div><div><h2>Metrics</h2>",
        key_values([(c, setting_text(row.get(c))) for c in (*METRIC_COLUMNS, *TIMING_COLUMNS, "wall_s") if c in row]),
        "</div><div><h2>Provenance</h2>",
        key_values([(c, setting_text(row.get(c))) for c in _PROVENANCE_SHOWN if c in row]),
        "</div></div>",
    ]
    return page(title=trial_id, body="\n".join(part for part in body if part))


def _rerun_command(row: dict[str, Any], *, results: Path) -> str:
    return f"lockcompare run --from {results.name}:{row['trial_id']}"


def _timeline(row: dict[str, Any], *, results: Path) -> str:
    source = history_file(row, results=results)
    if source is None:
        return '<p class="note">The history path leaves the results\' folder: not read.</p>'
    if not source.is_file():
        return f'<p class="note">The history file {escape(str(row.get("history")))} is missing: no timeline.</p>'
    try:
        history = load_history(source)
    except LockcompareError as exc:
        return f'<p class="note">The history cannot be read: {escape(str(exc))}</p>'
    if not history:
        return '<p class="note">The history is empty: no timeline.</p>'
    window = story_window(history)
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
            f'<p class="note">The steps in the window above; all of them, from the CSV\'s folder: '
            f"<code>{escape(redraw)}</code></p>",
            f'<pre class="history">{escape(chr(10).join(excerpt))}</pre>',
        ]
    )
