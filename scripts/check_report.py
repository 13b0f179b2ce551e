"""Check that a report built from the committed files renders (CI, issue 50.4): the report is not
committed, so CI builds it (`lockcompare report results/reproduction.csv --out DIR`) and this script
reads what it wrote.

    python scripts/check_report.py DIR results/reproduction.csv README.md docs/*.md

The index must hold the verdict grid with its legend and name every backend of the CSV; each trial
page the documents link (their page blocks, render/docs_trials.py) must exist in the report and be
the committed page but for its header line (the committed one is rendered alone). One line per
problem on stderr, exit 1; exit 0 with one summary line.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from lockcompare.analysis.results import latest_rows, read_results
from lockcompare.errors import LockcompareError
from lockcompare.render.docs_trials import PAGE, page_target
from lockcompare.render.html_trial import trial_page_name

_NAV = re.compile(r"<nav>.*?</nav>", re.DOTALL)


def problems(report: Path, csv: Path, documents: list[Path]) -> tuple[list[str], int]:
    """What is wrong with the report in ``report`` built from ``csv``, and how many trial pages were compared."""
    found: list[str] = []
    index = report / "html" / "index.html"
    if not index.is_file():
        return [f"{index}: missing"], 0
    html = index.read_text(encoding="utf-8")
    for needed in ('<table class="grid"', 'class="legend"', f"lockcompare report: {csv.name}"):
        if needed not in html:
            found.append(f"{index}: no {needed!r}")
    backends = sorted({str(r["backend"]) for r in latest_rows(read_results(csv))})
    found += [f"{index}: backend {b} not named" for b in backends if f">{b}" not in html]
    compared = 0
    for doc in documents:
        for match in PAGE.finditer(doc.read_text(encoding="utf-8")):
            if (doc.parent / match["csv"]).resolve() != csv.resolve():
                continue
            built = report / "html" / "trials" / trial_page_name({"trial_id": match["trial"]})
            committed = doc.parent / page_target(match["csv"], match["trial"])
            if not built.is_file():
                found.append(f"{built}: missing (linked by {doc})")
            elif _NAV.sub("", built.read_text(encoding="utf-8")) != _NAV.sub("", committed.read_text(encoding="utf-8")):
                found.append(f"{built}: differs from {committed} beyond its header")
            else:
                compared += 1
    if not compared:
        found.append(f"no document links a trial page of {csv}")
    return found, compared


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print("usage: python scripts/check_report.py REPORT_DIR RESULTS.csv DOCUMENT.md...", file=sys.stderr)
        return 2
    report, csv, documents = Path(argv[0]), Path(argv[1]), [Path(a) for a in argv[2:]]
    try:
        found, compared = problems(report, csv, documents)
    except (OSError, ValueError, LockcompareError) as exc:
        print(f"check_report: {exc}", file=sys.stderr)
        return 1
    for line in found:
        print(f"check_report: {line}", file=sys.stderr)
    if found:
        return 1
    print(f"check_report: {report} renders: index with grid and legend, {compared} linked trial page(s) as committed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
