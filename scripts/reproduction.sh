#!/usr/bin/env bash
# The reproduction (issue 31, item 5) and every file README.md and docs/ render from it, in order, in
# one command: every backend x every catalogue experiment at the lesson's scale, 5 trials per cell;
# its report (the glance picture; built in results/reproduction.report/, not committed); the contend
# workload beside it; the scripts' derived files; and
# the scripts' printed tables the docs quote (in results/derived/reproduction-*.txt).
#
# Run it from a clean clone at the revision to measure (.venv with '.[test]', `npm ci --prefix
# clients/node`, Debian's zookeeper, clients/go/build.sh and clients/java/build.sh: every backend
# viable), with nothing else running on the machine: it takes about two hours on 2 cores. Move the previous results/reproduction.* and results/contend.* to
# results/archive/ first (it refuses to write over them). Then, in the working copy:
#   python -m lockcompare.render.docs README.md docs/*.md
# and read every prose claim against the new histories before committing.
#
# `scripts/reproduction.sh --resume` finishes a reproduction that was stopped (SIGTERM keeps its rows):
# same clone, same revision (matrix refuses rows of another), the time file gets one line per part.
set -euo pipefail
cd "$(dirname "$0")/.."
# Written to a file, the CLI's messages wrap at 80 columns unless told the width: one line per
# message, so the floor lines below can be picked out of the log.
export COLUMNS=1000
resume=()
check=(results/reproduction.csv results/reproduction.histories)
if [ "${1:-}" = --resume ]; then
  resume=(--resume)
  check=()
elif [ $# -gt 0 ]; then
  echo "usage: scripts/reproduction.sh [--resume]" >&2
  exit 2
fi
for old in "${check[@]}" results/contend.csv results/contend.histories; do
  if [ -e "$old" ]; then
    echo "reproduction.sh: $old exists: move it to results/archive/ first (see results/archive/README.md)" >&2
    exit 1
  fi
done
experiments=baseline,short-ttl,client-pause,node-crash,node-restart,clock-jump,clock-jump-back,bare-majority,failover,renewal-pause,session-kill,cpu-starvation,slow-response,partition,partition-clock-jump,leader-crash,leader-freeze,leader-isolated,holder-minority,lost-reply,renewal-cut,leader-freeze-renewing,leader-isolated-renewing,client-pause-token,partition-clock-jump-token,clock-drift-covered,clock-drift,delayed-write
# Every registered backend: the default selection leaves out those a quick run skips (Sentinel's, the
# lock-free alternatives: their trait in_default_matrix), and the reproduction is every backend.
backends=$(.venv/bin/python -c 'from lockcompare.backends import registered_names; print(",".join(registered_names()))')
timed() {  # name, command...: the command's wall and CPU time, appended to results/derived/<name>.time
  local name=$1
  shift
  /usr/bin/time -f '%e s wall, %U user %S sys' -a -o "results/derived/$name.time" "$@"
}
log=$(mktemp)
status=0
timed reproduction .venv/bin/lockcompare matrix --backends "$backends" --experiments "$experiments" --trials 5 --jobs 16 \
  --out results/reproduction.csv "${resume[@]}" 2>&1 | tee "$log" || status=$?
# A trial the checker could not judge is a result (its row says why), not a broken run: the matrix
# exits 1 after writing every row; the rest still runs, and --resume runs such a trial again.
if [ "$status" -ne 0 ] && ! grep -q 'could not be judged (verdict unknown)' "$log"; then
  exit "$status"
fi
# The cells left out, as the run said before any trial started (docs/experiments.md quotes them).
grep '^lockcompare: warning: skipping' "$log" | sed 's/^lockcompare: warning: //' \
  > results/derived/reproduction-skipped.txt || true
# The run's own closing lines (runner/floor.py): its floor, both terms, and how far above it it went.
grep -E '^[0-9]+ trials run, |^[0-9]+ trials in .* wall; floor|^trials at once on average|^where the wall went|^free job-slot seconds' \
  "$log" > results/derived/reproduction-floor.txt || true
rm -f "$log"
.venv/bin/lockcompare report results/reproduction.csv
timed contend .venv/bin/lockcompare matrix --backends none,single,fenced --experiments client-pause \
  --workload contend --trials 5 --jobs 16 --out results/contend.csv
.venv/bin/python scripts/bare_majority_leases.py results/reproduction.csv redlock,pottery node-restart \
  > results/derived/bare-majority-leases.csv
.venv/bin/python scripts/contend_conflicts.py results/contend.csv > results/derived/contend-conflicts.csv
.venv/bin/python scripts/bare_majority.py results/reproduction.csv redlock,pottery node-restart,clock-jump \
  > results/derived/reproduction-bare-majority.txt
.venv/bin/python scripts/timing_marked.py results/reproduction.csv > results/derived/reproduction-timing-marked.txt
.venv/bin/python scripts/pause_rivals.py results/reproduction.csv single,fenced,redlock \
  > results/derived/reproduction-pause-rivals.txt
.venv/bin/python scripts/pause_rivals.py results/contend.csv single,fenced > results/derived/contend-pause-rivals.txt
echo "reproduction.sh: done; now render the docs and read them against the histories"
