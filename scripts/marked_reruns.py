#!/usr/bin/env python3
"""Per run kept by ``scripts/main_pattern.py --keep DIR``: how many trials the run ran again at its end
(``matrix --rerun-marked``), how many of those were marked again, and what had marked the first ones.

    python scripts/marked_reruns.py DIR

It reads each run's CSV (a rerun's row says so in its ``note``) and its ``.superseded.csv`` (the marked
rows the reruns replaced, with ``stall_at``). Standard library only.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

#: The start of the note a rerun's row carries (lockcompare.runner.local_executor.RERUN_NOTE).
RERUN_NOTE = "run again after a timing-marked"


def _rows(path: Path) -> list[dict[str, str]]:
    if not path.is_file():
        return []
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def summary(run_csv: Path) -> str:
    again = [r for r in _rows(run_csv) if RERUN_NOTE in r["note"]]
    marked = _rows(run_csv.with_name(run_csv.stem + ".superseded.csv"))
    still = sum(r["timing_marked"] == "true" for r in again)
    what = "; ".join(f"{r['backend']} x {r['experiment']} ({r['stall_at']})" for r in marked)
    return f"{run_csv.name}: {len(again)} run again, {still} still marked" + (f": {what}" if what else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kept", type=Path, help="the directory main_pattern.py --keep wrote")
    args = parser.parse_args(argv)
    runs = sorted(p for p in args.kept.glob("run-*.csv") if not p.name.endswith(".superseded.csv"))
    if not runs:
        print(f"marked_reruns.py: no run-*.csv in {args.kept}", file=sys.stderr)
        return 2
    for run in runs:
        print(summary(run))
    return 0


if __name__ == "__main__":
    sys.exit(main())
