#!/usr/bin/env bash
# The settled reproduction (issue 55) and every file README.md and docs/ render from it, at one
# revision: every registered backend x every catalogue experiment at the lesson's scale, in parts
# (scripts/reproduction_plan.py holds them: the cells that decide the argument --until-settled, 5
# trials elsewhere; cells a backend cannot take, or whose fault cannot be aimed at it, left out by the
# planner with their reason); the report; the contend workload, the lab's own loop (the lesson's rows
# A-E) and the fencing-depth sweep from the same revision; the scripts' derived files; and
# `lockcompare compare` of the previous reproduction (and of the consensus run it replaces) against it.
#
#   scripts/reproduction.sh --dry-run   the plan in seconds: cells, trials, settled or fixed, the cells
#                                       left out and why, the wall time its floor predicts; nothing runs
#   scripts/reproduction.sh             the run, from a clean clone, alone on the machine
#   scripts/reproduction.sh --resume    finishes a run that was stopped (SIGTERM keeps its rows): the
#                                       same clone at the same revision; finished parts are skipped
#
# Run it from a clean clone at the revision to measure (.venv with '.[test]', `npm ci --prefix
# clients/node`, Debian's zookeeper, clients/go/build.sh and clients/java/build.sh: every backend
# viable), with nothing else running on the machine. A fresh run refuses a dirty tree (results/
# aside: the run writes there) and moves the previous reproduction, contend, lab-loop and fencing runs
# into results/archive/reproduction-<their revision>/ first; add that directory's row to
# results/archive/README.md. After the run, in the working copy (the follow-up, in order):
#   .venv/bin/python scripts/docs_sources.py README.md docs/*.md   # a run another file still feeds, if any
#   .venv/bin/python -m lockcompare.render.docs README.md docs/*.md
# then pick again the excerpts and trial pages whose trials changed, and read every prose claim
# against the new rows and against results/derived/*-compare.txt before committing. A file stopped
# after its parts (or changed later) gets its derived files again from scripts/reproduction_derived.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
# Written to a file, the CLI's messages wrap at 80 columns unless told the width: one line per
# message, so the closing lines below can be picked out of the log.
export COLUMNS=1000
py=.venv/bin/python
lc=.venv/bin/lockcompare
case "${1:-}" in
  "") resume=0 ;;
  --resume) resume=1 ;;
  --dry-run) exec "$py" scripts/reproduction_plan.py ;;
  *) echo "usage: scripts/reproduction.sh [--dry-run | --resume]" >&2; exit 2 ;;
esac
[ $# -le 1 ] || { echo "usage: scripts/reproduction.sh [--dry-run | --resume]" >&2; exit 2; }

# One revision, committed: what the rows record is what the tree holds (results/ is the run's own output).
dirty=$({ git status --porcelain --untracked-files=no -- . ':(exclude)results'; git status --porcelain -- src scripts; } | sort -u)
if [ -n "$dirty" ]; then
  echo "reproduction.sh: the tree has changes outside results/ (commit or stash them): $(echo "$dirty" | head -3 | tr '\n' ' ')" >&2
  exit 1
fi
revision=$(git rev-parse HEAD)
mark=results/derived/reproduction.revision  # the revision a run began at: --resume continues only it
if [ "$resume" = 1 ]; then
  if [ ! -f "$mark" ]; then
    echo "reproduction.sh: --resume: no run to resume ($mark is missing): start one without --resume" >&2
    exit 1
  fi
  if [ "$(cat "$mark")" != "$revision" ]; then
    echo "reproduction.sh: --resume: the run began at $(cat "$mark"), the tree is at $revision: check that out" >&2
    exit 1
  fi
else
  # The previous runs to results/archive/reproduction-<their revision>/ (refused if that exists).
  old_csv=results/reproduction.csv
  if [ -e "$old_csv" ]; then
    old_rev=$("$py" -c 'import csv,sys; print(next(csv.DictReader(open(sys.argv[1])))["source_revision"][:7])' "$old_csv")
    archive=results/archive/reproduction-$old_rev
    if [ -e "$archive" ]; then
      echo "reproduction.sh: $archive exists: move the previous run aside by hand (see results/archive/README.md)" >&2
      exit 1
    fi
    mkdir -p "$archive"
    for old in results/reproduction.{csv,histories,report,superseded.csv} results/contend.{csv,histories} \
      results/lab-loop.{csv,histories} results/fencing.{csv,histories} results/derived/reproduction.time \
      results/derived/contend.time results/derived/fencing.time; do
      if [ -e "$old" ]; then mv "$old" "$archive/"; fi
    done
    echo "$archive/reproduction.csv" > results/derived/reproduction-previous.txt
  fi
  for out in results/reproduction.csv results/contend.csv results/lab-loop.csv results/fencing.csv; do
    if [ -e "$out" ]; then
      echo "reproduction.sh: $out exists: move it to results/archive/ first (see results/archive/README.md)" >&2
      exit 1
    fi
  done
  echo "$revision" > "$mark"
  for closing in reproduction lab-loop contend fencing; do : > "results/derived/$closing-floor.txt"; done
  : > results/derived/reproduction-skipped.txt
fi

timed() {  # name, command...: the command's wall and CPU time, appended to results/derived/<name>.time
  local name=$1
  shift
  /usr/bin/time -f '%e s wall, %U user %S sys' -a -o "results/derived/$name.time" "$@"
}
# A trial the checker could not judge is a result (its row says why), not a broken run: the matrix
# exits 1 after writing every row; the rest still runs, and --resume runs such a trial again.
matrix() {  # name, label, matrix options...: one matrix run; its closing lines, headed by the label,
  # appended to results/derived/<name>-floor.txt (the time to <name>.time)
  local name=$1 label=$2 log status=0
  shift 2
  log=$(mktemp)
  # shellcheck disable=SC2086  # REPRODUCTION_MATRIX_OPTIONS: a tiny check's options (reproduction_plan.py), split
  timed "$name" "$lc" matrix --jobs 16 "$@" ${REPRODUCTION_MATRIX_OPTIONS:-} 2>&1 | tee "$log" || status=$?
  if [ "$status" -ne 0 ] && ! grep -q 'could not be judged (verdict unknown)' "$log"; then
    rm -f "$log"
    exit "$status"
  fi
  {
    echo "== $label at $revision, $(date -u +%FT%TZ)"
    grep -E '^[0-9]+ trials run, |^[0-9]+ trials in .* wall; floor|^trials at once on average|^where the wall went|^free job-slot seconds|^settled: |^not settled: |^timing: |^timing-marked ' "$log" || true
  } | tee -a "results/derived/$name-floor.txt" | sed "s/^/reproduction.sh: /" >&2
  if [ "$name" = reproduction ]; then
    # The cells left out, as the run said before any trial started (docs/experiments.md quotes them).
    grep '^lockcompare: warning: skipping' "$log" | sed 's/^lockcompare: warning: //' \
      >> results/derived/reproduction-skipped.txt || true
  fi
  rm -f "$log"
}

# Every part into the one file (--resume: the first part finds none; a finished part runs nothing).
for part in $("$py" scripts/reproduction_plan.py --parts); do
  mapfile -t options < <("$py" scripts/reproduction_plan.py --args "$part")
  matrix reproduction "part $part" "${options[@]}" --out results/reproduction.csv --resume
done
sort -u -o results/derived/reproduction-skipped.txt results/derived/reproduction-skipped.txt
# Over every part (and every resumed piece of one): Σ wall / Σ floor.
"$py" scripts/floor_total.py results/derived/reproduction-floor.txt | tee -a results/derived/reproduction-floor.txt

# The trials still marked after every part, once more: one rerun a trial, four at a time with no
# other trial beside them (a pass stopped and started again skips the trials it ran); exit 1 is a
# rerun judged unknown (its row says why), not a broken run.
{
  echo "== rerun_marked.py at $revision, $(date -u +%FT%TZ)"
  status=0
  "$py" scripts/rerun_marked.py results/reproduction.csv --jobs 4 || status=$?
  [ "$status" -le 1 ] || exit "$status"
} | tee -a results/derived/reproduction-floor.txt

# The report (results/reproduction.report/: built here for reading, ignored by git, rebuilt on demand).
"$lc" report results/reproduction.csv
# The lesson's rows A-E under the lab's own loop (no jitter, no think time), the contend workload and
# the fencing-depth sweep: the same revision, other settings (their sentences say so); their marked
# trials run again as the parts' do.
mapfile -t reruns < <("$py" scripts/reproduction_plan.py --rerun-args)
matrix lab-loop lab-loop --backends none,single,fenced --experiments baseline,short-ttl,client-pause --jitter 0 \
  --think-ms 0 --trials 5 "${reruns[@]}" --out results/lab-loop.csv --resume
matrix contend contend --backends none,single,fenced --experiments client-pause --workload contend --trials 5 \
  "${reruns[@]}" --out results/contend.csv --resume
# scripts/fencing_story.sh's command, with the run's --jobs, reruns and --resume
matrix fencing fencing --backends fenced --experiments client-pause,clock-jump,short-ttl,partition-clock-jump \
  --fence writes,all,token --trials 5 "${reruns[@]}" --out results/fencing.csv --resume

scripts/reproduction_derived.sh

echo "reproduction.sh: done at $revision; now the follow-up at the top of this script (switch, render, archive, read)"
