"""Keep the README's result tables rendered from the committed CSVs, never typed by hand.

A table in a Markdown file is delimited by markers naming its source::

    <!-- table: results/seed-pattern.csv -->
    ...rendered here by `python -m lockcompare.docs README.md`...
    <!-- /table -->

The test suite checks that every such block equals a fresh rendering of its CSV.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from lockcompare.results import read_results
from lockcompare.table import render

BLOCK = re.compile(r"(<!-- table: (?P<csv>\S+) -->\n)(?P<body>.*?)(<!-- /table -->)", re.DOTALL)


def rendered_blocks(markdown: str, *, base: Path) -> str:
    """``markdown`` with every table block re-rendered from its CSV (paths relative to ``base``)."""

    def fill(match: re.Match[str]) -> str:
        table = render(read_results(base / match["csv"]), fmt="github")
        return f"{match.group(1)}{table}\n{match.group(4)}"

    return BLOCK.sub(fill, markdown)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m lockcompare.docs README.md", file=sys.stderr)
        return 2
    path = Path(args[0])
    text = path.read_text()
    path.write_text(rendered_blocks(text, base=path.parent))
    return 0


if __name__ == "__main__":
    sys.exit(main())
