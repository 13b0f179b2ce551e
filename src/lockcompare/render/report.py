"""A self-contained Markdown report of a results CSV: ``DIR/README.md`` and the PNGs it shows.

Everything in it is computed from the CSV and the histories beside it, and nothing in it depends
on when or where it was rendered (no "generated at", fixed figure sizes, file names derived from
experiment and cell names), so a report is rebuilt on demand rather than committed (issue 50.4:
``results/**/*.report/`` is ignored; CI builds the published one and scripts/check_report.py compares
its trial pages with the few committed ones, render/docs_trials.py). Sections: who survives what
(one picture: render/glance.py), the summary table (full
width), one matrix figure per experiment, per cell the timeline of the first trial that lost an
update, the parameters of every cell, the ``lockcompare matrix`` command that reproduces it, and
the provenance of every run the file holds. Cells are in backend registration order and experiment
catalogue order; a cell holding a timing-marked trial (analysis/sentinel.py) says so wherever it is
named.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from lockcompare.analysis.cells import CONDITION_COLUMNS, Cell, group_cells, setting_text
from lockcompare.analysis.history import Event
from lockcompare.analysis.reproduce import matrix_command, settings_key
from lockcompare.analysis.results import PROVENANCE_COLUMNS as ROW_PROVENANCE
from lockcompare.analysis.results import history_file, latest_rows, read_results
from lockcompare.analysis.sentinel import is_marked
from lockcompare.errors import LockcompareError, PlotDependencyError, RenderError
from lockcompare.render import table
from lockcompare.render.glance import GLANCE_PNG, plot_glance
from lockcompare.render.html_report import ABSENT_WHY, HTML_DIR, write_html_report
from lockcompare.render.plots import matrix_png_name, plot_matrix, plot_timeline, require_matplotlib
from lockcompare.render.pool import run_pieces
from lockcompare.render.staging import staged_folder
from lockcompare.render.table import markdown_text
from lockcompare.render.timeline import load_history

REPORT_NAME = "README.md"
#: Provenance shown per run when the CSV has it (rows before schema 4 lack it): results.py's list,
#: less what the table shows already (cluster, server_version) or what varies per trial.
PROVENANCE_COLUMNS = tuple(
    c for c in ROW_PROVENANCE if c not in ("cluster", "server_version", "lock_nodes_reachable", "jobs_concurrent")
)
#: Settings shown per cell, as stored (times already multiplied by time_scale).
PARAMETER_COLUMNS = (*CONDITION_COLUMNS, "cluster", "server_version")
#: PNG names this module writes (a folder rendered before manifests existed: see _owned).
_OUR_PNGS = ("matrix-*.png", "timeline-*.png", GLANCE_PNG)
#: The names of the files a rendering wrote, one a line: a later rendering replaces or removes only
#: these, never a file of the user's that happens to have one of our names.
MANIFEST_NAME = ".lockcompare-report"
_LEGACY_TITLE = "# lockcompare report:"


def timeline_png_name(cell: Cell) -> str:
    return f"timeline-{cell.name}.png"


def write_report(
    *,
    results: Path,
    out: Path,
    say: Callable[[str], None] | None = None,
    registered: Sequence[str] = (),
) -> list[Path]:
    """Write ``out/README.md`` and its PNGs; return their paths (the Markdown first).

    Without matplotlib (the ``plot`` extra) the Markdown and the HTML are written all the same
    (the HTML's timelines are SVG) and ``say`` is told, in one line, that the PNGs were skipped.
    ``registered``: the backends known where the report is rendered; those with no row in the file
    are named in the report and to ``say`` (the CSV does not record why a run left one out).

    Everything is rendered into a new folder beside ``out`` and put in its place whole (see
    render/staging.py): a Ctrl-C or SIGTERM leaves the previous report or none, never PNGs
    without their README (issue 38). PNGs of an earlier rendering into the same ``out`` that this
    one no longer shows are dropped, so the directory always matches its README; the user's own
    files in ``out`` stay.
    """
    rows = latest_rows(read_results(results))  # one row per trial, as the table counts them
    if not rows:
        raise RenderError(f"{results}: no trials to report")
    try:
        require_matplotlib()  # asked once, before anything is written
        plots = True
    except PlotDependencyError as exc:
        plots = False
        if say is not None:
            say(f"PNGs skipped ({exc}); the Markdown and the HTML report (SVG timelines) are written")
    absent = absent_backends(rows, registered=registered)
    if absent and say is not None:
        say(f"not in {results.name}: {', '.join(absent)} ({ABSENT_WHY})")
    owned = _owned(out)
    _refuse_foreign(out, owned=owned, names=_planned_names(rows))
    with staged_folder(out, ours=owned | {MANIFEST_NAME}) as into:
        written = _render_into(into, rows=rows, results=results, out=out, plots=plots, absent=absent)
        keep = {p.name for p in written}
        (into / MANIFEST_NAME).write_text("".join(f"{name}\n" for name in sorted(keep)), encoding="utf-8")
    return [out / p.name for p in written]


#: Said where a picture would be, when the PNGs were skipped.
NO_PICTURE = "(No picture: the PNGs need matplotlib, `pip install 'lockcompare[plot]'`; html/index.html has them.)"


def absent_backends(rows: Sequence[dict[str, Any]], *, registered: Sequence[str]) -> list[str]:
    """The registered backends that have no row in ``rows``, in the order given."""
    present = {str(r["backend"]) for r in rows}
    return [name for name in registered if name not in present]


def _render_into(
    into: Path, *, rows: Sequence[dict[str, Any]], results: Path, out: Path, plots: bool, absent: Sequence[str]
) -> list[Path]:
    """Render the report's files into the folder ``into``, its links computed from ``out`` (where
    they will be read); the Markdown first. ``plots`` False: no PNG (matplotlib is missing)."""
    pngs = [plot_glance(rows, out=into / GLANCE_PNG), *plot_matrix(rows, out=into)] if plots else []
    cells = group_cells(rows)
    sections = [_timeline_section(cell, results=results, out=out, into=into, plots=plots) for cell in cells]
    timelines = {cell.name: text for cell, (text, _) in zip(cells, sections, strict=True)}  # its Markdown paragraph
    pngs += run_pieces(_draw_timeline, [drawing for _, drawing in sections if drawing is not None])
    markdown = render_markdown(
        rows=rows, cells=cells, results=results, out=out, pngs=pngs, timelines=timelines, absent=absent
    )
    report = into / REPORT_NAME
    report.write_text(markdown, encoding="utf-8")
    html = write_html_report(rows=rows, results=results, out=into / HTML_DIR, absent=absent)
    return [report, *pngs, html]


def _owned(out: Path) -> set[str]:
    """The files of ``out`` an earlier rendering wrote: its manifest's names, or, in a folder rendered
    before manifests existed (its README.md is a report), the names of our patterns."""
    manifest = out / MANIFEST_NAME
    if manifest.is_file():
        try:
            return {line for line in manifest.read_text(encoding="utf-8").splitlines() if line and "/" not in line}
        except (OSError, UnicodeDecodeError):
            return set()
    try:
        with (out / REPORT_NAME).open(encoding="utf-8") as fh:
            legacy = fh.readline().startswith(_LEGACY_TITLE)
    except (OSError, UnicodeDecodeError):
        legacy = False
    if not legacy:
        return set()
    return {REPORT_NAME, *(p.name for pattern in _OUR_PNGS for p in out.glob(pattern))}


def _planned_names(rows: Sequence[dict[str, Any]]) -> set[str]:
    """Every name this rendering may write (timelines for every cell: a superset is safe)."""
    cells = group_cells(rows)
    matrices = {matrix_png_name(str(r["experiment"])) for r in rows}
    return {REPORT_NAME, GLANCE_PNG, HTML_DIR, *matrices, *(timeline_png_name(c) for c in cells)}


def _refuse_foreign(out: Path, *, owned: set[str], names: set[str]) -> None:
    """Refuse, before anything is written, to overwrite a file in ``out`` that no rendering wrote."""
    if not out.is_dir():
        return
    foreign = sorted(n for n in names if (out / n).exists() or (out / n).is_symlink())
    foreign = [n for n in foreign if n not in owned]
    if foreign:
        raise RenderError(
            f"--out {out} holds {foreign[0]}"
            + (f" and {len(foreign) - 1} more file(s)" if len(foreign) > 1 else "")
            + " that lockcompare did not write: choose a new or empty folder (nothing was written)"
        )


def cell_title(cell: Cell) -> str:
    """The cell's title, with how many of its trials are timing-marked when any is."""
    marked = sum(1 for row in cell.rows if is_marked(row))
    return cell.title + (f" [{marked} of {len(cell.rows)} timing-marked]" if marked else "")


def history_path(row: dict[str, Any], *, results: Path) -> Path | None:
    """A row's history file, or None when its path leaves the CSV's folder (see results.history_file)."""
    return history_file(row, results=results)


def row_for_history(path: Path) -> dict[str, Any] | None:
    """The results row of a history kept where the matrix puts it (``x.histories/`` beside
    ``x.csv``), or None when there is no such CSV or row."""
    folder = path.resolve().parent
    if not folder.name.endswith(".histories"):
        return None
    csv = folder.with_name(folder.name.removesuffix(".histories") + ".csv")
    if not csv.is_file():
        return None
    try:
        rows = read_results(csv)
    except LockcompareError:
        return None
    return next((r for r in rows if history_path(r, results=csv) == path.resolve()), None)


def _first_lost(cell: Cell) -> dict[str, Any] | None:
    return next((r for r in cell.rows if r["lost_updates"] > 0 and r["verdict"] != "unknown"), None)


def _draw_timeline(history: list[Event], out: Path, title: str, ttl_ms: float | None) -> Path:
    """One cell's timeline PNG (a piece of render/pool.py's work)."""
    return plot_timeline(history, out=out, title=title, ttl_ms=ttl_ms)


def _timeline_section(
    cell: Cell, *, results: Path, out: Path, into: Path, plots: bool = True
) -> tuple[str, tuple[list[Event], Path, str, float | None] | None]:
    """The cell's timeline paragraph, and the arguments of :func:`_draw_timeline` for its picture
    (None: no picture)."""
    row = _first_lost(cell)
    if row is None:
        return "", None
    source = history_path(row, results=results)
    link = f"[{code(row['history'])}]({_rel(source, out)})" if source is not None else code(row["history"])
    facts = (
        f"Trial {code(row['trial_id'])} of run {code(row['run_id'])} ({markdown_text(row['started_at'])}): "
        f"{_count(row['lost_updates'], 'lost update')}, {_count(row['conflicts'], 'conflict')} "
        f"in {row['entries']} entries, "
        f"verdict {code(row['verdict'])}. History: {link}."
    )
    if source is None:
        return f"{facts}\n\n(The history path leaves the results' folder: not read.)", None
    if not source.is_file():
        return f"{facts}\n\n(The history file is missing, so there is no picture.)", None
    try:
        history = load_history(source)
    except LockcompareError as exc:
        return f"{facts}\n\n(The history cannot be read: {exc}.)", None
    if not history:
        return f"{facts}\n\n(The history is empty, so there is no picture.)", None
    if not plots:
        return f"{facts}\n\n{NO_PICTURE}", None
    png = into / timeline_png_name(cell)
    drawing = (list(history), png, f"{cell_title(cell)}: {row['trial_id']}", row["ttl_ms"])
    picture = f"![timeline of {markdown_text(row['trial_id'])}]({png.name})"
    redraw = code(f"lockcompare history {row['history']} --plot {png.name} --from-ms A --to-ms B")
    return f"{facts}\n\n{picture}\n\nAnother window, from the CSV's folder: {redraw}.", drawing


def render_markdown(
    *,
    rows: Sequence[dict[str, Any]],
    cells: Sequence[Cell],
    results: Path,
    out: Path,
    pngs: Sequence[Path],
    timelines: dict[str, str],
    absent: Sequence[str] = (),
) -> str:
    runs = sorted({r["run_id"] for r in rows})
    started = sorted(r["started_at"] for r in rows)
    parts = [
        f"# lockcompare report: {results.name}",
        f"{_trials(len(rows))} in {len(cells)} cells from {len(runs)} runs, started {_span(started)}. "
        f"Everything below is computed from [`{results.name}`]({_rel(results, out)}) and the histories "
        f"beside it; render it again from the CSV's folder with "
        f"`lockcompare report {results.name} --out {_rel(out, results.parent)}`.",
        "## Who survives what",
        f"![who survives what]({GLANCE_PNG})" if any(p.name == GLANCE_PNG for p in pngs) else NO_PICTURE,
        "## Summary",
        "Conflicts: critical-section entries that found another worker inside, counted at the resource. "
        "Lost updates: increments the workers made that the final balance does not contain.",
        table.render(rows, fmt="github", wide=True),
        "## Conflicts and lost updates",
        *([f"![{p.stem}]({p.name})" for p in pngs if p.name.startswith("matrix-")] or [NO_PICTURE]),
        "## The first lost update, per cell",
        "Each picture is one real trial: a lane per worker with its lease as the worker believes it, "
        "where the key really expires on the lock nodes, its critical sections, pauses, reads and "
        "writes, and the runner's faults; shaded red where two workers were inside at once.",
    ]
    quiet = []
    for cell in cells:
        if timelines.get(cell.name):
            parts += [f"### {markdown_text(cell_title(cell))}", timelines[cell.name]]
        else:
            quiet.append(f"{markdown_text(cell_title(cell))} ({_trials(len(cell.rows))})")
    if quiet:
        parts.append("No trial lost an update in: " + "; ".join(quiet) + ".")
    if absent:
        parts += ["## Backends not in this file", f"{', '.join(f'`{name}`' for name in absent)}: {ABSENT_WHY}."]
    parts += [
        "## Parameters",
        "As stored in the CSV: times in ms, already multiplied by `time_scale`.",
        _parameters_table(cells),
        "## Commands",
        "The `lockcompare matrix` command that reproduces each cell, built from its rows' settings. The "
        "CSV stores times already multiplied by `time_scale`; the commands give them at the lesson's "
        "scale with the same `--time-scale`, so the new rows' settings equal these.",
        _commands(cells),
        "## Provenance",
        _provenance_table(rows),
    ]
    return "\n\n".join(parts) + "\n"


def _parameters_table(cells: Sequence[Cell]) -> str:
    headers = ["cell", "trials", *PARAMETER_COLUMNS]
    lines = [
        [cell_title(cell), str(len(cell.rows)), *(_values(cell.rows, c) for c in PARAMETER_COLUMNS)] for cell in cells
    ]
    return table.format_table(headers, lines, fmt="github")


def _commands(cells: Sequence[Cell]) -> str:
    blocks = []
    for cell in cells:
        groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
        for row in cell.rows:
            groups.setdefault(settings_key(row), []).append(row)
        commands = "\n".join(matrix_command(group) for group in groups.values())
        fence = "`" * max(3, _longest_backticks(commands) + 1)  # a cell's text cannot close the block
        blocks.append(f"{markdown_text(cell_title(cell))}:\n\n{fence}sh\n{commands}\n{fence}")
    return "\n\n".join(blocks)


def _provenance_table(rows: Sequence[dict[str, Any]]) -> str:
    present = [c for c in PROVENANCE_COLUMNS if any(str(r.get(c) or "").strip() for r in rows)]
    headers = ["run_id", "trials", "started_at", "cluster", "server_version", *present]
    by_run: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_run.setdefault(row["run_id"], []).append(row)
    lines = [
        [
            run,
            str(len(group)),
            _span(sorted(r["started_at"] for r in group)),
            *(_values(group, c) for c in headers[3:]),
        ]
        for run, group in sorted(by_run.items(), key=lambda item: min(r["started_at"] for r in item[1]))
    ]
    return table.format_table(headers, lines, fmt="github")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _trials(n: int) -> str:
    return _count(n, "trial")


def _span(ordered: Sequence[str]) -> str:
    return ordered[0] if ordered[0] == ordered[-1] else f"{ordered[0]} – {ordered[-1]}"


def _values(rows: Sequence[dict[str, Any]], column: str) -> str:
    """One value, or the range of numbers / the distinct texts when the rows differ."""
    raw = [r.get(column) for r in rows]
    values = [v for v in raw if v not in (None, "") and not (isinstance(v, float) and math.isnan(v))]
    if not values:
        return ""
    try:
        numbers = sorted({float(v) for v in values})
    except (TypeError, ValueError):
        return ", ".join(sorted({setting_text(v) for v in values}))
    lo, hi = (setting_text(numbers[0]), setting_text(numbers[-1]))
    return lo if lo == hi else f"{lo}–{hi}"


def _rel(path: Path, start: Path) -> str:
    return Path(os.path.relpath(path.resolve(), start.resolve())).as_posix()


def code(value: object) -> str:
    """A CSV value in a Markdown code span (HTML is not rendered there; a newline or ``|`` still ends
    a table row, and a backtick would end the span: fenced with more backticks than it holds)."""
    text = " ".join(str(value).splitlines()).replace("|", "\\|")
    ticks = "`" * (_longest_backticks(text) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def _longest_backticks(text: str) -> int:
    longest = run = 0
    for ch in text:
        run = run + 1 if ch == "`" else 0
        longest = max(longest, run)
    return longest
