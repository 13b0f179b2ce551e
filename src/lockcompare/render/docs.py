"""Keep the README's result tables rendered from the committed CSVs, never typed by hand.

A table in a Markdown file is delimited by markers naming its source::

    <!-- table: results/seed-pattern.csv -->
    ...rendered here by `python -m lockcompare.render.docs README.md docs/*.md`...
    <!-- /table -->

and optionally which of its rows, by column (comma lists; a row must match every column given),
so one committed run can feed several tables::

    <!-- table: results/reproduction.csv backend=single,redlock experiment=baseline,client-pause -->

A number in prose is rendered the same way, so a sentence cannot keep a figure its CSV no longer
holds::

    single loses <!-- value: results/reproduction.csv backend=single experiment=client-pause
    mean:lost_updates -->19.8<!-- /value --> updates per trial

(one line in the file; broken here to fit).

The statistic is one of ``mean:COLUMN`` (one decimal, as the tables round), ``sum:COLUMN``,
``ci:COLUMN`` (the mean with its 95% interval, "78.6 ±1.1", as the tables give it),
``min:COLUMN``, ``max:COLUMN``, ``median:COLUMN``, ``range:COLUMN`` ("19–20", or "20" when every row agrees),
``nonzero:COLUMN`` (rows where it is > 0), ``true:COLUMN`` (rows where it is true), ``scales`` (the
timings the rows ran, grouped: :func:`scales`), ``span:wall_s``
(each run's wall time from its first trial's ``started_at`` to its last trial's end, summed over the
runs that wrote the rows — a resumed file's parts, not the gap between them: "32 min 11 s"),
``violations`` (the violation rate with its exact 95% interval, "2/5 40% [5.3–85.3%]",
analysis/rates.py) or ``rows`` (how many rows match).

A history excerpt is rendered the same way, by the trial's id in a CSV and a time window (ms
after the trial's first event), optionally only some kinds of step, so a story told from a history
is the committed history's and no other run's::

    <!-- excerpt: results/reproduction.csv trial=<trial_id> from=1200 to=1800 kinds=acquire,write -->
    ...the timeline lines, as `lockcompare history --from-ms 1200 --to-ms 1800` prints them...
    <!-- /excerpt -->

A script's printed output, kept in a committed text file (results/derived/), is quoted the same way,
whole, as a code block, so a count a script printed is the committed file's and not a copy::

    <!-- output: results/derived/reproduction-skipped.txt -->
    ...the file's text, fenced...
    <!-- /output -->

Who survives what, in words, is rendered from a results file by lock family × fault family
(render/docs_words.py; the families are declared once in render/families.py)::

    <!-- words: results/reproduction.csv -->
    ...the table, how to read a cell, and which backends and experiments form each family...
    <!-- /words -->

``python -m lockcompare.render.docs --check FILE...`` renders without writing and exits 1 naming
every block whose text differs from a fresh rendering (`.ci/run` runs it), and every number in the
prose outside a rendered block, a code span or fence, a link target or an HTML comment that the
short allow-list ``ALLOWED`` (settings of the lesson's lab, versions, names that carry a number)
does not explain: a figure is rendered from a committed file or not written at all. The test suite
checks the same (tests/test_docs_check.py, tests/test_docs_numbers.py).
A trial page a document links is rendered the same way: its link target by a page block, the page
itself (HTML, one page of ``lockcompare report``'s) into a folder beside its CSV, and ``--check``
fails when the committed page is missing or differs from a fresh rendering (render/docs_trials.py)::

    <!-- page: results/r.csv trial=<trial_id> -->[the trial](results/r.pages/<trial_id>.html)<!-- /page -->

The fault kinds' table is rendered from their modules (scenario/faultkinds), between
``<!-- faultkinds -->`` and ``<!-- /faultkinds -->``; the verdicts' table from analysis/verdicts.py,
between ``<!-- verdicts -->`` and ``<!-- /verdicts -->``.
"""

from __future__ import annotations

import hashlib
import re
import sys
from pathlib import Path
from typing import Any

from lockcompare.analysis.results import latest_rows, read_results
from lockcompare.errors import LockcompareError
from lockcompare.render.docs_prose import ALLOWED, prose_numbers
from lockcompare.render.docs_trials import PAGE, linked_pages, rendered_link
from lockcompare.render.docs_values import duration, plain_table, scales, selected, statistic, wall_span
from lockcompare.render.table import render

#: The figures (render/docs_values.py) and the prose check (render/docs_prose.py) live in modules of
#: their own; their names stay importable from here.
__all__ = [
    "ALLOWED", "BLOCK", "VALUE", "WORDS", "duration", "fault_kinds_table", "main", "plain_table", "prose_numbers",
    "rendered_blocks", "scales", "selected", "stale_blocks", "statistic", "wall_span",
]  # fmt: skip

#: A value block: CSV, filters, statistic; the body is the rendered number.
VALUE = re.compile(
    r"(<!-- value: (?P<csv>\S+)(?P<filters>(?: \w+=\S+)*) (?P<stat>rows|scales|violations|\w+:\w+) -->)"
    r"(?P<body>[^<]*)(<!-- /value -->)"
)

BLOCK = re.compile(
    r"(<!-- table: (?P<csv>\S+)(?P<filters>(?: \w+=\S+)*) -->\n)(?P<body>.*?)(<!-- /table -->)", re.DOTALL
)

#: An excerpt block: CSV, the trial's id, a window in ms and optionally the kinds of step shown.
EXCERPT = re.compile(
    r"(<!-- excerpt: (?P<csv>\S+) trial=(?P<trial>\S+) from=(?P<from>[0-9.]+) to=(?P<to>[0-9.]+)"
    r"(?: kinds=(?P<kinds>[\w,-]+))? -->\n)(?P<body>.*?)(<!-- /excerpt -->)",
    re.DOTALL,
)


#: A words block: who survives what, lock family × fault family, from one results file.
WORDS = re.compile(r"(<!-- words: (?P<csv>\S+) -->\n)(?P<body>.*?)(<!-- /words -->)", re.DOTALL)

#: An output block: a committed text file (a script's printed table), quoted whole.
OUTPUT = re.compile(r"(<!-- output: (?P<path>\S+) -->\n)(?P<body>.*?)(<!-- /output -->)", re.DOTALL)

FAULT_KINDS = re.compile(r"(<!-- faultkinds -->\n)(?P<body>.*?)(<!-- /faultkinds -->)", re.DOTALL)
#: The verdicts' table, from their one vocabulary (analysis/verdicts.py).
VERDICTS_TABLE = re.compile(r"(<!-- verdicts -->\n)(?P<body>.*?)(<!-- /verdicts -->)", re.DOTALL)


def fault_kinds_table() -> str:
    """docs/faults.md's table of kinds, one row per module of scenario/faultkinds."""
    from lockcompare.scenario.faultkinds import KINDS, LINKS, NODES

    whom = {NODES: "`nodes=`", LINKS: "`nodes=` and `worker=`"}
    lines = [
        "| kind | what it does | acts on | parameters | `for=` omitted | lock servers must offer | sentinel excuses |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for kind in KINDS.values():
        params = "; ".join(f"{p.text}{': ' + p.help if p.help else ''}" for p in kind.params) or "–"
        target = whom.get(kind.acts_on, "`worker=`") + (f" (or `{kind.target_alias}=`)" if kind.target_alias else "")
        cells = (
            f"`{kind.name}`", kind.summary, target, params, kind.without_for,
            ", ".join(sorted(kind.needs)) or "–",
            "the workers it delays" if kind.excuses_worker else ("calls while it lasts" if kind.excuses_calls else "–"),
        )  # fmt: skip
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"


#: Rows already parsed, by file and a digest of its bytes: the pages read the same results CSVs again
#: and again (29 parses for the 18 pages of docs/, ~9 s of a 22 s profile), and the blocks only read
#: the rows. A file whose bytes changed is parsed again (a digest, not the mtime: a test may rewrite
#: a file within the filesystem's timestamp granularity).
_ROWS_READ: dict[tuple[str, bytes], list[dict[str, Any]]] = {}


def _read_rows(path: Path) -> list[dict[str, Any]]:
    """:func:`_read_file_rows`, parsed once per file and content in this process."""
    key = (str(path.resolve()), hashlib.blake2b(path.read_bytes(), digest_size=16).digest())
    if key not in _ROWS_READ:
        _ROWS_READ[key] = _read_file_rows(path)
    return _ROWS_READ[key]


def _read_file_rows(path: Path) -> list[dict[str, Any]]:
    """A results CSV (typed, in today's schema; one row per trial, a rerun superseding the row it
    retried, as the tables count them), or any other committed CSV as text — a script's counts, a
    source's published figures — that value blocks can read too."""
    import csv

    with path.open(newline="") as handle:
        header = handle.readline()
    if header.startswith("schema_version,"):
        return latest_rows(read_results(path))
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def rendered_blocks(markdown: str, *, base: Path) -> str:
    """``markdown`` with every table block, value, excerpt and output re-rendered from its file (paths
    relative to ``base``)."""
    return _render(markdown, base=base, stale=None)


def stale_blocks(markdown: str, *, base: Path) -> list[str]:
    """Every block of ``markdown`` whose text differs from a fresh rendering, one line each
    (``line N: table results/x.csv backend=...``), and every marker the renderer cannot read (a
    figure it would silently leave alone); empty when the file is up to date."""
    stale: list[str] = malformed_markers(markdown)
    _render(markdown, base=base, stale=stale)
    return stale


def malformed_markers(markdown: str) -> list[str]:
    """Opening markers (value, table, excerpt, output, words, page) that no block pattern reads, e.g. a doubled space.

    >>> malformed_markers("a <!-- value: r.csv  rows -->3<!-- /value --> b <!-- value: r.csv rows -->3<!-- /value -->")
    ['line 1: malformed value marker <!-- value: r.csv  rows -->']
    """
    read = {m.start() for pattern in (VALUE, BLOCK, EXCERPT, OUTPUT, WORDS, PAGE) for m in pattern.finditer(markdown)}
    found = []
    for marker in re.finditer(r"<!-- (value|table|excerpt|output|words|page): [^>]*-->", markdown):
        if marker.start() not in read:
            line = markdown.count("\n", 0, marker.start()) + 1
            found.append(f"line {line}: malformed {marker[1]} marker {marker[0]}")
    return found


def _render(markdown: str, *, base: Path, stale: list[str] | None) -> str:
    cache: dict[str, list[dict[str, Any]]] = {}

    def rows_of(csv: str) -> list[dict[str, Any]]:
        if csv not in cache:
            cache[csv] = _read_rows(base / csv)
        return cache[csv]

    def note(match: re.Match[str], fresh: str, what: str) -> str:
        if stale is not None and match.group(0) != fresh:
            line = match.string.count("\n", 0, match.start()) + 1
            stale.append(f"line {line}: {what}")
        return fresh

    def value(match: re.Match[str]) -> str:
        rows = selected(rows_of(match["csv"]), match["filters"])
        if not rows:
            raise ValueError(f"no row of {match['csv']} matches{match['filters']}")
        fresh = f"{match.group(1)}{statistic(rows, match['stat'])}{match.group(6)}"
        return note(match, fresh, f"value {match['csv']}{match['filters']} {match['stat']} (says {match['body']!r})")

    def fill(match: re.Match[str]) -> str:
        rows = selected(rows_of(match["csv"]), match["filters"])
        if not rows:
            raise ValueError(f"no row of {match['csv']} matches{match['filters']}")
        table = render(rows, fmt="github") if "schema_version" in rows[0] else plain_table(rows)
        return note(match, f"{match.group(1)}{table}\n{match.group(5)}", f"table {match['csv']}{match['filters']}")

    def excerpt(match: re.Match[str]) -> str:
        fresh = f"{match.group(1)}{excerpt_text(base / match['csv'], rows_of(match['csv']), match)}<!-- /excerpt -->"
        return note(match, fresh, f"excerpt {match['csv']} trial={match['trial']}")

    def output(match: re.Match[str]) -> str:
        text = (base / match["path"]).read_text()
        fresh = f"{match.group(1)}```\n{text.rstrip(chr(10))}\n```\n{match.group(4)}"
        return note(match, fresh, f"output {match['path']}")

    def words(match: re.Match[str]) -> str:
        from lockcompare.render.docs_words import words_block

        fresh = f"{match.group(1)}{words_block(rows_of(match['csv']))}{match.group(4)}"
        return note(match, fresh, f"words {match['csv']}")

    def kinds(match: re.Match[str]) -> str:
        return note(match, f"{match.group(1)}{fault_kinds_table()}{match.group(3)}", "fault kinds table")

    def verdicts(match: re.Match[str]) -> str:
        from lockcompare.analysis.verdicts import markdown_table

        return note(match, f"{match.group(1)}{markdown_table()}\n{match.group(3)}", "verdicts table")

    markdown = FAULT_KINDS.sub(kinds, markdown)
    markdown = VERDICTS_TABLE.sub(verdicts, markdown)
    markdown = VALUE.sub(value, markdown)
    markdown = BLOCK.sub(fill, markdown)
    markdown = OUTPUT.sub(output, markdown)
    markdown = WORDS.sub(words, markdown)
    markdown = PAGE.sub(lambda m: note(m, rendered_link(m), f"page link {m['csv']} trial={m['trial']}"), markdown)
    return EXCERPT.sub(excerpt, markdown)


def excerpt_text(csv: Path, rows: list[dict[str, Any]], match: re.Match[str]) -> str:
    """The timeline of trial ``match['trial']`` of ``csv`` in its window, fenced as a code block."""
    from lockcompare.render.report import history_path
    from lockcompare.render.timeline import load_history, render_timeline

    row = next((r for r in rows if r.get("trial_id") == match["trial"]), None)
    if row is None:
        raise ValueError(f"{csv}: no trial {match['trial']!r}")
    kinds = set(match["kinds"].split(",")) if match["kinds"] else None
    path = history_path(row, results=csv)
    if path is None:
        raise ValueError(f"{csv}: the history of {match['trial']!r} is outside the CSV's folder")
    events = load_history(path)
    timeline = render_timeline(events, from_ms=float(match["from"]), to_ms=float(match["to"]), kinds=kinds)
    return f"```\n{timeline}\n```\n"


def stale_pages(pages: dict[Path, str]) -> list[str]:
    """The linked pages (their fresh text by path, docs_trials.linked_pages) missing or differing on disk."""
    stale = []
    for page, text in pages.items():
        if not page.is_file():
            stale.append(f"page {page} is missing")
        elif page.read_text(encoding="utf-8") != text:
            stale.append(f"page {page}")
    return stale


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    check = "--check" in args
    names = [a for a in args if a != "--check"]
    if not names:
        print("usage: python -m lockcompare.render.docs [--check] README.md docs/*.md", file=sys.stderr)
        return 2
    failed = False
    for name in names:  # a block's CSV path is relative to its own file (docs/ use ../results/...)
        path = Path(name)
        try:
            text = path.read_text()
            cache: dict[str, list[dict[str, Any]]] = {}

            def rows_of(csv: str, base: Path = path.parent, cache: dict[str, Any] = cache) -> list[dict[str, Any]]:
                return cache[csv] if csv in cache else cache.setdefault(csv, _read_rows(base / csv))

            pages = linked_pages(text, base=path.parent, rows_of=rows_of)
            if check:
                stale = stale_blocks(text, base=path.parent) + stale_pages(pages)
                for line in stale:
                    print(f"{name}: {line}: stale (run: python -m lockcompare.render.docs {name})", file=sys.stderr)
                    failed = True
                for number_line, number in prose_numbers(text):
                    print(f"{name}: line {number_line}: {number!r} in prose outside a rendered block", file=sys.stderr)
                    failed = True
            else:
                fresh = rendered_blocks(text, base=path.parent)
                if fresh != text:
                    path.write_text(fresh)
                for page, page_text in pages.items():
                    if not page.is_file() or page.read_text(encoding="utf-8") != page_text:
                        page.parent.mkdir(exist_ok=True)
                        page.write_text(page_text, encoding="utf-8")
        except (OSError, ValueError, LockcompareError) as exc:
            print(f"{name}: {exc}", file=sys.stderr)
            return 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
