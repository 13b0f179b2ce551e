"""scripts/rejudge_timing.py on a committed file: it builds each row's plan the way the runner does,
so a change to that seam shows here (it once broke with an AttributeError unseen until a run needed
it). The lab loop's rows: few, quick, and every one judged from its own history."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from lockcompare.analysis.results import read_results

ROOT = Path(__file__).resolve().parents[1]


def test_rejudge_timing_judges_every_row_of_a_committed_file_again() -> None:
    out = subprocess.run(
        [sys.executable, "scripts/rejudge_timing.py", "--summary", "results/lab-loop.csv"],
        check=False,  # its exit code is asserted below, with its stderr
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    first = out.stdout.splitlines()[0]
    # every row of the file was judged again (none skipped for want of its plan or history)
    rows = len(read_results(ROOT / "results" / "lab-loop.csv"))
    assert first.startswith("lab-loop.csv: ") and f" of {rows} rows change their mark" in first, first
