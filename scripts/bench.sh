#!/bin/sh
# The figures behind `make bench`, printed as a plain-text table:
#   1. demo steps/s: the 1-feature linear job, 1 ps + 2 workers (processes);
#   2. pull+push MB/s of 1M and 10M float32 (bench_pullpush vs a real ps);
#   3. the raw RPC ceiling for the same payloads (bench_rawgrpc) and the
#      dtrain/raw ratio;
#   4. wide-model training steps/s (1M features) through the real binary.
# Everything runs on loopback on free ports; every wait is bounded; every
# process started here is stopped on exit, Ctrl-C included.
#
# usage: DTRAIN_BIN=build/dtrain BUILD=build sh scripts/bench.sh
#   (make bench sets both and builds $BUILD/bench_* first).
#   BENCH_KEEP_TMP=1 keeps the logs in the temp dir it names;
#   BENCH_TRIALS=N sets the pull+push and raw runs per size (default 3);
#   BENCH_CONFIG=FILE replaces conf/linear.json as the jobs' base config.
# Exit status: 0 when every figure was measured, 1 when something failed to
# run (its line says FAILED and its log is shown on stderr).
set -u

cd "$(dirname "$0")/.." || exit 1

BUILD=${BUILD:-build}
BIN=${DTRAIN_BIN:-$BUILD/dtrain}
CONFIG=${BENCH_CONFIG:-conf/linear.json}

# Sizes and lengths: each run takes 2-10 s on a 2-core machine.
DEMO_STEPS=20000
PP_SMALL=1000000
PP_SMALL_ROUNDS=100
PP_LARGE=10000000
PP_LARGE_ROUNDS=12
# Pull+push and raw runs per size: the best is reported, with the median and
# range (on a shared 2-core VM one run can be half as fast as the next).
TRIALS=${BENCH_TRIALS:-3}
WIDE_FEATURES=1000000
WIDE_BATCH=8
WIDE_STEPS=200
# 1M features of x in [-1, 1): the demo's learning rate (0.05) diverges; the
# largest stable sgd rate is about 3/F.
WIDE_LR=1e-6

case "$TRIALS" in
    '' | *[!0-9]* | 0)
        echo "bench: BENCH_TRIALS must be a positive integer (got \"$TRIALS\")" >&2
        exit 1
        ;;
esac

for f in "$BIN" "$BUILD/bench_freeport" "$BUILD/bench_pullpush" "$BUILD/bench_rawgrpc"; do
    if [ ! -x "$f" ]; then
        echo "bench: $f missing; run make bench" >&2
        exit 1
    fi
done

TMP=$(mktemp -d "${TMPDIR:-/tmp}/dtrain-bench.XXXXXX") || exit 1
PIDS=""
FAILED=0

# ---- process helpers ---------------------------------------------------------

# Drops pid $1 from PIDS once reaped, so cleanup never signals a pid the
# system may have handed to someone else.
forget_pid() {
    _kept=""
    for _p in $PIDS; do [ "$_p" = "$1" ] || _kept="$_kept $_p"; done
    PIDS=$_kept
}

# Stops one process we started: SIGTERM, then SIGKILL after $2 seconds.
stop_pid() {
    _pid=$1
    _left=$(($2 * 10))
    kill -TERM "$_pid" 2>/dev/null
    while kill -0 "$_pid" 2>/dev/null && [ "$_left" -gt 0 ]; do
        sleep 0.1
        _left=$((_left - 1))
    done
    kill -KILL "$_pid" 2>/dev/null
    wait "$_pid" 2>/dev/null
    forget_pid "$_pid"
}

cleanup() {
    for p in $PIDS; do kill -TERM "$p" 2>/dev/null; done
    for p in $PIDS; do stop_pid "$p" 3; done
    PIDS=""
    if [ -n "${BENCH_KEEP_TMP:-}" ] && [ "${BENCH_KEEP_TMP}" != 0 ]; then
        echo "bench: logs kept in $TMP" >&2
    else
        rm -rf "$TMP"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Starts "$@" in the background with its output in log $1; LAST_PID is its pid.
start_bg() {
    _log=$1
    shift
    "$@" >"$_log" 2>&1 &
    LAST_PID=$!
    PIDS="$PIDS $LAST_PID"
}

# Waits up to $2 seconds for pid $1 to exit. Sets STATUS to its exit status,
# or to "timeout" after stopping it.
wait_pid() {
    _left=$(($2 * 10))
    while kill -0 "$1" 2>/dev/null && [ "$_left" -gt 0 ]; do
        sleep 0.1
        _left=$((_left - 1))
    done
    if kill -0 "$1" 2>/dev/null; then
        stop_pid "$1" 3
        STATUS=timeout
    else
        wait "$1"
        STATUS=$?
        forget_pid "$1"
    fi
}

# Polls log $1 for the text $2 for up to $3 seconds, giving up as soon as
# pid $4 has exited. 0 when found.
wait_log() {
    _left=$(($3 * 10))
    while [ "$_left" -gt 0 ]; do
        grep -q -- "$2" "$1" 2>/dev/null && return 0
        kill -0 "$4" 2>/dev/null || break
        sleep 0.1
        _left=$((_left - 1))
    done
    grep -q -- "$2" "$1" 2>/dev/null
}

now_ms() {
    _t=$(date +%s%N 2>/dev/null)
    case "$_t" in
        *N|'') echo $(($(date +%s) * 1000)) ;;
        *) echo "${_t%??????}" ;;
    esac
}

# Writes a cluster file $1 with 1 ps and 2 workers on free ports (no worker
# listens; only the ps's port must stay free).
write_cluster() {
    _ports=$("$BUILD/bench_freeport" 3) || return 1
    set -- "$1" $_ports
    cat >"$1" <<EOF
{"cluster": {"ps": ["127.0.0.1:$2"], "worker": ["127.0.0.1:$3", "127.0.0.1:$4"]}}
EOF
}

# Starts a ps for cluster file $1 logging to $2 and waits until it serves;
# a port taken meanwhile gets one more try on new ports. PS_PID is its pid.
start_ps() {
    _cluster=$1
    _log=$2
    shift 2
    for _try in 1 2; do
        write_cluster "$_cluster" || return 1
        start_bg "$_log" "$BIN" --cluster "$_cluster" --job ps --task 0 "$@"
        PS_PID=$LAST_PID
        wait_log "$_log" ": serving" 15 "$PS_PID" && return 0
        stop_pid "$PS_PID" 3
    done
    return 1
}

# ---- output ------------------------------------------------------------------

row() {
    printf '%-30s %18s   %s\n' "$1" "$2" "$3"
}

# Marks a figure failed and shows the end of the log that says why.
failed() {
    FAILED=1
    row "$1" FAILED "$2"
    for _log in $3; do
        [ -f "$_log" ] || continue
        echo "---- $_log (last lines)" >&2
        tail -n 15 "$_log" >&2
    done
}

# Value of key=VALUE in a line.
field() {
    echo "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"
}

# From a chief's log: "G S" where G is the final global step and S the
# seconds from the chief's model start-up line ("initialized"; its first line
# if there is none) to the end of its training loop ("training done"), the
# final step coming from "job done at global_step G". Without those lines,
# the last progress line ("step N global_step G") gives both. Timestamps are
# hh:mm:ss.mmm; a run across midnight is unwrapped.
chief_rate() {
    awk '
        function secs(ts, a) { split(ts, a, ":"); return a[1] * 3600 + a[2] * 60 + a[3] }
        function after(word, i) { for (i = 1; i < NF; i++) if ($i == word) return $(i + 1); return "" }
        $3 ~ /^[0-9][0-9]:[0-9][0-9]:[0-9][0-9]/ {
            t = secs($3) + wrap
            if (seen && t < last) { wrap += 86400; t += 86400 }
            if (!seen) first = t
            last = t; seen = 1
            if (start == "" && / initialized /) start = t
            if (/: step [0-9]+ global_step [0-9]+ /) { g = after("global_step"); stop = t }
            if (/: training done /) done_t = t
            if (/ job done at global_step [0-9]+/) final_g = after("global_step")
        }
        END {
            if (start == "") start = first
            if (done_t != "" && final_g != "") { g = final_g; stop = done_t }
            if (stop == "" || stop <= start) exit 1
            printf "%d %.3f\n", g, stop - start
        }' "$1"
}

# Runs one whole job (ps, chief, worker 1) in dir $1 with --set flags $3...;
# the chief gets $2 seconds. JOB_SECS is the whole job's wall time.
run_job() {
    _dir=$1
    _budget=$2
    shift 2
    JOB_ERR=""
    mkdir -p "$_dir"
    _t0=$(now_ms)
    start_ps "$_dir/cluster.json" "$_dir/ps.log" --config "$CONFIG" --log-dir "$_dir/logs" "$@" ||
        return 1
    _ps=$PS_PID
    start_bg "$_dir/worker1.log" "$BIN" --cluster "$_dir/cluster.json" --job worker --task 1 \
        --config "$CONFIG" --log-dir "$_dir/logs" "$@"
    _w1=$LAST_PID
    start_bg "$_dir/chief.log" "$BIN" --cluster "$_dir/cluster.json" --job worker --task 0 \
        --config "$CONFIG" --log-dir "$_dir/logs" "$@"
    _chief=$LAST_PID
    wait_pid "$_chief" "$_budget"
    _rc_chief=$STATUS
    wait_pid "$_w1" 15
    _rc_w1=$STATUS
    wait_pid "$_ps" 15
    _rc_ps=$STATUS
    JOB_SECS=$(awk -v a="$_t0" -v b="$(now_ms)" 'BEGIN { printf "%.1f", (b - a) / 1000 }')
    [ "$_rc_chief" = 0 ] && [ "$_rc_w1" = 0 ] && [ "$_rc_ps" = 0 ] && return 0
    JOB_ERR="exit status chief $_rc_chief, worker 1 $_rc_w1, ps $_rc_ps"
    return 1
}

# ---- the figures ------------------------------------------------------------

cpu=$(sed -n 's/^model name[[:space:]]*:[[:space:]]*//p' /proc/cpuinfo 2>/dev/null | head -n 1)
mem=$(awk '/^MemTotal:/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo 2>/dev/null)
echo "dtrain bench, $(date '+%Y-%m-%d %H:%M %Z')"
load=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)
echo "machine: $(nproc 2>/dev/null || echo '?') cores (nproc), ${cpu:-unknown CPU}, ${mem:-unknown} RAM; load average ${load:-?} at start"
echo "binary: $BIN; job base config: $CONFIG"
echo "MB = 10^6 bytes; payload = tensor bytes pulled + pushed (or sent + received)"
echo
row figure value parameters
row ------ ----- ----------

# 1. Demo steps/s.
d=$TMP/demo
if run_job "$d" 90 --set max_steps=$DEMO_STEPS --set log_steps=1000; then
    if r=$(chief_rate "$d/chief.log"); then
        set -- $r
        rate=$(awk -v g="$1" -v s="$2" 'BEGIN { printf "%.0f", g / s }')
        row "demo training" "$rate steps/s" "linear F=1 B=10 sgd, 1 ps + 2 worker processes, global_step $1 in $2 s (chief log: model init to end of its training loop; whole job with start-up ${JOB_SECS} s)"
    else
        failed "demo training" "no progress lines in the chief's log" "$d/chief.log"
    fi
else
    failed "demo training" "${JOB_ERR:-ps did not start}" "$d/ps.log $d/chief.log $d/worker1.log"
fi

# 2 and 3. Pull+push against a real ps, then the raw ceiling, per size.
# Trials of the two alternate, so a busy spell of the machine hits both.

# One bench_pullpush run of $1 floats, $2 rounds, in dir $3 against a fresh
# ps. VAL is its MB/s; on failure ERR says why and ERR_LOGS where to look.
pullpush_once() {
    mkdir -p "$3"
    VAL=""
    ERR_LOGS="$3/err $3/ps.log"
    if ! start_ps "$3/cluster.json" "$3/ps.log"; then
        ERR="ps did not start"
        return 1
    fi
    if ! timeout -k 5 150 "$BUILD/bench_pullpush" --cluster "$3/cluster.json" --floats "$1" \
        --rounds "$2" >"$3/out" 2>"$3/err"; then
        ERR="bench_pullpush failed"
        stop_pid "$PS_PID" 3
        return 1
    fi
    # The bench told the ps the job is done: it exits by itself.
    wait_pid "$PS_PID" 15
    if [ "$STATUS" != 0 ]; then
        ERR="ps exit status $STATUS after the bench"
        return 1
    fi
    VAL=$(field "$(cat "$3/out")" mb_per_s)
}

# One bench_rawgrpc run: $1 floats, $2 rounds, clients as $3, dir $4.
raw_once() {
    mkdir -p "$4"
    VAL=""
    ERR_LOGS="$4/raw-$3.err"
    if ! port=$("$BUILD/bench_freeport" 1) ||
        ! timeout -k 5 150 "$BUILD/bench_rawgrpc" --addr "127.0.0.1:$port" --mode echo \
            --clients-as "$3" --floats "$1" --rounds "$2" >"$4/raw-$3.out" 2>"$4/raw-$3.err"; then
        ERR="bench_rawgrpc failed"
        return 1
    fi
    VAL=$(field "$(cat "$4/raw-$3.out")" mb_per_s)
}

# The largest of the numbers in $1: other load on the machine only ever
# slows a run down, so the best run is the closest to the machine's figure.
best() {
    echo $1 | tr ' ' '\n' | sort -n | tail -n 1
}

# "best of K; median M; range lo-hi" for the numbers in $1.
summary() {
    echo $1 | tr ' ' '\n' | sort -n | awk '
        { v[NR] = $1 }
        END { printf "best of %d; median %s; range %s-%s", NR, v[int((NR + 1) / 2)], v[1], v[NR] }'
}

for label in 1M 10M; do
    if [ $label = 1M ]; then n=$PP_SMALL rounds=$PP_SMALL_ROUNDS; else n=$PP_LARGE rounds=$PP_LARGE_ROUNDS; fi
    pp_vals="" raw_vals="" ok=1 trial=1
    while [ $trial -le "$TRIALS" ] && [ $ok = 1 ]; do
        d=$TMP/$label-$trial
        if pullpush_once "$n" "$rounds" "$d"; then
            pp_vals="$pp_vals $VAL"
        else
            failed "pull+push $label floats" "$ERR" "$ERR_LOGS"
            ok=0
        fi
        if raw_once "$n" "$rounds" processes "$d"; then
            raw_vals="$raw_vals $VAL"
        else
            failed "raw rpc $label floats" "$ERR" "$ERR_LOGS"
            ok=0
        fi
        trial=$((trial + 1))
    done
    [ $ok = 1 ] || continue
    payload="2 x $n x 4 B per round per worker"
    pp=$(best "$pp_vals")
    rps=$(awk -v m="$pp" -v n="$n" 'BEGIN { printf "%.1f", m * 1e6 / (8 * n) }')
    row "pull+push $label floats" "$pp MB/s" "$(summary "$pp_vals"); $rps rounds/s in all; 1 ps + 2 worker processes, $rounds rounds each, $payload"
    raw=$(best "$raw_vals")
    row "raw rpc $label floats" "$raw MB/s" "$(summary "$raw_vals"); echo server (2 pollers) + 2 client processes, $rounds rounds each, N*4 B each way per call"
    ratio=$(awk -v a="$pp" -v b="$raw" 'BEGIN { printf "%.2f", a / b }')
    row "dtrain/raw $label floats" "$ratio" "best pull+push over best raw"
    if raw_once "$n" "$rounds" threads "$TMP/$label-threads"; then
        row "raw rpc $label, client threads" "$VAL MB/s" "1 run; the raw run with the 2 clients as threads of the server's process"
    else
        failed "raw rpc $label, client threads" "$ERR" "$ERR_LOGS"
    fi
done

# 4. Wide-model training through the real binary.
d=$TMP/wide
if run_job "$d" 120 --set data=wide --set features=$WIDE_FEATURES --set batch_size=$WIDE_BATCH \
    --set learning_rate=$WIDE_LR --set examples=100000 --set max_steps=$WIDE_STEPS \
    --set log_steps=20; then
    if r=$(chief_rate "$d/chief.log"); then
        set -- $r
        rate=$(awk -v g="$1" -v s="$2" 'BEGIN { printf "%.1f", g / s }')
        row "wide training" "$rate steps/s" "linear F=$WIDE_FEATURES B=$WIDE_BATCH sgd lr $WIDE_LR, data=wide, 1 ps + 2 worker processes, global_step $1 in $2 s (chief log; whole job ${JOB_SECS} s)"
    else
        failed "wide training" "no progress lines in the chief's log" "$d/chief.log"
    fi
else
    failed "wide training" "${JOB_ERR:-ps did not start}" "$d/ps.log $d/chief.log $d/worker1.log"
fi

echo
echo "load average $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null) at the end"
exit $FAILED
