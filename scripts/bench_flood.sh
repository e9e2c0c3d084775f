#!/bin/sh
# The flood figures: the tiny linear job (1 ps + chief, plaintext) during a
# rapid-reset flood from one client (test/h2flood.py reset --reconnect, from
# 127.0.0.2), against the same job while the same client floods a sink (a
# port that reads and drops everything: the client takes its core, the ps
# sees nothing), and with no flood. Each row: the job's steps/s over the
# window (global_step from `dtrain status --json` before and after), the
# ps's growth (VmHWM after minus VmRSS before) and, for the flood, when the
# first connection was closed. With DTRAIN_OLD_BIN set, a no-flood row of
# that binary too (the same run, alternating).
#
# usage: DTRAIN_BIN=build/dtrain [DTRAIN_OLD_BIN=...] [FLOOD_SECS=20] sh scripts/bench_flood.sh
# Loopback only, free ports, every process started here stopped on exit.
set -u
BIN=${DTRAIN_BIN:-build/dtrain}
OLD=${DTRAIN_OLD_BIN:-}
SECS=${FLOOD_SECS:-20}
PY=/usr/bin/python3
TMP=$(mktemp -d "${TMPDIR:-/tmp}/bench_flood.XXXXXX")
PIDS=""
cleanup() {
    for p in $PIDS; do kill "$p" 2>/dev/null; done
    wait 2>/dev/null
    [ -n "${BENCH_KEEP_TMP:-}" ] && echo "bench_flood: logs in $TMP" >&2 || rm -rf "$TMP"
}
trap cleanup EXIT INT TERM

free_port() {
    $PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

step_of() { # cluster file -> global_step of ps 0
    "$1" status --cluster "$2" --json 2>/dev/null |
        $PY -c 'import json,sys; d=json.load(sys.stdin); print(d.get("global_step", d.get("ps",[{}])[0].get("global_step",0)) if isinstance(d,dict) else 0)' 2>/dev/null || echo 0
}

kb() { awk -v f="$2:" '$1==f {print $2}' "/proc/$1/status" 2>/dev/null; }

# row NAME BIN FLOOD(none|sink|ps)
row() {
    name=$1 bin=$2 kind=$3
    d="$TMP/$name"
    mkdir -p "$d"
    p1=$(free_port) p2=$(free_port)
    echo "{\"cluster\": {\"ps\": [\"127.0.0.1:$p1\"], \"worker\": [\"127.0.0.1:$p2\"]}}" >"$d/c.json"
    sets="--set max_steps=100000000 --set save_model_secs=6000 --set log_steps=100000"
    "$bin" --cluster "$d/c.json" --job-name ps --task-index 0 --log-dir "$d/logs" $sets >"$d/ps.log" 2>&1 &
    ps=$!
    PIDS="$PIDS $ps"
    sleep 0.5
    "$bin" --cluster "$d/c.json" --job-name worker --task-index 0 --log-dir "$d/logs" $sets >"$d/chief.log" 2>&1 &
    chief=$!
    PIDS="$PIDS $chief"
    sleep 3
    sink=""
    if [ "$kind" = sink ]; then
        sp=$(free_port)
        $PY -c '
import socket,sys,threading
s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(8)
def drop(c):
    while c.recv(1<<16): pass
while True:
    c,_=s.accept(); threading.Thread(target=drop, args=(c,), daemon=True).start()
' "$sp" &
        sink=$!
        PIDS="$PIDS $sink"
        sleep 0.3
    fi
    before=$(kb $ps VmRSS)
    s0=$(step_of "$bin" "$d/c.json")
    t0=$(date +%s%N)
    out=""
    case $kind in
    none) sleep "$SECS" ;;
    sink) out=$($PY test/h2flood.py reset --host 127.0.0.1 --port "$sp" --source 127.0.0.2 \
        --seconds "$SECS" --max-frames 100000000 --linger 0) ;;
    ps) out=$($PY test/h2flood.py reset --port "$p1" --source 127.0.0.2 --reconnect \
        --seconds "$SECS" --max-frames 100000000 --linger 0) ;;
    esac
    t1=$(date +%s%N)
    s1=$(step_of "$bin" "$d/c.json")
    peak=$(kb $ps VmHWM)
    sleep 2
    after=$(kb $ps VmRSS)
    kill $chief $ps $sink 2>/dev/null
    wait $chief $ps $sink 2>/dev/null
    rate=$(awk -v a="$s0" -v b="$s1" -v t0="$t0" -v t1="$t1" 'BEGIN {printf "%.0f", (b-a)/((t1-t0)/1e9)}')
    close=$(echo "$out" | $PY -c 'import json,sys
t=sys.stdin.read().strip()
d=json.loads(t) if t else {}
fc=d.get("first_close_ms",-1)
print("%s ms (%s streams, %s reconnects)" % (fc if fc >= 0 else d.get("close_ms",-1), d.get("streams","-"), d.get("reconnects","-")) if d else "-")' 2>/dev/null)
    printf '%-26s %10s %12s %12s %12s  %s\n' "$name" "$rate" \
        "$(( (peak - before) / 1024 )) MB" "$(( (after - before) / 1024 )) MB" "$((before / 1024)) MB" "${close:--}"
    echo "$rate" >"$TMP/$name.rate"
}

printf '%-26s %10s %12s %12s %12s  %s\n' "row ($SECS s)" "steps/s" "ps peak +" "ps after +" "ps before" "first close"
row no-flood "$BIN" none
[ -n "$OLD" ] && row no-flood-old "$OLD" none
row flood-to-sink "$BIN" sink
row flood-to-ps "$BIN" ps
[ -n "$OLD" ] && row no-flood-again "$BIN" none
[ -n "$OLD" ] && row no-flood-old-again "$OLD" none
awk -v a="$(cat "$TMP/flood-to-ps.rate")" -v b="$(cat "$TMP/flood-to-sink.rate")" \
    'BEGIN {printf "flood-to-ps / flood-to-sink steps/s: %.2f (goal >= 0.5)\n", (b > 0 ? a / b : 0)}'
