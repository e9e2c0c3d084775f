#!/bin/sh
# The CNN figures of issue "your own model": examples/fashion_cnn.py (a
# PyTorch CNN on the Python module) as 1 ps + 2 workers, against the same
# CNN, steps, batch and Adam in one process (bench/fashion_single.py, one
# torch thread, as each worker has) and on PyTorch's own RPC parameter
# server with 2 workers (bench/fashion_rpc.py). Each row: the wall time,
# the examples/s, and the test accuracy examples/fashion_score.py gives the
# model from its file alone. Then the ratios: dtrain's examples/s against
# two single-process trainers' compute (goal >= 0.8), and against RPC.
#
# usage: DTRAIN_LIBRARY=build/libdtrain.so.0 [CNN_STEPS=4000] sh scripts/bench_cnn.sh
# (make bench: BENCH_ONLY=cnn). Skipped, saying so, without Debian's
# dataset-fashion-mnist or python3-torch. Loopback only, free ports, every
# process started here stopped on exit.
set -u
cd "$(dirname "$0")/.." || exit 1
STEPS=${CNN_STEPS:-4000}
PY=/usr/bin/python3
DATA=/usr/share/datasets/fashion-mnist
TMP=$(mktemp -d "${TMPDIR:-/tmp}/bench_cnn.XXXXXX")
PIDS=""
cleanup() {
    for p in $PIDS; do kill "$p" 2>/dev/null; done
    wait 2>/dev/null
    [ -n "${BENCH_KEEP_TMP:-}" ] && echo "bench_cnn: logs in $TMP" >&2 || rm -rf "$TMP"
}
trap cleanup EXIT INT TERM

if [ ! -d "$DATA" ] || ! $PY -c 'import torch' 2>/dev/null; then
    echo "cnn: skipped: needs $DATA (dataset-fashion-mnist) and python3-torch; nothing measured"
    exit 0
fi
export DTRAIN_LIBRARY="${DTRAIN_LIBRARY:-$PWD/${BUILD:-build}/libdtrain.so.0}"
export PYTHONPATH="$PWD/python"
# Every contender one core a process, as its torch.set_num_threads(1) asks:
# Debian's OpenBLAS would otherwise add a thread per core that spins
# between calls (the lone trainer then used two cores, not one).
export OPENBLAS_NUM_THREADS=1

free_port() {
    $PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
field() { # JSON line, key -> value
    printf '%s' "$1" | $PY -c "import json,sys; print(json.loads(sys.stdin.read())['$2'])"
}
accuracy() { # checkpoint or log dir -> test accuracy
    $PY examples/fashion_score.py "$1" 2>>"$TMP/score.err" | $PY -c 'import json,sys; print("%.4f" % json.load(sys.stdin)["accuracy"])'
}
failed=0

# dtrain: 1 ps + 2 workers of the example, the job's wall time.
cat >"$TMP/cluster.json" <<EOF
{"cluster": {"ps": ["127.0.0.1:$(free_port)"],
             "worker": ["127.0.0.1:$(free_port)", "127.0.0.1:$(free_port)"]}}
EOF
base="$PY examples/fashion_cnn.py --cluster $TMP/cluster.json --config conf/fashion_cnn.json
      --log-dir $TMP/dtrain --set max_steps=$STEPS --set save_model_secs=600"
start=$($PY -c 'import time; print(time.monotonic())') # the same clock as Python's
$base --job-name ps --task-index 0 >"$TMP/ps.log" 2>&1 &
PIDS="$PIDS $!"
$base --job-name worker --task-index 0 >"$TMP/chief.log" 2>&1 &
chief=$!
$base --job-name worker --task-index 1 >"$TMP/worker1.log" 2>&1 &
worker=$!
PIDS="$PIDS $chief $worker"
if wait $chief && wait $worker; then
    wall=$($PY -c "import time; print('%.1f' % (time.monotonic() - $start))")
    # Training time: the longer of the two workers' first step to last.
    secs=$(cat "$TMP/chief.log" "$TMP/worker1.log" |
        sed -n 's/.*local steps in \([0-9.]*\) s$/\1/p' | sort -n | tail -1)
    rate=$($PY -c "print('%.0f' % ($STEPS * 64 / $secs))")
    acc=$(accuracy "$TMP/dtrain")
    echo "cnn: dtrain, 1 ps + 2 workers: $secs s first step to last ($wall s with start-up), $rate examples/s, test accuracy $acc"
else
    echo "cnn: dtrain, 1 ps + 2 workers: FAILED"
    tail -20 "$TMP/chief.log" >&2
    failed=1
fi

# One process, torch.optim.Adam; timed after its data is read.
out=$($PY bench/fashion_single.py --steps "$STEPS" --out "$TMP/single.safetensors" 2>"$TMP/single.err")
if [ -n "$out" ]; then
    single_rate=$(field "$out" examples_per_sec)
    echo "cnn: one process, 1 thread: $(field "$out" seconds | cut -c1-6) s of training, $(printf '%.0f' "$single_rate") examples/s, test accuracy $(accuracy "$TMP/single.safetensors")"
else
    echo "cnn: one process: FAILED"; cat "$TMP/single.err" >&2; failed=1; single_rate=0
fi

# torch.distributed.rpc, 1 ps + 2 workers; from its first step to its last.
out=$($PY bench/fashion_rpc.py --workers 2 --steps "$STEPS" --port "$(free_port)" \
    --out "$TMP/rpc.safetensors" 2>"$TMP/rpc.err" | tail -1)
case "$out" in
    '{'*)
        rpc_rate=$(field "$out" examples_per_sec)
        echo "cnn: torch.distributed.rpc, 1 ps + 2 workers: $(field "$out" seconds | cut -c1-6) s first step to last, $(printf '%.0f' "$rpc_rate") examples/s, test accuracy $(accuracy "$TMP/rpc.safetensors")"
        ;;
    *) echo "cnn: torch.distributed.rpc: FAILED"; tail -20 "$TMP/rpc.err" >&2; failed=1; rpc_rate=0 ;;
esac

if [ "$failed" = 0 ]; then
    $PY -c "print('cnn: dtrain 2 workers / 2 x one process: %.2f (goal >= 0.8); dtrain / rpc: %.2f' % ($rate / (2 * $single_rate), $rate / $rpc_rate))"
fi
exit "$failed"
