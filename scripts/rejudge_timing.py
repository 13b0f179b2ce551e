"""Every row of a results file judged again by today's timing sentinel, from its history alone.

    python scripts/rejudge_timing.py [--summary] results/reproduction.csv

The sentinel is pure (analysis/sentinel.py): a history and the trial's plan decide its worst stall.
When its rules change, this shows what the change does to rows already written, without rerunning a
trial: one line per row whose mark changes (stored stall and where, today's stall and where), then
the marked rows before and after, per backend, and why each mark that remains is there (what
stalled, against which margin). Rows are never rewritten.
"""

from __future__ import annotations

import re
import sys
from collections import Counter, defaultdict
from pathlib import Path

from lockcompare.analysis.reproduce import spec_from_row
from lockcompare.analysis.results import read_results
from lockcompare.analysis.sentinel import is_marked, judge_timing
from lockcompare.render.timeline import load_history
from lockcompare.runner.trial import ResolvedTrial, timing_plan


def main(argv: list[str]) -> int:
    summary_only = "--summary" in argv  # without the line per changed row
    argv = [a for a in argv if a != "--summary"]
    if len(argv) != 1:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    path = Path(argv[0])
    before: Counter[str] = Counter()
    after: Counter[str] = Counter()
    changed = 0
    rows = read_results(path)
    reasons: dict[tuple[str, str], list[tuple[str, float, float]]] = defaultdict(list)
    for row in rows:
        verdict = judge_timing(
            load_history(path.parent / str(row["history"])),
            timing_plan(ResolvedTrial.of(spec_from_row(row), check_viable=False)),
        )
        if verdict.marked:
            what = re.sub(r"^(worker \d+|runner) round -?\d+: ", "", verdict.stall.at)
            reasons[(what, verdict.margin.of)].append((str(row["backend"]), verdict.stall.ms, verdict.margin.ms))
        was = is_marked(row)
        before[row["backend"]] += was
        after[row["backend"]] += verdict.marked
        if was != verdict.marked:
            changed += 1
            if summary_only:
                continue
            print(
                f"{row['trial_id']}: stored {float(row['stall_ms']):.0f} of {float(row['margin_ms']):.0f} ms"
                f" at {row['stall_at']} -> today {verdict.stall.ms:.0f} ms at {verdict.stall.at or '-'}"
            )
    head = f"{path.name}: {changed} of {len(rows)} rows change their mark"
    print(f"{'' if summary_only else chr(10)}{head}; marked rows per backend, stored -> today:")
    for backend in sorted(before | after):
        print(f"  {backend:28} {before[backend]:3} -> {after[backend]:3}")
    print(f"  {'all':28} {sum(before.values()):3} -> {sum(after.values()):3}")
    print("\nwhy each remaining mark is there (what stalled, against which margin):")
    print(f"  {'marks':>5}  {'what stalled':28} {'margin':22} {'stall ms':>13}  backends")
    for (what, margin), marks in sorted(reasons.items(), key=lambda item: (-len(item[1]), item[0])):
        stalls = [ms for _, ms, _ in marks]
        backends = ", ".join(f"{b} {n}" for b, n in Counter(b for b, _, _ in marks).most_common())
        span = f"{min(stalls):.0f}-{max(stalls):.0f}"
        print(f"  {len(marks):5}  {what:28} {margin:22} {span:>13}  {backends}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
