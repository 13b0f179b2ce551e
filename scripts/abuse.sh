#!/usr/bin/env bash
# The hostile-but-fair user of issues 18 and 26, as one script: every case prints one line with its exit
# code, tracebacks printed, what it left (processes, temporary/data dirs, .part files, duplicate
# trial ids in the results files it wrote) and its last stderr line; a summary line ends it.
#
#   scripts/abuse.sh              every case (see the summary for how long; it loads the machine)
#   scripts/abuse.sh CASE...      only the cases whose names contain one of the words
#
# Runs from a repository checkout (PYTHONPATH=src) with the project's own venv by default: the
# checkout's .venv/bin/lockcompare (and its python), else the interpreter in $PYTHON, else the python
# beside the `lockcompare` on PATH; a bare python3 only if it imports lockcompare's dependencies
# (else the script says so and stops: a python3 without them turned every case into an ImportError). Cases that need a read-only or a
# full file system mount a small tmpfs and are skipped without root. Everything happens under one
# temporary directory, with TMPDIR and the run registry pointed into it, so leftovers are this
# script's own.
set -u
set -m  # background runs get process groups of their own: a Ctrl-C is sent to the group, as a terminal does

ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-}
if [ -z "$PY" ]; then
    for candidate in "$ROOT/.venv/bin/python" "$(dirname "$(command -v lockcompare 2>/dev/null || echo /nonexistent/x)")/python" python3; do
        if "$candidate" -c 'import typer, redis, lockcompare' >/dev/null 2>&1; then PY=$candidate; break; fi
    done
fi
if [ -z "$PY" ] || ! PYTHONPATH="$ROOT/src" "$PY" -c 'import typer, redis' >/dev/null 2>&1; then
    echo "abuse.sh: no interpreter with lockcompare's dependencies (set PYTHON=/path/to/venv/bin/python)" >&2
    exit 2
fi
# The command itself: the checkout's venv entry point when there is one and no $PYTHON was asked for.
LC_CMD=("$PY" -m lockcompare)
[ -z "${PYTHON:-}" ] && [ -x "$ROOT/.venv/bin/lockcompare" ] && LC_CMD=("$ROOT/.venv/bin/lockcompare")
echo "== interpreter: $PY; lockcompare: ${LC_CMD[*]}"
WORK=$(mktemp -d /tmp/abuse.XXXXXX)
export TMPDIR=$WORK/tmp LOCKCOMPARE_RUNS_DIR=$WORK/runs PYTHONPATH=$ROOT/src
mkdir -p "$TMPDIR" "$LOCKCOMPARE_RUNS_DIR" "$WORK/input"
Q=(--backends single --experiments baseline --trials 1 --rounds 3 --time-scale 0.1 --jobs 1)
ONLY=("$@")
TOTAL_TB=0 TOTAL_LEFT=0 TOTAL_DUP=0 TOTAL_PW=0 CASES=0 MOUNTS=() BG=()

# An executable, not a shell function: a run started in the background is then the python process
# itself (its pid is the one signals go to and the registry names).
mkdir -p "$WORK/bin" && printf '#!/bin/sh\nexec %s "$@"\n' "$(printf '"%s" ' "${LC_CMD[@]}")" >"$WORK/bin/lc" && chmod +x "$WORK/bin/lc"
lc() { "$WORK/bin/lc" "$@"; }
LC=$WORK/bin/lc
wanted() { [ ${#ONLY[@]} -eq 0 ] && return 0; for w in "${ONLY[@]}"; do [[ $1 == *"$w"* ]] && return 0; done; return 1; }
is_root() { [ "$(id -u)" = 0 ]; }

procs_left() {  # live processes of this case: its marker, or a working directory or command line under
    # $WORK (redis-server rewrites its environment, so the marker alone misses a leaked one)
    local n=0 d pid state cwd
    for d in /proc/[0-9]*; do
        pid=${d#/proc/}
        case " $$ $BASHPID ${SERVER_PID:-} ${RES_SERVER_PID:-} " in *" $pid "*) continue ;; esac
        state=$(awk '{print $3}' "$d/stat" 2>/dev/null)
        [ -z "$state" ] || [ "$state" = Z ] && continue
        cwd=$(readlink "$d/cwd" 2>/dev/null)
        if [[ $cwd == "$WORK/tmp"* || $cwd == "$WORK/$1" || $cwd == "$WORK/$1/"* ]] ||
            { tr '\0' '\n' <"$d/cmdline"; } 2>/dev/null | grep -q "^$TMPDIR/" ||
            { tr '\0' '\n' <"$d/environ"; } 2>/dev/null | grep -qx "ABUSE_CASE=$1"; then
            n=$((n + 1))
        fi
    done
    echo $n
}

dups() {  # judged trial ids written more than once, over the CSVs of a case's directory
    "$PY" - "$@" <<'EOF'
import collections, csv, sys
n = 0
for p in sys.argv[1:]:
    try:
        rows = list(csv.DictReader(open(p, newline="")))
    except (OSError, csv.Error, UnicodeDecodeError):
        continue
    seen = collections.Counter(r.get("trial_id") for r in rows if r.get("verdict") not in ("unknown", None))
    n += sum(c - 1 for c in seen.values() if c > 1)
print(n)
EOF
}

report() {  # NAME EXIT: one line for the case, after giving its processes a second to go
    local name=$1 rc=$2 dir=$WORK/$1 err=$WORK/$1/stderr
    sleep 1
    local procs dirs parts dup tb last
    procs=$(procs_left "$name")
    # A `run` without --out keeps its row and history in a lockcompare-run-* folder of the temporary
    # directory and prints where: output, not a leftover (one without its run.csv would be).
    dirs=$(find "$TMPDIR" -mindepth 1 -maxdepth 1 ! \( -type d -name 'lockcompare-run-*' -exec test -f '{}/run.csv' \; \) -print | wc -l)
    parts=$(find "$WORK" -name '*.part' 2>/dev/null | wc -l)
    dup=$(dups $(find "$dir" -name '*.csv' 2>/dev/null))
    tb=$(grep -c Traceback "$err" 2>/dev/null)
    local pw
    pw=$(cat "$err" "$dir/stdout" 2>/dev/null | grep -c 's3cret\|s3/cret\|hunter2')
    last=$(grep -v '^\s*$' "$err" 2>/dev/null | tail -1 | cut -c1-150)
    printf '%-26s exit=%-3s tb=%s procs=%s dirs=%s part=%s dup=%s pw=%s | %s\n' \
        "$name" "$rc" "${tb:-0}" "$procs" "$dirs" "$parts" "$dup" "${pw:-0}" "$last"
    [ "$dirs" != 0 ] && echo "    -> left in TMPDIR: $(ls "$TMPDIR" | grep -v '^lockcompare-run-' | head -5 | tr '\n' ' ')"
    [ "$parts" != 0 ] && echo "    -> .part files: $(find "$WORK" -name '*.part' | head -3 | tr '\n' ' ')"
    TOTAL_TB=$((TOTAL_TB + ${tb:-0})) TOTAL_LEFT=$((TOTAL_LEFT + procs + dirs + parts)) TOTAL_DUP=$((TOTAL_DUP + dup))
    TOTAL_PW=$((TOTAL_PW + ${pw:-0}))
    CASES=$((CASES + 1))
}

case_() {  # NAME CMD...: run CMD in the case's directory, marked, and report it
    local name=$1; shift
    wanted "$name" || return 0
    mkdir -p "$WORK/$name"
    [ "$1" = lc ] && set -- "$LC" "${@:2}"
    local t0 rc
    t0=$(date +%s%N)
    (cd "$WORK/$name" && ABUSE_CASE=$name "$@" >"$WORK/$name/stdout" 2>"$WORK/$name/stderr")
    rc=$?
    CASE_S=$(awk -v ns=$(($(date +%s%N) - t0)) 'BEGIN { printf "%.2f s", ns / 1e9 }')  # the command alone
    report "$name" $rc
}

start_bg() {  # NAME CMD...: start CMD in the background, marked; its pid in BG_PID
    local name=$1; shift
    mkdir -p "$WORK/$name"
    [ "$1" = lc ] && set -- "$LC" "${@:2}"
    cd "$WORK/$name" && { ABUSE_CASE=$name "$@" >"$WORK/$name/bg.out" 2>"$WORK/$name/${BG_ERR:-stderr}" & BG_PID=$!; }
    cd "$WORK"
    BG+=("$BG_PID")
}

wait_for() {  # FILE SECONDS: until FILE exists
    local i
    for ((i = 0; i < $2 * 20; i++)); do [ -e "$1" ] && return 0; sleep 0.05; done
    return 1
}

mount_tmpfs() {  # DIR OPTIONS
    mkdir -p "$1" && mount -t tmpfs -o "$2" tmpfs "$1" && MOUNTS+=("$1")
}

cleanup() {
    for pid in "${BG[@]}"; do kill -9 "$pid" 2>/dev/null; done
    [ -n "${SERVER_PID:-}" ] && kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null
    [ -n "${RES_SERVER_PID:-}" ] && kill "$RES_SERVER_PID" 2>/dev/null && wait "$RES_SERVER_PID" 2>/dev/null
    for m in "${MOUNTS[@]}"; do umount "$m" 2>/dev/null; done
    [ -n "${KEEP:-}" ] && echo "kept $WORK" || rm -rf "$WORK"
}
trap cleanup EXIT

# A results file with one trial and an external redis-server with a password, for the cases below.
(cd "$WORK/input" && lc matrix "${Q[@]}" --trials 2 --out good.csv >/dev/null 2>&1)
HIST=$(ls "$WORK"/input/good.histories/*.gz | head -1)
RS=$("$PY" -c "from lockcompare.infra.redis.kind import redis_protocol_binary; print(redis_protocol_binary())")
PORT=$("$PY" -c "import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
"$RS" --port "$PORT" --bind 127.0.0.1 --requirepass abuse-s3cret --save '' --appendonly no \
    --dir "$WORK/input" >/dev/null 2>&1 &
SERVER_PID=$!
PW_URL="redis://:abuse-s3cret@127.0.0.1:$PORT"
sleep 0.3

echo "== one writer per results file"
if wanted two-writers-same-second; then
    n=two-writers-same-second; mkdir -p "$WORK/$n"
    (cd "$WORK/$n" && ABUSE_CASE=$n lc matrix "${Q[@]}" --trials 2 --out x.csv >a.out 2>a.err) &
    A=$!
    (cd "$WORK/$n" && ABUSE_CASE=$n lc matrix "${Q[@]}" --trials 2 --out x.csv >b.out 2>b.err) &
    B=$!
    wait $A; ra=$?; wait $B; rb=$?
    cat "$WORK/$n/a.err" "$WORK/$n/b.err" >"$WORK/$n/stderr"
    [ $ra = 0 ] && [ $rb != 0 ] && grep -v '^\s*$' "$WORK/$n/b.err" | tail -1 >>"$WORK/$n/stderr"
    [ $rb = 0 ] && [ $ra != 0 ] && grep -v '^\s*$' "$WORK/$n/a.err" | tail -1 >>"$WORK/$n/stderr"
    rows=$(($(wc -l <"$WORK/$n/x.csv") - 1))
    report "$n" "$ra/$rb"
    echo "    -> exits $ra and $rb; x.csv holds $rows rows (2 planned), whole: $(lc table "$WORK/$n/x.csv" 2>&1 >/dev/null | grep -c . | sed 's/^0$/no warning/')"
fi
if wanted resume-while-writing; then
    n=resume-while-writing
    BG_ERR=bg.err start_bg $n lc matrix "${Q[@]}" --rounds 30 --out x.csv
    wait_for "$WORK/$n/x.csv.lock" 20
    (cd "$WORK/$n" && ABUSE_CASE=$n lc matrix "${Q[@]}" --out x.csv --resume >stdout2 2>stderr)
    rc=$?
    wait "$BG_PID"
    report $n $rc
fi
"$PY" - "$WORK/input/good.csv" "$WORK/input/dup.csv" <<'EOF'
import sys
lines = open(sys.argv[1]).read().splitlines(keepends=True)
open(sys.argv[2], "w").write(lines[0] + lines[1] + lines[1].replace(lines[1].split(",")[1], "otherrun", 1))
EOF
case_ table-duplicates lc table "$WORK/input/dup.csv"
case_ report-duplicates lc report "$WORK/input/dup.csv" --out rep
case_ compare-duplicates lc compare "$WORK/input/dup.csv" "$WORK/input/good.csv"
if wanted resume-duplicates; then
    mkdir -p "$WORK/input/copy" && cp "$WORK/input/dup.csv" "$WORK/input/copy/"
    case_ resume-duplicates lc matrix "${Q[@]}" --out "$WORK/input/copy/dup.csv" --resume
fi
if wanted upgrade-duplicates; then
    mkdir -p "$WORK/upgrade-duplicates" && cp "$WORK/input/dup.csv" "$WORK/upgrade-duplicates/"
    case_ upgrade-duplicates lc upgrade dup.csv
fi

echo "== no secret on disk"
if wanted registry-password; then
    n=registry-password
    start_bg $n lc matrix --backends single --experiments baseline --trials 1 --rounds 60 --time-scale 0.1 \
        --nodes "$PW_URL/0" --resource "$PW_URL/1" --out x.csv
    found=none mode=none
    for _ in $(seq 1 100); do
        if grep -q "\"pid\": $BG_PID" "$LOCKCOMPARE_RUNS_DIR"/*.json 2>/dev/null; then
            found=$(grep -rl abuse-s3cret "$LOCKCOMPARE_RUNS_DIR" "$WORK/$n" 2>/dev/null | wc -l)
            mode=$(stat -c %a "$LOCKCOMPARE_RUNS_DIR/$BG_PID.json")
            break
        fi
        sleep 0.1
    done
    wait "$BG_PID"; rc=$?
    report $n $rc
    echo "    -> during the run: grep -r abuse-s3cret <registry> <output dir>: $found file(s); registry entry mode $mode: $(cat "$LOCKCOMPARE_RUNS_DIR"/*.json 2>/dev/null || echo '(removed at the end)')"
fi
case_ password-from-env env LOCKCOMPARE_REDIS_PASSWORD=abuse-s3cret "$PY" -m lockcompare run --rounds 2 --time-scale 0.1 \
    --nodes "redis://127.0.0.1:$PORT/0" --resource "redis://127.0.0.1:$PORT/1"
if wanted password-from-file; then
    printf '# lock node\n%s/0\nresource=%s/1\n' "$PW_URL" "$PW_URL" >"$WORK/input/nodes"
    case_ password-from-file lc run --rounds 2 --time-scale 0.1 --nodes-file "$WORK/input/nodes"
fi
case_ wrong-password-redacted lc run --rounds 2 --nodes "redis://:wrong-s3cret@127.0.0.1:$PORT/0" \
    --resource "redis://127.0.0.1:$PORT/1"
case_ bad-url-redacted lc run --nodes "redis://:hunter2@127.0.0.1:port/0" --resource "redis://127.0.0.1:1/0"

echo "== bounds (refused before any server starts)"
case_ workers-1000 lc matrix "${Q[@]}" --workers 1000
case_ time-scale-1e9 lc matrix "${Q[@]}" --time-scale 1e9
case_ redlock-nodes-99 lc matrix --backends redlock --experiments baseline --redlock-nodes 99
case_ rounds-1e7 lc run --rounds 10000000
case_ trials-1e6 lc matrix "${Q[@]}" --trials 1000000
case_ jobs-1000 lc matrix "${Q[@]}" --jobs 1000
case_ ttl-ms-1e12 lc run --ttl-ms 1e12
case_ pause-ms-1e12 lc run --pause-ms 1e12
case_ nodes-17 lc run --nodes "$(for i in $(seq 1 17); do printf 'redis://127.0.0.1:%s/0,' $((7000 + i)); done)" \
    --resource redis://127.0.0.1:7000/0
case_ evaluate-time-scale-1e9 lc evaluate single --time-scale 1e9
case_ evaluate-trials-0 lc evaluate single --trials 0
case_ bench-iterations-0 lc bench --iterations 0
case_ bench-redlock-nodes-99 lc bench --redlock-nodes 99
case_ bench-ttl-0 lc bench --ttl-ms 0

echo "== output paths and OS errors"
if is_root; then
    mount_tmpfs "$WORK/ro" ro,size=1m
    mount_tmpfs "$WORK/rocsv" size=1m && cp "$WORK/input/good.csv" "$ROOT/tests/data/schema1.csv" "$WORK/rocsv/" &&
        mount -o remount,ro "$WORK/rocsv"
    mount_tmpfs "$WORK/full" size=64k
    dd if=/dev/zero of="$WORK/full/filler" bs=4k 2>/dev/null
    case_ matrix-out-read-only lc matrix "${Q[@]}" --out "$WORK/ro/x.csv"
    case_ run-out-read-only lc run --rounds 2 --time-scale 0.1 --out "$WORK/ro/x.csv"
    case_ resume-read-only-csv lc matrix "${Q[@]}" --out "$WORK/rocsv/good.csv" --resume
    case_ report-out-read-only lc report "$WORK/input/good.csv" --out "$WORK/ro/rep"
    case_ history-plot-read-only lc history "$HIST" --plot "$WORK/ro/t.png"
    case_ upgrade-read-only lc upgrade "$WORK/rocsv/schema1.csv"
    case_ disk-full lc matrix "${Q[@]}" --out "$WORK/full/x.csv"
else
    echo "(read-only and disk-full cases skipped: mounting a tmpfs needs root)"
fi
case_ table-dev-zero lc table /dev/zero
case_ out-dev-full lc matrix "${Q[@]}" --out /dev/full --resume
case_ out-is-a-directory lc matrix "${Q[@]}" --out "$WORK/input"
case_ out-under-a-file lc matrix "${Q[@]}" --out "$WORK/input/good.csv/x.csv"
case_ report-out-under-a-file lc report "$WORK/input/good.csv" --out "$WORK/input/good.csv/rep"
case_ history-plot-under-a-file lc history "$HIST" --plot "$WORK/input/good.csv/t.png"
case_ history-dev-zero lc history /dev/zero
case_ resume-without-out lc matrix "${Q[@]}" --resume
case_ nodes-file-dev-zero lc run --nodes-file /dev/zero

echo "== interrupts and kills (leftovers counted one second after the end)"
for stage in 0.7 1.5 3; do
    for sig in INT TERM KILL; do
        n=sig$sig-at-${stage}s
        wanted "$n" || continue
        start_bg $n lc matrix --backends single,redlock --experiments baseline --trials 2 --rounds 8 \
            --time-scale 0.1 --out x.csv
        sleep "$stage"
        if [ "$sig" = INT ]; then kill -s INT -- -"$BG_PID" 2>/dev/null; else kill -s "$sig" "$BG_PID" 2>/dev/null; fi
        { wait "$BG_PID"; } 2>/dev/null; rc=$?
        if [ "$sig" = KILL ]; then  # the next run removes what the killed one could not
            sleep 1
            echo "killed: $(find "$TMPDIR" -mindepth 1 -maxdepth 1 | wc -l) dir(s) left; the next run sweeps them" \
                >>"$WORK/$n/stderr"
            (cd "$WORK/$n" && lc matrix "${Q[@]}" --out next.csv >/dev/null 2>>"$WORK/$n/next.err")
        fi
        # histories without a row: an interrupted run removes its own
        orphans=$("$PY" - "$WORK/$n" <<'EOF'
import csv, pathlib, sys
d = pathlib.Path(sys.argv[1])
pointed = set()
for p in d.glob("*.csv"):
    pointed |= {r["history"] for r in csv.DictReader(open(p, newline=""))}
print(sum(1 for h in d.glob("*.histories/*.gz") if str(h.relative_to(d)) not in pointed))
EOF
)
        [ "$sig" != KILL ] && [ "$orphans" != 0 ] && echo "orphan histories: $orphans" >>"$WORK/$n/stderr"
        report "$n" "$rc"
    done
done
if wanted sigstop-runner; then
    n=sigstop-runner
    start_bg $n lc matrix --backends single --experiments baseline --trials 1 --rounds 80 --time-scale 0.1 --out x.csv
    wait_for "$WORK/$n/x.csv.lock" 20
    sleep 2.5
    kill -STOP "$BG_PID"; sleep 5; kill -CONT "$BG_PID"
    # With job control on, bash's wait can return the job's earlier *stopped* status (147) while it
    # runs on: wait again until the process is gone, so the case is judged after the run ended.
    wait "$BG_PID"; rc=$?
    while kill -0 "$BG_PID" 2>/dev/null; do wait "$BG_PID"; rc=$?; sleep 0.1; done
    report $n $rc
    echo "    -> $(grep -o 'stopped from outside[^;]*' "$WORK/$n/stderr" | head -1)"
fi

echo "== one server, one node; small items"
case_ alias-localhost lc run --backend redlock --redlock-nodes 3 \
    --nodes "$PW_URL/0,redis://:abuse-s3cret@localhost:$PORT/0,$PW_URL/2" --resource "$PW_URL/3"
case_ alias-databases lc run --backend redlock --redlock-nodes 5 \
    --nodes "$PW_URL/0,$PW_URL/1,$PW_URL/2,$PW_URL/3,$PW_URL/4" --resource "$PW_URL/5"
if wanted truncated-row; then
    head -c -40 "$WORK/input/good.csv" >"$WORK/input/trunc.csv"
    case_ truncated-row-report lc report "$WORK/input/trunc.csv" --out rep
    echo "    -> $(grep truncated "$WORK/truncated-row-report/stderr")"
    case_ truncated-row-compare lc compare "$WORK/input/trunc.csv" "$WORK/input/good.csv"
    echo "    -> $(grep truncated "$WORK/truncated-row-compare/stderr")"
fi
case_ bench-via-proxy-nodes lc bench --backends single --iterations 20 --nodes "$PW_URL/0" --resource "$PW_URL/1"
wanted bench-via-proxy-nodes && echo "    -> $(grep 'via-proxy' "$WORK/bench-via-proxy-nodes/stderr")"
case_ progress-shows-verdict lc matrix "${Q[@]}" --out x.csv
wanted progress-shows-verdict && echo "    -> $(grep '^\[1/1\]' "$WORK/progress-shows-verdict/stderr")"

# ---- issue 26: the second battery ------------------------------------------------------------------
mkdir -p "$WORK/plugins"
printf 'raise SystemExit(3)\n' >"$WORK/plugins/p_exit3.py"
printf 'import os\nos._exit(0)\n' >"$WORK/plugins/p_osexit.py"
printf 'import time\ntime.sleep(60)\n' >"$WORK/plugins/p_slow.py"
printf 'import os, time\nif os.fork() == 0:\n    time.sleep(300)\n    os._exit(0)\nfrom lockcompare.backends.single import SingleNodeLock as Lock\n' >"$WORK/plugins/p_fork.py"
cat >"$WORK/plugins/p_strdeadline.py" <<'EOF'
from dataclasses import replace
from lockcompare.backends.base import Lease
from lockcompare.backends.single import SingleNodeLock
class Lock(SingleNodeLock):
    summary = "a lease deadline that is a string"
    def acquire(self, *, key, ttl_ms):
        out = super().acquire(key=key, ttl_ms=ttl_ms)
        return replace(out, valid_until_ns="soon") if isinstance(out, Lease) else out
EOF
PP=(--plugin-path "$WORK/plugins")

echo "== 64-bit fencing tokens (compared as integers)"
if wanted wide-tokens-client-pause; then
    case_ wide-tokens-client-pause lc --plugin-path "$ROOT/tests" matrix --backends plugins.wide_tokens:WideTokenLock,fenced \
        --experiments client-pause --trials 1 --rounds 6 --time-scale 0.1 --out x.csv
    lc table "$WORK/wide-tokens-client-pause/x.csv" 2>/dev/null | sed -n '3,4p' | sed 's/^/    -> /'
fi

echo "== one writer per real file"
for alias in symlink hardlink; do
    n=$alias-alias-writers
    wanted "$n" || continue
    mkdir -p "$WORK/$n/real" && cp "$WORK/input/good.csv" "$WORK/$n/real/x.csv"
    if [ $alias = symlink ]; then ln -s real/x.csv "$WORK/$n/alias.csv"; else ln "$WORK/$n/real/x.csv" "$WORK/$n/alias.csv"; fi
    BG_ERR=bg.err start_bg $n lc matrix "${Q[@]}" --rounds 30 --trials 3 --out real/x.csv --resume
    wait_for "$WORK/$n/real/x.csv.lock" 30
    (cd "$WORK/$n" && ABUSE_CASE=$n lc matrix "${Q[@]}" --trials 3 --out alias.csv --resume >stdout 2>stderr)
    rc=$?
    wait "$BG_PID"; ra=$?
    report $n "$ra/$rc"
    echo "    -> exits $ra (real name) and $rc (the $alias); real/x.csv holds $(($(wc -l <"$WORK/$n/real/x.csv") - 1)) rows ($(($(wc -l <"$WORK/input/good.csv") - 1)) + 3 planned)"
done
if wanted out-through-symlink; then
    n=out-through-symlink
    mkdir -p "$WORK/$n/real" && ln -s real/x.csv "$WORK/$n/alias.csv"
    case_ $n lc matrix "${Q[@]}" --out alias.csv
    echo "    -> histories beside the real file: $(ls "$WORK/$n/real/x.histories" 2>/dev/null | wc -l); beside the link: $(ls "$WORK/$n/alias.histories" 2>/dev/null | wc -l)"
fi

echo "== every field bounded where it is written"
case_ faults-3000-steps lc run --faults "$("$PY" -c "print('; '.join(['crash nodes=0 at=start'] * 3000))")"
if wanted faults-file-60kB; then
    "$PY" -c "print('steps = [' + ','.join(['\"crash nodes=0 at=start\"'] * 2400) + ']')" >"$WORK/input/big.toml"
    case_ faults-file-60kB lc run --faults-file "$WORK/input/big.toml"
fi
if wanted long-field-readable; then
    "$PY" - "$WORK/input/good.csv" "$WORK/input/long.csv" <<'EOF'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1], newline="")))
rows[0]["faults"] = "crash nodes=0 at=start; " * 9000  # as an older lockcompare could write it
w = csv.DictWriter(open(sys.argv[2], "w", newline=""), fieldnames=list(rows[0]), lineterminator="\n")
w.writeheader(); w.writerows(rows)
EOF
    case_ long-field-table lc table "$WORK/input/long.csv"
    case_ long-field-compare lc compare "$WORK/input/long.csv" "$WORK/input/good.csv"
fi
if wanted bom-csv; then
    printf '\xef\xbb\xbf' | cat - "$WORK/input/good.csv" >"$WORK/input/bom.csv"
    case_ bom-csv-table lc table "$WORK/input/bom.csv"
fi

echo "== report writes only its own files, reads only the results' folder"
if wanted report-user-files; then
    n=report-user-files; mkdir -p "$WORK/$n/rep"
    echo mine >"$WORK/$n/rep/README.md"; echo mine >"$WORK/$n/rep/matrix-baseline.png"; echo mine >"$WORK/$n/rep/timeline-x.png"
    case_ $n lc report "$WORK/input/good.csv" --out rep
    echo "    -> the user's files intact: $(cat "$WORK/$n/rep/README.md" "$WORK/$n/rep/matrix-baseline.png" "$WORK/$n/rep/timeline-x.png" 2>/dev/null | grep -c mine) of 3"
fi
if wanted report-hostile-csv; then
    "$PY" - "$WORK/input/good.csv" "$WORK/input/evil.csv" <<'EOF'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1], newline="")))
r = rows[0]
r.update(backend="=cmd|' /C calc'!A0", run_id="<script>alert(1)</script>|x\ny", history="../../../../../../../../etc/passwd",
         lost_updates="1")
w = csv.DictWriter(open(sys.argv[2], "w", newline=""), fieldnames=list(r), lineterminator="\n")
w.writeheader(); w.writerow(r)
EOF
    case_ report-hostile-csv lc report "$WORK/input/evil.csv" --out rep
    echo "    -> /etc/passwd read: $(grep -c 'root:' "$WORK/report-hostile-csv/rep/README.md" 2>/dev/null); raw <script> outside code: $(sed 's/`[^`]*`//g' "$WORK/report-hostile-csv/rep/README.md" 2>/dev/null | grep -c '<script')"
    case_ table-csv-formula lc table "$WORK/input/evil.csv" --format csv
    wanted table-csv-formula && echo "    -> formula cells left: $(grep -c '^=' "$WORK/table-csv-formula/stdout")"
fi

echo "== no password printed, whatever the URL's form"
case_ pw-query-string lc run --nodes "redis://127.0.0.1:1/0?password=abuse-s3cret" --resource "redis://127.0.0.1:1/1"
case_ pw-slash-in-password lc run --nodes "redis://:abuse-s3/cret@127.0.0.1:1/0" --resource "redis://127.0.0.1:1/1"
case_ pw-postgres-psycopg-scheme lc run --backend pg-lease --postgres "postgresql+psycopg://u:abuse-s3cret@127.0.0.1:1/db"
case_ pw-postgres-query lc run --backend pg-lease --postgres "postgresql://u@127.0.0.1:1/db?password=abuse-s3cret"
case_ pw-postgres-slash lc run --backend pg-lease --postgres "postgresql://u:abuse-s3/cret@127.0.0.1:1/db"
case_ pw-etcd-url lc run --nodes "http://root:abuse-s3cret@127.0.0.1:1" --resource "redis://127.0.0.1:1/1"
case_ pw-rediss lc run --nodes "rediss://u:abuse-s3cret@127.0.0.1:1/0" --resource "redis://127.0.0.1:1/1"
case_ wrong-password-said lc run --rounds 2 --nodes "redis://:wrong-s3cret@127.0.0.1:$PORT/0" --resource "$PW_URL/1"
wanted wrong-password-said && echo "    -> $(grep -o 'refuses the password' "$WORK/wrong-password-said/stderr" | head -1)"

echo "== every number through one bounded parser"
case_ faults-pause-for-1e7 lc run --faults "pause worker=0 after-acquire=0 for=1e7"
case_ faults-nodes-superscript lc run --faults "crash nodes=² after-acquire=5"
case_ faults-for-1e308 lc run --faults "pause worker=0 after-acquire=0 for=1e308"
case_ faults-after-acquire-1e308 lc run --faults "crash nodes=0 after-acquire=1e308"
case_ faults-nodes-5000-digits lc run --faults "crash nodes=$(printf '1%.0s' $(seq 5000)) at=start"
case_ faults-worker-5000-digits lc run --faults "pause worker=$(printf '1%.0s' $(seq 5000)) after-acquire=0 for=5"
case_ run-from-5000-digit-row lc run --from "$WORK/input/good.csv:$(printf '1%.0s' $(seq 5000))"
case_ history-plot-1e308 lc history "$HIST" --plot t.png --from-ms -1e308 --to-ms 1e308
case_ explore-max-steps-1e8 lc explore single --max-steps 100000000 --budget 5s
case_ explore-jobs-1000 lc explore single --budget 15s --jobs 1000
case_ explore-budget-400-nines lc explore single --budget "$(printf '9%.0s' $(seq 400))"
case_ explore-resume-missing lc explore single --resume --out "$WORK/no-such-dir"
case_ out-non-utf8 lc matrix "${Q[@]}" --out "$(printf 'x\xff.csv')"
wanted out-non-utf8 && echo "    -> files left: $(ls "$WORK/out-non-utf8" | grep -vc '^std')"
case_ plugin-string-deadline lc "${PP[@]}" run --backend p_strdeadline:Lock --rounds 2 --time-scale 0.1 --out x.csv

echo "== plug-in imports probed with a time limit"
case_ plugin-sysexit-3 lc "${PP[@]}" run --backend p_exit3:Lock --rounds 2
case_ plugin-os-exit-0 lc "${PP[@]}" run --backend p_osexit:Lock --rounds 2
case_ plugin-import-60s lc "${PP[@]}" run --backend p_slow:Lock --rounds 2
case_ plugin-forks-child lc "${PP[@]}" run --backend p_fork:Lock --rounds 2

echo "== a dead resource is unknown, and the matrix goes on"
if wanted dead-resource; then
    n=dead-resource
    start_bg $n lc matrix --backends single,fenced --experiments baseline --trials 2 --rounds 30 --time-scale 0.1 \
        --jobs 1 --out x.csv
    for _ in $(seq 1 600); do grep -q '^\[1/4\]' "$WORK/$n/stderr" 2>/dev/null && break; sleep 0.1; done
    sleep 0.7
    for d in /proc/[0-9]*; do
        [[ $(readlink "$d/cwd" 2>/dev/null) == "$TMPDIR"/lockcompare-p"$BG_PID"-resource-* ]] && kill -9 "${d#/proc/}"
    done
    t0=$(date +%s)
    wait "$BG_PID"; rc=$?
    report $n $rc
    echo "    -> $(($(date +%s) - t0)) s after the kill; rows: $("$PY" -c "import csv,sys; print(' '.join(r['verdict'] + '/' + r['wall_s'][:4] + 's' for r in csv.DictReader(open(sys.argv[1]))))" "$WORK/$n/x.csv" 2>/dev/null)"
fi

# ---- issue 38: the third battery ------------------------------------------------------------------
echo "== one address parser, never raising; one redaction, whatever the form"
case_ fullwidth-at-redis lc run --nodes "redis://:abuse＠s3cret@127.0.0.1:1/0" --resource "redis://127.0.0.1:1/1"
case_ fullwidth-at-postgres lc run --backend pg-lease --postgres "postgresql://u:abuse＠s3cret@127.0.0.1:1/db"
case_ fullwidth-at-etcd lc run --backend etcd --nodes "http://root:abuse＠s3cret@127.0.0.1:1" --resource "redis://127.0.0.1:1/1"
case_ fullwidth-at-zookeeper lc run --backend zk-lock --zookeeper "u:abuse-s3cret＠127.0.0.1:1"
case_ fullwidth-only-redis lc run --nodes "redis://:abuse-s3cret＠127.0.0.1:1/0" --resource "redis://127.0.0.1:1/1"
case_ ipv6-nodes lc run --nodes "redis://[::1]:1/0" --resource "redis://127.0.0.1:1/1"
case_ ipv6-resource lc run --nodes "redis://127.0.0.1:1/0" --resource "redis://:abuse-s3cret@[::1]:1/1"
case_ ipv6-resource-unclosed lc run --nodes "redis://127.0.0.1:1/0" --resource "redis://:abuse-s3cret@[::1:1/1"
case_ ipv6-unbracketed lc run --nodes "redis://::1:1/0" --resource "redis://127.0.0.1:1/1"
case_ ipv6-postgres lc run --backend pg-lease --postgres "postgresql://u:abuse-s3cret@[::1]:1/db"
case_ pw-raw-space lc run --nodes "redis://:abuse s3cret@127.0.0.1:1/0" --resource "redis://127.0.0.1:1/1"
case_ pw-quote lc run --nodes "redis://:abuse's3cret@127.0.0.1:1/0" --resource "redis://127.0.0.1:1/1"
case_ pw-double-quote lc run --nodes 'redis://:abuse"s3cret@127.0.0.1:1/0' --resource "redis://127.0.0.1:1/1"
case_ pw-quote-bad-port lc run --nodes "redis://:abuse's3cret@127.0.0.1:port/0" --resource "redis://127.0.0.1:1/1"
case_ pw-postgres-keywords lc run --backend pg-lease --postgres "host=127.0.0.1 port=1 user=u password=abuse-s3cret dbname=x"
case_ pw-postgres-keywords-quoted lc run --backend pg-lease --postgres "host=127.0.0.1 port=1 password='abuse s3cret'"
case_ pw-postgres-keywords-unclosed lc run --backend pg-lease --postgres "host=127.0.0.1 port=1 password='abuse s3cret"
case_ pw-zookeeper-userinfo lc run --backend zk-lock --zookeeper "u:abuse-s3cret@127.0.0.1:1"
case_ pw-dask-userinfo lc matrix "${Q[@]}" --dask "tcp://u:abuse-s3cret@127.0.0.1:1" --out x.csv
case_ pw-dask-bare-userinfo lc matrix "${Q[@]}" --dask "u:abuse-s3cret@127.0.0.1:1" --out x.csv

echo "== manifests read as bytes; a daemonising server binary"
if wanted manifest-non-utf8; then
    printf 'protocol = 1\nname = "caf\xe9"\nsummary = "latin-1"\ncommand = ["true"]\n[claims]\nexclusive = true\nissues_fencing_tokens = false\n' \
        >"$WORK/input/latin1.toml"
    case_ manifest-non-utf8 lc run --backend "$WORK/input/latin1.toml" --rounds 2
fi
if wanted redis-server-daemonises; then
    printf '#!/bin/sh\nexec "%s" "$@" --daemonize yes\n' "$RS" >"$WORK/bin/redis-daemon" && chmod +x "$WORK/bin/redis-daemon"
    case_ redis-server-daemonises lc run --rounds 2 --time-scale 0.1 --redis-server "$WORK/bin/redis-daemon"
fi
if wanted redis-server-forks-and-exits; then
    printf '#!/bin/sh\n"%s" "$@" >/dev/null 2>&1 &\nexit 0\n' "$RS" >"$WORK/bin/redis-bg" && chmod +x "$WORK/bin/redis-bg"
    case_ redis-server-forks-and-exits lc run --rounds 2 --time-scale 0.1 --redis-server "$WORK/bin/redis-bg"
fi

echo "== a killed run's temporary directories, swept by whatever runs next"
if wanted killed-then-resume-nothing; then
    n=killed-then-resume-nothing; mkdir -p "$WORK/$n"
    (cd "$WORK/$n" && lc matrix "${Q[@]}" --out done.csv >/dev/null 2>&1)
    start_bg $n lc matrix --backends single,redlock --experiments baseline --trials 2 --rounds 30 --time-scale 0.1 --out y.csv
    wait_for "$WORK/$n/y.csv.lock" 30; sleep 1.5
    kill -9 "$BG_PID"; { wait "$BG_PID"; } 2>/dev/null; sleep 1
    echo "killed: $(find "$TMPDIR" -mindepth 1 -maxdepth 1 | wc -l) dir(s) left" >"$WORK/$n/killed.txt"
    # (another revision may have been committed meanwhile: the case is about the sweep, not the revision)
    case_ $n lc matrix "${Q[@]}" --out "$WORK/$n/done.csv" --resume --allow-mixed-revisions "abuse.sh"
    wanted $n && echo "    -> $(cat "$WORK/$n/killed.txt"); after a --resume with nothing to do: $(find "$TMPDIR" -mindepth 1 -maxdepth 1 | wc -l)"
fi
if wanted killed-then-table; then
    n=killed-then-table
    start_bg $n lc matrix --backends single,redlock --experiments baseline --trials 2 --rounds 30 --time-scale 0.1 --out y.csv
    wait_for "$WORK/$n/y.csv.lock" 30; sleep 1.5
    kill -9 "$BG_PID"; { wait "$BG_PID"; } 2>/dev/null; sleep 1
    case_ $n lc table "$WORK/input/good.csv"
fi

echo "== one histories folder per results file"
if wanted histories-csv-then-tsv; then
    n=histories-csv-then-tsv; mkdir -p "$WORK/$n"
    (cd "$WORK/$n" && lc matrix "${Q[@]}" --out x.csv >/dev/null 2>&1)
    case_ $n lc matrix "${Q[@]}" --out x.tsv
    wanted $n && echo "    -> x.csv's rows point into: $(cut -d, -f"$(head -1 "$WORK/$n/x.csv" | tr ',' '\n' | grep -nx history | cut -d: -f1)" "$WORK/$n/x.csv" | tail -n +2 | xargs dirname | sort -u | tr '\n' ' ')x.tsv's into: $(grep -o 'x[.a-z]*histories' "$WORK/$n/x.tsv" | sort -u | tr '\n' ' ')"
fi

echo "== SIGHUP and SIGQUIT as SIGTERM"
for sig in HUP QUIT; do
    for cmd in matrix explore; do
        n=sig$sig-$cmd
        wanted "$n" || continue
        if [ $cmd = matrix ]; then
            start_bg $n lc matrix --backends single,redlock --experiments baseline --trials 2 --rounds 30 --time-scale 0.1 --out x.csv
        else
            start_bg $n lc explore single --budget 60s --out ex
        fi
        sleep 3
        kill -s "$sig" "$BG_PID" 2>/dev/null
        { wait "$BG_PID"; } 2>/dev/null; rc=$?
        report "$n" "$rc"
    done
done

echo "== report: a temporary folder renamed whole"
for sig in TERM INT; do
    n=report-sig$sig
    wanted "$n" || continue
    mkdir -p "$WORK/$n"
    (cd "$WORK/$n" && lc report "$WORK/input/good.csv" --out rep >/dev/null 2>&1)
    seen=""
    for delay in 0.2 0.4 0.6 0.8; do  # the signal lands somewhere in the rendering (0.8-1.2 s here)
        start_bg $n lc report "$WORK/input/good.csv" --out rep
        sleep $delay
        if [ "$sig" = INT ]; then kill -s INT -- -"$BG_PID" 2>/dev/null; else kill -s TERM "$BG_PID" 2>/dev/null; fi
        { wait "$BG_PID"; } 2>/dev/null; rc=$?
        missing=$(cd "$WORK/$n/rep" 2>/dev/null && [ -f README.md ] && [ -f .lockcompare-report ] &&
            while read -r f; do [ -e "$f" ] || echo missing; done <.lockcompare-report | grep -c missing)
        seen+="${delay}s: exit $rc, ${missing:-no whole folder} missing; "
        grep -q 'Exception ignored' "$WORK/$n/stderr" && echo "Exception ignored printed (exit $rc)" >>"$WORK/$n/stderr"
    done
    staging=$(find "$WORK/$n" -maxdepth 2 -name '*staging*' | wc -l)
    (cd "$WORK/$n" && lc report "$WORK/input/good.csv" --out rep >/dev/null 2>"$WORK/$n/again.err"); again=$?
    report "$n" "$rc"
    echo "    -> $seen""staging folders left: $staging; the next report into it: exit $again"
done

echo "== no working directory needed unless written there"
for cmd in table run backends; do
    n=cwd-deleted-$cmd
    wanted "$n" || continue
    mkdir -p "$WORK/$n/gone"
    case $cmd in
        table) args=(table "$WORK/input/good.csv") ;;
        run) args=(run --rounds 2 --time-scale 0.1) ;;
        backends) args=(backends) ;;
    esac
    # The interpreter itself, not the sh wrapper: sh complains of the missing directory on its own.
    (cd "$WORK/$n/gone" && rmdir "$WORK/$n/gone" && ABUSE_CASE=$n "$PY" -m lockcompare "${args[@]}" >"$WORK/$n/stdout" 2>"$WORK/$n/stderr")
    report "$n" $?
done

echo "== durations bounded by what their server takes"
case_ idle-session-timeout-3e9 lc run --backend pg-advisory --idle-session-timeout-ms 3e9
case_ idle-session-timeout-scaled lc run --backend pg-advisory --idle-session-timeout-ms 2000000000 --time-scale 2
case_ client-timeout-1e308 lc run --client-timeout-ms 1e308

# ---- issue 49: the fourth battery ------------------------------------------------------------------
echo "== a malformed server list is still secret"
case_ pw-equals-in-lock-servers lc run --lock-servers "redis://:s3cret=abuse@127.0.0.1:1/0"
case_ pw-comma-in-lock-servers lc run --lock-servers "redis=redis://:abuse,s3cret@127.0.0.1:1/0" --resource "redis://127.0.0.1:1/1"
case_ pw-comma-in-nodes lc run --nodes "redis://:s3cret,abuse@127.0.0.1:1/0" --resource "redis://127.0.0.1:1/1"

echo "== DNS's limits in the address parser; a 100 KB argument in linear time"
BIG=$(printf 'a%.0s' $(seq 100000))
case_ host-label-64 lc run --lock-servers "redis=redis://:p@$(printf 'a%.0s' $(seq 64)):1/0" --resource "redis://127.0.0.1:1/1"
case_ host-100KB lc run --lock-servers "redis=redis://:abuse-s3cret@$BIG:1/0" --resource "redis://127.0.0.1:1/1"
if wanted kind-name-100KB; then
    case_ kind-name-100KB lc run --lock-servers "$BIG=redis://127.0.0.1:1/0"
    echo "    -> input to exit: $CASE_S (the whole command, interpreter start included)"
fi
if wanted sigINT-early; then
    n=sigINT-early; seen=""
    for delay in 0.05 0.15 0.3 0.5; do  # while the command is importing, reading its arguments, sweeping
        start_bg $n lc run --lock-servers "$BIG=redis://127.0.0.1:1/0"
        sleep $delay; kill -s INT -- -"$BG_PID" 2>/dev/null
        { wait "$BG_PID"; } 2>/dev/null; rc=$?; seen+="${delay}s: exit $rc; "
    done
    report $n "$rc"
    echo "    -> $seen"
fi

if wanted sigTERM-early; then
    n=sigTERM-early; seen="" wrong=0 lines=0
    for delay in 0.05 0.1 0.2 0.3 0.5 0.7 1.0; do  # the interface's imports, the arguments, the first trial
        BG_ERR=err.$delay start_bg $n lc matrix "${Q[@]}" --out "x$delay.csv"
        sleep $delay; kill -s TERM "$BG_PID" 2>/dev/null
        { wait "$BG_PID"; } 2>/dev/null; rc=$?
        seen+="${delay}s: exit $rc; "
        [ "$rc" != 143 ] && wrong=$((wrong + 1))
        lines=$((lines + $(grep -c . "$WORK/$n/err.$delay")))
        cat "$WORK/$n/err.$delay" >>"$WORK/$n/stderr"
    done
    report $n "$rc"
    echo "    -> $seen""not 143: $wrong; lines printed: $lines for 7 signals (none in the interpreter's own start)"
fi

echo "== clients install: signals end its toolchain; a full cache names the destination"
mkdir -p "$WORK/fakebin"
printf '#!/bin/sh\nsleep 300 &\necho "$$ $!" > "$NPM_MARKER"\nwait\n' >"$WORK/fakebin/npm"
printf '#!/bin/sh\nexit 0\n' >"$WORK/fakebin/node"
chmod +x "$WORK/fakebin/npm" "$WORK/fakebin/node"
for sig in INT TERM HUP; do
    n=clients-install-sig$sig
    wanted "$n" || continue
    rm -f "$WORK/npm-marker"
    PATH="$WORK/fakebin:$PATH" LOCKCOMPARE_CLIENTS_DIR="$WORK/$n/clients" NPM_MARKER="$WORK/npm-marker" \
        start_bg $n lc clients install node
    for _ in $(seq 1 600); do [ -s "$WORK/npm-marker" ] && break; sleep 0.05; done
    t0=$(date +%s.%N)
    if [ "$sig" = INT ]; then kill -s INT -- -"$BG_PID" 2>/dev/null; else kill -s "$sig" "$BG_PID" 2>/dev/null; fi
    { wait "$BG_PID"; } 2>/dev/null; rc=$?
    took=$("$PY" -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.2f} s')" "$t0" "$(date +%s.%N)")
    npm_left=0
    for pid in $(cat "$WORK/npm-marker" 2>/dev/null); do
        [ -e "/proc/$pid" ] && [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ] && npm_left=$((npm_left + 1)) && kill -9 "$pid"
    done
    [ "$npm_left" != 0 ] && echo "toolchain processes left: $npm_left" >>"$WORK/$n/stderr"
    report $n $rc
    echo "    -> signal to exit: $took; the toolchain's processes left: $npm_left"
done
if wanted clients-install-full; then
    n=clients-install-full; mkdir -p "$WORK/$n"
    # RLIMIT_FSIZE stands for the full disk (EFBIG where ENOSPC would be): no tmpfs, no root needed.
    case_ $n env LOCKCOMPARE_CLIENTS_DIR="$WORK/$n/clients" "$PY" -c "import os, resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
os.execv(sys.argv[1], sys.argv[1:])" "$LC" clients install python
    named=$(grep -o "cannot install [^:]*" "$WORK/$n/stderr" | cut -d' ' -f3)
    wanted $n && echo "    -> the file named: ${named:-none}, there now: $([ -n "$named" ] && [ -e "$named" ] && echo yes || echo no)"
fi

echo "== report: a SIGTERM while matplotlib is imported"
if wanted report-sigTERM-import; then
    n=report-sigTERM-import; seen="" wrong=0
    for delay in 0.05 0.1 0.2 0.3 0.4 0.5; do
        rm -rf "$WORK/$n/rep"
        start_bg $n lc report "$WORK/input/good.csv" --out rep
        sleep $delay; kill -s TERM "$BG_PID" 2>/dev/null
        { wait "$BG_PID"; } 2>/dev/null; rc=$?
        seen+="${delay}s: exit $rc; "
        [ "$rc" != 143 ] && wrong=$((wrong + 1))
    done
    grep -q 'need matplotlib' "$WORK/$n/stderr" && echo "said plots need matplotlib" >>"$WORK/$n/stderr"
    report $n "$rc"
    echo "    -> $seen""not 143: $wrong"
fi

echo "== an early Ctrl-C of matrix (a worker's cgroup outlives its start)"
for stage in 0.3 0.5 0.9 1.1; do
    n=sigINT-early-matrix-at-${stage}s
    wanted "$n" || continue
    start_bg $n lc matrix --backends single,redlock --experiments baseline --trials 2 --rounds 8 --time-scale 0.1 --out x.csv
    sleep "$stage"; kill -s INT -- -"$BG_PID" 2>/dev/null
    { wait "$BG_PID"; } 2>/dev/null; rc=$?
    report "$n" "$rc"
done

echo "== one histories folder per results file, with and without a suffix"
if wanted histories-bare-then-csv; then
    n=histories-bare-then-csv; mkdir -p "$WORK/$n"
    (cd "$WORK/$n" && lc run --rounds 2 --time-scale 0.1 --out x >/dev/null 2>&1)
    case_ $n lc run --rounds 2 --time-scale 0.1 --out x.csv
    col() { "$PY" -c "import csv, sys; print(' '.join(sorted({r['history'].split('/')[0] for r in csv.DictReader(open(sys.argv[1]))})))" "$1" 2>/dev/null; }
    wanted $n && echo "    -> x's rows point into: $(col "$WORK/$n/x"); x.csv's into: $(col "$WORK/$n/x.csv")"
fi
if wanted histories-bare-after-csv; then
    n=histories-bare-after-csv; mkdir -p "$WORK/$n"
    (cd "$WORK/$n" && lc run --rounds 2 --time-scale 0.1 --out y.csv >/dev/null 2>&1)
    case_ $n lc run --rounds 2 --time-scale 0.1 --out y
fi

echo "== revisions shown whole"
if wanted mixed-revision-whole; then
    n=mixed-revision-whole; mkdir -p "$WORK/$n"
    rev=$("$PY" -c "from lockcompare.infra.provenance import source_revision; print(source_revision())")
    other=$([ "${rev%+dirty}" = "$rev" ] && echo "$rev+dirty" || echo "${rev%+dirty}")
    "$PY" - "$WORK/input/good.csv" "$WORK/$n/x.csv" "$other" <<'EOF2'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1], newline="")))
w = csv.DictWriter(open(sys.argv[2], "w", newline=""), fieldnames=list(rows[0]), lineterminator="\n")
w.writeheader(); w.writerows(dict(r, source_revision=sys.argv[3]) for r in rows)
EOF2
    case_ $n lc matrix "${Q[@]}" --trials 2 --out "$WORK/$n/x.csv" --resume
fi

echo "== the Dask scheduler killed mid-matrix"
if wanted dask-scheduler-killed && "$PY" -c 'import distributed' 2>/dev/null; then
    n=dask-scheduler-killed; mkdir -p "$WORK/$n"
    DPORT=$("$PY" -c "import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
    export DASK_TEMPORARY_DIRECTORY=$WORK/$n/dask  # Dask's own scratch, not in the TMPDIR counted here
    (cd "$WORK/$n" && exec "$PY" -m distributed.cli.dask_scheduler --host 127.0.0.1 --port "$DPORT" \
        --dashboard-address :0 >sched.log 2>&1) &
    DSCHED=$!
    sleep 3
    (cd "$WORK/$n" && exec "$PY" -m distributed.cli.dask_worker "tcp://127.0.0.1:$DPORT" --nthreads 1 --no-dashboard \
        >worker.log 2>&1) &
    DWORKER=$!
    sleep 3
    start_bg $n lc matrix --backends single,fenced,none,atomic --experiments baseline --trials 2 --rounds 20 \
        --time-scale 0.2 --jobs 1 --dask "tcp://127.0.0.1:$DPORT" --out x.csv
    for _ in $(seq 1 1200); do [ "$(cat "$WORK/$n/x.csv" 2>/dev/null | wc -l)" -ge 2 ] && break; sleep 0.1; done
    kill -9 "$DSCHED"
    { wait "$BG_PID"; } 2>/dev/null; rc=$?
    kill "$DWORKER" 2>/dev/null; wait "$DWORKER" 2>/dev/null; wait "$DSCHED" 2>/dev/null
    # The worker, ended here, could not remove its batch's scratch folder: the next command does.
    lc table "$WORK/input/good.csv" >/dev/null 2>&1
    unset DASK_TEMPORARY_DIRECTORY
    report $n $rc
    echo "    -> stderr lines other than progress: $(grep -v '^\[' "$WORK/$n/stderr" | grep -c .); rows kept: $(($(wc -l <"$WORK/$n/x.csv") - 1)) of 8"
fi

echo "== summary: $CASES cases, $TOTAL_TB tracebacks, $TOTAL_LEFT leftovers (processes + dirs + .part files), $TOTAL_DUP duplicate rows, $TOTAL_PW passwords printed"
[ "$TOTAL_TB" = 0 ] && [ "$TOTAL_LEFT" = 0 ] && [ "$TOTAL_DUP" = 0 ] && [ "$TOTAL_PW" = 0 ]
