"""What the trial commands (matrix, run, run --from) say at their end, and where ``run`` keeps its
results: the lines on stderr, the exit for unjudged trials, the folder of a run without ``--out``."""

from __future__ import annotations

import contextlib
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from lockcompare.analysis.checker import VERDICT_MEANINGS
from lockcompare.analysis.sentinel import MARK_SHARE
from lockcompare.errors import UnknownTrialsError
from lockcompare.redaction import redact
from lockcompare.render import table

if TYPE_CHECKING:
    from lockcompare.runner.matrix import MatrixReport


def say(line: str) -> None:
    """A line on stderr as it is (rich would read ``[0–52.2%]``-like text as markup)."""
    print(line, file=sys.stderr, flush=True)


def rerun_line(reruns: tuple[tuple[str, bool], ...]) -> str:
    """How the timing-marked trials run again by themselves came out: unmarked now, or marked still."""
    still = [trial_id for trial_id, marked in reruns if marked]
    named = f": {', '.join(still)}" if still else ""
    return (
        f"timing: {len(reruns)} marked trial(s) run again by themselves: {len(reruns) - len(still)} no longer marked, "
        f"{len(still)} marked again{named} (the marked rows are in the .superseded file with their histories)"
    )


def timing_line(rows: list[dict[str, Any]]) -> str:
    """One line naming the cells that hold a timing-marked trial (analysis/sentinel.py), or saying none does."""
    marked = table.marked_cells(rows)
    if not marked:
        return f"timing: no trial marked (every stall under {MARK_SHARE:.0%} of its experiment's margin)"
    cells = ", ".join(f"{name} ({n} of {of})" for name, n, of in marked)
    return f"timing-marked (a stall ate >= {MARK_SHARE:.0%} of the margin): {cells}"


def fail_on_unknown(report: MatrixReport) -> None:
    """Exit non-zero when a trial could not be judged, after saying why on stderr. A trial that
    made no progress is a result (a lock may rightly refuse), said on stderr but exit code 0."""
    for verdict, count in sorted(report.no_progress.items()):
        print(f"lockcompare: note: {count} trial(s) {verdict}: {VERDICT_MEANINGS[verdict]}", file=sys.stderr)
    for trial_id, problem in report.unknown:
        print(f"lockcompare: unknown verdict for {trial_id}: {redact(problem)}", file=sys.stderr)  # it may quote a URL
    if report.unknown:
        raise UnknownTrialsError(f"{len(report.unknown)} trial(s) could not be judged (verdict unknown); see above")


#: Where ``run`` keeps its row and history without ``--out``: a folder of its own per run in the
#: temporary directory. Not ``lockcompare-p<pid>-``: the next run sweeps a dead run's folders of that name.
KEPT_RUN_PREFIX = "lockcompare-run-"


@contextlib.contextmanager
def kept_results(out_path: Path | None) -> Iterator[Path]:
    """The results file a single trial writes: ``out_path``, else ``run.csv`` in a new folder of the
    temporary directory, kept after the run (the trial's history is its evidence, which `history`
    reads) — but removed when the run wrote no row (refused input leaves nothing behind). Not the
    working directory: `run` does not need one it can write to."""
    if out_path is not None:
        yield out_path
        return
    folder = Path(tempfile.mkdtemp(prefix=time.strftime(f"{KEPT_RUN_PREFIX}%Y%m%d-%H%M%S-")))
    target = folder / "run.csv"
    try:
        yield target
    finally:
        if not target.exists():
            shutil.rmtree(folder, ignore_errors=True)


def where_kept(target: Path, row: dict[str, Any]) -> None:
    """The lines that say where the trial's row and history are, and how to read the history."""
    typer.echo(f"{'results':>24}: {target}")
    typer.echo(f"{'history':>24}: {target.parent / row['history']}")
    say(f"read it: lockcompare history {row['trial_id']} --results {shlex.quote(str(target))}")  # never wrapped
