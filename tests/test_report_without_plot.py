"""``lockcompare report`` without the plot extra: matplotlib's import blocked in a subprocess, the
report still writes its Markdown and the HTML (SVG timelines), and says in one line that the PNGs
were skipped; it names the registered backends the file has no row of."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from lockcompare.render.html_report import provenance_value
from lockcompare.render.report import absent_backends

GOLDEN = Path(__file__).parent / "data" / "golden"

NO_MATPLOTLIB = """
import sys

class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "matplotlib":
            raise ImportError(f"blocked: {name}")

sys.meta_path.insert(0, Block())
sys.argv = ["lockcompare", *sys.argv[1:]]
from lockcompare.cli import main
main()
"""


def test_the_report_without_matplotlib_writes_the_markdown_and_the_html_and_says_the_pngs_were_skipped(
    tmp_path: Path,
) -> None:
    out = tmp_path / "report"
    done = subprocess.run(
        [sys.executable, "-c", NO_MATPLOTLIB, "report", str(GOLDEN / "tiny.csv"), "--out", str(out)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(out / "README.md"), str(out / "html")]  # what it wrote: no PNG
    notes = done.stderr.splitlines()
    skipped = [line for line in notes if "PNGs skipped" in line]
    assert skipped == [
        "lockcompare: note: PNGs skipped (plots need matplotlib: pip install 'lockcompare[plot]'); the Markdown and "
        "the HTML report (SVG timelines) are written"
    ]
    assert "Traceback" not in done.stderr
    assert not list(out.glob("*.png"))
    markdown = (out / "README.md").read_text()
    assert "![" not in markdown and "(No picture: the PNGs need matplotlib" in markdown
    trial_pages = list((out / "html" / "trials").glob("*.html"))
    assert len(trial_pages) == 2 and all("<svg" in p.read_text() for p in trial_pages)
    # tiny.csv holds single and fenced only: every other registered backend is named, once
    (absent,) = [line for line in notes if line.startswith("lockcompare: note: not in tiny.csv: ")]
    names = absent.removeprefix("lockcompare: note: not in tiny.csv: ").split(" (")[0].split(", ")
    assert "redlock" in names and "single" not in names and "fenced" not in names
    assert "Backends not in this file" in markdown


def test_absent_backends_are_the_registered_ones_without_a_row_in_their_order() -> None:
    rows = [{"backend": "single"}, {"backend": "fenced"}]
    assert absent_backends(rows, registered=["fenced", "redlock", "single", "zk-lock"]) == ["redlock", "zk-lock"]
    assert absent_backends(rows, registered=[]) == []


def test_a_provenance_cell_summarises_many_values() -> None:
    loads = [0.42 + i / 10 for i in range(100)]  # ~100 load averages: one range, not a list
    assert provenance_value(loads) == "0.42–10.32"
    assert provenance_value([2, 10, 3]) == "2–10"  # numbers, not text: 10 above 3
    assert provenance_value(["h1", "h2", "h1", "", None]) == "h1, h2"
    hosts = [f"host{i}" for i in range(10)]
    assert provenance_value(hosts) == ", ".join(hosts[:8]) + " and 2 more"
    assert provenance_value([None, ""]) == ""
