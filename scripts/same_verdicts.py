#!/usr/bin/env python3
"""The verdicts of two results files side by side, cell by cell (backend × experiment): which
verdicts each file's trials got, and whether the two sets are the same.

Used by scripts/redis_vs_valkey.sh (the same matrix on Redis and on Valkey: the same verdicts are
expected, and a difference is to be explained from the two histories, each row's ``history``
column). Prints a Markdown table; with ``--csv PATH`` also writes it as a CSV that docs render
(``same=yes`` / ``same=no`` rows)::

    python scripts/same_verdicts.py results/redis-vs-valkey/redis.csv results/redis-vs-valkey/valkey.csv \\
        --csv results/redis-vs-valkey/verdicts.csv

Standard library only; exit 1 when a cell's verdicts differ or a cell is in one file only.
"""

from __future__ import annotations

import argparse
import collections
import csv
import sys
from pathlib import Path


def verdicts(path: Path) -> tuple[dict[tuple[str, str], collections.Counter[str]], str]:
    cells: dict[tuple[str, str], collections.Counter[str]] = collections.defaultdict(collections.Counter)
    versions: set[str] = set()
    with path.open(newline="") as fh:
        for row in csv.DictReader(fh):
            cells[(row["backend"], row["experiment"])][row["verdict"]] += 1
            versions.add(row.get("server_version", ""))
    return cells, ", ".join(sorted(versions)) or path.name


def say(counts: collections.Counter[str]) -> str:
    return ", ".join(f"{n}× {v}" for v, n in sorted(counts.items())) or "-"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("a", type=Path)
    parser.add_argument("b", type=Path)
    parser.add_argument("--csv", type=Path, help="also write the table here")
    args = parser.parse_args()
    (a, a_name), (b, b_name) = verdicts(args.a), verdicts(args.b)
    table = []
    for cell in sorted(set(a) | set(b)):
        same = cell in a and cell in b and set(a[cell]) == set(b[cell])
        table.append([cell[0], cell[1], say(a[cell]), say(b[cell]), "yes" if same else "no"])
    print(f"\n| backend | experiment | {a_name} | {b_name} | same verdicts |\n|---|---|---|---|---|")
    for row in table:
        print("| " + " | ".join(row) + " |")
    if args.csv is not None:
        with args.csv.open("w", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(["backend", "experiment", args.a.name, args.b.name, "same"])
            writer.writerows(table)
    return 0 if all(row[-1] == "yes" for row in table) else 1


if __name__ == "__main__":
    sys.exit(main())
