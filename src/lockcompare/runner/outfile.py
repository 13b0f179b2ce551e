"""The results file of a run: checked (and brought to the current schema) before anything runs,
and no history left behind that no row points to."""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Any

from lockcompare.analysis.results import SCHEMA_VERSION, finished_trials, inspect_results, rewrite
from lockcompare.errors import OutputPathError, ResultsFileError
from lockcompare.files import check_output_file
from lockcompare.infra.provenance import source_revision

log = logging.getLogger("lockcompare")


def history_dir(out: Path) -> Path:
    """Histories live beside the results file: ``results/x.csv`` → ``results/x.histories/``, unless
    that folder is another results file's: then ``results/x.csv.histories/``.

    ``--out x.csv`` and then ``--out x.tsv`` in one folder shared ``x.histories/``, and with the
    same settings and seed (the same trial ids) the second run silently replaced the first run's
    histories under its rows (issue 38). A file's rows say which folder is its own; a new file takes
    the shared name only when no other file of its stem lies beside it (a results file, or the lock
    of one being written). The answer is the same on every call, so ``--resume`` finds it again.
    """
    shared = out.with_name(out.stem + ".histories")
    own = out.with_name(out.name + ".histories")
    written = _head(out)
    if f"{own.name}/".encode() in written:
        return own
    if f"{shared.name}/".encode() in written:
        return shared
    return own if _others_of_the_stem(out) else shared


def claim_history_dir(out: Path) -> Path:
    """:func:`history_dir`, made (before the first history is written there)."""
    histories = history_dir(out)
    histories.mkdir(parents=True, exist_ok=True)
    return histories


def _head(path: Path) -> bytes:
    """The start of ``path`` (where its first rows name their histories), or b"" if there is none."""
    try:
        with path.open("rb") as fh:
            return fh.read(1 << 16)
    except OSError:
        return b""


def _others_of_the_stem(out: Path) -> bool:
    """Whether another results file named ``<stem>.*`` lies beside ``out`` (x.csv beside x.tsv), or
    the lock of one a run is writing (x.csv.lock): its rows may point into the shared folder. A log
    or a picture of the same stem (x.log, x.png) is no results file."""
    try:
        siblings = [p for p in out.parent.glob(f"{_glob_escape(out.stem)}.*") if not p.name.startswith(out.name)]
        return any(p.name.endswith(".lock") or _head(p)[:64].lstrip(b"\xef\xbb\xbf").startswith(b"schema_version")
                   for p in siblings if not p.is_dir())  # fmt: skip
    except OSError:
        return True


def _glob_escape(text: str) -> str:
    return "".join(f"[{c}]" if c in "*?[" else c for c in text)


def prepare_out(out: Path, *, resume: bool, allow_mixed_revisions: str | None = None) -> set[str]:
    """Check ``out`` before anything runs; with ``resume``, bring it to the current schema.

    Returns the trial_ids already judged there. An existing file without ``resume`` is refused; a
    file of an older schema or with a truncated row is rewritten once, atomically, in the current
    schema (truncated rows dropped, which is said); a file from a newer lockcompare is refused. A
    file holding rows of another source revision than the running code's is refused too — its
    cells would average two instruments — unless ``allow_mixed_revisions`` gives the reason (which
    every new row then records, and the tables mark the mixed cells).
    """
    check_output_file(out, flag="--out")
    histories = history_dir(out)
    if histories.exists() and not histories.is_dir():
        raise OutputPathError(f"--out {out}: {histories} (where its histories go) is not a directory")
    if not out.exists():
        return set()
    if not resume:
        raise ResultsFileError(f"{out} exists: pass --resume to continue it, or choose another --out")
    found = inspect_results(out)
    _check_revisions(out, found.rows, allow_mixed_revisions=allow_mixed_revisions)
    if found.duplicate_ids:
        raise ResultsFileError(
            f"{out}: {len(found.duplicate_ids)} trial id(s) have more than one judged row (e.g. "
            f"{found.duplicate_ids[0]}; two runs wrote it at once): `lockcompare upgrade {out}` keeps the latest "
            "row of each, then --resume"
        )
    if found.needs_rewrite:
        rewrite(out, found.rows)
        what = []
        if found.oldest_schema < SCHEMA_VERSION:
            what.append(f"upgraded from schema {found.oldest_schema} to {SCHEMA_VERSION}")
        if found.truncated_lines:
            what.append(f"dropped truncated row(s) at line {', '.join(map(str, found.truncated_lines))}")
        log.warning(
            "%s: %s (%d rows kept)", out, "; ".join(what) or "rewritten with the current header", len(found.rows)
        )
    return finished_trials(found.rows)


def _check_revisions(out: Path, rows: list[dict[str, Any]], *, allow_mixed_revisions: str | None) -> None:
    running = source_revision()
    # An unknown revision ("": rows from before provenance, code from neither a checkout nor a build
    # that recorded one) differs from every known one: nothing tells two such builds apart.
    others = sorted({str(r.get("source_revision") or "") for r in rows} - {running})
    if not others:
        return
    held = ", ".join(rev[:12] or "unknown" for rev in others)
    this = running[:12] or "of an unknown revision"
    if allow_mixed_revisions is None:
        raise ResultsFileError(
            f"{out} holds trials of revision {held}; this code is {this}: resuming would mix two "
            "instruments in one cell. Use another --out, or --allow-mixed-revisions REASON to continue anyway"
        )
    log.warning("%s: mixing revisions %s and %s (%s)", out, held, this, allow_mixed_revisions)


def history_ids(out: Path) -> set[str]:
    """trial_ids whose history a row already in ``out`` points to (a trial rerun after an unknown
    verdict overwrites it: an interrupted rerun must not delete it)."""
    if not out.exists():
        return set()
    return {row["trial_id"] for row in inspect_results(out).rows}


def remove_unpointed(saved: dict[str, Path], *, rowed: set[str], kept: set[str]) -> None:
    """Remove the histories this run wrote that no row points to (the run was interrupted, or its
    row could not be written): a results folder never holds a history without its row."""
    for trial_id, path in list(saved.items()):
        if trial_id not in rowed and trial_id not in kept:
            with contextlib.suppress(OSError):
                path.unlink()
            with contextlib.suppress(OSError):
                path.parent.rmdir()  # only when nothing else is left in it
