"""The README's result tables are renderings of committed CSVs, and its commands match CI."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from lockcompare.render.docs import BLOCK, VALUE, rendered_blocks, statistic

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
    # verbatim, as a whole command (not the prefix of another: the full tier adds --full)
    assert f'{command.group(1)}"' in (ROOT / ".ci" / "run").read_text()


def test_a_number_in_prose_is_rendered_from_its_csv_and_a_stale_one_is_caught() -> None:
    text = "lost <!-- value: results/reproduction.csv experiment=baseline backend=single sum:lost_updates -->7"
    text += "<!-- /value -->"
    fresh = rendered_blocks(text, base=ROOT)
    assert fresh != text and fresh.endswith("-->0<!-- /value -->")  # the single lock loses nothing at baseline
    assert VALUE.search(README), "the README's figures in prose are value blocks"


def test_statistics_over_hand_built_rows() -> None:
    rows = [{"lost_updates": 20, "timing_marked": True}, {"lost_updates": 0, "timing_marked": False},
            {"lost_updates": 19, "timing_marked": "true"}]  # fmt: skip
    assert statistic(rows, "mean:lost_updates") == "13"
    assert statistic(rows, "sum:lost_updates") == "39"
    assert statistic(rows, "min:lost_updates") == "0"
    assert statistic(rows, "max:lost_updates") == "20"
    assert statistic(rows, "nonzero:lost_updates") == "2"
    assert statistic(rows, "true:timing_marked") == "2"
    assert statistic(rows, "rows") == "3"
    assert statistic(rows[:2], "mean:lost_updates") == "10"
    assert statistic(rows, "median:lost_updates") == "19"
    assert statistic(rows, "range:lost_updates") == "0–20"
    assert statistic(rows, "ci:lost_updates").startswith("13 ±")
    with pytest.raises(ValueError, match="unknown statistic"):
        statistic(rows, "mode:lost_updates")
    with pytest.raises(ValueError, match="no row has a number"):
        statistic(rows, "mean:conflicts")
