"""The README's result tables are renderings of committed CSVs, and its commands match CI."""

from __future__ import annotations

import re
from pathlib import Path

from lockcompare.render.docs import BLOCK, rendered_blocks

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_readme_tables_are_rendered_from_committed_csvs() -> None:
    blocks = list(BLOCK.finditer(README))
    assert blocks, "the README shows at least one table rendered from results/"
    for block in blocks:
        assert (ROOT / block["csv"]).is_file(), block["csv"]
    assert rendered_blocks(README, base=ROOT) == README, "run: python -m lockcompare.render.docs README.md"


def test_docs_tables_are_rendered_from_committed_csvs() -> None:
    for doc in sorted((ROOT / "docs").glob("*.md")):
        text = doc.read_text()
        for block in BLOCK.finditer(text):
            assert (doc.parent / block["csv"]).is_file(), (doc.name, block["csv"])
        assert rendered_blocks(text, base=doc.parent) == text, f"run: python -m lockcompare.render.docs {doc}"


def test_ci_runs_the_readme_test_command() -> None:
    command = re.search(r"^(python3 -m venv .*pytest)$", README, re.MULTILINE)
    assert command, "the README gives the test command on a line of its own"
    assert command.group(1) in (ROOT / ".ci" / "run").read_text()
