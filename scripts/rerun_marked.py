"""Run a results file's still timing-marked trials again, each alone on the machine (or ``--jobs`` at a
time, nothing else beside them), and put each rerun in its marked row's place: the pass a run in
parts needs after its last part.

    python scripts/rerun_marked.py results/reproduction.csv            # every marked row, alone
    python scripts/rerun_marked.py results/reproduction.csv --dry-run  # which, and nothing runs
    python scripts/rerun_marked.py results/reproduction.csv --jobs 2   # two at a time, nothing else beside

``matrix --rerun-marked`` runs again the marked trials of its own invocation, at its end; a file
written in parts keeps the ones its parts' reruns left marked (a rerun among a few is marked again
more often than one alone: docs/sentinel.md). This pass takes them from the file: each trial is
rebuilt from its row with exactly its settings and seed (as ``lockcompare run --from`` does: the id
must match), run with no other trial beside it, and its row takes the marked row's place, marked or not — one rerun a
trial, never "until it comes out unmarked" — with a note saying so; the marked row moves to the
``.superseded`` file with the history it was judged from. The trials run with the lockcompare the
running Python imports: run it with the clone's own interpreter, at the revision the rows record
(a row of another revision is refused before anything runs). A pass stopped and started again
skips the trials it already ran again (their histories say so).

Exit 0 when every rerun was judged, 1 when one was ``unknown`` (its row says why), 2 on bad input.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from lockcompare import interrupts
from lockcompare.analysis.reproduce import spec_from_row
from lockcompare.analysis.results import read_results, supersede
from lockcompare.analysis.sentinel import is_marked
from lockcompare.errors import LockcompareError, Terminated
from lockcompare.infra.provenance import source_revision
from lockcompare.runner.local_executor import RERUN_NOTE

#: The note a rerun row carries: the matrix's own for a marked trial run again (the marked row is in
#: the .superseded file), so a reader tells the two passes' reruns by nothing but their run_id.
RERUN_ALONE_NOTE = RERUN_NOTE
#: What names a history this pass wrote (``<trial_id>.rerun-<run_id>.jsonl.gz``).
RERUN_HISTORY = ".rerun-"


def marked_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows the sentinel marked, in file order, but a row this pass already wrote (its history is
    a ``.rerun-`` one): a stopped pass started again runs each trial again once, never twice.

    >>> marked_rows([{"trial_id": "a", "timing_marked": True, "history": "h/a.jsonl.gz"},
    ...              {"trial_id": "b", "timing_marked": False, "history": "h/b.jsonl.gz"},
    ...              {"trial_id": "c", "timing_marked": True, "history": "h/c.rerun-r1.jsonl.gz"}])
    [{'trial_id': 'a', 'timing_marked': True, 'history': 'h/a.jsonl.gz'}]
    """
    return [row for row in rows if is_marked(row) and RERUN_HISTORY not in str(row.get("history") or "")]


def file_summary(rows: list[dict[str, Any]]) -> str:
    """What the file holds after every pass so far (one stopped and started again included).

    >>> file_summary([{"timing_marked": True, "history": "h/a.rerun-r1.jsonl.gz"},
    ...               {"timing_marked": False, "history": "h/b.rerun-r1.jsonl.gz"},
    ...               {"timing_marked": False, "history": "h/c.jsonl.gz"}])
    '3 rows, 1 timing-marked (33.3%); 2 trials run again by this pass, 1 of them still marked'
    """
    marked = sum(is_marked(row) for row in rows)
    again = [row for row in rows if RERUN_HISTORY in str(row.get("history") or "")]
    share = 100 * marked / len(rows) if rows else 0.0
    return (
        f"{len(rows)} rows, {marked} timing-marked ({share:.1f}%); {len(again)} trials run again by this pass, "
        f"{sum(is_marked(row) for row in again)} of them still marked"
    )


def placed_row(rerun: dict[str, Any], *, history: Path, results: Path) -> dict[str, Any]:
    """The rerun's row as it goes into ``results``: its history where the file's histories are, its
    note saying what it is.

    >>> placed_row({"note": "", "history": "x"}, history=Path("r/res.histories/t.1.jsonl.gz"),
    ...            results=Path("r/res.csv"))["history"]
    'res.histories/t.1.jsonl.gz'
    """
    row = dict(rerun)
    row["history"] = history.relative_to(results.parent).as_posix()
    row["note"] = "; ".join(filter(None, [str(row.get("note") or ""), RERUN_ALONE_NOTE]))
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path)
    parser.add_argument("--dry-run", action="store_true", help="list the marked trials; run nothing")
    parser.add_argument("--jobs", type=int, default=1, help="trials at once (default 1: each alone)")
    options = parser.parse_args(argv)
    results: Path = options.results
    if options.jobs < 1:
        print(f"rerun_marked.py: --jobs must be at least 1, got {options.jobs}", file=sys.stderr)
        return 2
    try:
        rows = read_results(results)
        todo = marked_rows(rows)
        here = source_revision()
        other = sorted({str(r["source_revision"]) for r in todo} - {here})
        if other and not options.dry_run:
            raise LockcompareError(f"rows of revision {', '.join(other)}, this lockcompare is {here}: check it out")
        specs = [spec_from_row(row) for row in todo]  # every one rebuilt before any runs
    except LockcompareError as exc:
        print(f"rerun_marked.py: {exc}", file=sys.stderr)
        return 2
    print(f"rerun_marked.py: {len(todo)} of {len(rows)} trials are timing-marked", file=sys.stderr)
    if options.dry_run or not todo:
        print("\n".join(r["trial_id"] for r in todo))
        print(f"rerun_marked.py: {results}: {file_summary(rows)}", file=sys.stderr)
        return 0
    from lockcompare.runner.matrix import run_planned

    histories = results.with_name(f"{results.stem}.histories")
    unknown = still = 0
    try:
        with tempfile.TemporaryDirectory(prefix="rerun-marked-", dir=results.parent) as scratch:
            # --jobs at a time, no other trial beside them; each batch's rows are placed before the next
            # starts, so a stopped pass loses at most one batch.
            for first in range(0, len(specs), options.jobs):
                batch = specs[first : first + options.jobs]
                out = Path(scratch) / f"{first}.csv"
                run_planned(batch, out=out, jobs=len(batch))
                for n, rerun in enumerate(read_results(out), first + 1):
                    source = out.parent / str(rerun["history"])
                    target = histories / f"{rerun['trial_id']}{RERUN_HISTORY}{rerun['run_id']}.jsonl.gz"
                    shutil.move(source, target)
                    supersede(results, placed_row(rerun, history=target, results=results))
                    still += is_marked(rerun)
                    unknown += rerun["verdict"] == "unknown"
                    mark = "still marked" if is_marked(rerun) else "not marked"
                    print(f"[{n}/{len(specs)}] {rerun['trial_id']}: {rerun['verdict']}, {mark}", file=sys.stderr)
                # The matrix turns a SIGTERM into a stopped batch, not an exception out of it: stop
                # here, the batch's whole rows placed, rather than start the next.
                interrupts.raise_if_received()
    except (KeyboardInterrupt, Terminated) as exc:
        code = int(getattr(exc, "exit_code", 130))
        print(f"rerun_marked.py: stopped; the reruns placed so far are in {results}: run it again to go on",
              file=sys.stderr)  # fmt: skip
        return code
    at_once = "alone" if options.jobs == 1 else f"{options.jobs} at a time"
    again = f"{len(specs) - still} no longer marked, {still} marked again"
    print(f"rerun_marked.py: {len(specs)} run again {at_once}: {again}")
    print(f"rerun_marked.py: {results}: {file_summary(read_results(results))}")
    return 1 if unknown else 0


if __name__ == "__main__":
    sys.exit(main())
