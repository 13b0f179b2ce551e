"""The commands that read results and need no server: compare, table, history, report, upgrade."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from lockcompare.analysis.compare import compare_rows, comparison_table, differs, summary_lines
from lockcompare.analysis.results import (
    ResultsWriter,
    inspect_results,
    read_results,
    rewrite,
    split_superseded,
    superseded_path,
)
from lockcompare.cli.core import app
from lockcompare.cli.options import (
    _split,
)
from lockcompare.errors import InvalidValueError
from lockcompare.files import check_output_dir, check_output_file, results_lock
from lockcompare.render import table
from lockcompare.render.timeline import STEP_KINDS, load_history, render_timeline
from lockcompare.scenario.numbers import parse_number


@app.command()
def compare(
    path_a: Annotated[Path, typer.Argument(help="Results CSV A (e.g. a serial run).")],
    path_b: Annotated[Path, typer.Argument(help="Results CSV B (e.g. the same matrix with --jobs 4).")],
    fmt: Annotated[str, typer.Option("--format", help="github, simple, latex or csv.")] = "github",
    ignore: Annotated[
        str, typer.Option("--ignore", help="Settings that do not split cells here, comma-separated (e.g. jitter).")
    ] = "",
) -> None:
    """Compare two results files cell by cell: each file's violation rate with its exact 95% interval
    and Fisher's exact test of the two, beside the conflict rate and lost updates per trial.

    A cell differs only where Fisher's two-sided p < 0.05; the closing lines say how many cells were
    tested (some differ by chance alone). Cells are matched across time scales (every time is
    recorded at the lesson's scale); a cell in one file only says why. Exit code 1 if any cell
    differs or is in one file only (as diff does), 0 otherwise.
    """
    table.check_format(fmt)
    rows_a, rows_b = read_results(path_a), read_results(path_b)
    lines = compare_rows(rows_a, rows_b, ignore=_split(ignore))
    headers, cells = comparison_table(lines)
    typer.echo(table.format_table(headers, cells, fmt=fmt))
    print(f"{path_a} (A) against {path_b} (B), {len(lines)} cells:", file=sys.stderr)
    for line in summary_lines(lines, rows_a=rows_a, rows_b=rows_b):
        print(line, file=sys.stderr)
    if any(differs(line) for line in lines):
        raise typer.Exit(1)


@app.command(name="table")
def table_command(
    path: Annotated[Path, typer.Argument(help="A results CSV written by `lockcompare matrix`.")],
    fmt: Annotated[str, typer.Option("--format", help="github, simple, latex or csv.")] = "github",
    wide: Annotated[
        bool,
        typer.Option(
            "--wide",
            help="Every column: entries completed, most inside at once, overlap time, optional counts, "
            "acquires given up, worst timing stall against the margin (default: the narrow table).",
        ),
    ] = False,
) -> None:
    """Print the summary table of a results CSV (computed from the CSV alone), cells in backend
    registration order and experiment catalogue order."""
    table.check_format(fmt)
    typer.echo(table.render(read_results(path), fmt=fmt, wide=wide))  # truncated rows and duplicates are said


#: The timeline window's bounds: no trial lasts a day.
MAX_WINDOW_MS = 86_400_000


@app.command()
def history(
    path: Annotated[
        Path,
        typer.Argument(
            help="A trial's history (results/<name>.histories/<trial>.jsonl.gz), or a trial id (as `matrix` "
            "prints it, or its unique start), looked up in --results or else in every CSV in . and results/."
        ),
    ],
    results: Annotated[
        Path | None,
        typer.Option("--results", help="The results CSV (or a folder of them) to look a trial id up in."),
    ] = None,
    from_ms: Annotated[
        float | None, typer.Option("--from-ms", help="Show events from this time (ms after the first).")
    ] = None,
    to_ms: Annotated[float | None, typer.Option("--to-ms", help="...up to this time.")] = None,
    kinds: Annotated[
        str | None,
        typer.Option(
            "--kinds",
            help=f"Show only these steps, comma-separated (of {', '.join(STEP_KINDS)}); e.g. 'fault' lists "
            "the runner's injections, with who held the lock on each node when a node fault struck.",
        ),
    ] = None,
    plot: Annotated[
        Path | None,
        typer.Option(
            "--plot",
            help="Draw the timeline into this PNG instead (needs matplotlib). Default window: around the "
            "first lost update, else the first conflict, else the first 3 s.",
        ),
    ] = None,
    ttl_ms: Annotated[
        float | None,
        typer.Option("--ttl-ms", help="With --plot: the lease TTL as run (default: the CSV beside the histories)."),
    ] = None,
) -> None:
    """Print a trial's history as a timeline: who acquired, read, paused and wrote, and when."""
    for flag, value in (("--from-ms", from_ms), ("--to-ms", to_ms)):  # a day: longer than any trial
        if value is not None:
            parse_number(str(value), what=flag, low=0, high=MAX_WINDOW_MS, unit=" ms")
    shown = None
    if kinds is not None:
        shown = {k.strip() for k in kinds.split(",") if k.strip()}
        if not shown or not shown <= set(STEP_KINDS):
            raise InvalidValueError(f"--kinds takes step kinds among {', '.join(STEP_KINDS)}, got {kinds!r}")
        if plot is not None:
            raise InvalidValueError("--kinds selects lines of the text timeline; --plot draws every step")
    if plot is not None:
        check_output_file(plot, flag="--plot")
    if not path.exists() and not path.name.endswith(".jsonl.gz"):  # a trial id, not a file
        from lockcompare.analysis.lookup import DEFAULT_PLACES, find_trial, results_files

        path = find_trial(str(path), files=results_files([results] if results else DEFAULT_PLACES)).history
    events = load_history(path)
    if plot is None:
        typer.echo(render_timeline(events, from_ms=from_ms or 0, to_ms=to_ms, kinds=shown))
        return
    from lockcompare.render.plots import (
        plot_timeline,  # matplotlib is imported only when a picture is drawn
    )
    from lockcompare.render.report import row_for_history

    row = row_for_history(path)
    if ttl_ms is None and row is not None:
        ttl_ms = row["ttl_ms"]
    title = row["trial_id"] if row is not None else path.name
    typer.echo(plot_timeline(events, out=plot, title=title, ttl_ms=ttl_ms, from_ms=from_ms, to_ms=to_ms))


@app.command()
def report(
    path: Annotated[Path, typer.Argument(help="A results CSV written by `lockcompare matrix` or `run --out`.")],
    out_dir: Annotated[
        Path | None,
        typer.Option("--out", help="Directory for README.md, its PNGs and html/ (default: <csv>.report/ beside it)."),
    ] = None,
) -> None:
    """Write a Markdown report (table, plots, first lost update per cell, commands, provenance) and
    an HTML one in <out>/html/ (the verdict grid, every trial a page with its timeline)."""
    from lockcompare.backends import registered_names  # entry points only: no backend is imported
    from lockcompare.render.report import write_report  # imports matplotlib when it is installed

    target = out_dir if out_dir is not None else path.with_name(path.stem + ".report")
    check_output_dir(target, flag="--out")
    for written in write_report(results=path, out=target, say=_note, registered=registered_names()):
        typer.echo(written)


def _note(line: str) -> None:
    """A line on stderr as it is (rich would read ``lockcompare[plot]`` as markup)."""
    print(f"lockcompare: note: {line}", file=sys.stderr, flush=True)


@app.command()
def upgrade(
    paths: Annotated[list[Path], typer.Argument(help="Results CSVs (or explore logs) to bring to the current schema.")],
) -> None:
    """Rewrite results CSVs in the current schema, atomically: truncated rows are dropped and named,
    and a trial's rows replaced by its rerun move to FILE.superseded.csv (one row per trial). An
    explore log (explored.csv) gets its own id for every request that ran no trial."""
    from lockcompare.evaluation.explore_log import is_explore_log, upgrade_log

    logs = [path for path in paths if is_explore_log(path)]
    found = [inspect_results(path) for path in paths if path not in logs]  # all readable before any is rewritten
    plans = {f.path: split_superseded(f.kept_rows()) for f in found}
    for f in found:
        if f.needs_rewrite or plans[f.path][1]:
            check_output_file(f.path, flag="upgrade")  # every rewrite possible before the first is made
    for path in logs:
        changed = upgrade_log(path)
        print(f"{path}: explore log, {changed} request(s) without a trial given their own id", file=sys.stderr)
    for f in found:
        kept, superseded = plans[f.path]
        if not f.needs_rewrite and not superseded:
            print(f"{f.path}: already current ({len(f.rows)} rows)", file=sys.stderr)
            continue
        with results_lock(f.path):  # never under a run that is appending to it
            _keep_superseded(f.path, superseded, kept=kept)
            rewrite(f.path, kept)
        dropped = (
            f"; dropped truncated row(s) at line {', '.join(map(str, f.truncated_lines))}" if f.truncated_lines else ""
        )
        judged_twice = len(f.rows) - len(f.kept_rows())
        if judged_twice:
            dropped += f"; dropped {judged_twice} earlier row(s) of trials judged twice"
        if superseded:
            dropped += f"; moved {len(superseded)} row(s) replaced by their rerun to {superseded_path(f.path).name}"
        print(f"{f.path}: rewritten from schema {f.oldest_schema} ({len(kept)} rows){dropped}", file=sys.stderr)


def _keep_superseded(path: Path, superseded: list[dict[str, Any]], *, kept: list[dict[str, Any]]) -> None:
    """Append the rows a rerun replaced to FILE.superseded.csv. A row whose history file is the one
    its rerun wrote (files from before reruns had names of their own) no longer has its history:
    its ``history`` is emptied and its ``note`` says why, rather than pointing at another trial's events."""
    rerun_history = {str(row["history"]) for row in kept}
    side = ResultsWriter(superseded_path(path))
    for old in superseded:
        row = dict(old)
        if str(row.get("history") or "") in rerun_history:
            row["history"] = ""
            gone = "history overwritten by its rerun (before reruns kept their own)"
            row["note"] = "; ".join(filter(None, [str(row.get("note") or ""), gone]))
        side.append(row)
