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
    another results file may keep its histories there: then ``results/x.csv.histories/``.

    ``--out x.csv`` and then ``--out x.tsv`` in one folder shared ``x.histories/`` (issue 38), and
    so did ``--out x`` and ``--out x.csv`` (issue 49): with the same settings and seed (the same
    trial ids) the second run silently replaced the first run's histories under its rows. A file's
    rows say which folder is its own; a new file takes the first of ``<stem>.histories`` and
    ``<name>.histories`` that no other results file beside it may use (the one its rows name, or
    either of its two while it has none, or while a run holds its lock). A file with no suffix has
    one name only (``x`` → ``x.histories``): when another file holds it, the file is refused
    (:class:`OutputPathError`: choose another ``--out``). The answer is the same on every call, so
    ``--resume`` finds it again.
    """
    shared = out.with_name(out.stem + ".histories")
    own = out.with_name(out.name + ".histories")
    written = _head(out)
    for folder in (own, shared):
        if f"{folder.name}/".encode() in written:
            return folder
    taken = _folders_of_others(out)
    for folder in (shared, own):
        if folder.name not in taken:
            return folder
    holders = ", ".join(sorted(taken[shared.name] | taken[own.name]))
    raise OutputPathError(
        f"--out {out}: its histories would go in {own.name}/, where {holders} beside it may keep its own: "
        "choose another --out (a name with a suffix of its own, e.g. .csv)"
    )


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


def _folders_of_others(out: Path) -> dict[str, set[str]]:
    """The histories folders other results files beside ``out`` may use, each with the files that
    may: only those that could collide with ``out``'s two (``x``, ``x.*`` for ``x.csv`` or ``x``;
    ``x.csv.*`` for ``x.csv``). A file being written (its ``.lock``) counts before its first row; a
    log or a picture of the same stem (x.log, x.png) is no results file. In doubt (the folder cannot
    be listed), every candidate is taken."""
    own_files = {out.name, out.name + ".lock", out.name + ".part", f"{out.stem}.superseded{out.suffix}"}
    taken: dict[str, set[str]] = {}
    try:
        paths = [out.with_name(out.stem), *out.parent.glob(f"{_glob_escape(out.stem)}.*")]
        names = set()
        for path in paths:
            if path.name in own_files or path.is_dir() or not path.exists():
                continue
            if path.name.endswith(".lock"):
                names.add(path.name.removesuffix(".lock"))
            elif _head(path)[:64].lstrip(b"\xef\xbb\xbf").startswith(b"schema_version"):
                names.add(path.name)
    except OSError:
        return {f"{out.stem}.histories": {"(unreadable folder)"}, f"{out.name}.histories": {"(unreadable folder)"}}
    for name in names - {out.name}:
        other = out.with_name(name)
        candidates = [other.with_name(other.stem + ".histories").name, other.name + ".histories"]
        head = _head(other)
        named = [c for c in candidates if f"{c}/".encode() in head]
        for folder in named or candidates:
            taken.setdefault(folder, set()).add(name)
    return taken


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
    # Whole: a [:12] cut "+dirty" and the refusal read "holds trials of revision X; this code is X"
    # (issue 49).
    held = ", ".join(rev or "unknown" for rev in others)
    this = running or "of an unknown revision"
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
