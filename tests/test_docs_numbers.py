"""Issue 31: no hand-typed figure in README.md or docs/ — every number in prose is rendered from a
committed file, or is a setting the short allow-list names."""

from __future__ import annotations

from pathlib import Path

import pytest

from lockcompare.render.docs import ALLOWED, main, prose_numbers

ROOT = Path(__file__).resolve().parents[1]

#: Every document, none exempt: a figure is rendered from a committed file or not written at all.
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_no_number_in_prose_outside_a_rendered_block(doc: Path) -> None:
    found = prose_numbers(doc.read_text())
    assert not found, "\n".join(f"{doc.relative_to(ROOT)}:{line}: {number}" for line, number in found)


def test_a_figure_in_prose_is_found_and_a_setting_is_not() -> None:
    text = (
        "2 workers × 40 rounds, 300 ms of work, TTL 1000 ms, a 1200 ms pause, 5 nodes, at ×0.1.\n"
        "Worker 0 paused; single lost 19.8 updates and 3 of 12 leases broke.\n"
        "`--trials 5` and [the report](results/x.png) and <!-- a note: 42 -->\n"
        "```\n77 ms\n```\n"
        "lost <!-- value: results/reproduction.csv backend=single experiment=client-pause"
        " mean:lost_updates -->20<!-- /value --> updates\n"
    )
    assert prose_numbers(text) == [(2, "19.8"), (2, "3"), (2, "12")]


def test_a_result_that_follows_a_setting_word_is_still_a_result() -> None:
    # The allow-list names settings by the word before them; a result phrased the same way is caught.
    assert prose_numbers("the grant came 500 ms earlier and took 33 min 6 s\n") == [(1, "500"), (1, "33"), (1, "6")]
    assert prose_numbers("±0.9 and 39 ±0.9 / 80\n") != []
    # "N trials" is a run's shape; "19 trials of 20" is a result (issue 42).
    assert prose_numbers("5 trials per cell; 19 trials of 20 lost updates\n") == [(1, "19"), (1, "20")]


def test_the_allow_list_stays_short_and_says_why() -> None:
    assert len(ALLOWED) <= 15
    assert all(reason.strip() for _, reason in ALLOWED)


def test_check_mode_names_a_prose_number(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text("TTL 1000 ms, 2 workers.\n\nsingle lost 19.8 updates.\n")
    assert main(["--check", str(doc)]) == 1
    err = capsys.readouterr().err
    assert f"{doc}: line 3: '19.8' in prose outside a rendered block" in err
    doc.write_text("TTL 1000 ms, 2 workers.\n")
    assert main(["--check", str(doc)]) == 0
