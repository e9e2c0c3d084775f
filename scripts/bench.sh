#!/bin/sh
# The figures behind `make bench`, printed as a plain-text table:
#   1. demo steps/s: the 1-feature linear job, 1 ps + 2 workers (processes),
#      then the same job async and sync (mode=sync) at equal max_steps;
#   2. pull+push MB/s of 1M and 10M float32 (bench_pullpush vs a real ps),
#      one round trip per step (fuse_push_pull), with 1 and 2 workers, and
#      once as a pull then a push;
#   3. the raw RPC ceiling for the same payloads (bench_rawgrpc echo-ref, the
#      reply the request's own slices and read in place, with 1 and 2
#      clients) and the dtrain/raw ratios; the copying echo beside it;
#   4. pull+push MB/s of 10M float32 split across 1, 2 and 3 ps tasks (one
#      machine: the cost of the fan-out, not scaling);
#   5. wide-model training (1M features) through the real binary: steps/s
#      and MB/s of payload against the raw echo of 1M floats, and the
#      same model in one process without RPC (bench_compute);
#   5b. peak memory (VmHWM, as each role logs it) of a ps and its workers in
#      a 4M-feature Adam job with checkpoints every second, against
#      1.1 x (variables + slots) + 50 MB and, for a worker, 1.1 x (model +
#      gradient + its data) + 50 MB;
#   6. Fashion-MNIST MLP examples/s with 1 and 2 workers through the real
#      binary, against the single-process compute-only rate (bench_compute);
#      skipped, with a note, when the data set is not installed;
#   7. the cost of mutual TLS: the demo job and pull+push of 1M float32,
#      each with and without TLS, alternating, and TLS over plaintext, with
#      certificates made here by scripts/make_certs.sh (127.0.0.1, localhost);
#   8. the chief's histogram of one 10M-float variable (bench_histogram);
#   1f. the cost of /metrics: the tiny model's steps/s with every role
#      serving --metrics-port and scraped every second, against the same
#      job without, runs alternating, best of each;
#   9. sparse logistic regression over a table of 2^28 rows on Criteo-layout
#      data (gen-criteo), 1 worker (not pipelined and pipelined), 2 workers
#      and 1 worker with L1: steps/s, examples/s,
#      bytes a step, ps peak RSS, held-out log loss against the generating
#      model's (bench_sparse_eval); a dense 2^20 model's steps beside it.
# Everything runs on loopback on free ports; every wait is bounded; every
# process started here is stopped on exit, Ctrl-C included.
#
# usage: DTRAIN_BIN=build/dtrain BUILD=build sh scripts/bench.sh
#   (make bench sets both and builds $BUILD/bench_* first).
#   BENCH_KEEP_TMP=1 keeps the logs in the temp dir it names;
#   BENCH_TRIALS=N sets the pull+push and raw runs per size (default 3);
#   BENCH_COPY_TRIALS=N the copying echo's runs per size (default 1, at most
#      BENCH_TRIALS);
#   BENCH_PS_TRIALS=N the runs per ps count of figure 4 (default 1);
#   BENCH_CONFIG=FILE replaces conf/linear.json as the jobs' base config;
#   BENCH_TLS_TRIALS=N the runs per figure and security of figure 7
#      (default 1);
#   BENCH_ONLY=sparse runs figure 9 alone; BENCH_ONLY=tiny the tiny model
#      against the 16 B echoes (figure 1d), pipelined (1e) and with /metrics
#      scraped (1f) alone; BENCH_ONLY=metrics figure 1f alone;
#   BENCH_METRICS_TRIALS=N the runs of each side of figure 1f (default 3).
#   BENCH_ONLY=flood every flood of test/h2flood.py, plaintext and mutual
#      TLS, against the job and a sink (scripts/bench_flood.sh, 12 minutes)
#      alone; BENCH_ONLY=cnn the PyTorch CNN on dtrain against one process
#      and torch.distributed.rpc (scripts/bench_cnn.sh, minutes: not in the
#      default run); BENCH_ONLY=python the tiny linear model through
#      examples/linear.py and the C API against the binary
#      (scripts/bench_python.sh).
#   BENCH_ONLY=firsttry five unscaled tabular sets, 1 ps + 2 workers, a
#      config naming only the model, files and label, against least
#      squares and logistic regression (bench/firsttry.py, 3 minutes).
#   BENCH_ONLY=summary figure 1g alone: the event file bytes an hour of the
#      tiny model at the default summary cadence (summary_secs), and at
#      summary_steps=10 (the default before it); BENCH_SUMMARY_SECS=N the
#      seconds each job runs (default 30; the figure is scaled to an hour).
# Exit status: 0 when every figure was measured, 1 when something failed to
# run (its line says FAILED and its log is shown on stderr).
set -u

cd "$(dirname "$0")/.." || exit 1

BUILD=${BUILD:-build}
BIN=${DTRAIN_BIN:-$BUILD/dtrain}
CONFIG=${BENCH_CONFIG:-conf/linear.json}

# Sizes and lengths: each run takes 2-10 s on a 2-core machine.
DEMO_STEPS=20000
# The tiny-model runs (one round trip per step against the 16-byte echo).
TINY_STEPS=10000
PP_SMALL=1000000
PP_SMALL_ROUNDS=100
PP_LARGE=10000000
PP_LARGE_ROUNDS=12
# Pull+push and raw runs per size: the best is reported, with the median and
# range (on a shared 2-core VM one run can be half as fast as the next).
TRIALS=${BENCH_TRIALS:-3}
# The copying echo (the reference before echo-ref, printed for comparison
# with older runs, no goal's reference): runs per size, at most TRIALS.
COPY_TRIALS=${BENCH_COPY_TRIALS:-1}
WIDE_FEATURES=1000000
WIDE_BATCH=8
WIDE_STEPS=200
# 1M features of x in [-1, 1): the demo's learning rate (0.05) diverges; the
# largest stable sgd rate is about 3/F.
WIDE_LR=1e-6
# The memory figure's job: 4M features with Adam (16 MB of variables, 32 MB
# of slots), long enough for a few checkpoints a second apart.
MEM_FEATURES=4000000
MEM_STEPS=60
# Async against sync: global steps of the demo job for each (sync makes both
# workers wait for each other, so each does about max_steps local steps).
MODE_STEPS=6000
# 10M float32 (40 MB) across 1..PS_MAX ps tasks: split when it is at least
# twice this, into min(ps tasks, 40 MB / this) slices, so into one per task.
PS_MAX=3
PS_PARTITION_MIN_BYTES=1048576
PS_TRIALS=${BENCH_PS_TRIALS:-1}
# Mutual TLS against plaintext: runs of each, alternating (1 by default, so
# the whole bench stays under 3 minutes; BENCH_TLS_TRIALS=3 for best-of-3).
TLS_TRIALS=${BENCH_TLS_TRIALS:-1}
ONLY=${BENCH_ONLY:-}
case "$ONLY" in
    '' | sparse | tiny | metrics | summary) ;;
    flood) exec sh "$(dirname "$0")/bench_flood.sh" ;;
    cnn) exec sh "$(dirname "$0")/bench_cnn.sh" ;;
    python) exec sh "$(dirname "$0")/bench_python.sh" ;;
    firsttry) exec /usr/bin/python3 "$(dirname "$0")/../bench/firsttry.py" --dtrain "$BIN" ;;
    *)
        echo "bench: BENCH_ONLY must be sparse, tiny, metrics, summary, flood, cnn, python, firsttry or unset (got \"$ONLY\")" >&2
        exit 1
        ;;
esac
# Fashion-MNIST: steps of the MLP job (batch 100) through the binary, and
# of the compute-only run.
# Sparse logistic (figure 9): Criteo-layout rows, a table of 2^28 rows.
SPARSE_TRAIN=300000
# The 2% goal's run: 1 worker, 1 epoch of this many rows (about 55 s on the
# 2-core machine, 35 of them reading the file); 0 skips it.
SPARSE_QUALITY_TRAIN=${BENCH_SPARSE_QUALITY_ROWS:-2000000}
SPARSE_EVAL=100000
SPARSE_BITS=28
SPARSE_EPOCHS=1
SPARSE_BATCH=256
SPARSE_L1=0.05
SPARSE_DENSE_STEPS=100
FASHION_CONFIG=conf/fashion_mlp.json
FASHION_DATA=/usr/share/datasets/fashion-mnist
FASHION_STEPS=600
FASHION_BATCH=100

# Event file bytes an hour (figure 1g): the seconds each job runs.
SUMMARY_RUN_SECS=${BENCH_SUMMARY_SECS:-30}

# The cost of /metrics (figure 1f): steps of each run, runs of each side.
METRICS_STEPS=30000
METRICS_TRIALS=${BENCH_METRICS_TRIALS:-3}

for _n in "BENCH_TRIALS=$TRIALS" "BENCH_PS_TRIALS=$PS_TRIALS" "BENCH_TLS_TRIALS=$TLS_TRIALS" \
    "BENCH_COPY_TRIALS=$COPY_TRIALS" "BENCH_METRICS_TRIALS=$METRICS_TRIALS"; do
    case "${_n#*=}" in
        '' | *[!0-9]* | 0)
            echo "bench: ${_n%%=*} must be a positive integer (got \"${_n#*=}\")" >&2
            exit 1
            ;;
    esac
done

for f in "$BIN" "$BUILD/bench_freeport" "$BUILD/bench_pullpush" "$BUILD/bench_rawgrpc" \
    "$BUILD/bench_compute" "$BUILD/bench_histogram" "$BUILD/bench_sparse_eval" "$BUILD/bench_metrics"; do
    if [ ! -x "$f" ]; then
        echo "bench: $f missing; run make bench" >&2
        exit 1
    fi
done

TMP=$(mktemp -d "${TMPDIR:-/tmp}/dtrain-bench.XXXXXX") || exit 1
PIDS=""
FAILED=0
# Set to a scripts/make_certs.sh dir, run_job and pullpush_once secure every
# connection with mutual TLS; empty: plaintext.
TLS_DIR=""

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

# The wall time of each piece of the bench, printed at the end, so a change
# of lengths can be weighed against what a piece costs. piece NAME ends the
# piece running (if any) and starts NAME.
PIECE_NAME="" PIECE_T0=0 PIECE_TIMES="" BENCH_T0=$(now_ms)
piece() {
    if [ -n "$PIECE_NAME" ]; then
        PIECE_TIMES="$PIECE_TIMES${PIECE_TIMES:+, }$PIECE_NAME $(awk -v a="$PIECE_T0" -v b="$(now_ms)" 'BEGIN { printf "%.1f", (b - a) / 1000 }')"
    fi
    PIECE_NAME=$1
    PIECE_T0=$(now_ms)
}

# Writes a cluster file $1 with $2 ps tasks (default 1) and $3 workers
# (default 2) on free ports (no worker listens; only the ps ports must stay
# free).
write_cluster() {
    _wc_nps=${2:-1}
    _wc_ports=$("$BUILD/bench_freeport" $((_wc_nps + ${3:-2}))) || return 1
    _wc_ps="" _wc_workers="" _wc_i=0
    for _wc_port in $_wc_ports; do
        if [ $_wc_i -lt "$_wc_nps" ]; then
            _wc_ps="$_wc_ps${_wc_ps:+, }\"127.0.0.1:$_wc_port\""
        else
            _wc_workers="$_wc_workers${_wc_workers:+, }\"127.0.0.1:$_wc_port\""
        fi
        _wc_i=$((_wc_i + 1))
    done
    echo "{\"cluster\": {\"ps\": [$_wc_ps], \"worker\": [$_wc_workers]}}" >"$1"
}

# Starts a ps for cluster file $1 logging to $2 and waits until it serves;
# a port taken meanwhile gets one more try on new ports. PS_PID is its pid.
# The cluster has CLUSTER_PS ps tasks (default 1; task N > 0 logs to $2
# with .N before .log, its pid in PS_PIDS with ps 0's) and CLUSTER_WORKERS
# workers (default 2).
start_ps() {
    _cluster=$1
    _log=$2
    shift 2
    _nps=${CLUSTER_PS:-1}
    for _try in 1 2; do
        write_cluster "$_cluster" "$_nps" "${CLUSTER_WORKERS:-2}" || return 1
        PS_PIDS="" _up=0 _t=0
        while [ $_t -lt "$_nps" ]; do
            _tlog=$_log
            [ $_t = 0 ] || _tlog=${_log%.log}.$_t.log
            start_bg "$_tlog" "$BIN" --cluster "$_cluster" --job ps --task $_t "$@"
            PS_PIDS="$PS_PIDS $LAST_PID"
            [ $_t = 0 ] && PS_PID=$LAST_PID
            wait_log "$_tlog" ": serving" 15 "$LAST_PID" && _up=$((_up + 1))
            _t=$((_t + 1))
        done
        [ $_up = "$_nps" ] && return 0
        for _p in $PS_PIDS; do stop_pid "$_p" 3; done
    done
    return 1
}

# The TLS flags of identity $1 ("ps-0", "chief", "worker-1": make_certs.sh's
# file names) when TLS_DIR is set, else nothing. Unquoted by the callers:
# the temp dir has no spaces unless TMPDIR does.
tls_flags() {
    [ -n "$TLS_DIR" ] || return 0
    echo "--tls-cert $TLS_DIR/$1.pem --tls-key $TLS_DIR/$1-key.pem --tls-ca $TLS_DIR/ca.pem"
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

# $1 / $2 printed with the printf format $3 (a rate, a ratio).
ratio() {
    awk -v a="$1" -v b="$2" -v f="$3" 'BEGIN { printf f, a / b }'
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

# Waits (15 s each) for the processes $3... of role $1, numbered from $2:
# their statuses go into JOB_ERR, and a non-zero one sets _ok (run_job's).
wait_rest() {
    _wr_role=$1
    _wr_i=$2
    shift 2
    for _wr_pid in "$@"; do
        wait_pid "$_wr_pid" 15
        JOB_ERR="$JOB_ERR, $_wr_role $_wr_i $STATUS"
        [ "$STATUS" = 0 ] || _ok=1
        _wr_i=$((_wr_i + 1))
    done
}

# Runs one whole job (ps, chief, workers 1..W-1) in dir $1 with job config
# $4 and --set flags $5...; W is $3; the chief gets $2 seconds. JOB_SECS is
# the whole job's wall time. Logs: ps.log, chief.log, worker<i>.log.
run_job() {
    _dir=$1
    _budget=$2
    _nw=$3
    _config=$4
    shift 4
    JOB_ERR=""
    mkdir -p "$_dir"
    _t0=$(now_ms)
    CLUSTER_WORKERS=$_nw
    # shellcheck disable=SC2046 # tls_flags is several words on purpose
    start_ps "$_dir/cluster.json" "$_dir/ps.log" --config "$_config" --log-dir "$_dir/logs" \
        $(tls_flags ps-0) "$@"
    _started=$?
    CLUSTER_WORKERS=2
    [ $_started = 0 ] || return 1
    _pss=$PS_PIDS
    _wpids=""
    _i=1
    while [ $_i -lt "$_nw" ]; do
        start_bg "$_dir/worker$_i.log" "$BIN" --cluster "$_dir/cluster.json" --job worker \
            --task $_i --config "$_config" --log-dir "$_dir/logs" $(tls_flags worker-$_i) "$@"
        _wpids="$_wpids $LAST_PID"
        _i=$((_i + 1))
    done
    start_bg "$_dir/chief.log" "$BIN" --cluster "$_dir/cluster.json" --job worker --task 0 \
        --config "$_config" --log-dir "$_dir/logs" $(tls_flags chief) "$@"
    _chief=$LAST_PID
    wait_pid "$_chief" "$_budget"
    JOB_ERR="exit status chief $STATUS"
    _ok=0
    [ "$STATUS" = 0 ] || _ok=1
    # shellcheck disable=SC2086 # the pid lists split into arguments
    wait_rest worker 1 $_wpids
    # shellcheck disable=SC2086
    wait_rest ps 0 $_pss
    JOB_SECS=$(awk -v a="$_t0" -v b="$(now_ms)" 'BEGIN { printf "%.1f", (b - a) / 1000 }')
    [ $_ok = 0 ] && JOB_ERR=""
    return $_ok
}

# The logs of a job in dir $1, for failed().
job_logs() {
    ls "$1"/ps*.log "$1"/chief.log "$1"/worker*.log 2>/dev/null | tr '\n' ' '
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

# A whole job's rate from its chief's log, after run_job in dir $1 returned
# $2 (0: ran). RATE_G and RATE_S are the global step and seconds; 0 when
# they could be read, else the figure $3 is marked failed.
job_rate() {
    if [ "$2" != 0 ]; then
        failed "$3" "${JOB_ERR:-ps did not start}" "$(job_logs "$1")"
        return 1
    fi
    if ! _r=$(chief_rate "$1/chief.log"); then
        failed "$3" "no progress lines in the chief's log" "$1/chief.log"
        return 1
    fi
    set -- $_r
    RATE_G=$1
    RATE_S=$2
}

# "peak RSS X MB ..." from log $1; "" when absent.
peak_of() {
    sed -n 's/.*: peak RSS \([0-9.]*\) MB.*/\1/p' "$1" 2>/dev/null | tail -n 1
}

# 1f. The tiny model with every role serving /metrics and scraped once a
# second, against the same job without; runs alternate (off, on, off, ...)
# so a busy spell of the machine hits both; the best of each is compared.
# The scraper (Python's urllib, one GET per role a second) finds each
# role's port in its log ("metrics: serving http://HOST:PORT/metrics").
metrics_figure() {
    piece metrics
    _mf_best_off="" _mf_best_on="" _mf_scrapes=0 _mf_t=1
    while [ $_mf_t -le "$METRICS_TRIALS" ]; do
        for _mf_side in off on; do
            _mf_d=$TMP/metrics-$_mf_side-$_mf_t
            mkdir -p "$_mf_d"
            _mf_flags=""
            if [ $_mf_side = on ]; then
                _mf_flags="--metrics-port 0"
                start_bg "$_mf_d/scraper.out" /usr/bin/python3 -c '
import glob, re, sys, time, urllib.request
d, n = sys.argv[1], 0
while True:
    for log in glob.glob(d + "/*.log"):
        m = re.search(r"metrics: serving http://[^ ]*:(\d+)/metrics", open(log, errors="replace").read())
        if not m:
            continue
        try:
            urllib.request.urlopen("http://127.0.0.1:%s/metrics" % m.group(1), timeout=1).read()
            n += 1
        except Exception:
            pass
    print(n, flush=True)
    time.sleep(1)
' "$_mf_d"
                _mf_scraper=$LAST_PID
            fi
            # shellcheck disable=SC2086 # the flags split into arguments
            run_job "$_mf_d" 120 1 "$CONFIG" --set max_steps=$METRICS_STEPS --set log_steps=5000 $_mf_flags
            _mf_rc=$?
            if [ $_mf_side = on ]; then
                stop_pid "$_mf_scraper" 3
                _mf_n=$(tail -n 1 "$_mf_d/scraper.out" 2>/dev/null)
                _mf_scrapes=$((_mf_scrapes + ${_mf_n:-0}))
            fi
            job_rate "$_mf_d" $_mf_rc "tiny model, metrics $_mf_side" || continue
            _mf_rate=$(ratio "$RATE_G" "$RATE_S" %.0f)
            eval "_mf_best=\${_mf_best_$_mf_side}"
            if [ -z "$_mf_best" ] || [ "$_mf_rate" -gt "$_mf_best" ]; then
                eval "_mf_best_$_mf_side=$_mf_rate"
            fi
            eval "_mf_runs_$_mf_side=\"\${_mf_runs_$_mf_side:-}\${_mf_runs_$_mf_side:+ }$_mf_rate\""
        done
        _mf_t=$((_mf_t + 1))
    done
    if [ -n "$_mf_best_off" ] && [ -n "$_mf_best_on" ]; then
        row "tiny model, metrics off" "$_mf_best_off steps/s" "demo job, 1 ps + 1 worker, $METRICS_STEPS steps, no --metrics-port; best of $METRICS_TRIALS (runs: ${_mf_runs_off:-})"
        row "tiny model, metrics scraped" "$_mf_best_on steps/s" "the same with --metrics-port on the ps and the worker, each scraped every second ($_mf_scrapes scrapes in all); best of $METRICS_TRIALS (runs: ${_mf_runs_on:-})"
        row "  scraped / off" "$(ratio "$_mf_best_on" "$_mf_best_off" %.3f)" "goal: >= 0.98 (metrics cost < 2%)"
    fi
    # The same cost where it is paid, free of the jobs' run-to-run spread:
    # the hooks of one step (ps and worker side) and one page's render.
    if _mf_out=$("$BUILD/bench_metrics" 2>"$TMP/bench_metrics.err"); then
        _mf_ns=$(field "$_mf_out" ns_per_step)
        row "metrics hooks a step" "$_mf_ns ns" "bench_metrics: a step's counters, histograms and clock reads on the ps and the worker side together, one thread ($(field "$_mf_out" ns_per_step_2threads) ns with two threads on the same histograms); against a tiny step of ${_mf_best_off:-?} steps/s: $(ratio "$_mf_ns" "$(ratio 1000000000 "${_mf_best_off:-1}" %.1f)" %.4f) of it"
        row "metrics render" "$(field "$_mf_out" render_us) us" "bench_metrics: one scrape of a worker's page ($(field "$_mf_out" page_bytes) bytes), once a second"
    else
        failed "metrics hooks a step" "bench_metrics failed" "$TMP/bench_metrics.err"
    fi
}

# 1g. Event file bytes an hour: the tiny model (the demo job, 1 ps + 1
# worker, max_steps past reach) runs SUMMARY_RUN_SECS seconds from the
# chief's "writing summaries to" line; the event file's size then, scaled
# to an hour. Once at the defaults (summary_secs 10: the first step, then
# every 10 s) and once at summary_steps=10 for the old default; goal:
# under 20 MB an hour at the defaults.
summary_once() {
    _so_d=$1
    shift
    mkdir -p "$_so_d"
    CLUSTER_WORKERS=1
    start_ps "$_so_d/cluster.json" "$_so_d/ps.log" --config "$CONFIG" --log-dir "$_so_d/logs" \
        --set max_steps=100000000000 "$@"
    _so_rc=$?
    CLUSTER_WORKERS=2
    [ $_so_rc = 0 ] || return 1
    _so_ps=$PS_PID
    start_bg "$_so_d/chief.log" "$BIN" --cluster "$_so_d/cluster.json" --job worker --task 0 \
        --config "$CONFIG" --log-dir "$_so_d/logs" --set max_steps=100000000000 \
        --set log_steps=100000 "$@"
    _so_chief=$LAST_PID
    if ! wait_log "$_so_d/chief.log" "writing summaries to" 30 "$_so_chief"; then
        stop_pid "$_so_chief" 3
        stop_pid "$_so_ps" 3
        return 1
    fi
    _so_t0=$(now_ms)
    sleep "$SUMMARY_RUN_SECS"
    _so_t1=$(now_ms)
    _so_bytes=$(cat "$_so_d"/logs/events.out.tfevents.* 2>/dev/null | wc -c)
    _so_alive=1
    kill -0 "$_so_chief" 2>/dev/null || _so_alive=0
    stop_pid "$_so_chief" 5
    stop_pid "$_so_ps" 5
    [ "$_so_alive" = 1 ] || return 1
    SO_MB_H=$(awk -v b="$_so_bytes" -v a="$_so_t0" -v c="$_so_t1" 'BEGIN { printf "%.2f", b / ((c - a) / 1000) * 3600 / 1e6 }')
    SO_BYTES=$_so_bytes
    SO_SECS=$(awk -v a="$_so_t0" -v c="$_so_t1" 'BEGIN { printf "%.1f", (c - a) / 1000 }')
    SO_STEP=$(sed -n 's/.*: step [0-9]* global_step \([0-9]*\) .*/\1/p' "$_so_d/chief.log" | tail -n 1)
}

summary_figure() {
    piece summary
    if summary_once "$TMP/summary-default"; then
        row "event files, defaults" "$SO_MB_H MB/h" "tiny model (demo job, 1 ps + 1 worker) at summary_secs 10: $SO_BYTES bytes in $SO_SECS s, scaled to an hour; goal: < 20 MB/h"
    else
        failed "event files, defaults" "the job did not run $SUMMARY_RUN_SECS s" "$(job_logs "$TMP/summary-default")"
    fi
    if summary_once "$TMP/summary-steps10" --set summary_steps=10; then
        row "event files, summary_steps=10" "$SO_MB_H MB/h" "the same at summary_steps=10 (the default before summary_secs): $SO_BYTES bytes in $SO_SECS s${SO_STEP:+ (global_step $SO_STEP at the last progress line)}"
    else
        failed "event files, summary_steps=10" "the job did not run $SUMMARY_RUN_SECS s" "$(job_logs "$TMP/summary-steps10")"
    fi
}

if [ "$ONLY" = summary ]; then
    summary_figure
    piece ""
    echo
    echo "load average $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null) at the end"
    echo "seconds per piece: $PIECE_TIMES"
    exit $FAILED
fi

if [ "$ONLY" = metrics ]; then
    metrics_figure
    piece ""
    echo
    echo "load average $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null) at the end"
    echo "seconds per piece: $PIECE_TIMES"
    exit $FAILED
fi

# BENCH_ONLY=sparse: figure 9 alone (the sections before it are skipped).
if [ "$ONLY" != sparse ]; then
# BENCH_ONLY=tiny: the tiny model against the 16 B echoes, and pipelined, alone.
if [ "$ONLY" != tiny ]; then

piece demo
# 1. Demo steps/s.
d=$TMP/demo
run_job "$d" 90 2 "$CONFIG" --set max_steps=$DEMO_STEPS --set log_steps=1000
if job_rate "$d" $? "demo training"; then
    rate=$(ratio "$RATE_G" "$RATE_S" %.0f)
    row "demo training" "$rate steps/s" "linear F=1 B=10 sgd, 1 ps + 2 worker processes, global_step $RATE_G in $RATE_S s (chief log: model init to end of its training loop; whole job with start-up ${JOB_SECS} s)"
fi

piece "async/sync"
# 1b. The same job async, then sync (both workers' gradients averaged into
# each global step), back to back at the same max_steps.
mode_rates=""
for mode in async sync; do
    d=$TMP/mode-$mode
    run_job "$d" 90 2 "$CONFIG" --set mode=$mode --set max_steps=$MODE_STEPS --set log_steps=1000
    if job_rate "$d" $? "demo $mode"; then
        rate=$(ratio "$RATE_G" "$RATE_S" %.0f)
        mode_rates="$mode_rates $rate"
        if [ $mode = async ]; then
            what="each push applied at once"
        else
            what="replicas_to_aggregate 2: each global step waits for both workers' gradients"
        fi
        row "demo $mode" "$rate steps/s" "mode=$mode, max_steps=$MODE_STEPS, otherwise the demo job; $what; global_step $RATE_G in $RATE_S s (chief log; whole job ${JOB_SECS} s)"
    fi
done
set -- $mode_rates
if [ $# = 2 ]; then
    row "sync/async" "$(ratio "$2" "$1" %.2f)" "global steps/s, sync over async"
fi
# 1c. Sync on 2 ps tasks (weight on one, bias on the other): each step's
# push goes to ps 1 and then to ps 0, which decides the step for both, and
# each pull asks ps 0 and then passes its decision on to ps 1.
d=$TMP/mode-sync-2ps
CLUSTER_PS=2
run_job "$d" 90 2 "$CONFIG" --set mode=sync --set max_steps=$MODE_STEPS --set log_steps=1000
_rc=$?
CLUSTER_PS=1
if job_rate "$d" $_rc "demo sync, 2 ps"; then
    row "demo sync, 2 ps" "$(ratio "$RATE_G" "$RATE_S" %.0f) steps/s" "as demo sync on 2 ps tasks: one decision per step for both shards (ps 0's), two round trips in a row per push and per pull; global_step $RATE_G in $RATE_S s"
fi

fi # BENCH_ONLY=tiny

piece "tiny+echo16"
# 1d. One round trip per step: the tiny demo model on 1 ps with 1 and 2
# workers, the push bringing back the next step's variables
# (fuse_push_pull, the default), and with 1 worker Pull then Push too,
# against the raw ceiling of one 16-byte echo call in flight per client.
for nw in 1 2; do
    fuses="true false"
    [ $nw = 1 ] || fuses=true
    for fuse in $fuses; do
        d=$TMP/fuse-$nw-$fuse
        run_job "$d" 90 "$nw" "$CONFIG" --set max_steps=$TINY_STEPS --set log_steps=1000 \
            --set fuse_push_pull=$fuse
        if job_rate "$d" $? "tiny model, $nw worker(s), fuse $fuse"; then
            rate=$(ratio "$RATE_G" "$RATE_S" %.0f)
            eval "TINY_${nw}_$fuse=$rate"
            row "tiny model, $nw worker, fuse $fuse" "$rate steps/s" "demo job, 1 ps + $nw worker process(es), fuse_push_pull=$fuse; global_step $RATE_G in $RATE_S s"
        fi
    done
    # The reference: the zero-copy echo (echo-ref); the copying echo
    # (echo), the reference before, beside it; and echo-ref with its
    # clients exec'd anew (exec), as dtrain's ps and workers are started:
    # a forked client has the server's libraries at the same addresses,
    # which on a shared core makes both sides' gRPC code cheaper.
    for mode in echo-ref echo exec; do
        ERR_LOGS="$TMP/echo16-$nw-$mode.err"
        as=processes
        rawmode=$mode
        if [ $mode = exec ]; then
            as="exec"
            rawmode=echo-ref
        fi
        if port=$("$BUILD/bench_freeport" 1) &&
            timeout -k 5 150 "$BUILD/bench_rawgrpc" --addr "127.0.0.1:$port" --mode $rawmode \
                --clients-as $as --clients "$nw" --floats 4 --rounds 20000 \
                >"$TMP/echo16-$nw-$mode.out" 2>"$ERR_LOGS"; then
            calls=$(field "$(cat "$TMP/echo16-$nw-$mode.out")" rounds_per_s)
            if [ $mode = echo ]; then
                row "raw echo 16 B, copying, $nw in flight" "$calls calls/s" "bench_rawgrpc echo (request and reply copied together), $nw client process(es): the reference before echo-ref"
                continue
            fi
            if [ $mode = exec ]; then
                row "raw echo 16 B, exec'd, $nw in flight" "$calls calls/s" "bench_rawgrpc echo-ref, $nw client process(es) each exec'd anew (--clients-as exec), not forked from the server: libraries at addresses of their own, as dtrain's processes have"
                eval "fused=\${TINY_${nw}_true:-}"
                [ -n "$fused" ] && row "tiny $nw worker / raw echo exec'd" "$(ratio "$fused" "$calls" %.2f)" "fused steps/s over the exec'd echo-ref's calls/s (not the goal's reference; see bench/README.md)"
                continue
            fi
            eval "ECHO16_$nw=$calls"
            row "raw echo 16 B, $nw in flight" "$calls calls/s" "bench_rawgrpc echo-ref (no copy on either side), $nw client process(es), one call in flight each, 16 B each way"
            eval "fused=\${TINY_${nw}_true:-}"
            [ -n "$fused" ] && row "tiny $nw worker / raw echo" "$(ratio "$fused" "$calls" %.2f)" "fused steps/s over raw echo-ref calls/s (goal: >= 0.9 with 1 worker)"
        else
            failed "raw echo 16 B ($mode), $nw in flight" "bench_rawgrpc failed" "$ERR_LOGS"
        fi
    done
done
if [ -n "${TINY_1_true:-}" ] && [ -n "${TINY_2_true:-}" ]; then
    row "tiny 2 workers / 1 worker" "$(ratio "$TINY_2_true" "$TINY_1_true" %.2f)" "fused (goal: >= 1.8)"
fi
piece pipelined
# 1e. pipeline_push: one worker computes its next gradient while its push
# is in flight, so compute and a call overlap as two calls in flight would.
# Also how well each fits: the demo's w* is 2.
# "w= loss=" of the last progress line of log $1.
fit_of() {
    awk '/ loss [0-9.e+-]+ / { for (i = 1; i < NF; i++) { if ($i == "loss") l = $(i + 1); if ($i ~ /^linear\/weight=/) w = substr($i, 15) } } END { printf "weight %s, loss %s", w, l }' "$1"
}
d=$TMP/pipeline-1
run_job "$d" 90 1 "$CONFIG" --set max_steps=$TINY_STEPS --set log_steps=1000 --set pipeline_push=true
if job_rate "$d" $? "tiny model, 1 worker, pipelined"; then
    rate=$(ratio "$RATE_G" "$RATE_S" %.0f)
    row "tiny model, 1 worker, pipelined" "$rate steps/s" "demo job, 1 ps + 1 worker, pipeline_push=true (one round trip per step); global_step $RATE_G in $RATE_S s; fit: $(fit_of "$d/chief.log") (not pipelined: $(fit_of "$TMP/fuse-1-true/chief.log"))"
    [ -n "${ECHO16_2:-}" ] && row "tiny pipelined / raw echo x2" "$(ratio "$rate" "$ECHO16_2" %.2f)" "pipelined steps/s over the raw echo with 2 calls in flight ($ECHO16_2 calls/s)"
fi
metrics_figure
summary_figure

if [ "$ONLY" != tiny ]; then

# 2 and 3. Pull+push against a real ps, then the raw ceiling, per size.
# Trials of the two alternate, so a busy spell of the machine hits both.

# One bench_pullpush run of $1 floats, $2 rounds, in dir $3 against a fresh
# ps, with PP_WORKERS workers (default 2), one round trip per round when
# PP_FUSE is 1 (default 0: a pull, then a push). VAL is its MB/s; on
# failure ERR says why and ERR_LOGS where to look.
pullpush_once() {
    mkdir -p "$3"
    VAL=""
    ERR_LOGS="$3/err $3/ps.log"
    # The ps sizes its message cap from its job's model; this variable is
    # not one: room for it.
    # shellcheck disable=SC2046
    if ! start_ps "$3/cluster.json" "$3/ps.log" --max-message-mb $(($1 * 4 / 1048576 + 2)) \
        $(tls_flags ps-0); then
        ERR="ps did not start"
        return 1
    fi
    if ! timeout -k 5 150 "$BUILD/bench_pullpush" --cluster "$3/cluster.json" --floats "$1" \
        --rounds "$2" --workers "${PP_WORKERS:-2}" --fuse "${PP_FUSE:-0}" \
        ${TLS_DIR:+--tls-dir "$TLS_DIR"} >"$3/out" 2>"$3/err"; then
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

# One bench_rawgrpc run: $1 floats, $2 rounds, $3 client processes, dir $4,
# mode $5 (echo-ref, the reference: no copy on either side; echo: copied).
raw_once() {
    mkdir -p "$4"
    VAL=""
    ERR_LOGS="$4/raw-$3-$5.err"
    if ! port=$("$BUILD/bench_freeport" 1) ||
        ! timeout -k 5 150 "$BUILD/bench_rawgrpc" --addr "127.0.0.1:$port" --mode "$5" \
            --clients-as processes --clients "$3" --floats "$1" --rounds "$2" \
            >"$4/raw-$3-$5.out" 2>"$ERR_LOGS"; then
        ERR="bench_rawgrpc failed"
        return 1
    fi
    VAL=$(field "$(cat "$4/raw-$3-$5.out")" mb_per_s)
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
    piece "pull+push/raw $label"
    if [ $label = 1M ]; then n=$PP_SMALL rounds=$PP_SMALL_ROUNDS; else n=$PP_LARGE rounds=$PP_LARGE_ROUNDS; fi
    payload="2 x $n x 4 B per round per worker"
    for nw in 1 2; do
        pp_vals="" raw_vals="" copy_vals="" ok=1 trial=1
        while [ $trial -le "$TRIALS" ] && [ $ok = 1 ]; do
            d=$TMP/$label-$nw-$trial
            if PP_WORKERS=$nw PP_FUSE=1 pullpush_once "$n" "$rounds" "$d"; then
                pp_vals="$pp_vals $VAL"
            else
                failed "pull+push $label, $nw worker(s)" "$ERR" "$ERR_LOGS"
                ok=0
            fi
            if raw_once "$n" "$rounds" $nw "$d" echo-ref; then
                raw_vals="$raw_vals $VAL"
            else
                failed "raw echo $label, $nw client(s)" "$ERR" "$ERR_LOGS"
                ok=0
            fi
            if [ $trial -gt "$COPY_TRIALS" ]; then
                : # the copying echo is no goal's reference: fewer runs
            elif raw_once "$n" "$rounds" $nw "$d" echo; then
                copy_vals="$copy_vals $VAL"
            else
                failed "raw echo $label, copying, $nw client(s)" "$ERR" "$ERR_LOGS"
                ok=0
            fi
            trial=$((trial + 1))
        done
        [ $ok = 1 ] || continue
        pp=$(best "$pp_vals")
        raw=$(best "$raw_vals")
        eval "RAW_${label}_$nw=$raw"
        if [ $nw = 1 ]; then w="1 worker"; else w="$nw workers"; fi
        rps=$(awk -v m="$pp" -v n="$n" 'BEGIN { printf "%.1f", m * 1e6 / (8 * n) }')
        row "pull+push $label, $w" "$pp MB/s" "$(summary "$pp_vals"); $rps rounds/s in all; one round trip each (a push whose reply brings the values back: fuse_push_pull); 1 ps + $nw worker process(es), $rounds rounds each, $payload"
        row "raw echo $label, $nw client(s)" "$raw MB/s" "$(summary "$raw_vals"); echo-ref server (2 pollers; the reply the request's slices, no copy) + $nw client process(es) reading replies in place, $rounds rounds each, N*4 B each way per call"
        copy=$(best "$copy_vals")
        row "raw echo $label, copying, $nw client(s)" "$copy MB/s" "$(summary "$copy_vals"); echo (request and reply copied together): the reference before echo-ref; dtrain over it $(ratio "$pp" "$copy" %.2f)"
        row "dtrain/raw $label, $w" "$(ratio "$pp" "$raw" %.2f)" "best pull+push over best raw echo-ref (goal: >= 0.85)"
    done
    # The same as a pull then a push (two round trips), once, at 1M.
    [ $label = 1M ] || continue
    if PP_WORKERS=2 PP_FUSE=0 pullpush_once "$n" "$rounds" "$TMP/$label-separate"; then
        row "pull then push $label" "$VAL MB/s" "1 run; 2 workers, a Pull and then a Push per round (fuse_push_pull=false), $payload"
    else
        failed "pull then push $label" "$ERR" "$ERR_LOGS"
    fi
done

# 4. 10M floats split across 1..PS_MAX ps tasks, which bench_pullpush
# starts itself (one process per task). Trials go round the ps counts, so a
# busy spell hits all of them. Each ps gets 5 s to exit by itself after the
# job (it exits at once) and is then killed; bench_pullpush counts those that
# exited (ps_exited).

# One run on $1 ps tasks in dir $2 (one retry on new ports when a ps could
# not start). VAL is MB/s, UNITS the slices, EXITED the ps tasks that exited
# by themselves; on failure ERR and ERR_LOGS.
pullpush_split_once() {
    mkdir -p "$2"
    VAL=""
    ERR_LOGS="$2/err"
    for _try in 1 2; do
        write_cluster "$2/cluster.json" "$1" 2 || break
        if timeout -k 5 150 "$BUILD/bench_pullpush" --cluster "$2/cluster.json" \
            --floats "$PP_LARGE" --rounds "$PP_LARGE_ROUNDS" \
            --partition-min-bytes "$PS_PARTITION_MIN_BYTES" --placement greedy \
            --dtrain "$BIN" --ps-log-dir "$2" --ps-exit-secs 5 >"$2/out" 2>"$2/err"; then
            _out=$(cat "$2/out")
            VAL=$(field "$_out" mb_per_s)
            UNITS=$(field "$_out" units)
            EXITED=$(field "$_out" ps_exited)
            return 0
        fi
        grep -q "before serving" "$2/err" || break
    done
    ERR="bench_pullpush failed"
    ERR_LOGS="$2/err $(ls "$2"/ps*.log 2>/dev/null | tr '\n' ' ')"
    return 1
}

piece "split ps"
split_ok=1
trial=1
while [ $trial -le "$PS_TRIALS" ] && [ $split_ok = 1 ]; do
    nps=1
    while [ $nps -le $PS_MAX ]; do
        if pullpush_split_once $nps "$TMP/split-$nps-$trial"; then
            eval "split_vals_$nps=\"\${split_vals_$nps:-} $VAL\""
            eval "split_units_$nps=$UNITS"
            eval "split_exited_$nps=\$((\${split_exited_$nps:-0} + ${EXITED:-0}))"
        else
            failed "pull+push 10M floats, $nps ps" "$ERR" "$ERR_LOGS"
            split_ok=0
            break
        fi
        nps=$((nps + 1))
    done
    trial=$((trial + 1))
done
if [ $split_ok = 1 ]; then
    one_ps=""
    nps=1
    while [ $nps -le $PS_MAX ]; do
        eval "vals=\$split_vals_$nps units=\$split_units_$nps exited=\$split_exited_$nps"
        pp=$(best "$vals")
        [ -n "$one_ps" ] || one_ps=$pp
        rel=$(ratio "$pp" "$one_ps" %.2f)
        row "pull+push 10M floats, $nps ps" "$pp MB/s" "$(summary "$vals"); $rel x the 1-ps run; variable in $units slice(s), one per ps task (partition_min_bytes $PS_PARTITION_MIN_BYTES, greedy); 2 worker processes, $PP_LARGE_ROUNDS rounds each; $nps ps process(es) started by bench_pullpush, $exited of $((nps * PS_TRIALS)) exited by themselves within 5 s of the end, the rest killed then"
        nps=$((nps + 1))
    done
fi

piece wide
# 5. Wide-model training through the real binary: steps/s, and the payload
# (each step pulls the 1M-float model and pushes its gradient) against the
# raw echo of 1M floats with as many clients as workers; then the same
# model in one process, which bounds what any RPC could reach.
d=$TMP/wide
run_job "$d" 120 2 "$CONFIG" --set data=wide --set features=$WIDE_FEATURES --set batch_size=$WIDE_BATCH \
    --set learning_rate=$WIDE_LR --set examples=100000 --set max_steps=$WIDE_STEPS \
    --set log_steps=20
if job_rate "$d" $? "wide training"; then
    wide_rate=$(ratio "$RATE_G" "$RATE_S" %.1f)
    row "wide training" "$wide_rate steps/s" "linear F=$WIDE_FEATURES B=$WIDE_BATCH sgd lr $WIDE_LR, data=wide, 1 ps + 2 worker processes, global_step $RATE_G in $RATE_S s (chief log; whole job ${JOB_SECS} s)"
    wide_mb=$(awk -v r="$wide_rate" -v f=$WIDE_FEATURES 'BEGIN { printf "%.1f", r * 2 * f * 4 / 1e6 }')
    row "wide training payload" "$wide_mb MB/s" "steps/s x 2 x $WIDE_FEATURES x 4 B (the model pulled, its gradient pushed)"
    if [ -n "${RAW_1M_2:-}" ] && [ "$WIDE_FEATURES" = "$PP_SMALL" ]; then
        row "wide/raw echo" "$(ratio "$wide_mb" "$RAW_1M_2" %.2f)" "wide payload over the raw echo of 1M floats, 2 clients ($RAW_1M_2 MB/s; goal: >= 0.85)"
    fi
fi
piece "wide compute"
d=$TMP/wide-compute
mkdir -p "$d"
if timeout -k 5 120 "$BUILD/bench_compute" --config "$CONFIG" --set data=wide \
    --set features=$WIDE_FEATURES --set batch_size=$WIDE_BATCH --set learning_rate=$WIDE_LR \
    --set examples=100000 --steps 40 >"$d/out" 2>"$d/err"; then
    out=$(cat "$d/out")
    steps=$(field "$out" steps_per_s)
    row "wide, compute only" "$steps steps/s" "the same model in one process, no RPC (bench_compute): 40 steps of next batch + loss and gradient + sgd; $(field "$out" grad_share) of the time in loss+gradient, the rest making the batch; 2 such workers could move at most $(awk -v r="$steps" -v f=$WIDE_FEATURES 'BEGIN { printf "%.0f", 2 * r * 2 * f * 4 / 1e6 }') MB/s"
else
    failed "wide, compute only" "bench_compute failed" "$d/err"
fi

piece memory
# 5b. Peak memory of each role in the 4M-feature Adam job (16 MB of
# variables, 32 MB of slots) with 2 workers pushing and checkpoints every
# second, as each role logs its VmHWM at its end.
d=$TMP/memory
run_job "$d" 120 2 "$CONFIG" --set data=wide --set features=$MEM_FEATURES --set batch_size=$WIDE_BATCH \
    --set optimizer=adam --set learning_rate=$WIDE_LR --set examples=2000 \
    --set max_steps=$MEM_STEPS --set save_model_secs=1 --set log_steps=20
mem_rc=$?
if [ $mem_rc != 0 ]; then
    failed "ps peak memory" "${JOB_ERR:-ps did not start}" "$(job_logs "$d")"
else
    ps_peak=$(peak_of "$d/ps.log")
    model=$(sed -n 's/.*variables and slots \([0-9.]*\) MB.*/\1/p' "$d/ps.log" | tail -n 1)
    w_peak=$(peak_of "$d/worker1.log")
    c_peak=$(peak_of "$d/chief.log")
    w_model=$(sed -n 's/.*; model \([0-9.]*\) MB, gradient \([0-9.]*\) MB.*/\1 \2/p' "$d/worker1.log" | tail -n 1)
    ckpts=$(grep -c ": saved " "$d/chief.log")
    if [ -z "$ps_peak" ] || [ -z "$model" ] || [ -z "$w_peak" ] || [ -z "$w_model" ]; then
        failed "ps peak memory" "no peak RSS line in the logs" "$(job_logs "$d")"
    else
        # The data a wide worker holds: its batch (B x F floats) and w* (F).
        data=$(awk -v f=$MEM_FEATURES -v b=$WIDE_BATCH 'BEGIN { printf "%.1f", 4 * f * (b + 1) / 1e6 }')
        ps_goal=$(awk -v m="$model" 'BEGIN { printf "%.1f", 1.1 * m + 50 }')
        set -- $w_model
        w_goal=$(awk -v m="$1" -v g="$2" -v d="$data" 'BEGIN { printf "%.1f", 1.1 * (m + g + d) + 50 }')
        row "ps peak RSS" "$ps_peak MB" "VmHWM at its end; goal <= 1.1 x $model MB of variables and slots + 50 MB = $ps_goal MB; linear F=$MEM_FEATURES adam, data=wide B=$WIDE_BATCH, 1 ps + 2 workers, $MEM_STEPS steps, $ckpts checkpoints (save_model_secs=1)"
        row "worker 1 peak RSS" "$w_peak MB" "goal <= 1.1 x ($1 MB model + $2 MB gradient + $data MB data: its batch and w*) + 50 MB = $w_goal MB"
        row "chief peak RSS" "${c_peak:-?} MB" "the chief is worker 0 and also pulls variables and slots for each checkpoint and writes it (no goal set)"
    fi
fi

piece fashion
# 6. Fashion-MNIST MLP: examples/s through the real binary with 1 and 2
# workers (global_step * batch / training seconds from the chief's log),
# and the same model trained in one process without RPC.
if [ ! -f "$FASHION_DATA/train-images-idx3-ubyte.gz" ] ||
    [ ! -f "$FASHION_DATA/train-labels-idx1-ubyte.gz" ]; then
    row "fashion mlp" skipped "no Fashion-MNIST in $FASHION_DATA (Debian's dataset-fashion-mnist); nothing measured"
else
    model="784-256-128-10 mlp, adam, batch $FASHION_BATCH"
    fashion_rates=""
    for run in 1 2 2p; do
        nw=${run%p}
        pipe=false
        [ "$run" = 2p ] && pipe=true
        if [ $nw = 1 ]; then label="fashion mlp, 1 worker"; else label="fashion mlp, $nw workers"; fi
        [ $pipe = true ] && label="$label, pipelined"
        d=$TMP/fashion-$run
        run_job "$d" 120 $nw "$FASHION_CONFIG" --set max_steps=$FASHION_STEPS \
            --set batch_size=$FASHION_BATCH --set log_steps=100 --set pipeline_push=$pipe
        if job_rate "$d" $? "$label"; then
            rate=$(ratio $((RATE_G * FASHION_BATCH)) "$RATE_S" %.0f)
            [ $pipe = true ] || fashion_rates="$fashion_rates $nw:$rate"
            acc=$(sed -n 's/.*: eval at global_step [0-9]*: .*accuracy \([0-9.]*\).*/\1/p' "$d/chief.log" | tail -n 1)
            row "$label" "$rate ex/s" "$model, $FASHION_CONFIG, 1 ps + $nw worker process(es), async, pipeline_push=$pipe; global_step $RATE_G x $FASHION_BATCH examples in $RATE_S s (chief log: model init to end of its training loop; whole job with data loading ${JOB_SECS} s); test accuracy ${acc:-?} after $FASHION_STEPS steps"
        fi
    done
    d=$TMP/compute
    mkdir -p "$d"
    if timeout -k 5 120 "$BUILD/bench_compute" --config "$FASHION_CONFIG" \
        --set batch_size=$FASHION_BATCH --steps $FASHION_STEPS >"$d/out" 2>"$d/err"; then
        out=$(cat "$d/out")
        compute=$(field "$out" examples_per_s)
        row "fashion mlp, compute only" "$compute ex/s" "the same model in one process, no RPC (bench_compute): $FASHION_STEPS steps of next batch + loss and gradient + adam update after 10 untimed ones; $(field "$out" grad_share) of the time in loss+gradient; loss $(field "$out" loss_first) -> $(field "$out" loss_last)"
        for pair in $fashion_rates; do
            nw=${pair%%:*}
            if [ $nw = 1 ]; then label="fashion 1 worker/compute"; else label="fashion $nw workers/compute"; fi
            row "$label" "$(ratio "${pair#*:}" "$compute" %.2f)" "distributed examples/s over compute-only examples/s"
        done
    else
        failed "fashion mlp, compute only" "bench_compute failed" "$d/err"
    fi
fi

piece tls
# 7. The cost of mutual TLS. Certificates for 127.0.0.1 and localhost are
# made now, in the temp dir. The demo job (as figure 1) and pull+push of 1M
# floats (as figure 2) run TLS_TRIALS times each way, plaintext then TLS in
# turn, so a busy spell hits both; the ratio is of the best runs.
certs=$TMP/certs

# 0 when the ps of the run in dir $1 served as TLS_DIR says (its log names
# TLS, or does not); else figure $2 is marked failed: a figure must not be
# the other security than its label.
tls_served() {
    _said=0
    grep -q ": TLS, client certificates" "$1/ps.log" 2>/dev/null && _said=1
    if [ -n "$TLS_DIR" ] && [ $_said = 0 ]; then
        failed "$2" "the ps did not serve TLS" "$1/ps.log"
        return 1
    fi
    if [ -z "$TLS_DIR" ] && [ $_said = 1 ]; then
        failed "$2" "the ps served TLS in a plaintext run" "$1/ps.log"
        return 1
    fi
}
if ! sh scripts/make_certs.sh "$certs" 127.0.0.1 localhost 2>"$TMP/certs.err"; then
    failed "tls" "scripts/make_certs.sh failed" "$TMP/certs.err"
else
    demo_plain="" demo_tls="" pp_plain="" pp_tls="" tls_ok=1 trial=1
    while [ $trial -le "$TLS_TRIALS" ] && [ $tls_ok = 1 ]; do
        for sec in plain tls; do
            if [ $sec = tls ]; then TLS_DIR=$certs; else TLS_DIR=""; fi
            d=$TMP/tls-demo-$sec-$trial
            run_job "$d" 90 2 "$CONFIG" --set max_steps=$DEMO_STEPS --set log_steps=1000
            if job_rate "$d" $? "demo training, $sec" && tls_served "$d" "demo training, $sec"; then
                eval "demo_$sec=\"\$demo_$sec $(ratio "$RATE_G" "$RATE_S" %.0f)\""
            else
                tls_ok=0
            fi
            d=$TMP/tls-pp-$sec-$trial
            if ! pullpush_once "$PP_SMALL" "$PP_SMALL_ROUNDS" "$d"; then
                failed "pull+push 1M floats, $sec" "$ERR" "$ERR_LOGS"
                tls_ok=0
            elif tls_served "$d" "pull+push 1M floats, $sec"; then
                eval "pp_$sec=\"\$pp_$sec $VAL\""
            else
                tls_ok=0
            fi
        done
        trial=$((trial + 1))
    done
    TLS_DIR=""
    if [ $tls_ok = 1 ]; then
        mtls="mutual TLS (certificates of scripts/make_certs.sh, P-256) on every connection"
        b_plain=$(best "$demo_plain")
        b_tls=$(best "$demo_tls")
        row "demo training, plaintext" "$b_plain steps/s" "$(summary "$demo_plain"); the demo job of figure 1 (global_step $DEMO_STEPS), runs alternating with the TLS ones"
        row "demo training, mTLS" "$b_tls steps/s" "$(summary "$demo_tls"); the same job, $mtls"
        row "demo TLS/plaintext" "$(ratio "$b_tls" "$b_plain" %.2f)" "best mTLS steps/s over best plaintext steps/s"
        b_plain=$(best "$pp_plain")
        b_tls=$(best "$pp_tls")
        row "pull+push 1M, plaintext" "$b_plain MB/s" "$(summary "$pp_plain"); as figure 2, 1 ps + 2 worker processes, $PP_SMALL_ROUNDS rounds each, runs alternating with the TLS ones"
        row "pull+push 1M, mTLS" "$b_tls MB/s" "$(summary "$pp_tls"); the same, $mtls"
        row "pull+push 1M TLS/plaintext" "$(ratio "$b_tls" "$b_plain" %.2f)" "best mTLS MB/s over best plaintext MB/s"
    fi
fi

piece histogram
# 8. One histogram summary of a 10M-float variable, as the chief writes one
# per variable every summary_steps (one pass, no copy).
d=$TMP/histogram
mkdir -p "$d"
if timeout -k 5 120 "$BUILD/bench_histogram" --floats 10000000 --rounds 5 >"$d/out" 2>"$d/err"; then
    out=$(cat "$d/out")
    row "histogram 10M floats" "$(field "$out" best_ms) ms" "dt_summary_histogram_floats of 10M normal float32 (a 40 MB variable) into an event file, TF's default buckets; best of 5 after 1 untimed, mean $(field "$out" mean_ms) ms, $(field "$out" ns_per_float) ns/float; $(field "$out" entries_bytes) bytes per record"
else
    failed "histogram 10M floats" "bench_histogram failed" "$d/err"
fi

fi # BENCH_ONLY=tiny
fi # BENCH_ONLY

if [ "$ONLY" != tiny ]; then
piece gen-criteo
# 9. Sparse logistic regression on Criteo-layout data (dtrain gen-criteo,
# the first SPARSE_TRAIN rows to train on, the next SPARSE_EVAL held out):
# the weight a table of 2^SPARSE_BITS rows on the ps (conf/sparse_criteo.json,
# FTRL), with 1 and 2 workers; the same with L1; and a dense model of 2^20
# features (data=wide) for what a dense weight of that size costs a step.
# Quality: bench_sparse_eval scores each final checkpoint on the held-out
# rows against the generating model's own log loss on them.
sparse_cfg=conf/sparse_criteo.json
d=$TMP/criteo
mkdir -p "$d"
sparse_rows=$SPARSE_QUALITY_TRAIN
[ "$sparse_rows" -ge $SPARSE_TRAIN ] || sparse_rows=$SPARSE_TRAIN
if ! timeout -k 5 120 "$BIN" gen-criteo --out "$d/all.txt" --rows $((sparse_rows + SPARSE_EVAL)) \
    --seed 7 --vocab-scale 0.01 >"$d/gen.out" 2>&1; then
    failed "sparse logistic" "gen-criteo failed" "$d/gen.out"
else
    head -n $SPARSE_TRAIN "$d/all.txt" >"$d/train.txt"
    [ "$SPARSE_QUALITY_TRAIN" -gt 0 ] && head -n "$SPARSE_QUALITY_TRAIN" "$d/all.txt" >"$d/train-quality.txt"
    tail -n $SPARSE_EVAL "$d/all.txt" >"$d/eval.txt"
    rm -f "$d/all.txt"
    dense_mb=$(awk -v b=$SPARSE_BITS 'BEGIN { printf "%.0f", 2 ^ b * 4 * 3 / 1e6 }')
    sparse_loss=""
    # p: 1 worker with pipeline_push (its next batch's rows pulled and
    # gradient made while its push is in flight).
    runs="1 p 2 l1"
    [ "$SPARSE_QUALITY_TRAIN" -gt 0 ] && runs="$runs q"
    for run in $runs; do
        nw=${run%l1}
        nw=${nw%q}
        nw=${nw%p}
        [ -n "$nw" ] || nw=1
        l1=0
        [ "$run" = l1 ] && l1=$SPARSE_L1
        pipe=false
        [ "$run" = p ] && pipe=true
        train=$d/train.txt
        rows_n=$SPARSE_TRAIN
        label="sparse logistic 2^$SPARSE_BITS, $nw worker(s)"
        [ "$run" = p ] && label="sparse logistic 2^$SPARSE_BITS, 1 worker, pipelined"
        [ "$run" = l1 ] && label="sparse logistic, L1 $l1"
        if [ "$run" = q ]; then
            train=$d/train-quality.txt
            rows_n=$SPARSE_QUALITY_TRAIN
            label="sparse logistic, $rows_n rows"
        fi
        piece "sparse $run"
        sd=$TMP/sparse-$run
        sets="--set train_data=$train --set hash_bits=$SPARSE_BITS --set epochs=$SPARSE_EPOCHS --set l1_regularization_strength=$l1 --set l2_regularization_strength=0 --set save_model_secs=600 --set log_steps=100000 --set pipeline_push=$pipe"
        # shellcheck disable=SC2086 # sets splits into flags
        run_job "$sd" 150 $nw "$sparse_cfg" $sets
        job_rate "$sd" $? "$label" || continue
        ex=$(ratio $((RATE_G * SPARSE_BATCH)) "$RATE_S" %.0f)
        kb=$(sed -n 's/.*rows a step (the batch.s distinct ids), \([0-9.]*\) kB a step.*/\1/p' "$sd/chief.log" | tail -n 1)
        rows=$(sed -n 's/.*sparse: \([0-9.]*\) rows a step.*/\1/p' "$sd/chief.log" | tail -n 1)
        ps_peak=$(peak_of "$sd/ps.log")
        # shellcheck disable=SC2086
        if ! out=$(timeout -k 5 120 "$BUILD/bench_sparse_eval" --config "$sparse_cfg" $sets \
            --set log_dir="$sd/logs" --data "$d/eval.txt" --hidden "7,$sparse_rows,0.01" 2>"$sd/eval.err"); then
            failed "$label" "bench_sparse_eval failed" "$sd/eval.err"
            continue
        fi
        loss=$(field "$out" log_loss)
        hidden=$(field "$out" hidden_log_loss)
        nz=$(field "$out" nonzero)
        held=$(field "$out" rows)
        row "$label" "$(ratio "$RATE_G" "$RATE_S" %.0f) steps/s" "$ex examples/s; batch $SPARSE_BATCH, $SPARSE_EPOCHS epoch(s) of $rows_n rows, 1 ps + $nw worker process(es), pipeline_push=$pipe, ftrl (alpha 1, beta 1), L1 $l1; ${rows:-?} rows a step, ${kb:-?} kB a step of ids and rows on the wire; ps peak RSS ${ps_peak:-?} MB against $dense_mb MB for the dense weight and its two slots (goal < 10%: $(ratio "${ps_peak:-0}" "$dense_mb" %.4f))"
        row "  held-out log loss" "$loss" "on $SPARSE_EVAL rows (rows $sparse_rows.. of the generator), after $rows_n rows; the generating model's $hidden (goal within 2%: $(ratio "$loss" "$hidden" %.4f)x); $nz of $held rows held non-zero ($(ratio "$nz" "$held" %.3f))"
        [ "$run" = 1 ] && sparse_loss=$loss
        [ "$run" = l1 ] && [ -n "$sparse_loss" ] &&
            row "  L1 / no L1 log loss" "$(ratio "$loss" "$sparse_loss" %.4f)" "goal: within 1% (<= 1.01) with < 20% of the rows non-zero"
    done
    piece "dense 2^20"
    # A dense weight of 2^20 floats: every step pulls and pushes all of it.
    dd=$TMP/dense-2e20
    run_job "$dd" 120 1 "$CONFIG" --set data=wide --set features=1048576 --set batch_size=8 \
        --set learning_rate=1e-6 --set max_steps=$SPARSE_DENSE_STEPS --set log_steps=100000
    if job_rate "$dd" $? "dense logistic 2^20"; then
        row "dense linear 2^20, 1 worker" "$(ratio "$RATE_G" "$RATE_S" %.0f) steps/s" "$(ratio $((RATE_G * 8)) "$RATE_S" %.0f) examples/s; data=wide features=1048576 batch 8, 1 ps + 1 worker, $SPARSE_DENSE_STEPS steps: 8.4 MB a step on the wire (the weight pulled and its gradient pushed); ps peak RSS $(peak_of "$dd/ps.log") MB"
    fi
fi

fi # BENCH_ONLY=tiny

piece ""
echo
echo "load average $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null) at the end"
echo "seconds per piece: $PIECE_TIMES; $(awk -v a="$BENCH_T0" -v b="$(now_ms)" 'BEGIN { printf "%.1f", (b - a) / 1000 }') in all"
exit $FAILED
