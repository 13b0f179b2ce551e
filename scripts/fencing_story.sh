#!/usr/bin/env bash
# Issue 31, item 3: the fencing story measured — the fenced lock with the token checked on the write
# only (--fence writes, the default), on every access, the read included (--fence all), and a
# conditional write (--fence token: check-and-set on the lease's token), under the four experiments
# where a lease ends while its holder still works: client-pause, clock-jump, short-ttl,
# partition-clock-jump. At the lesson's scale, 5 trials per cell; run it alone on the machine.
# docs/reproduction.md and docs/experiments.md render results/fencing.csv (table and value blocks):
#   python -m lockcompare.render.docs README.md docs/*.md
# Extra arguments are passed to matrix (e.g. --out /tmp/fencing.csv --time-scale 0.1 --trials 1
# for a quick look that is not committed).
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/lockcompare matrix --backends fenced \
  --experiments client-pause,clock-jump,short-ttl,partition-clock-jump \
  --fence writes,all,token --trials 5 --out results/fencing.csv "$@"
