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

The test suite checks that every such block and value equals a fresh rendering of its CSV.
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
    """``markdown`` with every table block and value re-rendered from its CSV (paths relative to ``base``)."""
    cache: dict[str, list[dict[str, Any]]] = {}

    def rows_of(csv: str) -> list[dict[str, Any]]:
        if csv not in cache:
            cache[csv] = read_results(base / csv)
        return cache[csv]

    def value(match: re.Match[str]) -> str:
        rows = selected(rows_of(match["csv"]), match["filters"])
        if not rows:
            raise ValueError(f"no row of {match['csv']} matches{match['filters']}")
        return f"{match.group(1)}{statistic(rows, match['stat'])}{match.group(6)}"

    markdown = VALUE.sub(value, markdown)

    def fill(match: re.Match[str]) -> str:
        rows = selected(rows_of(match["csv"]), match["filters"])
        if not rows:
            raise ValueError(f"no row of {match['csv']} matches{match['filters']}")
        table = render(rows, fmt="github")
        return f"{match.group(1)}{table}\n{match.group(5)}"

    return BLOCK.sub(fill, markdown)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args:
        print("usage: python -m lockcompare.render.docs README.md docs/*.md", file=sys.stderr)
        return 2
    for name in args:  # a block's CSV path is relative to its own file (docs/ use ../results/...)
        path = Path(name)
        text = path.read_text()
        try:
            path.write_text(rendered_blocks(text, base=path.parent))
        except (ValueError, LockcompareError) as exc:
            print(f"{name}: {exc}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
