#!/bin/sh
# The tiny linear model (the demo's job: sgd 0.05, batch 10) through the
# library: examples/linear.py (the Python module over libdtrain) and
# build/example_linear (the C API), against the dtrain binary, each with
# every role its own program (1 ps + the chief). Each run: the job's
# steps/s over a window of the chief's training (global_step from
# `dtrain status --json` before and after, after a warm-up); the programs
# alternate, BENCH_TRIALS times (3), and each row gives the median and the
# range. Then each program's median over the binary's (goal for Python:
# >= 0.8).
#
# usage: DTRAIN_BIN=build/dtrain [BUILD=build] [BENCH_TRIALS=3]
#        [PY_BENCH_SECS=10] sh scripts/bench_python.sh
# Loopback only, free ports, every process started here stopped on exit.
set -u
BIN=${DTRAIN_BIN:-build/dtrain}
BUILD=${BUILD:-build}
TRIALS=${BENCH_TRIALS:-3}
SECS=${PY_BENCH_SECS:-10}
PY=/usr/bin/python3
TMP=$(mktemp -d "${TMPDIR:-/tmp}/bench_python.XXXXXX")
PIDS=""
cleanup() {
    for p in $PIDS; do kill "$p" 2>/dev/null; done
    wait 2>/dev/null
    [ -n "${BENCH_KEEP_TMP:-}" ] && echo "bench_python: logs in $TMP" >&2 || rm -rf "$TMP"
}
trap cleanup EXIT INT TERM
cd "$(dirname "$0")/.." || exit 1
EXAMPLE=$(cd "$BUILD" 2>/dev/null && pwd)/example_linear
[ -x "$EXAMPLE" ] || { echo "bench_python: $EXAMPLE is not built (make)" >&2; exit 1; }

free_port() {
    $PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

step_of() { # cluster file -> global_step of ps 0
    "$BIN" status --cluster "$1" --json 2>/dev/null |
        $PY -c 'import json,sys; d=json.load(sys.stdin); print(d.get("global_step", d.get("ps",[{}])[0].get("global_step",0)) if isinstance(d,dict) else 0)' 2>/dev/null || echo 0
}

# run NAME TRIAL: one job of that program; its steps/s into $TMP/NAME.rates
run() {
    name=$1 trial=$2
    d="$TMP/$name-$trial"
    mkdir -p "$d"
    p1=$(free_port) p2=$(free_port)
    echo "{\"cluster\": {\"ps\": [\"127.0.0.1:$p1\"], \"worker\": [\"127.0.0.1:$p2\"]}}" >"$d/c.json"
    case $name in
    binary) set -- "$BIN" ;;
    c) set -- "$EXAMPLE" ;;
    python) set -- $PY examples/linear.py ;;
    esac
    sets="--set max_steps=100000000 --set save_model_secs=6000 --set log_steps=100000"
    # shellcheck disable=SC2086
    "$@" --cluster "$d/c.json" --job-name ps --task-index 0 --log-dir "$d/logs" $sets \
        >"$d/ps.log" 2>&1 &
    ps=$!
    # shellcheck disable=SC2086
    "$@" --cluster "$d/c.json" --job-name worker --task-index 0 --log-dir "$d/logs" $sets \
        >"$d/chief.log" 2>&1 &
    chief=$!
    PIDS="$PIDS $ps $chief"
    sleep 3 # start-up and warm-up: the window is steady training
    s0=$(step_of "$d/c.json")
    t0=$(date +%s%N)
    sleep "$SECS"
    s1=$(step_of "$d/c.json")
    t1=$(date +%s%N)
    kill $chief $ps 2>/dev/null
    wait $chief $ps 2>/dev/null
    awk -v a="$s0" -v b="$s1" -v t0="$t0" -v t1="$t1" \
        'BEGIN {printf "%.0f\n", (b - a) / ((t1 - t0) / 1e9)}' >>"$TMP/$name.rates"
}

# NAME -> "median min max" of its rates
stats() {
    sort -n "$TMP/$1.rates" | awk '{v[NR] = $1} END {printf "%d %d %d", v[int((NR + 1) / 2)], v[1], v[NR]}'
}

t=1
while [ "$t" -le "$TRIALS" ]; do
    for name in binary python c; do run "$name" "$t"; done
    t=$((t + 1))
done
printf '%-34s %10s %18s\n' "tiny linear, 1 ps + chief ($SECS s)" "steps/s" "range ($TRIALS runs)"
for name in binary python c; do
    set -- $(stats "$name")
    label=$name
    [ "$name" = binary ] && label="dtrain binary"
    [ "$name" = python ] && label="examples/linear.py (Python)"
    [ "$name" = c ] && label="example_linear (C API)"
    printf '%-34s %10s %18s\n' "$label" "$1" "$2-$3"
done
b=$(stats binary | cut -d' ' -f1)
for name in python c; do
    m=$(stats "$name" | cut -d' ' -f1)
    awk -v m="$m" -v b="$b" -v n="$name" \
        'BEGIN {printf "%s / binary steps/s: %.2f%s\n", n, (b > 0 ? m / b : 0), (n == "python" ? " (goal >= 0.8)" : "")}'
done
