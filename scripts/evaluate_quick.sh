#!/usr/bin/env bash
# The quick report card's wall time for each backend given (default: the seven issue 54 names), one
# after another, each alone: the lines docs/plugins.md renders from results/derived/evaluate-quick.txt.
# A benchmark, not a test: run it on a quiet machine (no other lockcompare run, no test suite), from
# an installed checkout. Each card's own output goes to a temporary directory, removed at the end;
# what is printed (and written with --out FILE) is the timing line per card, with the revision, the
# load before it and the card's exit code (1: the card failed a claim, which is the card's answer,
# not an error of this script).
#
#   bash scripts/evaluate_quick.sh [--out results/derived/evaluate-quick.txt] [BACKEND ...]
set -euo pipefail
cd "$(dirname "$0")/.."
out=""
if [ "${1:-}" = "--out" ]; then out=$2; shift 2; fi
backends=("$@")
[ ${#backends[@]} -gt 0 ] || backends=(single redlock etcd zk-lock pg-advisory node-redlock curator-mutex)
lockcompare=${LOCKCOMPARE:-.venv/bin/lockcompare}
rev=$(git rev-parse --short=7 HEAD)
[ -z "$(git status --porcelain --untracked-files=no -- src)" ] || { echo "evaluate_quick.sh: src/ has uncommitted changes: the lines would name a revision they did not run" >&2; exit 2; }
work=$(mktemp -d "${TMPDIR:-/tmp}/evaluate-quick.XXXXXX")
trap 'rm -rf "$work"' EXIT
lines="$work/lines.txt"
: > "$lines"
for backend in "${backends[@]}"; do
  load=$(cut -d' ' -f1 /proc/loadavg)
  started=$(date +%s.%N)
  set +e
  (cd "$work" && "$OLDPWD/$lockcompare" evaluate "$backend" --quick --out "$work/$backend.csv" >"$work/$backend.log" 2>&1)
  code=$?
  set -e
  ended=$(date +%s.%N)
  wall=$(python3 -c "print(f'{$ended - $started:.1f}')")
  printf '$ time lockcompare evaluate %s --quick   # at %s, alone on the 2-core machine (load %s before; exit %s)\nreal\t%s s\n' \
    "$backend" "$rev" "$load" "$code" "$wall" | tee -a "$lines"
  if [ "$code" -gt 1 ]; then echo "evaluate_quick.sh: $backend: exit $code; its last lines:" >&2; tail -5 "$work/$backend.log" >&2; fi
done
[ -z "$out" ] || cp "$lines" "$out"
