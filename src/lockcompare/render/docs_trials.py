"""The few trial pages README.md and docs/ link: rendered alone from the committed CSV and histories.

The HTML report is built on demand (``lockcompare report results/reproduction.csv``) and is not
committed: a reproduction renders some 2,000 trial pages, which grew the repository by tens of
megabytes a run (issue 50.4). A finding in the README still links the page that shows it, so each page
a document links is committed, and only those, in a folder beside its CSV named after it
(``results/reproduction.pages/``), written by a page block::

    <!-- page: results/r.csv trial=<trial_id> -->[the trial](results/r.pages/<trial_id>.html)<!-- /page -->

The block's link target is rendered (the CSV's folder, its stem + ``.pages``, the trial's page name),
its text is the author's. ``python -m lockcompare.render.docs FILE...`` writes the page beside the CSV
and ``--check`` fails when a committed page differs from a fresh rendering or is missing, as it fails
for a stale table. A page rendered alone links no other page of the report (they are not committed):
its header says which command builds the rest.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

from lockcompare.analysis.cells import group_cells

#: A page block: the CSV and the trial's id; the body is one Markdown link, its target rendered.
PAGE = re.compile(
    r"(?P<open><!-- page: (?P<csv>\S+) trial=(?P<trial>\S+) -->)"
    r"\[(?P<text>[^\]]*)\]\((?P<target>[^)\s]*)\)(?P<close><!-- /page -->)"
)
PAGES_SUFFIX = ".pages"


def pages_folder(csv: PurePosixPath) -> PurePosixPath:
    """Where the linked pages of ``csv`` are committed: beside it, named after it.

    >>> pages_folder(PurePosixPath("../results/reproduction.csv"))
    PurePosixPath('../results/reproduction.pages')
    """
    return csv.with_name(csv.stem + PAGES_SUFFIX)


def page_target(csv: str, trial_id: str) -> str:
    """The link a page block renders, relative to the document (as its CSV path is).

    >>> page_target("results/reproduction.csv", "redlock.node-restart:t1 4340f221")
    'results/reproduction.pages/redlock.node-restart_t1_4340f221.html'
    """
    from lockcompare.render.html_trial import trial_page_name

    return str(pages_folder(PurePosixPath(csv)) / trial_page_name({"trial_id": trial_id}))


def rendered_link(match: re.Match[str]) -> str:
    """A page block with its link target rendered."""
    return f"{match['open']}[{match['text']}]({page_target(match['csv'], match['trial'])}){match['close']}"


def linked_pages(markdown: str, *, base: Path, rows_of: Callable[[str], list[dict[str, Any]]]) -> dict[Path, str]:
    """The fresh text of every page ``markdown`` links by a page block, by path (``base``: the
    document's folder). ``rows_of(csv)``: the CSV's rows, one per trial, as the tables count them."""
    pages: dict[Path, str] = {}
    for match in PAGE.finditer(markdown):
        path = base / page_target(match["csv"], match["trial"])
        if path not in pages:
            pages[path] = trial_page_alone(base / match["csv"], rows=rows_of(match["csv"]), trial_id=match["trial"])
    return pages


def trial_page_alone(csv: Path, *, rows: list[dict[str, Any]], trial_id: str) -> str:
    """The report's page of one trial of ``csv``, rendered without the rest of the report."""
    from lockcompare.render.html_trial import read_story, trial_page

    row = next((r for r in rows if r.get("trial_id") == trial_id), None)
    if row is None:
        raise ValueError(f"{csv}: no trial {trial_id!r}")
    cell = next(c for c in group_cells(rows) if any(r is row for r in c.rows))
    story = read_story(row, results=csv)
    return trial_page(row, cell=cell, results=csv, story=story, neighbours=(None, None), alone=True)
