"""The README is summary-first (issue 53): one run's words table, five linked findings and two commands,
every figure rendered from a committed CSV, every relative link a committed file, its commands CI's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from lockcompare.render.docs import BLOCK, EXCERPT, OUTPUT, VALUE, WORDS, rendered_blocks, statistic

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_readme_tables_are_rendered_from_committed_csvs() -> None:
    assert WORDS.search(README), "the README's who-survives-what table is a words block"
    assert rendered_blocks(README, base=ROOT) == README, "run: python -m lockcompare.render.docs README.md"


def test_every_figure_in_the_readme_reads_one_committed_run() -> None:
    sources = {m["csv"] for pattern in (VALUE, BLOCK, WORDS, EXCERPT) for m in pattern.finditer(README)}
    assert sources == {"results/reproduction.csv"}
    assert not OUTPUT.search(README), "a script's output belongs with its run's provenance in docs/"


def test_the_readme_is_summary_first_and_short() -> None:
    lines = README.splitlines()
    assert len(lines) <= 250
    headings = [line for line in lines if line.startswith("## ")]
    assert headings[:4] == ["## Who survives what", "## Five findings", "## The main command", "## The tests"]
    findings = README.split("## Five findings")[1].split("\n## ")[0]
    assert findings.count("\n- **") == 5
    assert findings.count("](results/reproduction.pages/") == 5, "each finding links its committed trial page"
    assert "glance.png" not in README, (
        "the overview picture is illegible at README width: docs/reproduction.md links it"
    )


def test_the_readme_has_exactly_two_code_blocks_the_main_command_and_the_tests() -> None:
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```", README, re.MULTILINE | re.DOTALL)
    assert [b.count("\n") for b in blocks] == [1, 1]
    assert blocks[0].strip().endswith("lockcompare matrix --time-scale 0.1 --trials 2")
    assert blocks[1].strip().endswith("python -m pytest")


def test_every_relative_link_in_the_readme_is_a_committed_file() -> None:
    # PyPI renders the README as the long description (pyproject readme) and resolves no relative
    # link; there is no canonical URL to make them absolute with, so they stay relative and must at
    # least resolve in a checkout and on the repository's own pages.
    targets = re.findall(r"\]\(([^)\s]+)\)", README)
    assert targets
    for target in targets:
        assert not target.startswith(("http://", "https://")), target
        path = target.split("#")[0]
        assert (ROOT / path).is_file(), target


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
