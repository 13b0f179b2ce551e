"""Keep the README's result tables rendered from the committed CSVs, never typed by hand.

A table in a Markdown file is delimited by markers naming its source::

    <!-- table: results/seed-pattern.csv -->
    ...rendered here by `python -m lockcompare.render.docs README.md docs/*.md`...
    <!-- /table -->

and optionally which of its rows, by column (comma lists; a row must match every column given),
so one committed run can feed several tables::

    <!-- table: results/reproduction.csv backend=single,redlock experiment=baseline,client-pause -->

The test suite checks that every such block equals a fresh rendering of its CSV.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

from lockcompare.analysis.results import read_results
from lockcompare.render.table import render

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


def rendered_blocks(markdown: str, *, base: Path) -> str:
    """``markdown`` with every table block re-rendered from its CSV (paths relative to ``base``)."""

    def fill(match: re.Match[str]) -> str:
        rows = selected(read_results(base / match["csv"]), match["filters"])
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
        path.write_text(rendered_blocks(text, base=path.parent))
    return 0


if __name__ == "__main__":
    sys.exit(main())
