#!/bin/sh
# A dtrain task's TF_CONFIG inside a Slurm job step, computed from what Slurm
# tells every task, so that one `srun` starts the whole cluster and each task
# finds its own role (deploy/slurm/dtrain.sbatch runs it so).
#
# usage: slurm_cluster.sh [--tf-config]      print this task's TF_CONFIG (default)
#        slurm_cluster.sh --role             print "TYPE INDEX IDENTITY HOST:PORT"
#        slurm_cluster.sh --layout           print "RANK TYPE INDEX IDENTITY HOST:PORT"
#                                            for every task (no SLURM_PROCID needed)
#        slurm_cluster.sh --exec CMD [ARG...]  export TF_CONFIG (and, with
#                                            DTRAIN_CERTS, the TLS variables),
#                                            then exec CMD
#
# Reads (the step's variables first, as srun sets them, then the job's):
#   SLURM_PROCID                                this task's rank
#   SLURM_STEP_NUM_TASKS, SLURM_NTASKS          how many tasks
#   SLURM_STEP_NODELIST, SLURM_JOB_NODELIST     the nodes ("n[1-3]"), expanded
#                                               by `scontrol show hostnames`
#   SLURM_STEP_TASKS_PER_NODE, SLURM_TASKS_PER_NODE
#                                               tasks per node ("2(x3)", "3,2");
#                                               without either, spread evenly
#   SLURM_LOCALID, SLURMD_NODENAME              checked against the layout
#   DTRAIN_NUM_PS     ps tasks (default 1)
#   DTRAIN_EVALUATOR  1: the last task is an evaluator (default 0)
#   DTRAIN_PORT       base port (default 2222, Kubeflow's); a task listens on
#                     the base port plus its local id on its node, so tasks
#                     sharing a node never share a port
#   DTRAIN_CERTS      --exec only: a directory made by scripts/make_certs.sh;
#                     the task's identity's files become DTRAIN_TLS_CERT,
#                     DTRAIN_TLS_KEY and DTRAIN_TLS_CA
#   DTRAIN_STATUS_DIR --exec only: run CMD as a child instead, and write
#                     "STATUS TYPE INDEX" to DIR/RANK when it ends, so the
#                     batch script learns each task's own exit status (srun
#                     reports only the highest); signals still reach CMD,
#                     which shares this shell's process group
#
# Roles by rank: the ps tasks first (ps:0 ...), then the workers (worker 0 is
# the chief, as TF_CONFIG has no "chief" job here), then the evaluator if
# any. Ranks are laid out as srun --distribution=block places them: the
# first node's tasks, then the next node's; SLURM_LOCALID and SLURMD_NODENAME,
# when set, must agree, so another distribution is an error, not a silent
# mix-up. Identities (certificates): ps:N is ps-N, worker 0 is chief, worker N
# is worker-N; the evaluator talks to no ps and has none.
#
# Exit status: 0 (--exec: CMD's), or 2 with one line on stderr for a bad
# variable or layout (dtrain's status for configuration errors: permanent).
set -eu

die() {
    echo "slurm_cluster: $*" >&2
    exit 2
}

usage() {
    sed -n '5,13s/^# \{0,1\}//p' "$0" >&2
    exit 2
}

is_uint() {
    case $1 in
        '' | *[!0-9]*) return 1 ;;
        *) return 0 ;;
    esac
}

mode=--tf-config
if [ $# -gt 0 ]; then
    case $1 in
        --tf-config | --role | --layout)
            mode=$1
            shift
            [ $# -eq 0 ] || die "$mode takes no arguments"
            ;;
        --exec)
            mode=--exec
            shift
            [ $# -gt 0 ] || die "--exec needs a command"
            ;;
        -h | --help) usage ;;
        *) die "unknown argument \"$1\" (see --help)" ;;
    esac
fi

procid=${SLURM_PROCID:-}
ntasks=${SLURM_STEP_NUM_TASKS:-${SLURM_NTASKS:-}}
nodelist=${SLURM_STEP_NODELIST:-${SLURM_JOB_NODELIST:-}}
per_node=${SLURM_STEP_TASKS_PER_NODE:-${SLURM_TASKS_PER_NODE:-}}
num_ps=${DTRAIN_NUM_PS:-1}
evaluator=${DTRAIN_EVALUATOR:-0}
base_port=${DTRAIN_PORT:-2222}

[ "$mode" = --layout ] && procid=0
is_uint "$procid" || die "SLURM_PROCID \"$procid\" is not a task rank (run inside srun)"
if ! is_uint "$ntasks" || [ "$ntasks" -lt 1 ]; then
    die "SLURM_NTASKS \"$ntasks\" is not a task count (give sbatch --ntasks or --ntasks-per-node)"
fi
[ "$procid" -lt "$ntasks" ] || die "SLURM_PROCID $procid is not below the $ntasks tasks"
[ -n "$nodelist" ] || die "SLURM_JOB_NODELIST is not set (run inside a Slurm job)"
if ! is_uint "$num_ps" || [ "$num_ps" -lt 1 ]; then
    die "DTRAIN_NUM_PS \"$num_ps\" must be 1 or more"
fi
case $evaluator in
    0 | 1) ;;
    *) die "DTRAIN_EVALUATOR \"$evaluator\" must be 0 or 1" ;;
esac
if ! is_uint "$base_port" || [ "$base_port" -lt 1 ] || [ "$base_port" -gt 65535 ]; then
    die "DTRAIN_PORT \"$base_port\" is not a port (1..65535)"
fi
num_workers=$((ntasks - num_ps - evaluator))
[ "$num_workers" -ge 1 ] ||
    die "$ntasks tasks leave no worker after $num_ps ps and $evaluator evaluator"

hosts=$(scontrol show hostnames "$nodelist") || die "scontrol show hostnames \"$nodelist\" failed"
num_nodes=0
for host in $hosts; do
    # The host goes into JSON and into a gRPC address as it is.
    case $host in
        *[!A-Za-z0-9._-]*) die "node name \"$host\" is not a plain host name" ;;
    esac
    num_nodes=$((num_nodes + 1))
done
[ "$num_nodes" -ge 1 ] || die "no node in \"$nodelist\""

# counts: the tasks on each node, in node order, as words ("2 2 2").
counts=""
if [ -n "$per_node" ]; then
    old_ifs=$IFS
    IFS=,
    for item in $per_node; do
        case $item in
            *"(x"*")")
                count=${item%%"(x"*}
                repeat=${item#*"(x"}
                repeat=${repeat%")"}
                ;;
            *)
                count=$item
                repeat=1
                ;;
        esac
        if ! is_uint "$count" || ! is_uint "$repeat"; then
            die "tasks per node \"$per_node\": cannot read \"$item\""
        fi
        while [ "$repeat" -gt 0 ]; do
            counts="$counts $count"
            repeat=$((repeat - 1))
        done
    done
    IFS=$old_ifs
else
    # Slurm's block layout over equal nodes: the first (ntasks % nodes)
    # nodes take one task more.
    i=0
    while [ "$i" -lt "$num_nodes" ]; do
        count=$((ntasks / num_nodes))
        [ "$i" -lt $((ntasks % num_nodes)) ] && count=$((count + 1))
        counts="$counts $count"
        i=$((i + 1))
    done
fi

nl='
'
# role RANK: sets task_type, index and identity of that rank.
role() {
    if [ "$1" -lt "$num_ps" ]; then
        task_type="ps"
        index=$1
        identity=ps-$index
    elif [ "$1" -lt $((num_ps + num_workers)) ]; then
        task_type="worker"
        index=$(($1 - num_ps))
        identity=worker-$index
        [ "$index" -ne 0 ] || identity=chief
    else
        task_type="evaluator"
        index=0
        identity=""
    fi
}

# One pass over the ranks, node by node: every address into its job's JSON
# list, every task into the layout, and this task's own place.
ps_list=""
worker_list=""
evaluator_list=""
layout=""
rank=0
node=0
rest_hosts=$hosts$nl
for count in $counts; do
    node=$((node + 1))
    [ "$node" -le "$num_nodes" ] ||
        die "tasks per node \"$per_node\" lists more nodes than \"$nodelist\" ($num_nodes)"
    host=${rest_hosts%%"$nl"*}
    rest_hosts=${rest_hosts#*"$nl"}
    local_id=0
    while [ "$local_id" -lt "$count" ]; do
        port=$((base_port + local_id))
        [ "$port" -le 65535 ] || die "port $port of task $rank is past 65535 (lower DTRAIN_PORT)"
        address=$host:$port
        role "$rank"
        case $task_type in
            ps) ps_list="$ps_list${ps_list:+, }\"$address\"" ;;
            worker) worker_list="$worker_list${worker_list:+, }\"$address\"" ;;
            *) evaluator_list="\"$address\"" ;;
        esac
        layout="$layout$rank $task_type $index ${identity:--} $address$nl"
        if [ "$rank" -eq "$procid" ]; then
            my_addr=$address
            my_host=$host
            my_local=$local_id
        fi
        rank=$((rank + 1))
        local_id=$((local_id + 1))
    done
done
[ "$node" -eq "$num_nodes" ] ||
    die "tasks per node \"$per_node\" lists $node nodes, \"$nodelist\" has $num_nodes"
[ "$rank" -eq "$ntasks" ] || die "tasks per node \"$per_node\" adds up to $rank tasks, not $ntasks"

if [ "$mode" = --layout ]; then
    printf '%s' "$layout"
    exit 0
fi

# This task's place, checked against what Slurm says it is.
if [ -n "${SLURM_LOCALID:-}" ] && [ "$SLURM_LOCALID" != "$my_local" ]; then
    die "task $procid has SLURM_LOCALID $SLURM_LOCALID, but a block layout gives it $my_local (run srun --distribution=block)"
fi
if [ -n "${SLURMD_NODENAME:-}" ] && [ "$SLURMD_NODENAME" != "$my_host" ]; then
    die "task $procid runs on $SLURMD_NODENAME, but a block layout puts it on $my_host (run srun --distribution=block)"
fi

role "$procid"
cluster="\"ps\": [$ps_list], \"worker\": [$worker_list]"
[ -z "$evaluator_list" ] || cluster="$cluster, \"evaluator\": [$evaluator_list]"
tf_config=$(printf '{"cluster": {%s}, "task": {"type": "%s", "index": %s}}' "$cluster" "$task_type" "$index")

case $mode in
    --tf-config) printf '%s\n' "$tf_config" ;;
    --role) printf '%s %s %s %s\n' "$task_type" "$index" "${identity:--}" "$my_addr" ;;
    --exec)
        TF_CONFIG=$tf_config
        export TF_CONFIG
        if [ -n "${DTRAIN_CERTS:-}" ] && [ -n "$identity" ]; then
            DTRAIN_TLS_CERT=$DTRAIN_CERTS/$identity.pem
            DTRAIN_TLS_KEY=$DTRAIN_CERTS/$identity-key.pem
            DTRAIN_TLS_CA=$DTRAIN_CERTS/ca.pem
            export DTRAIN_TLS_CERT DTRAIN_TLS_KEY DTRAIN_TLS_CA
        fi
        [ -n "${DTRAIN_STATUS_DIR:-}" ] || exec "$@"
        # A signal (Slurm stopping the step) reaches CMD too; this shell
        # only waits for it to finish, then records how it ended.
        trap ':' HUP INT TERM
        status=0
        "$@" || status=$?
        printf '%s %s %s\n' "$status" "$task_type" "$index" >"$DTRAIN_STATUS_DIR/$procid" ||
            echo "slurm_cluster: cannot write $DTRAIN_STATUS_DIR/$procid" >&2
        exit "$status"
        ;;
esac
