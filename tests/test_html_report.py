"""The HTML report in a real browser (headless Chromium): it loads the index from ``file://``,
follows a grid cell to its trials and a trial to its page, reads the rendered DOM, sorts a table
by a click, takes screenshots, and finds no console message (an uncaught error would be one).
The pure parts (the SVG, the folder) are tests/test_svg_timeline.py."""

from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from lockcompare.analysis.results import latest_rows, read_results
from lockcompare.analysis.verdicts import MEANINGS
from lockcompare.render.html_report import MARKER, write_html_report
from test_svg_timeline import RESULTS, Dom

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="needs Chromium: apt-get install chromium")


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("html") / "html"
    write_html_report(rows=latest_rows(read_results(RESULTS)), results=RESULTS, out=out)
    write_html_report(rows=latest_rows(read_results(RESULTS)), results=RESULTS, out=out)  # a rerender replaces it
    assert (out / MARKER).is_file() and not out.with_name("html.part").exists()
    return out


def _browse(page: Path, *args: str, profile: Path) -> str:
    """Load ``page`` in headless Chromium; its stdout (the DOM with --dump-dom). Fails on any console
    message Chromium logs (an uncaught error is one: ``INFO:CONSOLE ... "Uncaught ..."``)."""
    assert CHROMIUM is not None
    done = subprocess.run(
        [CHROMIUM, "--headless", "--disable-gpu", "--no-sandbox", "--hide-scrollbars", "--enable-logging=stderr",
         "--v=0", f"--user-data-dir={profile}", *args, page.resolve().as_uri()],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    console = [line for line in done.stderr.splitlines() if ":CONSOLE" in line]
    assert not console, console
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def _png_size(path: Path) -> tuple[int, int]:
    width, height = struct.unpack(">II", path.read_bytes()[16:24])
    return width, height


@needs_chromium
def test_chromium_follows_a_cell_to_a_trial_page(report: Path, tmp_path: Path) -> None:
    profile = tmp_path / "profile"
    index = Dom(_browse(report / "index.html", "--dump-dom", profile=profile))
    assert all(e[1].get("data-sortable") == "ready" for e in index.having("table", "sortable"))  # the script ran
    cells = {e[1]["data-verdict"]: e for e in index.having("td", "cell")}
    assert sorted(cells) == ["conflicts-no-damage", "lost-updates"]
    grid = [
        index.elements[i + 1] for i, e in enumerate(index.elements) if e[0] == "td" and "cell" in e[1].get("class", "")
    ]
    links = [e[1]["href"] for e in grid if e[0] == "a"]
    assert links == ["cells/none.client-pause.html", "cells/single.client-pause.html", "cells/fenced.client-pause.html"]
    summary = [e[1]["href"] for e in index.having("a") if e not in grid and e[1].get("href", "").startswith("cells/")]
    assert summary == links  # the summary's lines link to the same cells

    cell = Dom(_browse(report / links[1], "--dump-dom", profile=profile))
    trials = [e[1]["href"] for e in cell.having("a") if e[1].get("href", "").startswith("../trials/")]
    assert len(set(trials)) == 5 and all(
        "single.client-pause" in t for t in trials
    )  # (one linked twice: "shown best by")
    page = (report / "cells" / trials[0]).resolve()

    trial = Dom(_browse(page, "--dump-dom", profile=profile))
    (verdict,) = [e for e in trial.having("abbr", "verdict") if "".join(e[2]) == "lost-updates"][:1]
    assert verdict[1]["title"] == MEANINGS["lost-updates"]  # the verdict defined where it appears
    caption = "".join(trial.having("div", "caption")[0][2])
    assert "lost-updates w" in caption and " ms" in caption  # the rule that fired, with the history's times
    assert len(trial.having("svg", "timeline")) == 1
    assert [e[1]["data-worker"] for e in trial.having("g", "lane")] == ["0", "1"]
    assert trial.having("rect", "cs") and trial.having("rect", "lease") and trial.having("rect", "server-lease")
    assert trial.having("rect", "fault") and trial.having("circle", "lost-update")
    assert "lockcompare run --from contend.csv:single.client-pause" in "".join(trial.having("pre", "cmd")[0][2])
    assert "acquire" in "".join(trial.having("pre", "history")[0][2])

    for name, where in (("index", report / "index.html"), ("trial", page)):
        shot = tmp_path / f"{name}.png"
        _browse(where, f"--screenshot={shot}", "--window-size=1400,1000", profile=profile)
        assert _png_size(shot) == (1400, 1000)


@needs_chromium
def test_a_click_on_a_column_sorts_the_summary(report: Path, tmp_path: Path) -> None:
    """The summary lists none, single, fenced (registration order); a click on "lost updates" sorts
    it ascending by number: fenced (0) first."""
    text = (report / "index.html").read_text(encoding="utf-8")
    click = (
        "<script>var t=document.querySelectorAll('table.sortable')[0];"
        "Array.prototype.find.call(t.querySelectorAll('th'),function(h){"
        "return h.textContent.indexOf('lost updates')===0;}).click();</script></body>"
    )
    clicked = report / "clicked.html"
    clicked.write_text(text.replace("</body>", click), encoding="utf-8")
    try:
        dom = Dom(_browse(clicked, "--dump-dom", profile=tmp_path / "profile"))
    finally:
        clicked.unlink()
    summary = dom.having("table", "sortable")[0]
    start = dom.elements.index(summary)
    after = dom.elements[start:]
    columns = len([e for e in after[: next(i for i, e in enumerate(after) if e[0] == "td")] if e[0] == "th"])
    cells = [e for e in after if e[0] == "td"][: 3 * columns]  # the summary's 3 lines
    backends = ["".join(e[2]) for e in cells[::columns]]
    assert backends == ["fenced", "none", "single"]  # a stable sort: none and single (40 each) keep their order
    assert any(e[1].get("aria-sort") == "ascending" for e in dom.having("th"))
