#!/usr/bin/env bash
# The files README.md and docs/ quote from the reproduction and the runs beside it (results/derived/),
# written again from the committed results: scripts/reproduction.sh runs this at its end; run it alone
# after anything that changes rows of a finished run (scripts/rerun_marked.py).
#
#   scripts/reproduction_derived.sh     from the checkout's root or anywhere; writes results/derived/
set -euo pipefail
cd "$(dirname "$0")/.."
export COLUMNS=1000
py=.venv/bin/python
lc=.venv/bin/lockcompare

"$py" scripts/bare_majority_leases.py results/reproduction.csv redlock,pottery node-restart \
  > results/derived/bare-majority-leases.csv
"$py" scripts/contend_conflicts.py results/contend.csv > results/derived/contend-conflicts.csv
"$py" scripts/bare_majority.py results/reproduction.csv redlock,pottery node-restart,clock-jump \
  > results/derived/reproduction-bare-majority.txt
"$py" scripts/timing_marked.py results/reproduction.csv > results/derived/reproduction-timing-marked.txt
"$py" scripts/history_storage.py results/reproduction.histories > results/derived/history-storage.txt
"$py" scripts/pause_rivals.py results/reproduction.csv single,fenced,redlock \
  > results/derived/reproduction-pause-rivals.txt
"$py" scripts/pause_rivals.py results/contend.csv single,fenced > results/derived/contend-pause-rivals.txt
"$py" scripts/lockstep.py results/lab-loop.csv none,single baseline,short-ttl > results/derived/lockstep-lab-loop.txt
"$py" scripts/lockstep.py results/reproduction.csv none,single baseline,short-ttl \
  > results/derived/lockstep-reproduction.txt
# What the pages of the runs the reproduction replaces quoted, now from the reproduction's cells:
# docs/consensus.md's cells (the consensus run's backends x the role experiments and failover).
"$py" scripts/cell_mechanisms.py results/reproduction.csv \
  --backends etcd,etcd-fenced,etcd-go-mutex,etcd-go-fenced,zk-lock,zk-lock-checked,zk-fenced,curator-mutex,curator-mutex-checked,pg-advisory,pg-lease,redlock,fenced,sentinel-single,sentinel-fenced \
  --experiments leader-crash,leader-freeze,leader-isolated,holder-minority,failover \
  > results/derived/consensus-cells.txt
# Every cell of the file that made under half its planned entries, and why (each part's closing lines
# name only the cells that part ran).
"$py" scripts/thin_cells.py results/reproduction.csv > results/derived/reproduction-thin-cells.txt
# Where the settled parts' cells stand after every pass (reruns of marked trials came after the parts).
"$py" scripts/settled_cells.py results/reproduction.csv > results/derived/reproduction-settled.txt
"$py" scripts/zk_lease_violated.py results/reproduction.csv results/explore/zk-fenced-all/trials.csv \
  > results/derived/zk-lease-violated.txt
"$py" scripts/renewals_in_pauses.py results/reproduction.csv \
  curator-mutex,curator-mutex-checked,zk-lock,etcd-go-mutex,etcd-go-fenced,etcd client-pause \
  > results/derived/consensus-clients-renewals.txt
"$py" scripts/bare_majority_losses.py results/reproduction.csv \
  node-redlock,node-semaphore-redlock,node-sesame-using,node-sesame-using-checked node-restart,clock-jump \
  > results/derived/node-clients-bare-majority.txt

# Old against new, cell by cell (exit 1 when cells differ: that is the point of the file, not a failure).
if [ -f results/derived/reproduction-previous.txt ]; then
  previous=$(cat results/derived/reproduction-previous.txt)
  "$lc" compare "$previous" results/reproduction.csv > results/derived/reproduction-compare.txt \
    2> results/derived/reproduction-compare-summary.txt || true
fi
# The consensus run the settled role cells replace (a5a2178, archived by issue 55).
consensus=results/archive/consensus-a5a2178/consensus.csv
if [ -f "$consensus" ]; then
  "$lc" compare "$consensus" results/reproduction.csv > results/derived/consensus-compare.txt \
    2> results/derived/consensus-compare-summary.txt || true
fi
