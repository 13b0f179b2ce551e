"""Which node-fault trials broke a Redlock holder's majority, from the holders the runner read.

    python scripts/bare_majority.py results/minority-faults.csv
    python scripts/bare_majority.py results/reproduction.csv redlock,pottery node-restart,clock-jump

For every trial in the CSV (or of the given backends and experiments, in that order): how many node-
fault injections took the lock's majority away from its holder (the owner found on most nodes held a
majority of the lock nodes before the fault and fewer than a majority of the nodes it spared),
beside the trial's verdict and lost updates; then a count of lost and clean trials with and without
such an injection. The majority is taken over every lock node the runner read (all of the embedded
cluster's): right for backends that use all of them, as redlock and pottery do by default, not for
``--redlock-nodes`` runs. An injection recorded without ``holders`` (older histories, etcd) is
reported as unknown.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

from lockcompare.analysis.holders import NODE_LOSING_FAULTS, majority_broken
from lockcompare.analysis.results import latest_rows, read_results
from lockcompare.render.timeline import load_history


def main(csv_path: Path, *, backends: list[str] | None = None, experiments: list[str] | None = None) -> None:
    tally: Counter[tuple[str, str, str]] = Counter()
    rows = latest_rows(read_results(csv_path))
    if backends or experiments:  # a selection, in the order asked for
        order = {(b, e): i for i, (b, e) in enumerate((b, e) for b in backends or [] for e in experiments or [])}
        rows = [r for r in rows if (backends is None or r["backend"] in backends)
                and (experiments is None or r["experiment"] in experiments)]  # fmt: skip
        rows.sort(key=lambda r: (order.get((r["backend"], r["experiment"]), 0), r["trial"]))
    print("backend  experiment    trial  verdict        lost  injections  broke-majority")
    for row in rows:
        events = load_history(csv_path.parent / row["history"])
        injects = [e for e in events if e["kind"] == "fault" and e.get("action") == "inject"
                   and e.get("fault") in NODE_LOSING_FAULTS]  # fmt: skip
        judged = [majority_broken(e) for e in injects]
        broke = "unknown" if None in judged else str(sum(judged))
        print(f"{row['backend']:8} {row['experiment']:13} {row['trial']:5}  {row['verdict']:14} "
              f"{row['lost_updates']:4}  {len(injects):10}  {broke}")  # fmt: skip
        lost = "lost" if row["lost_updates"] > 0 else "none lost"
        tally[(row["backend"], lost, "broke a majority" if broke not in ("0", "unknown") else f"broke: {broke}")] += 1
    print()
    for (backend, lost, broke), trials in sorted(tally.items()):
        print(f"{backend}: {trials} trial(s) {lost}, {broke}")


if __name__ == "__main__":
    if not 2 <= len(sys.argv) <= 4:
        sys.exit("usage: python scripts/bare_majority.py RESULTS.csv [BACKEND,... [EXPERIMENT,...]]")
    main(
        Path(sys.argv[1]),
        backends=sys.argv[2].split(",") if len(sys.argv) > 2 else None,
        experiments=sys.argv[3].split(",") if len(sys.argv) > 3 else None,
    )
