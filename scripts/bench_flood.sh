#!/bin/sh
# The flood figures: the tiny linear job (1 ps + chief) during each flood
# of test/h2flood.py from one client on 127.0.0.2 (bench/flood_repeat.py
# connects again whenever the ps closes it, for the whole window), over
# plaintext and over mutual TLS with a valid worker:1 certificate (the
# insider), against the same job while the same client floods a sink (a
# port that reads and drops everything, over TLS for the TLS rows: the
# client takes its core, the ps sees nothing), and with no flood. Each row:
# the job's steps/s over the window (global_step from `dtrain status --json`
# before and after), the ps's growth (VmHWM after minus VmRSS before, and
# VmRSS 2 s after), when the first connection was closed, and the runs (a
# run: one connection) and connects refused while its address backed off.
# Then, per flood, flood-to-ps / flood-to-sink steps/s (goal >= 0.5). With
# DTRAIN_OLD_BIN set, a no-flood row of that binary too (the same run,
# alternating).
#
# usage: DTRAIN_BIN=build/dtrain [DTRAIN_OLD_BIN=...] [FLOOD_SECS=20]
#        [FLOOD_MODES="reset ping ..."] [FLOOD_TLS="plain mtls"] sh scripts/bench_flood.sh
# All modes over both: about 12 minutes at 20 s a row.
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
cd "$(dirname "$0")/.." || exit 1

free_port() {
    $PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

MODES=${FLOOD_MODES:-reset settings ping window continuation bigheaders hpackbomb zerowindow}
TLS_KINDS=${FLOOD_TLS:-plain mtls}
CERTS="$TMP/certs"
case " $TLS_KINDS " in
*" mtls "*) WORKERS=2 PS=1 sh scripts/make_certs.sh "$CERTS" >/dev/null 2>&1 ||
    { echo "bench_flood: cannot make certificates (openssl?)" >&2; exit 1; } ;;
esac

# with_tls KIND ID CMD...: CMD in place of this (sub)shell, with the TLS
# files of identity ID ("ps-0", "chief", "tool") when KIND is mtls; run in
# the background (or a pipeline), so $! is CMD's own pid.
with_tls() {
    kind=$1 id=$2
    shift 2
    if [ "$kind" = mtls ]; then
        DTRAIN_TLS_CERT="$CERTS/$id.pem" DTRAIN_TLS_KEY="$CERTS/$id-key.pem" \
            DTRAIN_TLS_CA="$CERTS/ca.pem" exec "$@"
    else
        exec "$@"
    fi
}

step_of() { # tls kind, cluster file -> global_step of ps 0
    with_tls "$1" tool "$BIN" status --cluster "$2" --json 2>/dev/null |
        $PY -c 'import json,sys; d=json.load(sys.stdin); print(d.get("global_step", d.get("ps",[{}])[0].get("global_step",0)) if isinstance(d,dict) else 0)' 2>/dev/null || echo 0
}

kb() { awk -v f="$2:" '$1==f {print $2}' "/proc/$1/status" 2>/dev/null; }

# A port that takes connections (TLS ones with the ps's certificate for
# mtls) and reads and drops every byte.
start_sink() { # port tls-kind
    $PY -c '
import socket, ssl, sys, threading
port, kind, certs = int(sys.argv[1]), sys.argv[2], sys.argv[3]
ctx = None
if kind == "mtls":
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(certs + "/ps-0.pem", certs + "/ps-0-key.pem")
    ctx.load_verify_locations(certs + "/ca.pem")
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.set_alpn_protocols(["h2"])
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", port)); s.listen(64)
def drop(c):
    try:
        if ctx: c = ctx.wrap_socket(c, server_side=True)
        while c.recv(1 << 16): pass
    except OSError:
        pass
while True:
    c, _ = s.accept(); threading.Thread(target=drop, args=(c,), daemon=True).start()
' "$1" "$2" "$CERTS" &
    sink=$!
    PIDS="$PIDS $sink"
}

# start_job DIR BIN TLS: the tiny job (1 ps + chief) in DIR, training
# after a warm-up; sets d, p1 (the ps's port), ps and chief (their pids).
start_job() {
    d=$1
    mkdir -p "$d"
    p1=$(free_port) p2=$(free_port)
    echo "{\"cluster\": {\"ps\": [\"127.0.0.1:$p1\"], \"worker\": [\"127.0.0.1:$p2\"]}}" >"$d/c.json"
    sets="--set max_steps=100000000 --set save_model_secs=6000 --set log_steps=100000"
    # shellcheck disable=SC2086
    with_tls "$3" ps-0 "$2" --cluster "$d/c.json" --job-name ps --task-index 0 --log-dir "$d/logs" $sets >"$d/ps.log" 2>&1 &
    ps=$!
    PIDS="$PIDS $ps"
    sleep 0.5
    # shellcheck disable=SC2086
    with_tls "$3" chief "$2" --cluster "$d/c.json" --job-name worker --task-index 0 --log-dir "$d/logs" $sets >"$d/chief.log" 2>&1 &
    chief=$!
    PIDS="$PIDS $chief"
    sleep 3
}

# row NAME BIN TLS(plain|mtls) MODE FLOOD(none|sink|ps)
row() {
    name=$1 bin=$2 tls=$3 mode=$4 kind=$5
    start_job "$TMP/$name" "$bin" "$tls"
    sink=""
    target=$p1
    if [ "$kind" = sink ]; then
        target=$(free_port)
        start_sink "$target" "$tls"
        sleep 0.3
    fi
    sec=""
    [ "$tls" = mtls ] && sec="--cert $CERTS/worker-1.pem --key $CERTS/worker-1-key.pem --ca $CERTS/ca.pem"
    again=""
    [ "$mode" = reset ] && again=--reconnect
    before=$(kb $ps VmRSS)
    s0=$(step_of "$tls" "$d/c.json")
    t0=$(date +%s%N)
    out=""
    if [ "$kind" = none ]; then
        sleep "$SECS"
    else
        # shellcheck disable=SC2086
        out=$($PY bench/flood_repeat.py "$mode" "$SECS" --host 127.0.0.1 --port "$target" \
            --source 127.0.0.2 $again $sec)
    fi
    t1=$(date +%s%N)
    s1=$(step_of "$tls" "$d/c.json")
    peak=$(kb $ps VmHWM)
    sleep 2
    after=$(kb $ps VmRSS)
    kill $chief $ps $sink 2>/dev/null
    wait $chief $ps $sink 2>/dev/null
    rate=$(awk -v a="$s0" -v b="$s1" -v t0="$t0" -v t1="$t1" 'BEGIN {printf "%.0f", (b-a)/((t1-t0)/1e9)}')
    close=$(echo "$out" | $PY -c 'import json,sys
t=sys.stdin.read().strip()
d=json.loads(t) if t else {}
print("%s ms (%s runs, %s refused, %s streams)" % (d["first_close_ms"], d["runs"], d["refused_at_connect"], d["streams"]) if d else "-")' 2>/dev/null)
    [ "$kind" = sink ] && close="-"
    printf '%-30s %10s %12s %12s %12s  %s\n' "$name" "$rate" \
        "$(( (peak - before) / 1024 )) MB" "$(( (after - before) / 1024 )) MB" "$((before / 1024)) MB" "${close:--}"
    echo "$rate" >"$TMP/$name.rate"
}

ratio() { # flood name, sink name
    awk -v a="$(cat "$TMP/$1.rate")" -v b="$(cat "$TMP/$2.rate")" -v n="$1" \
        'BEGIN {printf "%-30s flood-to-ps / flood-to-sink steps/s: %.2f (goal >= 0.5)\n", n, (b > 0 ? a / b : 0)}' >>"$TMP/ratios"
}

printf '%-30s %10s %12s %12s %12s  %s\n' "row ($SECS s)" "steps/s" "ps peak +" "ps after +" "ps before" "first close (runs, refused at connect, streams)"
: >"$TMP/ratios"
for tls in $TLS_KINDS; do
    row "no-flood-$tls" "$BIN" "$tls" - none
    [ -n "$OLD" ] && row "no-flood-old-$tls" "$OLD" "$tls" - none
    for mode in $MODES; do
        row "$mode-to-sink-$tls" "$BIN" "$tls" "$mode" sink
        row "$mode-to-ps-$tls" "$BIN" "$tls" "$mode" ps
        ratio "$mode-to-ps-$tls" "$mode-to-sink-$tls"
    done
done
cat "$TMP/ratios"

# Slow headers: SLOW_CONNS connections from one address, each trickling a
# HEADERS frame a byte every 0.2 s after the preface. Those over the
# per-peer cap (64) are closed at once, the rest at the header deadline
# (10 s): every one closed within it, the job trains on.
SLOW_CONNS=${FLOOD_SLOW_CONNS:-2000}
slow_row() { # tls kind
    tls=$1
    start_job "$TMP/slowloris-$tls" "$BIN" "$tls"
    sec=""
    [ "$tls" = mtls ] && sec="--cert $CERTS/worker-1.pem --key $CERTS/worker-1-key.pem --ca $CERTS/ca.pem"
    before=$(kb $ps VmRSS)
    s0=$(step_of "$tls" "$d/c.json")
    t0=$(date +%s%N)
    # shellcheck disable=SC2086
    out=$(sh -c 'ulimit -n 8192 2>/dev/null; exec "$@"' sh $PY test/h2flood.py slowloris --port "$p1" \
        --source 127.0.0.2 --conns "$SLOW_CONNS" --seconds 15 --linger 2 $sec)
    t1=$(date +%s%N)
    s1=$(step_of "$tls" "$d/c.json")
    peak=$(kb $ps VmHWM)
    kill $chief $ps 2>/dev/null
    wait $chief $ps 2>/dev/null
    rate=$(awk -v a="$s0" -v b="$s1" -v t0="$t0" -v t1="$t1" 'BEGIN {printf "%.0f", (b-a)/((t1-t0)/1e9)}')
    what=$(echo "$out" | $PY -c 'import json,sys
d=json.loads(sys.stdin.read().strip() or "{}")
print("%s of %s connections closed, the last at %s ms" % (d.get("conns_closed","-"), d.get("conns","-"), d.get("last_close_ms", d.get("close_ms","-"))))' 2>/dev/null)
    printf '%-30s %10s %12s %12s %12s  %s\n' "slowloris-$SLOW_CONNS-$tls" "$rate" \
        "$(( (peak - before) / 1024 )) MB" "-" "$((before / 1024)) MB" "${what:--}"
}
for tls in $TLS_KINDS; do slow_row "$tls"; done
