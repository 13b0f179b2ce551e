"""Every ZooKeeper trial once judged ``lease-violated``, judged again by today's checker, with what it was.

    python scripts/zk_lease_violated.py results/reproduction.csv results/zookeeper.csv ...

Issue 42: ``zk-fenced × node-restart`` was ``lease-violated`` in 3 of 5 trials, where the holder had
written, then sent its unlock while its only server was restarting; its session timed out in the
outage, which deleted the lock node, so the unlock "released nothing". Today's rule
(analysis/sessions.py) ends such a session at the outage's start plus the timeout and does not count
an unlock sent during the outage. One line per such trial: stored verdict -> today's, and the
evidence today's verdict rests on (an unlock during an outage; a write accepted after the session
ended, which is a real violation: the lease was gone and nothing refused it).
"""

from __future__ import annotations

import sys
from pathlib import Path

from lockcompare.analysis.checker import check
from lockcompare.analysis.counters import ResourceCounters
from lockcompare.analysis.results import read_results
from lockcompare.analysis.sessions import outages_cutting_off
from lockcompare.render.timeline import load_history


def main(paths: list[Path]) -> int:
    for path in paths:
        shown = 0
        for row in read_results(path):
            if not str(row["backend"]).startswith("zk") or row["verdict"] != "lease-violated":
                continue
            events = load_history(path.parent / str(row["history"]))
            extra = max(row["extra_entries"], 0)  # the contend workload's extra rounds (as scripts/rejudge.py)
            conflicts = (
                sum(1 for e in events if e["kind"] == "enter" and e["inside"] > 1) if extra else row["conflicts"]
            )
            counters = ResourceCounters(
                entries=row["entries"] + extra, conflicts=conflicts, writes_accepted=row["writes_accepted"],
                writes_rejected=row["writes_rejected"], final_balance=row["final_balance"], occupancy=0,
                reads_rejected=max(row["reads_rejected"], 0),
            )  # fmt: skip
            now = check(events, counters, entries_planned=row["entries_planned"]).as_row()
            unlocks_in_outage = sum(
                1
                for e in events
                if e["kind"] == "release"
                and e.get("released") is False
                and any(s <= e["t0"] <= t for s, t in outages_cutting_off(events).get(e["worker"], []))
            )
            why = []
            if unlocks_in_outage:
                why.append(f"{unlocks_in_outage} unlock(s) sent while its server was away (not a violation)")
            if int(now["stale_writes_accepted"]):
                why.append(f"{now['stale_writes_accepted']} write(s) accepted after the session ended (a violation)")
            if int(now["grants_while_held"]):
                why.append(f"{now['grants_while_held']} grant(s) over a valid lease")
            if now["verdict"] == "unknown":
                why.append(f"unknown: {now['problem']}")
            print(f"{path.name}: {row['trial_id']}: lease-violated -> {now['verdict']}: {'; '.join(why) or '-'}")
            shown += 1
        print(f"{path.name}: {shown} ZooKeeper trial(s) stored as lease-violated")
    return 0


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: python scripts/zk_lease_violated.py RESULTS.csv ...")
    sys.exit(main([Path(p) for p in sys.argv[1:]]))
