"""A run in parts against its floor, over every part: Σ wall / Σ floor.

    python scripts/floor_total.py results/derived/reproduction-floor.txt

Reads every closing floor line a matrix printed (runner/floor.py: ``N trials in W s wall; floor F s
= max(...)``), one per part or resumed piece of one (a settled part's line already sums its rounds),
and prints one line: how many parts, trials, the summed wall and floor, and their ratio. A part's
floor is what it could not go below on its own; run one after another, the whole cannot go below
their sum. A piece stopped by a signal prints no closing lines: its wall and its trials are in
neither sum (results/derived/reproduction.time has every piece's wall, from /usr/bin/time), so a run
that was stopped says so beside this line. Exit 1 when the file holds no floor line (nothing to
total), 2 when it cannot be read.
"""

from __future__ import annotations

import re
import sys

FLOOR_LINE = re.compile(r"^(?P<trials>\d+) trials in (?P<wall>[\d.]+) s wall; floor (?P<floor>[\d.]+) s ")


def total_line(text: str) -> str | None:
    """The over-all line for the floor lines in ``text`` (None when it holds none).

    >>> total_line("12 trials in 30.0 s wall; floor 20.0 s = ...\\nx\\n3 trials in 10.0 s wall; floor 10.0 s = ...")
    'over 2 matrix runs (parts, resumed pieces): 15 trials in 40.0 s wall; floor 30.0 s; wall/floor 1.33'
    """
    found = [m for m in map(FLOOR_LINE.match, text.splitlines()) if m]
    if not found:
        return None
    trials = sum(int(m["trials"]) for m in found)
    wall = sum(float(m["wall"]) for m in found)
    floor = sum(float(m["floor"]) for m in found)
    ratio = f"{wall / floor:.2f}" if floor > 0 else "n/a"
    runs = f"over {len(found)} matrix runs (parts, resumed pieces)"
    return f"{runs}: {trials} trials in {wall:.1f} s wall; floor {floor:.1f} s; wall/floor {ratio}"


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python scripts/floor_total.py FLOOR_LINES.txt", file=sys.stderr)
        return 2
    try:
        text = open(argv[0], encoding="utf-8").read()
    except OSError as exc:
        print(f"floor_total.py: {argv[0]}: {exc.strerror}", file=sys.stderr)
        return 2
    line = total_line(text)
    if line is None:
        print(
            f"floor_total.py: {argv[0]}: no floor line (runner/floor.py's 'N trials in W s wall; floor F s')",
            file=sys.stderr,
        )
        return 1
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
