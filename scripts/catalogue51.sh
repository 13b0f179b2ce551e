#!/usr/bin/env bash
# Issue 51's experiments, each for every backend it applies to, 2 trials per cell at the lesson's scale,
# into results/catalogue-51.csv; then `lockcompare experiments --check` on it (each claim against the run).
#
#   scripts/catalogue51.sh                       # the whole run (move the old file to results/archive/ first)
#   scripts/catalogue51.sh --resume              # finish a run that was stopped (same clone and revision)
#   scripts/catalogue51.sh --plan                # print the trials and the cells left out, and a wall estimate
#   scripts/catalogue51.sh --time-scale 0.1 --backends single --out /tmp/c51.csv   # a quick check of the script
#
# Run it alone on a quiet machine (a first look ran beside other work: a quarter of its trials were
# timing-marked). Cells are grouped by the backends an experiment is about; a backend the plan cannot
# run an experiment for (a renewal experiment on a lock that does not renew, a pause inside an acquire
# that offers no pause point) is left out with one line saying why. --backends keeps only the named
# backends of each group (a group left with none is passed over). `scripts/catalogue51.sh --plan`
# estimates the wall time from the plan (scripts/plan_cells.py: each trial at its cell's mean wall in
# the committed file).
set -euo pipefail
cd "$(dirname "$0")/.."
export COLUMNS=1000
out=results/catalogue-51.csv
scale=1
only=""
resume=0
plan=0
jobs=4
while [ $# -gt 0 ]; do
  case "$1" in
    --resume) resume=1 ;;
    --plan) plan=1 ;;
    --out) out=$2; shift ;;
    --time-scale) scale=$2; shift ;;
    --backends) only=$2; shift ;;
    --jobs) jobs=$2; shift ;;
    *) echo "usage: scripts/catalogue51.sh [--resume] [--plan] [--out FILE] [--time-scale X] [--backends LIST] [--jobs N]" >&2
       exit 2 ;;
  esac
  shift
done
if [ "$plan" = 0 ] && [ "$resume" = 0 ] && [ -e "$out" ]; then
  echo "catalogue51.sh: $out exists: move it to results/archive/ first, or pass --resume" >&2
  exit 1
fi

renewing=single-renew,redis-lock-renew,redis-lock-renew-checked,node-sesame-using,node-sesame-using-checked
renewing=$renewing,node-semaphore-mutex,node-semaphore-redlock,etcd,etcd-fenced,etcd-go-mutex,etcd-go-fenced
renewing=$renewing,zk-lock,zk-fenced,zk-lock-checked,curator-mutex,curator-mutex-checked
consensus=etcd,etcd-fenced,etcd-go-mutex,etcd-go-fenced,zk-lock,zk-fenced,zk-lock-checked,curator-mutex
consensus=$consensus,curator-mutex-checked
# One line per matrix: backends | experiments | extra options.
groups=(
  "$renewing|renewal-cut|"
  "etcd-fenced,etcd-go-fenced,zk-fenced|renewal-cut|--fence all"
  "$consensus|leader-freeze-renewing,leader-isolated-renewing|"
  "single,redlock,fenced,pottery|client-pause-token,partition-clock-jump-token|"
  "single,redlock,pottery|clock-drift-covered,clock-drift|"
  "single,redlock,fenced,single-renew|delayed-write|"
  "single,redlock,single-renew,sentinel-single|acquire-pause|"
  # The cells reproduction.csv measured before the Python etcd lock renewed (renewal-not-measured):
  "etcd,etcd-fenced|renewal-pause,cpu-starvation|"
  # The issue's check that etcd now renews: work past the TTL, no fault (1 trial).
  "etcd|baseline|--work-ms 3000 --rounds 5 --trials 1"
)

keep() {  # the backends of $1 that --backends names (all without it)
  if [ -z "$only" ]; then echo "$1"; return; fi
  local kept=() b
  IFS=, read -ra wanted <<< "$only"
  IFS=, read -ra listed <<< "$1"
  for b in "${listed[@]}"; do
    for w in "${wanted[@]}"; do [ "$b" = "$w" ] && kept+=("$b"); done
  done
  (IFS=,; echo "${kept[*]}")
}

for group in "${groups[@]}"; do
  IFS='|' read -r backends experiments extra <<< "$group"
  backends=$(keep "$backends")
  [ -n "$backends" ] || continue
  # shellcheck disable=SC2206  # the extra options are words
  options=(--trials 2 $extra)
  if [ "$plan" = 1 ]; then
    echo "== $backends x $experiments ${extra}"
    .venv/bin/python scripts/plan_cells.py --backends "$backends" --experiments "$experiments" \
      --time-scale "$scale" --jobs "$jobs" --measured results/catalogue-51.csv "${options[@]}" || true
    continue
  fi
  continuing=()
  [ -e "$out" ] && continuing=(--resume)
  status=0
  .venv/bin/lockcompare matrix --backends "$backends" --experiments "$experiments" --time-scale "$scale" \
    --jobs "$jobs" --out "$out" "${continuing[@]}" "${options[@]}" || status=$?
  # Exit 1 after every row is written means a trial could not be judged (its row says why): go on.
  [ "$status" -le 1 ] || exit "$status"
done
[ "$plan" = 1 ] && exit 0
.venv/bin/lockcompare experiments --check "$out"
