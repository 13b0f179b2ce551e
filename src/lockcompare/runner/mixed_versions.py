"""``--resume`` over rows that ran other versions of Python or of a backend's libraries: refused.

A results file's cells average their trials; trials of pottery 3.0 and 3.1 in one cell average two
locks, as trials of two revisions average two instruments (runner/outfile.py refuses those). So,
as for revisions: a file whose rows ran another Python than this one, or a backend whose rows ran
other library versions than this run's, is refused before any trial — unless
``--allow-mixed-revisions REASON`` says why (every new row then records the reason in its ``note``).

A backend's versions are checked as a whole, not per cell: its rows in one file form one line of
the tables. A Python backend's versions are known before anything runs (its ``libraries`` trait);
an external client says its own only when it starts, so its first new row is checked: a mismatch
stops the run there, that row unwritten (its history removed), with the same words. Rows that
record no versions (before schema 10) are unknown, which differs from every known version. A row
whose external client never started (``client_versions`` ``unknown``: no hello, so no trial of the
client either; its verdict is unknown) says nothing of a version, on either side: it is neither held
against the run nor checked as its first row (the reproduction stopped on such a row: a JVM that
gave no hello within 10 s while 16 trials started at once).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lockcompare.analysis.results import inspect_results
from lockcompare.backends import load_backend, traits_of
from lockcompare.backends.versions import client_versions, no_client_started, python_version
from lockcompare.errors import ResultsFileError

log = logging.getLogger("lockcompare")

ESCAPE = "--allow-mixed-revisions REASON"


def _shown(value: str) -> str:
    return value or "unknown"


@dataclass(kw_only=True)
class FileVersions:
    """The versions a results file's rows ran: Python's, and each backend's ``client_versions``."""

    out: Path
    pythons: set[str] = field(default_factory=set)
    by_backend: dict[str, set[str]] = field(default_factory=dict)
    allow: str | None = None
    #: Backends whose new rows were found to agree already (checked once each).
    _agreed: set[str] = field(default_factory=set)

    @classmethod
    def read(cls, out: Path, *, allow: str | None) -> FileVersions:
        """What the rows of ``out`` ran (nothing when it does not exist yet)."""
        return cls.of(out, inspect_results(out).rows if out.exists() else [], allow=allow)

    @classmethod
    def of(cls, out: Path, rows: Iterable[Mapping[str, Any]], *, allow: str | None) -> FileVersions:
        found = cls(out=out, allow=allow)
        for row in rows:
            found.pythons.add(str(row.get("python_version") or ""))
            cell = str(row.get("client_versions") or "")
            if not no_client_started(cell):
                found.by_backend.setdefault(str(row["backend"]), set()).add(cell)
        return found

    def check_before(self, backends: Iterable[str]) -> None:
        """Refuse (or, allowed, warn) before any trial: this Python against the file's, and each
        Python backend's libraries against its rows'."""
        running = python_version()
        others = sorted(self.pythons - {running})
        if others:
            self._mixed(f"trials run on Python {', '.join(map(_shown, others))}; this is Python {running}")
        for backend in dict.fromkeys(backends):
            traits = traits_of(load_backend(backend, check_viable=False))
            if not traits.external:
                self._check(backend, client_versions(libraries=traits.libraries, external=False))

    def check_row(self, row: Mapping[str, Any]) -> None:
        """Refuse a new row whose backend's rows in the file ran other versions (an external client's
        first new row: only its start says what it runs; a row whose client never started is not it)."""
        cell = str(row.get("client_versions") or "")
        if not no_client_started(cell):
            self._check(str(row["backend"]), cell)

    def _check(self, backend: str, running: str) -> None:
        held = self.by_backend.get(backend)
        if not held or backend in self._agreed:
            return
        self._agreed.add(backend)
        others = sorted(held - {running})
        if others:
            self._mixed(
                f"trials of {backend} that ran {' | '.join(map(_shown, others))}; this run's {backend} "
                f"runs {_shown(running)}"
            )

    def _mixed(self, what: str) -> None:
        if self.allow is None:
            raise ResultsFileError(
                f"{self.out} holds {what}: resuming would mix two versions in one cell. Use another --out, "
                f"or {ESCAPE} to continue anyway"
            )
        log.warning("%s: mixing %s (%s)", self.out, what, self.allow)
