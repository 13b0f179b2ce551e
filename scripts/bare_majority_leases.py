"""Every lease granted by a bare majority (exactly 3 of 5 nodes) in a run's histories, and what
was happening when it was granted: how long since the last node restart had finished, and whether
the rival's release call was still in flight. Issue 31 asked why redlock and pottery lose updates
under node-restart: this is the count behind the answer in docs/experiments.md#node-restart.

    python scripts/bare_majority_leases.py results/reproduction.csv redlock,pottery node-restart \
        > results/derived/bare-majority-leases.csv

A backend that does not record which nodes granted a lease (pottery) is read from the restart's
``holders`` (the owner of the lock on each node at the injection), so only its leases a restart
met while held are seen. One row per such lease:

- ``struck``: a restart then hit one of its three nodes while it was held (the rounds that can
  lose an update);
- ``near_restart``: a restart was under way during the final attempt, or had finished within
  100 ms before the grant;
- ``during_rival_release``: the other worker's release call overlapped the final attempt (its key
  still on some nodes, already gone from others: the majority formed by racing the release);
- ``during_rival_acquire``: the other worker was acquiring at the same time (its attempts take and
  give back keys node by node).
"""

from __future__ import annotations

import csv
import gzip
import json
import sys
from pathlib import Path
from typing import Any

NEAR_MS = 100.0
FIELDS = ["backend", "trial_id", "worker", "round", "granted_by", "since_restart_ms", "near_restart",
          "during_rival_release", "during_rival_acquire", "struck"]  # fmt: skip


def leases(events: list[dict[str, Any]], *, node_count: int = 5) -> list[dict[str, Any]]:
    """The bare-majority leases of one history (times in ns as recorded), with the three tests."""
    start = min(e["t0"] for e in events)
    heals = [e for e in events if e["kind"] == "fault" and e.get("action") == "heal"]
    injects = [e for e in events if e["kind"] == "fault" and e.get("action") == "inject"]
    releases = [e for e in events if e["kind"] == "release"]
    found = []
    for acq in events:
        if acq["kind"] != "acquire" or not acq.get("ok"):
            continue
        own_release = next(
            (r["t0"] for r in releases if r["worker"] == acq["worker"] and r["round"] == acq["round"]), float("inf")
        )
        granted = acq.get("granted_by")
        if granted is None:  # a backend that does not say (pottery): the nodes a restart found holding it
            seen = [i for i in injects if acq["t1"] <= i["t0"] <= own_release and i.get("holders")]
            if not seen:
                continue
            granted = [n for n, holder in enumerate(seen[0]["holders"]) if holder == acq.get("owner")]
        if len(granted) != node_count // 2 + 1:
            continue
        attempt = (acq.get("t_attempt") or acq["t0"], acq["t1"])
        before = [h["t1"] for h in heals if h["t1"] <= acq["t1"]]
        since = (acq["t1"] - max(before)) / 1e6 if before else None
        under_way = any(i["t0"] <= attempt[1] and h["t1"] >= attempt[0] for i, h in zip(injects, heals, strict=False))
        rival = any(r["worker"] != acq["worker"] and r["t0"] <= attempt[1] and r["t1"] >= attempt[0] for r in releases)
        contending = any(
            a["kind"] == "acquire" and a["worker"] != acq["worker"] and a["t0"] <= attempt[1] and a["t1"] >= attempt[0]
            for a in events
        )
        struck = any(acq["t1"] <= i["t0"] <= own_release and set(i["nodes"]) & set(granted) for i in injects)
        found.append({
            "worker": acq["worker"], "round": acq["round"], "granted_by": " ".join(map(str, granted)),
            "since_restart_ms": "" if since is None else f"{since:.1f}",
            "near_restart": under_way or (since is not None and since <= NEAR_MS),
            "during_rival_release": rival, "during_rival_acquire": contending, "struck": struck,
            "t_ms": (acq["t1"] - start) / 1e6,
        })  # fmt: skip
    return found


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: bare_majority_leases.py RESULTS.csv BACKEND,... EXPERIMENT", file=sys.stderr)
        return 2
    results, backends, experiment = Path(argv[0]), set(argv[1].split(",")), argv[2]
    out = csv.DictWriter(sys.stdout, fieldnames=FIELDS, extrasaction="ignore", lineterminator="\n")
    out.writeheader()
    with results.open(newline="") as handle:
        rows = [r for r in csv.DictReader(handle) if r["backend"] in backends and r["experiment"] == experiment]
    for row in rows:
        with gzip.open(results.parent / row["history"], "rt") as history:
            events = [json.loads(line) for line in history if line.strip()]
        for lease in leases(events, node_count=int(row["node_count"] or 5)):
            out.writerow({"backend": row["backend"], "trial_id": row["trial_id"], **lease})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
