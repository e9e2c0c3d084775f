#!/usr/bin/env bash
# Runs the demo cluster on this machine: one ps, the chief (worker 0) and
# worker 1, each a build/dtrain process, training the job in conf/linear.json.
#
# usage: scripts/launch_local.sh [--ps-port N] [--chief-port N] [--worker-port N]
#                                [--log-dir DIR] [--config FILE] [--tls [--certs DIR]]
#                                [-- DTRAIN_FLAGS...]
#   Ports default to 1681 (ps), 1682 (chief), 1683 (worker 1), or come from
#   PS_PORT, CHIEF_PORT, WORKER_PORT; the log dir from LOGDIR, else the job
#   config's "log_dir" (conf/linear.json's: logs/linear).
#   --tls runs every channel over mutual TLS with the certificates in DIR
#   (or TLS_CERTS; default LOGDIR/certs, made by scripts/make_certs.sh when
#   it holds none). Flags after "--" go to every role, e.g. -- --set max_steps=500.
#   DTRAIN_BIN picks another binary (default build/dtrain, built if missing).
#   --program 'CMD' runs CMD in every role instead (a program on libdtrain:
#   'build/example_linear', '/usr/bin/python3 examples/linear.py'), the role
#   flags (--cluster, --job-name, --task-index, --config, --log-dir) appended.
#
# Each role logs to LOGDIR/<role>.log; the chief also writes its checkpoints
# and TensorBoard event files there. The workers' lines are streamed here.
# Ctrl-C, or any role failing, stops the others. The exit status is 0 when
# every role finished the job, else the first failing role's status
# (2 usage/config, 200 a peer stayed unreachable, 128+N stopped by signal N).
set -u

cd "$(dirname "$0")/.." || exit 1

usage() {
    sed -n '5,17s/^# \{0,1\}//p' "$0" >&2
    exit 2
}

PS_PORT=${PS_PORT:-1681}
CHIEF_PORT=${CHIEF_PORT:-1682}
WORKER_PORT=${WORKER_PORT:-1683}
LOGDIR=${LOGDIR:-}
CONFIG=${CONFIG:-conf/linear.json}
BIN=${DTRAIN_BIN:-build/dtrain}
TLS=0
CERTS=${TLS_CERTS:-}
[ -n "$CERTS" ] && TLS=1

while [ $# -gt 0 ]; do
    case "$1" in
        --ps-port) [ $# -ge 2 ] || usage; PS_PORT=$2; shift 2 ;;
        --chief-port) [ $# -ge 2 ] || usage; CHIEF_PORT=$2; shift 2 ;;
        --worker-port) [ $# -ge 2 ] || usage; WORKER_PORT=$2; shift 2 ;;
        --log-dir) [ $# -ge 2 ] || usage; LOGDIR=$2; shift 2 ;;
        --config) [ $# -ge 2 ] || usage; CONFIG=$2; shift 2 ;;
        --tls) TLS=1; shift ;;
        --program) [ $# -ge 2 ] || usage; PROGRAM=$2; shift 2 ;;
        --certs) [ $# -ge 2 ] || usage; CERTS=$2; TLS=1; shift 2 ;;
        -h|--help) usage ;;
        --) shift; break ;;
        *) echo "launch_local: unknown flag $1" >&2; usage ;;
    esac
done
EXTRA=("$@")
# What each role runs: the binary, or --program's words.
RUN=("$BIN")
[ -n "${PROGRAM:-}" ] && read -r -a RUN <<<"$PROGRAM"

# config_log_dir FILE: the job config's "log_dir" (at the top level, or
# under "job" in a cluster-shaped file), or nothing.
config_log_dir() {
    python3 - "$1" 2>/dev/null <<'PY'
import json, sys
with open(sys.argv[1]) as f:
    doc = json.load(f)
job = doc.get("job", {}) if "cluster" in doc or "job" in doc else doc
value = job.get("log_dir", "") if isinstance(job, dict) else ""
print(value if isinstance(value, str) else "")
PY
}

for p in "$PS_PORT" "$CHIEF_PORT" "$WORKER_PORT"; do
    case "$p" in
        ''|*[!0-9]*) echo "launch_local: port \"$p\" is not a number" >&2; exit 2 ;;
    esac
    if [ "$p" -lt 1 ] || [ "$p" -gt 65535 ]; then
        echo "launch_local: port $p is not in 1..65535" >&2
        exit 2
    fi
done
if [ ! -f "$CONFIG" ]; then
    echo "launch_local: no job config $CONFIG" >&2
    exit 2
fi

# The log dir: --log-dir (or LOGDIR), else the config's "log_dir", else
# the roles' default; a "--set log_dir=DIR" after "--" wins, as it does
# in the roles.
if [ -z "$LOGDIR" ]; then
    if ! command -v python3 >/dev/null 2>&1; then
        echo "launch_local: no python3 to read \"log_dir\" from $CONFIG; give --log-dir" >&2
    fi
    LOGDIR=$(config_log_dir "$CONFIG")
    LOGDIR=${LOGDIR:-logs/linear}
fi
for ((i = 0; i + 1 < ${#EXTRA[@]}; i++)); do
    if [ "${EXTRA[i]}" = --set ]; then
        case "${EXTRA[i + 1]}" in log_dir=?*) LOGDIR=${EXTRA[i + 1]#log_dir=} ;; esac
    fi
done

if [ ! -x "$BIN" ]; then
    echo "launch_local: $BIN missing; building it" >&2
    make "$BIN" >&2 || { echo "launch_local: build failed" >&2; exit 1; }
fi

mkdir -p "$LOGDIR" || exit 1

# tls_flags IDENTITY: the --tls-* flags of a role (ps-0, chief, worker-1).
tls_flags() { :; }
if [ "$TLS" = 1 ]; then
    CERTS=${CERTS:-$LOGDIR/certs}
    if [ ! -f "$CERTS/ca.pem" ]; then
        echo "launch_local: no certificates in $CERTS; making them" >&2
        sh scripts/make_certs.sh "$CERTS" localhost 127.0.0.1 || exit 1
    fi
    tls_flags() {
        TLS_FLAGS=(--tls-cert "$CERTS/$1.pem" --tls-key "$CERTS/$1-key.pem" --tls-ca "$CERTS/ca.pem")
    }
    echo "launch_local: mutual TLS with the certificates in $CERTS"
fi

# The shipped cluster file names the default ports; other ports get a
# generated one beside the logs.
CLUSTER=conf/cluster.json
if [ "$PS_PORT:$CHIEF_PORT:$WORKER_PORT" != "1681:1682:1683" ] || [ ! -f "$CLUSTER" ]; then
    CLUSTER=$LOGDIR/cluster.json
    cat >"$CLUSTER" <<EOF
{
  "cluster": {
    "ps": ["localhost:$PS_PORT"],
    "worker": ["localhost:$CHIEF_PORT", "localhost:$WORKER_PORT"]
  }
}
EOF
fi

echo "launch_local: cluster $CLUSTER, job $CONFIG"
echo "launch_local: logs, checkpoints and events in $LOGDIR (ps.log, chief.log, worker1.log)"
echo "launch_local: tensorboard --logdir $LOGDIR"

ROLES=(ps chief worker1)
PIDS=()
STATUS=()
TAIL_PID=""

# start NAME JOB TASK IDENTITY: one role in the background, its output in
# its log; IDENTITY names its certificate files under --tls.
start() {
    : >"$LOGDIR/$1.log"
    TLS_FLAGS=()
    tls_flags "$4"
    "${RUN[@]}" --cluster "$CLUSTER" --job-name "$2" --task-index "$3" --config "$CONFIG" \
        --log-dir "$LOGDIR" ${TLS_FLAGS[@]+"${TLS_FLAGS[@]}"} ${EXTRA[@]+"${EXTRA[@]}"} \
        >>"$LOGDIR/$1.log" 2>&1 &
    PIDS+=("$!")
}

# Stops every role still running: SIGTERM, then SIGKILL after a grace period.
stop_all() {
    local pid i
    for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
    for i in 1 2 3 4 5 6 7 8 9 10; do
        local alive=0
        for pid in "${PIDS[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
        [ "$alive" = 0 ] && break
        sleep 0.5
        [ "$i" = 10 ] && for pid in "${PIDS[@]}"; do kill -KILL "$pid" 2>/dev/null; done
    done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null; done
}

stop_tail() {
    if [ -n "$TAIL_PID" ]; then
        kill "$TAIL_PID" 2>/dev/null
        wait "$TAIL_PID" 2>/dev/null
        TAIL_PID=""
    fi
}

# shellcheck disable=SC2317  # called from the traps below
on_signal() {
    trap - INT TERM
    echo "launch_local: interrupted; stopping the cluster" >&2
    stop_all
    stop_tail
    exit "$1"
}
trap 'on_signal 130' INT
trap 'on_signal 143' TERM
trap 'stop_tail' EXIT

start ps ps 0 ps-0
start chief worker 0 chief
start worker1 worker 1 worker-1

# The workers' progress, as it comes (the log lines carry pid and role).
tail -q -n +1 -F "$LOGDIR/chief.log" "$LOGDIR/worker1.log" 2>/dev/null &
TAIL_PID=$!

# Poll rather than `wait -n` so we know which role ended, on any bash.
left=${#PIDS[@]}
rc=0
for i in "${!PIDS[@]}"; do STATUS[i]=""; done
while [ "$left" -gt 0 ]; do
    for i in "${!PIDS[@]}"; do
        [ -n "${STATUS[i]}" ] && continue
        kill -0 "${PIDS[i]}" 2>/dev/null && continue
        wait "${PIDS[i]}"
        STATUS[i]=$?
        left=$((left - 1))
        if [ "${STATUS[i]}" -ne 0 ] && [ "$rc" -eq 0 ]; then
            rc=${STATUS[i]}
            echo "launch_local: ${ROLES[i]} failed with status $rc (see $LOGDIR/${ROLES[i]}.log); stopping the others" >&2
            [ "$rc" -eq 200 ] && echo "launch_local: status 200 is retryable (a peer unreachable or a port busy); are the ports free?" >&2
            stop_all
        fi
    done
    [ "$left" -gt 0 ] && sleep 0.3
done

# Let tail print the last lines before stopping it.
sleep 0.3
stop_tail
trap - INT TERM

if [ "$rc" -eq 0 ]; then
    echo "launch_local: job done; the model is in $LOGDIR (checkpoint file names the latest)"
fi
exit "$rc"
