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
``min:COLUMN``, ``max:COLUMN``, ``nonzero:COLUMN`` (rows where it is > 0), ``true:COLUMN`` (rows
where it is true), or ``rows`` (how many rows match).

A history excerpt is rendered the same way, by the trial's id in a CSV and a time window (ms
after the trial's first event), optionally only some kinds of step, so a story told from a history
is the committed history's and no other run's::

    <!-- excerpt: results/reproduction.csv trial=<trial_id> from=1200 to=1800 kinds=acquire,write -->
    ...the timeline lines, as `lockcompare history --from-ms 1200 --to-ms 1800` prints them...
    <!-- /excerpt -->

``python -m lockcompare.render.docs --check FILE...`` renders without writing and exits 1 naming
every block whose text differs from a fresh rendering (`.ci/run` runs it); the test suite checks
the same. The fault kinds' table is rendered from their modules (spec/faultkinds), between
``<!-- faultkinds -->`` and ``<!-- /faultkinds -->``.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

from lockcompare.analysis.results import read_results
from lockcompare.errors import LockcompareError
from lockcompare.render.table import render

#: A value block: CSV, filters, statistic; the body is the rendered number.
VALUE = re.compile(
    r"(<!-- value: (?P<csv>\S+)(?P<filters>(?: \w+=\S+)*) (?P<stat>rows|\w+:\w+) -->)(?P<body>[^<]*)(<!-- /value -->)"
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


FAULT_KINDS = re.compile(r"(<!-- faultkinds -->\n)(?P<body>.*?)(<!-- /faultkinds -->)", re.DOTALL)


def fault_kinds_table() -> str:
    """docs/faults.md's table of kinds, one row per module of spec/faultkinds."""
    from lockcompare.spec.faultkinds import KINDS, LINKS, NODES

    whom = {NODES: "`nodes=`", LINKS: "`nodes=` and `worker=`"}
    lines = [
        "| kind | what it does | acts on | parameters | `for=` omitted | lock servers must offer | sentinel excuses |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for kind in KINDS.values():
        params = "; ".join(f"{p.text}{': ' + p.help if p.help else ''}" for p in kind.params) or "–"
        cells = (
            f"`{kind.name}`", kind.summary, whom.get(kind.acts_on, "`worker=`"), params, kind.without_for,
            ", ".join(sorted(kind.needs)) or "–", "the workers it delays" if kind.excuses_worker else "–",
        )  # fmt: skip
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"


def selected(rows: list[dict[str, Any]], filters: str) -> list[dict[str, Any]]:
    """The rows matching every ``column=value,value`` of ``filters`` (compared as text).

    >>> selected([{"backend": "single", "trial": 0}, {"backend": "none", "trial": 0}], " backend=single,redlock")
    [{'backend': 'single', 'trial': 0}]
    """
    wanted = {col: set(values.split(",")) for col, _, values in (f.partition("=") for f in filters.split())}
    return [row for row in rows if all(str(row.get(col)) in values for col, values in wanted.items())]


def _number(value: object) -> float | None:
    """A cell as a number: provenance columns stay text (empty in old rows), so "2" counts as 2."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    try:
        return float(str(value)) if str(value).strip() else None
    except ValueError:
        return None


def statistic(rows: list[dict[str, Any]], stat: str) -> str:
    """One number over ``rows``, formatted as the tables format it.

    >>> rows = [{"lost_updates": 20, "marked": True}, {"lost_updates": 19, "marked": False}]
    >>> stats = ("mean:lost_updates", "sum:lost_updates", "min:lost_updates", "rows", "true:marked")
    >>> [statistic(rows, s) for s in stats]
    ['19.5', '39', '19', '2', '1']
    """
    if stat == "rows":
        return str(len(rows))
    op, _, column = stat.partition(":")
    if op == "true":
        return str(sum(1 for row in rows if row.get(column) is True or str(row.get(column)).lower() == "true"))
    values = [v for v in (_number(row.get(column)) for row in rows) if v is not None]
    if not values:
        raise ValueError(f"no row has a number in column {column!r}")
    if op == "nonzero":
        return str(sum(1 for v in values if v > 0))
    computed = {"mean": lambda: sum(values) / len(values), "sum": lambda: sum(values), "min": lambda: min(values),
                "max": lambda: max(values)}  # fmt: skip
    if op not in computed:
        raise ValueError(f"unknown statistic {stat!r} (mean, sum, min, max, nonzero, true: COLUMN; or rows)")
    value = computed[op]()
    return f"{value:.1f}".rstrip("0").rstrip(".")


def rendered_blocks(markdown: str, *, base: Path) -> str:
    """``markdown`` with every table block, value and excerpt re-rendered from its CSV (paths relative to ``base``)."""
    return _render(markdown, base=base, stale=None)


def stale_blocks(markdown: str, *, base: Path) -> list[str]:
    """Every block of ``markdown`` whose text differs from a fresh rendering, one line each
    (``line N: table results/x.csv backend=...``); empty when the file is up to date."""
    stale: list[str] = []
    _render(markdown, base=base, stale=stale)
    return stale


def _render(markdown: str, *, base: Path, stale: list[str] | None) -> str:
    cache: dict[str, list[dict[str, Any]]] = {}

    def rows_of(csv: str) -> list[dict[str, Any]]:
        if csv not in cache:
            cache[csv] = read_results(base / csv)
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
        table = render(rows, fmt="github")
        return note(match, f"{match.group(1)}{table}\n{match.group(5)}", f"table {match['csv']}{match['filters']}")

    def excerpt(match: re.Match[str]) -> str:
        fresh = f"{match.group(1)}{excerpt_text(base / match['csv'], rows_of(match['csv']), match)}<!-- /excerpt -->"
        return note(match, fresh, f"excerpt {match['csv']} trial={match['trial']}")

    def kinds(match: re.Match[str]) -> str:
        return note(match, f"{match.group(1)}{fault_kinds_table()}{match.group(3)}", "fault kinds table")

    markdown = FAULT_KINDS.sub(kinds, markdown)
    markdown = VALUE.sub(value, markdown)
    markdown = BLOCK.sub(fill, markdown)
    return EXCERPT.sub(excerpt, markdown)


def excerpt_text(csv: Path, rows: list[dict[str, Any]], match: re.Match[str]) -> str:
    """The timeline of trial ``match['trial']`` of ``csv`` in its window, fenced as a code block."""
    from lockcompare.render.report import history_path
    from lockcompare.render.timeline import load_history, render_timeline

    row = next((r for r in rows if r.get("trial_id") == match["trial"]), None)
    if row is None:
        raise ValueError(f"{csv}: no trial {match['trial']!r}")
    kinds = set(match["kinds"].split(",")) if match["kinds"] else None
    events = load_history(history_path(row, results=csv))
    timeline = render_timeline(events, from_ms=float(match["from"]), to_ms=float(match["to"]), kinds=kinds)
    return f"```\n{timeline}\n```\n"


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
            if check:
                for line in stale_blocks(text, base=path.parent):
                    print(f"{name}: {line}: stale (run: python -m lockcompare.render.docs {name})", file=sys.stderr)
                    failed = True
            else:
                fresh = rendered_blocks(text, base=path.parent)
                if fresh != text:
                    path.write_text(fresh)
        except (OSError, ValueError, LockcompareError) as exc:
            print(f"{name}: {exc}", file=sys.stderr)
            return 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
