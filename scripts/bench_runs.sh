#!/usr/bin/env bash
# `lockcompare bench` N times in a row (default 3), each with a header naming the revision and the load
# before it, and each run's redlock/single and redlock/floor-fanout p50 ratios (issue 54): the lines of
# results/derived/bench.txt. A benchmark, not a test: run it on a quiet machine, from an installed
# checkout with committed sources.
#
#   bash scripts/bench_runs.sh [--runs N] [--out FILE] [-- BENCH OPTIONS]   (default: --iterations 500)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=3 out=""
while [ $# -gt 0 ]; do
  case $1 in
    --runs) runs=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "bench_runs.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[ $# -gt 0 ] || set -- --iterations 500
lockcompare=${LOCKCOMPARE:-.venv/bin/lockcompare}
rev=$(git rev-parse --short=7 HEAD)
[ -z "$(git status --porcelain --untracked-files=no -- src)" ] || { echo "bench_runs.sh: src/ has uncommitted changes: the lines would name a revision they did not run" >&2; exit 2; }
lines=$(mktemp "${TMPDIR:-/tmp}/bench-runs.XXXXXX")
trap 'rm -f "$lines"' EXIT
for run in $(seq 1 "$runs"); do
  echo "== run $run of $runs: lockcompare bench $* at $rev (load $(cut -d' ' -f1 /proc/loadavg) before)" | tee -a "$lines"
  table=$("$lockcompare" bench --format csv "$@" 2>/dev/null)
  echo "$table" | tee -a "$lines"
  echo "$table" | python3 -c '
import csv, sys
p50 = {r["backend"]: float(r["p50 µs"]) for r in csv.DictReader(sys.stdin)}
said = []
for a, b in (("redlock", "single"), ("redlock", "floor-fanout")):
    if a in p50 and b in p50:
        said.append("%s/%s %.2f" % (a, b, p50[a] / p50[b]))
locks = {k: v for k, v in p50.items() if not k.startswith("floor")}
if "floor" in p50 and locks:
    low = min(locks, key=locks.get)
    holds = "<=" if p50["floor"] <= locks[low] else ">"
    said.append("floor %.0f µs %s every lock row (lowest: %s %.0f µs)" % (p50["floor"], holds, low, locks[low]))
print("; ".join(said))
' | tee -a "$lines"
done
[ -z "$out" ] || cp "$lines" "$out"
