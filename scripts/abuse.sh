#!/usr/bin/env bash
# The hostile-but-fair user of issue 18, as one script: every case prints one line with its exit
# code, tracebacks printed, what it left (processes, temporary/data dirs, .part files, duplicate
# trial ids in the results files it wrote) and its last stderr line; a summary line ends it.
#
#   scripts/abuse.sh              every case (about 3 minutes on 2 cores; it loads the machine)
#   scripts/abuse.sh CASE...      only the cases whose names contain one of the words
#
# Runs from a repository checkout (PYTHONPATH=src) with the interpreter in $PYTHON (default
# /work/venv/bin/python, else python3). Cases that need a read-only or a full file system mount a
# small tmpfs and are skipped without root. Everything happens under one temporary directory,
# with TMPDIR and the run registry pointed into it, so leftovers are this script's own.
set -u
set -m  # background runs get process groups of their own: a Ctrl-C is sent to the group, as a terminal does

ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-/work/venv/bin/python}
[ -x "$PY" ] || PY=python3
WORK=$(mktemp -d /tmp/abuse.XXXXXX)
export TMPDIR=$WORK/tmp LOCKCOMPARE_RUNS_DIR=$WORK/runs PYTHONPATH=$ROOT/src
mkdir -p "$TMPDIR" "$LOCKCOMPARE_RUNS_DIR" "$WORK/input"
Q=(--backends single --experiments baseline --trials 1 --rounds 3 --time-scale 0.1 --jobs 1)
ONLY=("$@")
TOTAL_TB=0 TOTAL_LEFT=0 TOTAL_DUP=0 CASES=0 MOUNTS=() BG=()

# An executable, not a shell function: a run started in the background is then the python process
# itself (its pid is the one signals go to and the registry names).
mkdir -p "$WORK/bin" && printf '#!/bin/sh\nexec "%s" -m lockcompare "$@"\n' "$PY" >"$WORK/bin/lc" && chmod +x "$WORK/bin/lc"
lc() { "$WORK/bin/lc" "$@"; }
LC=$WORK/bin/lc
wanted() { [ ${#ONLY[@]} -eq 0 ] && return 0; for w in "${ONLY[@]}"; do [[ $1 == *"$w"* ]] && return 0; done; return 1; }
is_root() { [ "$(id -u)" = 0 ]; }

procs_left() {  # live processes carrying this case's marker (workers and servers inherit it)
    local n=0 e pid state
    for e in /proc/[0-9]*/environ; do
        pid=${e#/proc/}; pid=${pid%/environ}
        [ "$pid" = $$ ] && continue
        if { tr '\0' '\n' <"$e"; } 2>/dev/null | grep -qx "ABUSE_CASE=$1"; then
            state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)
            [ -n "$state" ] && [ "$state" != Z ] && n=$((n + 1))
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
    dirs=$(find "$TMPDIR" -mindepth 1 -maxdepth 1 | wc -l)
    parts=$(find "$WORK" -name '*.part' 2>/dev/null | wc -l)
    dup=$(dups $(find "$dir" -name '*.csv' 2>/dev/null))
    tb=$(grep -c Traceback "$err" 2>/dev/null)
    last=$(grep -v '^\s*$' "$err" 2>/dev/null | tail -1 | cut -c1-150)
    printf '%-26s exit=%-3s tb=%s procs=%s dirs=%s part=%s dup=%s | %s\n' \
        "$name" "$rc" "${tb:-0}" "$procs" "$dirs" "$parts" "$dup" "$last"
    [ "$dirs" != 0 ] && echo "    -> left in TMPDIR: $(ls "$TMPDIR" | head -5 | tr '\n' ' ')"
    [ "$parts" != 0 ] && echo "    -> .part files: $(find "$WORK" -name '*.part' | head -3 | tr '\n' ' ')"
    TOTAL_TB=$((TOTAL_TB + ${tb:-0})) TOTAL_LEFT=$((TOTAL_LEFT + procs + dirs + parts)) TOTAL_DUP=$((TOTAL_DUP + dup))
    CASES=$((CASES + 1))
}

case_() {  # NAME CMD...: run CMD in the case's directory, marked, and report it
    local name=$1; shift
    wanted "$name" || return 0
    mkdir -p "$WORK/$name"
    [ "$1" = lc ] && set -- "$LC" "${@:2}"
    (cd "$WORK/$name" && ABUSE_CASE=$name "$@" >"$WORK/$name/stdout" 2>"$WORK/$name/stderr")
    report "$name" $?
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
    for m in "${MOUNTS[@]}"; do umount "$m" 2>/dev/null; done
    [ -n "${KEEP:-}" ] && echo "kept $WORK" || rm -rf "$WORK"
}
trap cleanup EXIT

# A results file with one trial and an external redis-server with a password, for the cases below.
(cd "$WORK/input" && lc matrix "${Q[@]}" --trials 2 --out good.csv >/dev/null 2>&1)
HIST=$(ls "$WORK"/input/good.histories/*.gz | head -1)
RS=$("$PY" -c "from lockcompare.infra.server import redis_protocol_binary; print(redis_protocol_binary())")
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
    wait "$BG_PID"; rc=$?
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

echo "== summary: $CASES cases, $TOTAL_TB tracebacks, $TOTAL_LEFT leftovers (processes + dirs + .part files), $TOTAL_DUP duplicate rows"
[ "$TOTAL_TB" = 0 ] && [ "$TOTAL_LEFT" = 0 ] && [ "$TOTAL_DUP" = 0 ]
