"""Issue 50.4: the HTML report is built on demand, not committed; the few trial pages README.md and
docs/ link are, rendered alone from the committed CSV and history by page blocks and checked fresh,
and every relative link of README.md and docs/*.md names a committed file (and heading)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from lockcompare.analysis.results import latest_rows, read_results
from lockcompare.render.docs import main, stale_pages
from lockcompare.render.docs_trials import PAGES_SUFFIX, linked_pages

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
TRIAL = "redlock.node-restart.plain.pause0.t1.4340f221"


def _results_with_one_history(tmp_path: Path) -> Path:
    """A copy of the committed reproduction CSV and of TRIAL's history (the page reads no other)."""
    results = tmp_path / "results"
    (results / "reproduction.histories").mkdir(parents=True)
    shutil.copy(ROOT / "results" / "reproduction.csv", results)
    history = f"reproduction.histories/{TRIAL}.jsonl.gz"
    shutil.copy(ROOT / "results" / history, results / history)
    return results


def test_a_page_block_writes_its_trial_page_beside_the_csv_and_check_names_it_missing_or_stale(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = _results_with_one_history(tmp_path)
    doc = tmp_path / "doc.md"
    block = f"<!-- page: results/reproduction.csv trial={TRIAL} -->[why]({{target}})<!-- /page -->"
    doc.write_text("See " + block.format(target="somewhere.html") + ".\n")
    page = results / f"reproduction{PAGES_SUFFIX}" / f"{TRIAL}.html"

    assert main(["--check", str(doc)]) == 1
    err = capsys.readouterr().err
    assert f"page link results/reproduction.csv trial={TRIAL}" in err and f"page {page} is missing" in err
    assert not page.parent.exists(), "check mode writes nothing"

    assert main([str(doc)]) == 0
    assert doc.read_text() == "See " + block.format(target=f"results/reproduction.pages/{TRIAL}.html") + ".\n"
    html = page.read_text()
    assert f"<h1>{TRIAL}</h1>" in html and "granted_by" in html  # the decisive grant, in the excerpt
    # rendered alone: it links no page of the report (none is committed) and names the command that builds them
    assert not re.search(r'href="[^"#]', html)
    assert "lockcompare report reproduction.csv" in html
    assert main(["--check", str(doc)]) == 0

    page.write_text(html.replace("granted_by", "granted by"))
    assert main(["--check", str(doc)]) == 1
    assert f"page {page}: stale" in capsys.readouterr().err
    assert main([str(doc)]) == 0 and page.read_text() == html  # rendering repairs it


def test_the_committed_pages_are_exactly_those_the_documents_link_and_are_fresh() -> None:
    cache: dict[Path, list[dict[str, object]]] = {}
    linked: dict[Path, str] = {}
    for doc in DOCUMENTS:

        def rows_of(csv: str, base: Path = doc.parent) -> list[dict[str, object]]:
            path = (base / csv).resolve()
            return cache[path] if path in cache else cache.setdefault(path, latest_rows(read_results(path)))

        linked.update(
            {p.resolve(): t for p, t in linked_pages(doc.read_text(), base=doc.parent, rows_of=rows_of).items()}
        )
    assert len(linked) >= 5, "the README's five findings link their trial pages"
    committed = {p.resolve() for p in (ROOT / "results").glob(f"*{PAGES_SUFFIX}/*")}
    assert committed == set(linked), "a page no document links is a rendered output: remove it"
    assert stale_pages(linked) == [], "run: python -m lockcompare.render.docs README.md docs/*.md"


def _committed_files() -> set[str]:
    try:
        listed = subprocess.run(
            ["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True, check=True, text=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: which files are committed is unknown here")
    return set(filter(None, listed.split("\0")))


def heading_anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives the headings of ``markdown``: lower case, punctuation dropped, spaces
    as hyphens, a repeated heading numbered.

    >>> sorted(heading_anchors("# A b\\n## Install (Python ≥ 3.11)\\n```\\n# not a heading\\n```\\n## A b\\n"))
    ['a-b', 'a-b-1', 'install-python--311']
    """
    anchors: set[str] = set()
    text = re.sub(r"^```.*?^```", "", markdown, flags=re.MULTILINE | re.DOTALL)
    for heading in re.findall(r"^#{1,6} +(.+?) *#*$", text, re.MULTILINE):
        plain = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text
        slug = re.sub(r"[^\w\- ]", "", plain.lower()).replace(" ", "-")
        anchor, n = slug, 0
        while anchor in anchors:
            n += 1
            anchor = f"{slug}-{n}"
        anchors.add(anchor)
    return anchors


def test_every_relative_link_of_the_readme_and_docs_names_a_committed_file_and_heading() -> None:
    committed = _committed_files()
    broken = []
    for doc in DOCUMENTS:
        text = re.sub(r"^```.*?^```", "", doc.read_text(), flags=re.MULTILINE | re.DOTALL)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            path, _, anchor = target.partition("#")
            file = (doc.parent / path).resolve() if path else doc
            name = file.relative_to(ROOT).as_posix() if file.is_relative_to(ROOT) else str(file)
            if name not in committed:
                broken.append(f"{doc.name}: {target} (not a committed file)")
            elif anchor and file.suffix == ".md" and anchor not in heading_anchors(file.read_text()):
                broken.append(f"{doc.name}: {target} (no such heading)")
    assert broken == []


def test_results_hold_inputs_not_rendered_reports() -> None:
    committed = _committed_files()
    reports = sorted({name.split(".report/")[0] for name in committed if ".report/" in name})
    assert reports == [], "a report is built on demand (lockcompare report): git rm it"
    images = [n for n in committed if n.startswith("results/") and n.endswith((".html", ".png", ".svg"))]
    assert len(images) < 20, images
    read_results(ROOT / "results" / "reproduction.csv")  # the published report's input is committed and readable
