"""A matrix's time-left estimates against the time it really had left (issue 53: within 25% after the
first tenth of a run).

    python scripts/eta_lines.py -- lockcompare matrix --backends single,fenced,none \\
        --experiments baseline,client-pause,short-ttl --trials 5 --jobs 16 --time-scale 0.1 --out /tmp/x.csv

Runs the command with stderr on a pipe (not a terminal: the matrix prints one plain line per finished
trial, cli/progress_bar.py), stamps each line with the time it came, and when the command has ended
prints, for each line with a ``(~N s left)``, the estimate, the time really left until the last
trial's line, and the error; lines in the first tenth of the run are marked. The machine's load
average at the start and the end comes first: the estimate follows the trials at once, which the
scheduler sets by the load. Exit status: the command's.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

TRIAL_LINE = re.compile(r"^\[(?P<done>\d+)/(?P<total>\d+)\] ")
LEFT = re.compile(r"\(~(?:(?P<hours>\d+) h )?(?P<value>\d+) (?P<unit>s|min) left\)$")


def seconds_left(line: str) -> int | None:
    """The estimate a progress line ends with, in seconds (None: it has none).

    >>> seconds_left("[3/45] single × baseline #0: exclusive, 0/80 conflicts, 0 lost, 2.6 s (~105 s left)")
    105
    >>> seconds_left("[1/9] x (~1 h 40 min left)"), seconds_left("[9/9] x: exclusive, 2.0 s")
    (6000, None)
    """
    found = LEFT.search(line)
    if found is None:
        return None
    per_unit = 60 if found["unit"] == "min" else 1
    return int(found["hours"] or 0) * 3600 + int(found["value"]) * per_unit


def report(stamped: list[tuple[float, str]]) -> list[str]:
    """One line per estimate: when it came, [done/total], the estimate, the time really left, the error."""
    trials = [(at, line) for at, line in stamped if TRIAL_LINE.match(line)]
    if not trials:
        return ["no progress lines"]
    end = trials[-1][0]
    lines = []
    for at, line in trials:
        estimate, real = seconds_left(line), end - at
        if estimate is None or real <= 0:
            continue
        counts = line.split("]", 1)[0] + "]"
        tenth = "  (first tenth)" if at < end / 10 else ""
        lines.append(
            f"{at:6.1f} s {counts:9} ~{estimate:4d} s left  real {real:6.1f} s  {estimate / real - 1:+5.0%}{tenth}"
        )
    return lines


def main(command: list[str]) -> int:
    if not command:
        print("usage: eta_lines.py -- COMMAND...", file=sys.stderr)
        return 2
    before, start = os.getloadavg()[0], time.monotonic()
    try:
        child = subprocess.Popen(command, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    except OSError as exc:
        print(f"eta_lines.py: cannot run {command[0]}: {exc.strerror}", file=sys.stderr)
        return 2
    assert child.stderr is not None
    stamped = [(time.monotonic() - start, line.rstrip("\n")) for line in child.stderr]
    status = child.wait()
    print(f"load average {before:.1f} at the start, {os.getloadavg()[0]:.1f} at the end; exit {status}")
    print("\n".join(report(stamped)))
    return status


if __name__ == "__main__":
    args = sys.argv[1:]
    sys.exit(main(args[1:] if args[:1] == ["--"] else args))
