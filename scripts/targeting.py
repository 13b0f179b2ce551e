"""Share of node-fault injections that hit a node of the lease current when they landed.

    python scripts/targeting.py results/targeting.csv

For every trial in the CSV: its node-fault injections (crash, restart, clock jump), and how many
hit only nodes that held the current lease just before (read by the runner at injection: the
event's ``holders``; the current lease is the owner on the most nodes, as faults/targets.py
decides). Then one line per backend x experiment x --fault-nodes cell. Injections recorded
without ``holders`` (older histories, etcd members) count as unknown.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

from lockcompare.analysis.holders import NODE_LOSING_FAULTS
from lockcompare.analysis.results import read_results
from lockcompare.faults.targets import current_owner
from lockcompare.render.timeline import load_history


def hit(inject: dict) -> bool | None:
    """True when every node hit held the current lease; None when the holders were not read."""
    holders = inject.get("holders")
    if not isinstance(holders, list):
        return None
    owner = inject.get("lease_owner") or current_owner(holders)
    return owner is not None and bool(inject["nodes"]) and all(holders[n] == owner for n in inject["nodes"])


def main(csv_path: Path) -> None:
    cells: dict[tuple[str, str, int], list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    print(f"{'backend':9} {'experiment':15} {'K':>2} {'trial':>5}  {'verdict':14} {'lost':>4}  "
          f"{'injections':>10} {'hit lease':>9} {'skipped':>7}")  # fmt: skip
    for row in read_results(csv_path):
        events = load_history(csv_path.parent / row["history"])
        faults = [e for e in events if e["kind"] == "fault" and e.get("fault") in NODE_LOSING_FAULTS]
        injects = [e for e in faults if e.get("action") == "inject"]
        skipped = sum(1 for e in events if e["kind"] == "fault" and e.get("action") == "skipped")
        judged = [hit(e) for e in injects]
        hits = sum(1 for j in judged if j)
        key = (row["backend"], row["experiment"], int(row["fault_nodes"]))
        cell = cells[key]
        cell[0] += len(injects)
        cell[1] += hits
        cell[2] += sum(1 for j in judged if j is None)
        cell[3] += skipped
        print(f"{row['backend']:9} {row['experiment']:15} {key[2]:>2} {row['trial']:>5}  {row['verdict']:14} "
              f"{row['lost_updates']:>4}  {len(injects):>10} {hits:>9} {skipped:>7}")  # fmt: skip
    print()
    for (backend, experiment, k), (total, hits, unknown, skipped) in sorted(cells.items()):
        share = f"{100 * hits / total:.1f}%" if total else "-"
        extra = f", {unknown} unknown" if unknown else ""
        print(f"{backend} x {experiment} --fault-nodes {k}: {hits}/{total} injections hit the current lease "
              f"({share}){extra}; {skipped} step(s) skipped")  # fmt: skip


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python scripts/targeting.py RESULTS.csv")
    main(Path(sys.argv[1]))
