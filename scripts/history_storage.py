"""What a run's histories cost the repository, stored per trial (as today) and by the alternatives.

    python scripts/history_storage.py results/reproduction.histories [--every N]

A reproduction commit adds its histories to the pack as they are: git cannot delta-compress gzip
files, so each trial's ``.jsonl.gz`` costs its own size. This measures, over every N-th history of
the folder (default 10), bytes per trial for: the files as committed (gzip per trial); the raw
JSON lines of all of them in one xz stream (one archive per run); the same with every timestamp
made relative to its trial's first and the keys dropped (an estimate of a lean, schema-per-kind
encoding); and, further, each timestamp as its distance from the previous event's start. The last
line scales the best of them to a given run's trial count (``--trials``, default: the folder's).
Every alternative keeps every value exactly: the checker judges from nanoseconds, and rejudging
must reproduce each row, so rounding the clocks is not among them.
"""

from __future__ import annotations

import argparse
import gzip
import json
import lzma
import sys
from pathlib import Path

#: Integers above this are clock readings in nanoseconds (a trial's monotonic times); below, counts.
_CLOCK_FLOOR = 10**12


def _is_clock(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > _CLOCK_FLOOR


def _relative(events: list[dict], *, delta: bool) -> bytes:
    """Each event as a JSON array of its values (keys dropped, as a schema per event kind would),
    clocks relative to the trial's first (``delta``: to the previous event's start)."""
    base = min((v for e in events for v in e.values() if _is_clock(v)), default=0)
    lines, previous_start = [], 0
    for event in events:
        origin = base + (previous_start if delta else 0)
        lines.append(json.dumps([v - origin if _is_clock(v) else v for v in event.values()], separators=(",", ":")))
        if delta and _is_clock(event.get("t0")):
            previous_start = event["t0"] - base
    return ("\n".join(lines) + "\n").encode()


def _xz(data: bytes) -> int:
    return len(lzma.compress(data, preset=9 | lzma.PRESET_EXTREME))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="a run's histories folder (<run>.histories)")
    parser.add_argument("--every", type=int, default=10, help="measure every N-th history (default 10)")
    parser.add_argument("--trials", type=int, help="scale to this many trials (default: the folder's)")
    args = parser.parse_args(argv)
    files = sorted(args.folder.glob("*.jsonl.gz"))
    if not files or args.every < 1:
        print(f"history_storage.py: no *.jsonl.gz in {args.folder} (or --every below 1)", file=sys.stderr)
        return 2
    sample = files[:: args.every]
    gz = raw_size = 0
    raw, relative, delta = bytearray(), bytearray(), bytearray()
    for path in sample:
        gz += path.stat().st_size
        data = gzip.decompress(path.read_bytes())
        raw_size += len(data)
        raw += data
        events = [json.loads(line) for line in data.splitlines() if line.strip()]
        relative += _relative(events, delta=False)
        delta += _relative(events, delta=True)
    n = len(sample)
    print(f"{args.folder}: {n} of {len(files)} histories measured (every {args.every}th); bytes per trial:")
    print(f"  raw JSON lines                                    {raw_size / n:8.0f}")
    print(f"  gzip per trial (as committed)                     {gz / n:8.0f}")
    print(f"  one xz archive per run                            {_xz(bytes(raw)) / n:8.0f}")
    print(f"  one xz archive, clocks relative to the trial's    {_xz(bytes(relative)) / n:8.0f}")
    best = _xz(bytes(delta)) / n
    print(f"  one xz archive, clocks as deltas between events   {best:8.0f}")
    trials = args.trials or len(files)
    print(
        f"for {trials} trials: {gz / n * trials / 1e6:.1f} MB as committed, {best * trials / 1e6:.1f} MB at best "
        "(lossless: the checker judges nanoseconds)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
