#!/bin/sh
# Checks the deployment files in deploy/ as far as a machine without Docker,
# Kubernetes or Slurm can, and never pretends to run those:
#   tfjob   deploy/kubernetes/tfjob.yaml, read line by line (no YAML library):
#           one image everywhere, the one the README and the Dockerfile build;
#           every replica type, its container "tensorflow" and its port 2222
#           named tfjob-port; the ps probes run `dtrain health` on that port
#           and readiness does not ask for SERVING; the restart policies are
#           the README's table; every DTRAIN_* variable is one cmd/dtrain.c
#           reads; each replica's certificates follow the identity rule; the
#           ConfigMap's job config is conf/linear.json with the documented
#           changes, and the binary accepts it; the real TF_CONFIG parser
#           accepts the cluster training-operator would make of the file;
#           every replica serves /metrics on port 9464 (--metrics-port, a port
#           named metrics, the prometheus.io annotations) and podmonitor.yaml
#           scrapes the TFJob's pods there
#   grafana deploy/grafana/dtrain.json parses, and every metric it queries is
#           one lib/ serves (the metrics suite checks them on live pages)
#   slurm   deploy/slurm/slurm_cluster.sh under fake Slurm variables and a fake
#           scontrol: each task's TF_CONFIG exactly, a port per local task,
#           no address twice, the errors, --exec; then dtrain.sbatch with a
#           fake srun and a fake dtrain: which statuses requeue
#   docker  deploy/Dockerfile runs scripts/install_deps.sh, its runtime
#           packages provide every shared library the built binary links
#           (ldd and dpkg -S here, on the same Debian release), USER not root
#   lint    shellcheck on the shell files (skipped when not installed)
#
# usage: sh test/deploy_check.sh   (DTRAIN_BIN: the built binary, default
#        build/dtrain). One line per check passed; the first failure stops it
#        with a message and exit 1.
set -eu
set -f # n[1-3] and the like are Slurm's, not file patterns
cd "$(dirname "$0")/.."

BIN=${DTRAIN_BIN:-build/dtrain}
DOCKERFILE=deploy/Dockerfile
TFJOB=deploy/kubernetes/tfjob.yaml
K8S_README=deploy/kubernetes/README.md
SBATCH=deploy/slurm/dtrain.sbatch
CLUSTER_SH=deploy/slurm/slurm_cluster.sh

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

fail() {
    echo "deploy_check: FAIL: $*" >&2
    exit 1
}
pass() { echo "deploy_check: ok: $*"; }
skip() { echo "deploy_check: skip: $*"; }

for f in "$DOCKERFILE" "$TFJOB" "$K8S_README" "$SBATCH" "$CLUSTER_SH" cmd/dtrain.c conf/linear.json; do
    [ -f "$f" ] || fail "$f is missing"
done
[ -x "$BIN" ] || fail "no binary $BIN: build it first (make), or set DTRAIN_BIN"

# ---- tfjob -------------------------------------------------------------

# One record per line that matters, "REPLICA WHAT VALUE...", from the file's
# layout: documents split by ---, replica types at 4 spaces under
# tfReplicaSpecs, replica fields at 6. Comment lines are skipped.
awk '
function indent(s) { match(s, /^ */); return RLENGTH }
function val(s) {
    sub(/^[^:]*:[ ]*/, "", s); sub(/[ ]+#.*$/, "", s)
    gsub(/^"|"$/, "", s); return s
}
function item(s) { sub(/^ *- */, "", s); gsub(/^"|"$/, "", s); return s }
/^---/ { doc++; kind = ""; rep = ""; specs = 0; meta = 0; next }
/^[ ]*#/ || /^[ ]*$/ { next }
{ ind = indent($0) }
ind == 0 { meta = ($0 ~ /^metadata:/) }
/^kind:/ { kind = val($0); print "doc", kind; next }
meta && /^  name:/ { print "meta", kind, val($0); next }
kind == "PersistentVolumeClaim" && /^    - ReadWrite/ { print "access", item($0); next }
kind != "TFJob" { next }
/^  tfReplicaSpecs:/ { specs = 1; next }
specs && ind <= 2 { specs = 0; rep = "" }
specs && ind == 4 && /^    [A-Za-z]+:[ ]*$/ { rep = $1; sub(/:$/, "", rep); print "replica", rep; probe = ""; next }
rep == "" { next }
probe != "" && ind <= probe_ind { probe = "" }
ind == 6 && /^      replicas:/ { print rep, "replicas", val($0) }
ind == 6 && /^      restartPolicy:/ { print rep, "restartPolicy", val($0) }
/^ *image:/ { print rep, "image", val($0) }
/^ *args:/ { print rep, "args", val($0) }
/^ *- name:/ { name = val($0); print rep, "name", name }
/^ *containerPort:/ { print rep, "containerPort", val($0), name }
/^ *(readiness|liveness)Probe:/ { probe = $1; sub(/:$/, "", probe); probe_ind = ind; next }
probe != "" && /^ *- / { print rep, "probearg", probe, item($0) }
/^ *- key:/ { key = val($0) }
/^ *path:/ && key != "" { print rep, "item", key, val($0); key = "" }
/^ *configMap:/ { want_cm = 1; next }
want_cm && /^ *name:/ { print rep, "configMap", val($0); want_cm = 0 }
/^ *claimName:/ { print rep, "claimName", val($0) }
/^ *secretName:/ { print rep, "secretName", val($0) }
/^ *mountPath:/ { print rep, "mountPath", val($0), name }
' "$TFJOB" >"$TMP/tfjob.rec"

rec() { grep "^$1 " "$TMP/tfjob.rec" | cut -d' ' -f2- || true; }
# has REPLICA WHAT VALUE...: that record, exactly, is there.
has() { grep -qxF "$*" "$TMP/tfjob.rec"; }
grep -q '^doc TFJob$' "$TMP/tfjob.rec" || fail "$TFJOB: no TFJob document"

# The image: one value on every replica, the one the README pushes and the
# Dockerfile's build line tags.
images=$(grep '^[A-Za-z]* image ' "$TMP/tfjob.rec" | cut -d' ' -f3 | sort -u)
[ -n "$images" ] || fail "$TFJOB: no image"
[ "$(echo "$images" | wc -l)" -eq 1 ] || fail "$TFJOB: more than one image: $(echo "$images" | tr '\n' ' ')"
image=$images
readme_build=$(sed -n 's/^docker build -f deploy\/Dockerfile -t \([^ ]*\) \.$/\1/p' "$K8S_README")
readme_push=$(sed -n 's/^docker push \([^ ]*\)$/\1/p' "$K8S_README")
docker_build=$(sed -n 's/^#  *docker build -f deploy\/Dockerfile -t \([^ ]*\) \.$/\1/p' "$DOCKERFILE")
[ "$readme_build" = "$image" ] || fail "$K8S_README builds \"$readme_build\", $TFJOB runs \"$image\""
[ "$readme_push" = "$image" ] || fail "$K8S_README pushes \"$readme_push\", $TFJOB runs \"$image\""
[ "$docker_build" = "$image" ] || fail "$DOCKERFILE's build line tags \"$docker_build\", $TFJOB runs \"$image\""
pass "tfjob: image $image everywhere, as the README and the Dockerfile build it"

# Every replica type, once, each with the container and port training-operator
# looks for.
replicas=$(rec replica | sort)
[ "$replicas" = "$(printf '%s\n' Chief Evaluator PS Worker)" ] ||
    fail "$TFJOB: replica types are \"$(echo "$replicas" | tr '\n' ' ')\", not Chief Evaluator PS Worker"
for r in $replicas; do
    has "$r" 'name tensorflow' || fail "$TFJOB: $r has no container named tensorflow"
    has "$r" 'containerPort 2222 tfjob-port' || fail "$TFJOB: $r has no containerPort 2222 named tfjob-port"
    n=$(rec "$r" | sed -n 's/^replicas //p')
    case $n in '' | *[!0-9]*) fail "$TFJOB: $r has no replicas count" ;; esac
    has "$r" args '["--config", "/etc/dtrain/job/linear.json", "--metrics-port", "9464"]' ||
        fail "$TFJOB: $r does not run with --config /etc/dtrain/job/linear.json --metrics-port 9464"
    has "$r" 'containerPort 9464 metrics' || fail "$TFJOB: $r has no containerPort 9464 named metrics"
done
pass "tfjob: PS, Chief, Worker, Evaluator each have container tensorflow, port 2222 named tfjob-port, --config, /metrics on 9464 named metrics"

# Scraping: each pod template says where its /metrics is; the PodMonitor
# selects the TFJob's pods and the port by that name.
[ "$(grep -c '^ *prometheus.io/scrape: "true"$' "$TFJOB")" -eq 4 ] ||
    fail "$TFJOB: not every replica's pod has prometheus.io/scrape: \"true\""
[ "$(grep -c '^ *prometheus.io/port: "9464"$' "$TFJOB")" -eq 4 ] ||
    fail "$TFJOB: not every replica's pod has prometheus.io/port: \"9464\" (its --metrics-port)"
PODMON=deploy/kubernetes/podmonitor.yaml
[ -f "$PODMON" ] || fail "$PODMON is missing"
tfjob_name=$(awk '/^kind: TFJob/ { t = 1 } t && /^  name:/ { print $2; exit }' "$TFJOB")
grep -q "^      training.kubeflow.org/job-name: $tfjob_name\$" "$PODMON" ||
    fail "$PODMON does not select the pods of TFJob $tfjob_name"
grep -q '^    - port: metrics$' "$PODMON" || fail "$PODMON does not scrape the port named metrics"
pass "monitoring: every pod annotated for port 9464; $PODMON selects TFJob $tfjob_name's port metrics"

# The Grafana dashboard: valid JSON, and every metric it queries is one a
# role serves (named in lib/; check_metrics' every_role test checks them
# against live pages).
DASH=deploy/grafana/dtrain.json
[ -f "$DASH" ] || fail "$DASH is missing"
/usr/bin/python3 -c '
import json, re, sys
d = json.load(open(sys.argv[1]))
names = set()
for p in d["panels"]:
    for t in p.get("targets", []):
        names.update(re.findall(r"\b(?:dtrain|process)_[a-z_]+", t["expr"]))
for n in sorted(names):
    print(re.sub(r"_(bucket|sum|count)$", "", n))
' "$DASH" | sort -u >"$TMP/dash.metrics" || fail "$DASH is not valid JSON"
[ -s "$TMP/dash.metrics" ] || fail "$DASH queries no dtrain metric"
while read -r m; do
    grep -rq --include='*.c' "\"$m\"" lib || fail "$DASH queries $m, which no role serves (not named in lib/)"
done <"$TMP/dash.metrics"
pass "grafana: $DASH parses; its $(wc -l <"$TMP/dash.metrics") metrics are served by the roles"

# The ps probes: dtrain health on the ps's own port; readiness takes
# NOT_SERVING as ready.
port=$(rec PS | sed -n 's/^containerPort \([0-9]*\) tfjob-port$/\1/p')
for probe in readinessProbe livenessProbe; do
    cmd=$(rec PS | sed -n "s/^probearg $probe //p" | tr '\n' ' ')
    case $cmd in
        "dtrain health "*) ;;
        *) fail "$TFJOB: the ps's $probe runs \"$cmd\", not dtrain health" ;;
    esac
    case $cmd in
        *"--address 127.0.0.1:$port "*) ;;
        *) fail "$TFJOB: the ps's $probe does not dial 127.0.0.1:$port (its containerPort): $cmd" ;;
    esac
    case $cmd in
        *"--tls-cert /etc/dtrain/certs/tool/cert.pem "*"--tls-key /etc/dtrain/certs/tool/key.pem "*) ;;
        *) fail "$TFJOB: the ps's $probe does not present the tool identity: $cmd" ;;
    esac
done
case $(rec PS | sed -n 's/^probearg readinessProbe //p' | tr '\n' ' ') in
    *--serving*) fail "$TFJOB: the ps's readinessProbe asks for SERVING; the chief could never reach the ps" ;;
esac
has PS 'item tool.pem tool/cert.pem' || fail "$TFJOB: the ps does not mount tool.pem for its probes"
for r in Chief Worker Evaluator; do
    if rec "$r" | grep -q '^probearg '; then fail "$TFJOB: $r has probes; only the ps serves"; fi
done
pass "tfjob: ps readiness and liveness run dtrain health on 127.0.0.1:$port as tool, readiness without --serving"

# Restart policies: the README's table, replica by replica.
awk -F'|' '{ gsub(/ /, "", $2); gsub(/ /, "", $3) }
    $2 ~ /^(PS|Chief|Worker|Evaluator)$/ && $3 ~ /^(ExitCode|OnFailure|Never|Always)$/ { print $2, $3 }' \
    "$K8S_README" | sort >"$TMP/policies.readme"
for r in $replicas; do echo "$r $(rec "$r" | sed -n 's/^restartPolicy //p')"; done | sort >"$TMP/policies.yaml"
[ -s "$TMP/policies.readme" ] || fail "$K8S_README has no restartPolicy table"
cmp -s "$TMP/policies.readme" "$TMP/policies.yaml" ||
    fail "restart policies differ: README \"$(tr '\n' ',' <"$TMP/policies.readme")\", $TFJOB \"$(tr '\n' ',' <"$TMP/policies.yaml")\""
pass "tfjob: restart policies are the README's ($(tr '\n' ',' <"$TMP/policies.yaml" | sed 's/,$//'))"

# DTRAIN_* variables: only ones the binary reads, and TLS on every training
# replica.
grep -o '"DTRAIN_[A-Z0-9_]*"' cmd/dtrain.c | tr -d '"' | sort -u >"$TMP/env.read"
grep -o 'DTRAIN_[A-Z0-9_]*' "$TFJOB" | sort -u >"$TMP/env.used"
unknown=$(comm -23 "$TMP/env.used" "$TMP/env.read" | tr '\n' ' ')
[ -z "$unknown" ] || fail "$TFJOB uses $unknown which cmd/dtrain.c never reads"
for r in PS Chief Worker; do
    for v in DTRAIN_TLS_CERT DTRAIN_TLS_KEY DTRAIN_TLS_CA; do
        has "$r" "name $v" || fail "$TFJOB: $r does not set $v"
    done
    has "$r" 'name REPLICA_INDEX' || fail "$TFJOB: $r does not take REPLICA_INDEX from its label"
done
pass "tfjob: DTRAIN_* variables ($(tr '\n' ' ' <"$TMP/env.used" | sed 's/ $//')) are read by cmd/dtrain.c; PS, Chief, Worker set the TLS ones"

# Certificates by identity: PS index i is ps:i, the Chief chief, TF's Worker
# index i dtrain's worker:(i+1); each from the one Secret the README makes.
secret=$(sed -n 's/^kubectl create secret generic \([a-z0-9-]*\) .*/\1/p' "$K8S_README")
[ -n "$secret" ] || fail "$K8S_README does not create the certificate Secret"
expect_items() { # REPLICA KEY-STEM INDEX
    has "$1" "item $2.pem $3/cert.pem" || fail "$TFJOB: $1 index $3 does not get $2.pem as $3/cert.pem"
    has "$1" "item $2-key.pem $3/key.pem" || fail "$TFJOB: $1 index $3 does not get $2-key.pem as $3/key.pem"
    grep -q -- "--from-file=certs/$2.pem --from-file=certs/$2-key.pem" "$K8S_README" ||
        fail "$K8S_README does not put $2.pem and $2-key.pem in the Secret"
}
i=0
while [ "$i" -lt "$(rec PS | sed -n 's/^replicas //p')" ]; do expect_items PS "ps-$i" "$i"; i=$((i + 1)); done
expect_items Chief chief 0
i=0
while [ "$i" -lt "$(rec Worker | sed -n 's/^replicas //p')" ]; do
    expect_items Worker "worker-$((i + 1))" "$i"
    i=$((i + 1))
done
for r in PS Chief Worker; do
    has "$r" "secretName $secret" || fail "$TFJOB: $r does not mount the Secret $secret"
    has "$r" 'item ca.pem ca.pem' || fail "$TFJOB: $r does not mount ca.pem"
    has "$r" 'mountPath /etc/dtrain/certs certs' || fail "$TFJOB: $r does not mount its certificates at /etc/dtrain/certs"
done
if rec Evaluator | grep -q '^secretName '; then
    fail "$TFJOB: the evaluator talks to no ps and needs no certificate"
fi
if grep -q '^[A-Za-z]* item ca-key' "$TMP/tfjob.rec"; then
    fail "$TFJOB mounts ca-key.pem: the CA's key must stay out of the cluster"
fi
pass "tfjob: certificates by identity (ps:i, chief, TF worker i = worker:i+1) from the Secret $secret"

# The shared volume and the job config.
pvc=$(rec meta | sed -n 's/^PersistentVolumeClaim //p')
cm=$(rec meta | sed -n 's/^ConfigMap //p')
job=$(rec meta | sed -n 's/^TFJob //p')
if [ -z "$pvc" ] || [ -z "$cm" ] || [ -z "$job" ]; then
    fail "$TFJOB needs a PersistentVolumeClaim, a ConfigMap and the TFJob"
fi
has access ReadWriteMany || fail "$TFJOB: the claim $pvc is not ReadWriteMany"
for r in $replicas; do
    has "$r" "configMap $cm" || fail "$TFJOB: $r does not mount the ConfigMap $cm"
    has "$r" 'mountPath /etc/dtrain/job job' || fail "$TFJOB: $r does not mount the job config at /etc/dtrain/job"
done
for r in Chief Evaluator PS; do
    has "$r" "claimName $pvc" || fail "$TFJOB: $r does not mount the claim $pvc"
    has "$r" 'mountPath /logs logs' || fail "$TFJOB: $r does not mount the claim at /logs"
done
# linear.json in the ConfigMap: conf/linear.json, its data from the files
# beside it and log_dir on the volume; nothing else differs.
cm_file() { # KEY: the block scalar's text
    awk -v key="  $1: |" '$0 == key { on = 1; next } on && /^  [^ ]/ { exit } on { sub(/^    /, ""); print }' "$TFJOB"
}
cm_file linear.json >"$TMP/linear.json"
cm_file train.csv >"$TMP/train.csv"
cm_file eval.csv >"$TMP/eval.csv"
if [ ! -s "$TMP/linear.json" ] || [ ! -s "$TMP/train.csv" ] || [ ! -s "$TMP/eval.csv" ]; then
    fail "$TFJOB: the ConfigMap lacks linear.json, train.csv or eval.csv"
fi
sed -e 's#"data": "line"#"data": "csv"#' \
    -e 's#"train_data": ""#"train_data": "/etc/dtrain/job/train.csv"#' \
    -e 's#"eval_data": ""#"eval_data": "/etc/dtrain/job/eval.csv"#' \
    -e 's#"label_column": "0"#"label_column": "y"#' \
    -e 's#"max_steps": 0#"max_steps": 2000#' \
    -e 's#"log_dir": "logs/linear"#"log_dir": "/logs/linear"#' conf/linear.json >"$TMP/linear.expected"
diff "$TMP/linear.expected" "$TMP/linear.json" >"$TMP/linear.diff" ||
    fail "$TFJOB: the ConfigMap's linear.json is not conf/linear.json with the documented changes: $(head -5 "$TMP/linear.diff" | tr '\n' ' ')"
if [ "$(head -1 "$TMP/train.csv")" != "x,y" ] || [ "$(grep -c . "$TMP/train.csv")" -ne 101 ]; then
    fail "$TFJOB: train.csv is not the header x,y and 100 examples"
fi
# The binary takes the config (exit 2 is a config error; without a
# checkpoint, eval stops after that with 1).
mkdir "$TMP/nolog"
set +e
"$BIN" eval --config "$TMP/linear.json" --set "train_data=$TMP/train.csv" --set "eval_data=$TMP/eval.csv" \
    --log-dir "$TMP/nolog" >"$TMP/eval.out" 2>&1
status=$?
set -e
[ "$status" -ne 2 ] || fail "$BIN rejects the ConfigMap's linear.json: $(cat "$TMP/eval.out")"
pass "tfjob: claim $pvc is ReadWriteMany at /logs; ConfigMap $cm is conf/linear.json with csv data and log_dir /logs/linear, accepted by $BIN"

# The TF_CONFIG training-operator makes of this file (every replica type, the
# evaluator too, as <job>-<type>-<i>.<namespace>.svc:<port>), through the
# real parser. A token file that cannot be read is the first error after the
# cluster and the role are resolved, so nothing listens.
svc_list() { # TYPE COUNT
    out=""
    j=0
    while [ "$j" -lt "$2" ]; do
        out="$out${out:+, }\"$job-$1-$j.default.svc:2222\""
        j=$((j + 1))
    done
    printf '[%s]' "$out"
}
cluster=$(printf '"chief": %s, "evaluator": %s, "ps": %s, "worker": %s' \
    "$(svc_list chief "$(rec Chief | sed -n 's/^replicas //p')")" \
    "$(svc_list evaluator "$(rec Evaluator | sed -n 's/^replicas //p')")" \
    "$(svc_list ps "$(rec PS | sed -n 's/^replicas //p')")" \
    "$(svc_list worker "$(rec Worker | sed -n 's/^replicas //p')")")
parse_tf_config() { # TF_CONFIG WHAT: fail unless dtrain resolves it
    set +e
    TF_CONFIG=$1 "$BIN" --config conf/linear.json --token-file "$TMP/no-such-file" >"$TMP/parse.out" 2>&1
    status=$?
    set -e
    if [ "$status" -ne 2 ] || ! grep -q -- '--token-file.*cannot read' "$TMP/parse.out"; then
        fail "$BIN does not take the TF_CONFIG of $2 (exit $status): $(head -2 "$TMP/parse.out" | tr '\n' ' ')"
    fi
}
# The canary: a TF_CONFIG with a task out of range must be the error, else
# the token file is checked first and the check below would prove nothing.
set +e
TF_CONFIG='{"cluster": {"ps": ["a:1"], "worker": ["b:1"]}, "task": {"type": "worker", "index": 5}}' \
    "$BIN" --config conf/linear.json --token-file "$TMP/no-such-file" >"$TMP/parse.out" 2>&1
status=$?
set -e
if [ "$status" -ne 2 ] || ! grep -q 'TF_CONFIG' "$TMP/parse.out"; then
    fail "$BIN does not read TF_CONFIG before the token file (exit $status: $(head -1 "$TMP/parse.out")); this check needs another probe"
fi
for task in chief:0 ps:0 worker:0 worker:1 evaluator:0; do
    parse_tf_config "{\"cluster\": {$cluster}, \"task\": {\"type\": \"${task%:*}\", \"index\": ${task#*:}}, \"environment\": \"cloud\"}" \
        "the TFJob's $task"
done
pass "tfjob: $BIN resolves the TF_CONFIG training-operator makes for each task (chief, ps, workers, evaluator)"

# ---- slurm -------------------------------------------------------------

mkdir "$TMP/bin"
cat >"$TMP/bin/scontrol" <<'EOF'
#!/bin/sh
# scontrol, as far as the Slurm scripts use it.
case "$1 $2" in
    "show hostnames")
        case $3 in
            'n[1-3]') printf 'n1\nn2\nn3\n' ;;
            'n[1-2]') printf 'n1\nn2\n' ;;
            *) printf '%s\n' "$3" ;;
        esac
        ;;
    "requeue "*) echo "$2" >>"$FAKE_REQUEUE_LOG" ;;
    *) exit 1 ;;
esac
EOF
chmod +x "$TMP/bin/scontrol"
FAKE_REQUEUE_LOG=$TMP/requeue.log
export FAKE_REQUEUE_LOG
PATH_WITH_FAKES=$TMP/bin:$PATH

# clean VAR=VALUE... COMMAND...: COMMAND with the fakes first on PATH and no
# Slurm or DTRAIN_ variable of this shell's, only the ones given.
clean() {
    (
        for v in $(env | sed -n -e 's/^\(SLURM[A-Z_]*\)=.*/\1/p' -e 's/^\(DTRAIN_[A-Z_]*\)=.*/\1/p'); do
            unset "$v"
        done
        PATH=$PATH_WITH_FAKES
        export PATH
        exec env "$@"
    )
}
# slurm RANK VAR=VALUE... COMMAND...: COMMAND as task RANK.
slurm() {
    slurm_rank=$1
    shift
    clean SLURM_PROCID="$slurm_rank" "$@"
}
# on_three_nodes RANK VAR=VALUE... COMMAND...: 6 tasks on n[1-3], 2 on each.
on_three_nodes() {
    three_rank=$1
    shift
    slurm "$three_rank" SLURM_NTASKS=6 'SLURM_JOB_NODELIST=n[1-3]' 'SLURM_TASKS_PER_NODE=2(x3)' "$@"
}

# 3 nodes, 2 tasks each, 1 ps: ps:0 on n1's first port, the chief beside it.
W='"worker": ["n1:2223", "n2:2222", "n2:2223", "n3:2222", "n3:2223"]'
set -- \
    "{\"cluster\": {\"ps\": [\"n1:2222\"], $W}, \"task\": {\"type\": \"ps\", \"index\": 0}}" \
    "{\"cluster\": {\"ps\": [\"n1:2222\"], $W}, \"task\": {\"type\": \"worker\", \"index\": 0}}" \
    "{\"cluster\": {\"ps\": [\"n1:2222\"], $W}, \"task\": {\"type\": \"worker\", \"index\": 1}}" \
    "{\"cluster\": {\"ps\": [\"n1:2222\"], $W}, \"task\": {\"type\": \"worker\", \"index\": 2}}" \
    "{\"cluster\": {\"ps\": [\"n1:2222\"], $W}, \"task\": {\"type\": \"worker\", \"index\": 3}}" \
    "{\"cluster\": {\"ps\": [\"n1:2222\"], $W}, \"task\": {\"type\": \"worker\", \"index\": 4}}"
rank=0
for want in "$@"; do
    got=$(on_three_nodes "$rank" SLURM_LOCALID=$((rank % 2)) sh "$CLUSTER_SH") ||
        fail "slurm_cluster.sh failed for task $rank"
    [ "$got" = "$want" ] || fail "slurm_cluster.sh task $rank: got $got, want $want"
    echo "$got" >>"$TMP/tf_configs"
    rank=$((rank + 1))
done
pass "slurm: 6 tasks on n[1-3], 2 per node, 1 ps: each task's TF_CONFIG exactly"

# Every address once, and on each node the ports are the base plus the local
# task id (0, 1).
first=$(head -1 "$TMP/tf_configs")
echo "$first" | grep -o '"[a-z0-9]*:[0-9]*"' | tr -d '"' >"$TMP/addrs"
[ "$(wc -l <"$TMP/addrs")" -eq 6 ] || fail "slurm: TF_CONFIG lists $(wc -l <"$TMP/addrs") addresses, not 6"
[ -z "$(sort "$TMP/addrs" | uniq -d)" ] || fail "slurm: an address appears twice: $(sort "$TMP/addrs" | uniq -d)"
rank=0
while read -r address; do
    [ "${address#*:}" -eq $((2222 + rank % 2)) ] || fail "slurm: task $rank's port is ${address#*:}, not 2222 + local id $((rank % 2))"
    rank=$((rank + 1))
done <"$TMP/addrs"
[ "$(sort -u "$TMP/tf_configs" | sed 's/, "task".*//' | sort -u | wc -l)" -eq 1 ] ||
    fail "slurm: the tasks disagree on the cluster"
pass "slurm: every address distinct, port = 2222 + local task id, one cluster for all tasks"

# 2 ps, an evaluator, base port 3000, uneven nodes (3, 2, 1 tasks): the
# evaluator is the last task.
got=$(slurm 5 SLURM_NTASKS=6 'SLURM_JOB_NODELIST=n[1-3]' SLURM_TASKS_PER_NODE=3,2,1 DTRAIN_NUM_PS=2 \
    DTRAIN_EVALUATOR=1 DTRAIN_PORT=3000 sh "$CLUSTER_SH")
want='{"cluster": {"ps": ["n1:3000", "n1:3001"], "worker": ["n1:3002", "n2:3000", "n2:3001"], "evaluator": ["n3:3000"]}, "task": {"type": "evaluator", "index": 0}}'
[ "$got" = "$want" ] || fail "slurm_cluster.sh with 2 ps and an evaluator: got $got, want $want"
got=$(slurm 1 SLURM_NTASKS=6 'SLURM_JOB_NODELIST=n[1-3]' SLURM_TASKS_PER_NODE=3,2,1 DTRAIN_NUM_PS=2 \
    DTRAIN_EVALUATOR=1 DTRAIN_PORT=3000 sh "$CLUSTER_SH" --role)
[ "$got" = "ps 1 ps-1 n1:3001" ] || fail "slurm_cluster.sh --role for task 1: got \"$got\""
# No tasks-per-node variable: Slurm's even block layout (5 on 2 nodes: 3, 2).
got=$(slurm 3 SLURM_NTASKS=5 'SLURM_JOB_NODELIST=n[1-2]' sh "$CLUSTER_SH" --role)
[ "$got" = "worker 2 worker-2 n2:2222" ] || fail "slurm_cluster.sh without tasks per node, task 3: got \"$got\""
pass "slurm: 2 ps + evaluator + DTRAIN_PORT, uneven nodes, and the even layout without tasks per node"

# Errors are exit 2 with a reason.
expect_error() { # WHAT PATTERN VAR=VALUE... -- (runs slurm_cluster.sh for task 0)
    what=$1
    pattern=$2
    shift 2
    set +e
    slurm 0 "$@" sh "$CLUSTER_SH" >"$TMP/err.out" 2>&1
    status=$?
    set -e
    if [ "$status" -ne 2 ] || ! grep -q "$pattern" "$TMP/err.out"; then
        fail "slurm_cluster.sh with $what: exit $status, \"$(cat "$TMP/err.out")\" (want 2 and $pattern)"
    fi
}
expect_error "no worker left" "leave no worker" SLURM_NTASKS=2 SLURM_JOB_NODELIST=n1 DTRAIN_NUM_PS=2
expect_error "a local id against the layout" "block" SLURM_NTASKS=2 SLURM_JOB_NODELIST=n1 SLURM_LOCALID=1
expect_error "another node than the layout's" "block" SLURM_NTASKS=2 SLURM_JOB_NODELIST=n1 SLURMD_NODENAME=n9
expect_error "tasks per node not adding up" "adds up to" SLURM_NTASKS=6 'SLURM_JOB_NODELIST=n[1-3]' SLURM_TASKS_PER_NODE=2,2,1
expect_error "a bad port" "DTRAIN_PORT" SLURM_NTASKS=2 SLURM_JOB_NODELIST=n1 DTRAIN_PORT=70000
expect_error "no rank" "SLURM_PROCID" SLURM_PROCID= SLURM_NTASKS=2 SLURM_JOB_NODELIST=n1
pass "slurm: bad layouts and variables are exit 2 with a reason"

# --exec: TF_CONFIG and the task's own certificate in the environment.
# shellcheck disable=SC2016 # the task's shell expands them
got=$(on_three_nodes 1 DTRAIN_CERTS=/certs sh "$CLUSTER_SH" --exec sh -c \
    'printf "%s|%s|%s|%s" "$TF_CONFIG" "$DTRAIN_TLS_CERT" "$DTRAIN_TLS_KEY" "$DTRAIN_TLS_CA"')
[ "$got" = "$(sed -n 2p "$TMP/tf_configs")|/certs/chief.pem|/certs/chief-key.pem|/certs/ca.pem" ] ||
    fail "slurm_cluster.sh --exec for the chief: got $got"
# shellcheck disable=SC2016
got=$(on_three_nodes 3 DTRAIN_CERTS=/certs sh "$CLUSTER_SH" --exec sh -c 'printf %s "$DTRAIN_TLS_CERT"')
[ "$got" = /certs/worker-2.pem ] || fail "slurm_cluster.sh --exec for worker 2: certificate $got"
# shellcheck disable=SC2016
got=$(on_three_nodes 0 DTRAIN_CERTS=/certs sh "$CLUSTER_SH" --exec sh -c 'printf %s "$DTRAIN_TLS_KEY"')
[ "$got" = /certs/ps-0-key.pem ] || fail "slurm_cluster.sh --exec for ps 0: key $got"
mkdir "$TMP/status"
set +e
on_three_nodes 4 DTRAIN_STATUS_DIR="$TMP/status" sh "$CLUSTER_SH" --exec sh -c 'exit 200'
status=$?
set -e
if [ "$status" -ne 200 ] || [ "$(cat "$TMP/status/4" 2>/dev/null)" != "200 worker 3" ]; then
    fail "slurm_cluster.sh --exec with DTRAIN_STATUS_DIR: exit $status, status file \"$(cat "$TMP/status/4" 2>/dev/null)\""
fi
pass "slurm: --exec exports TF_CONFIG and the identity's certificate (chief, worker-N, ps-N), records the status"

# Each task's TF_CONFIG through the real parser.
rank=0
while read -r tf_config; do
    parse_tf_config "$tf_config" "slurm task $rank"
    rank=$((rank + 1))
done <"$TMP/tf_configs"
parse_tf_config "$want" "the slurm evaluator"
pass "slurm: $BIN resolves every task's TF_CONFIG"

# dtrain.sbatch under a fake srun (block layout, here) and a fake dtrain that
# exits as told per task: which statuses end the job, which requeue it.
cat >"$TMP/bin/srun" <<'EOF'
#!/bin/sh
# srun, as far as dtrain.sbatch uses it: every task here, block layout over
# SLURM_TASKS_PER_NODE ("C(xN)"), the highest status.
while [ $# -gt 0 ]; do case $1 in --*) shift ;; *) break ;; esac; done
per=${SLURM_TASKS_PER_NODE%%(*}
rank=0
pids=""
for host in $(scontrol show hostnames "$SLURM_JOB_NODELIST"); do
    local_id=0
    while [ "$local_id" -lt "$per" ] && [ "$rank" -lt "$SLURM_NTASKS" ]; do
        SLURM_PROCID=$rank SLURM_LOCALID=$local_id SLURMD_NODENAME=$host "$@" &
        pids="$pids $!"
        rank=$((rank + 1))
        local_id=$((local_id + 1))
    done
done
highest=0
for pid in $pids; do
    wait "$pid" && status=0 || status=$?
    [ "$status" -gt "$highest" ] && highest=$status
done
exit "$highest"
EOF
cat >"$TMP/bin/fake-dtrain" <<'EOF'
#!/bin/sh
# Exits with FAKE_EXIT_<type><index> (default 0), the task from TF_CONFIG.
task=$(printf '%s' "$TF_CONFIG" | sed 's/.*"task": {"type": "\([a-z]*\)", "index": \([0-9]*\)}.*/\1\2/')
eval "exit \${FAKE_EXIT_$task:-0}"
EOF
chmod +x "$TMP/bin/srun" "$TMP/bin/fake-dtrain"
sbatch_case() { # WANT-STATUS WANT-REQUEUES VAR=VALUE...
    want_status=$1
    want_requeues=$2
    shift 2
    : >"$FAKE_REQUEUE_LOG"
    set +e
    clean SLURM_JOB_ID=42 SLURM_SUBMIT_DIR="$(pwd)" SLURM_NTASKS=6 'SLURM_JOB_NODELIST=n[1-3]' \
        'SLURM_TASKS_PER_NODE=2(x3)' DTRAIN_EVALUATOR=1 DTRAIN_BIN="$TMP/bin/fake-dtrain" \
        DTRAIN_LOG_DIR="$TMP/sbatch-logs" FAKE_REQUEUE_LOG="$FAKE_REQUEUE_LOG" "$@" sh "$SBATCH" \
        >"$TMP/sbatch.out" 2>&1
    status=$?
    set -e
    requeues=$(wc -l <"$FAKE_REQUEUE_LOG")
    if [ "$status" -ne "$want_status" ] || [ "$requeues" -ne "$want_requeues" ]; then
        fail "dtrain.sbatch with ${*:-no failure}: exit $status and $requeues requeues, want $want_status and $want_requeues: $(tail -3 "$TMP/sbatch.out" | tr '\n' ' ')"
    fi
}
sbatch_case 0 0
sbatch_case 0 0 FAKE_EXIT_worker2=137      # a worker killed as the chief finished
sbatch_case 200 1 FAKE_EXIT_worker0=200    # the chief: a peer unreachable
sbatch_case 143 1 FAKE_EXIT_worker0=143    # the chief: preempted
sbatch_case 75 1 FAKE_EXIT_worker0=75      # the chief: final checkpoint unwritable
sbatch_case 2 0 FAKE_EXIT_evaluator0=2     # a config error anywhere: permanent
sbatch_case 1 0 FAKE_EXIT_worker0=1        # the chief: permanent failure
sbatch_case 200 0 FAKE_EXIT_worker0=200 SLURM_RESTART_COUNT=3   # requeued enough
sbatch_case 2 0 DTRAIN_NUM_PS=6            # no worker left: stops before srun
pass "slurm: dtrain.sbatch requeues on the chief's 75, 200, 128+N (up to DTRAIN_MAX_REQUEUES), not on 0, 1, 2"

# ---- docker ------------------------------------------------------------

# The build stage runs the install script, the runtime stage runs as a user.
stages=$(grep -c '^FROM ' "$DOCKERFILE")
[ "$stages" -eq 2 ] || fail "$DOCKERFILE has $stages stages, not 2 (build, runtime)"
awk '/^FROM /{n++} n == 1 && /^RUN .*sh scripts\/install_deps\.sh/ { found = 1 } END { exit !found }' "$DOCKERFILE" ||
    fail "$DOCKERFILE's build stage does not RUN sh scripts/install_deps.sh"
awk '/^FROM /{n++} n == 1 && /^COPY scripts\/install_deps\.sh/ { found = 1 } END { exit !found }' "$DOCKERFILE" ||
    fail "$DOCKERFILE's build stage does not COPY scripts/install_deps.sh"
awk '/^FROM /{n++} n == 1 && /^RUN make/ { found = 1 } END { exit !found }' "$DOCKERFILE" ||
    fail "$DOCKERFILE's build stage does not RUN make"
user=$(awk '/^FROM /{n++} n == 2 && /^USER / { u = $2 } END { print u }' "$DOCKERFILE")
case ${user%%:*} in
    '') fail "$DOCKERFILE's runtime stage has no USER" ;;
    0 | root) fail "$DOCKERFILE's runtime stage runs as root ($user)" ;;
    *[!0-9]*) fail "$DOCKERFILE's USER $user is not numeric: runAsNonRoot cannot verify it" ;;
esac
grep -q '^COPY --from=build /src/build/dtrain /usr/local/bin/dtrain$' "$DOCKERFILE" ||
    fail "$DOCKERFILE does not copy the binary to /usr/local/bin/dtrain"
grep -q '^ENTRYPOINT \["dtrain"\]$' "$DOCKERFILE" || fail "$DOCKERFILE's ENTRYPOINT is not dtrain"
pass "docker: build stage runs scripts/install_deps.sh and make; runtime copies the binary, ENTRYPOINT dtrain, USER $user"

# The runtime packages against the binary built here, on the same release.
release=$(sed -n 's/^ARG DEBIAN_RELEASE=//p' "$DOCKERFILE")
here=$(sed -n 's/^VERSION_CODENAME=//p' /etc/os-release 2>/dev/null || true)
if ! command -v dpkg >/dev/null 2>&1 || ! command -v ldd >/dev/null 2>&1; then
    skip "docker: runtime packages (no dpkg or ldd here)"
elif [ "$here" != "$release" ]; then
    skip "docker: runtime packages (this machine is Debian \"$here\", the image $release: other package names)"
else
    packages=$(sed -n 's/^ARG RUNTIME_PACKAGES="\(.*\)"$/\1/p' "$DOCKERFILE")
    [ -n "$packages" ] || fail "$DOCKERFILE has no ARG RUNTIME_PACKAGES=\"...\""
    # The owner of every library the binary loads, by one dpkg -S over the
    # names dpkg may know it by (ldd may say /lib where dpkg says /usr/lib,
    # or the other way round, or name a symlink).
    ldd "$BIN" >"$TMP/ldd"
    awk '/=>/ && $3 ~ /^\// { print $1, $3 }' "$TMP/ldd" >"$TMP/libs"
    [ -s "$TMP/libs" ] || fail "ldd $BIN lists no libraries"
    while read -r soname lib; do
        real=$(readlink -f "$lib")
        for path in "$lib" "$real"; do
            echo "$soname $path"
            case $path in
                /usr/*) echo "$soname ${path#/usr}" ;;
                *) echo "$soname /usr$path" ;;
            esac
        done
    done <"$TMP/libs" >"$TMP/candidates"
    cut -d' ' -f2 "$TMP/candidates" | sort -u | xargs dpkg -S 2>/dev/null >"$TMP/dpkg-S" || true
    # "pkg:arch: /path" -> "/path pkg"; then soname -> pkg.
    awk -F': ' 'NF == 2 && $2 ~ /^\// { sub(/:.*/, "", $1); print $2, $1 }' "$TMP/dpkg-S" >"$TMP/owners"
    awk 'NR == FNR { owner[$1] = $2; next }
        !($1 in found) && ($2 in owner) { found[$1] = owner[$2]; print $1, owner[$2] }' \
        "$TMP/owners" "$TMP/candidates" >"$TMP/lib-packages"
    while read -r soname lib; do
        grep -q "^$soname " "$TMP/lib-packages" || fail "dpkg -S: no package owns $lib ($soname)"
    done <"$TMP/libs"
    # The listed packages and everything they depend on, as installed here
    # (apt brings the same into the image).
    dpkg-query -W -f='${Package} ${Pre-Depends}, ${Depends}\n' | awk -v roots="$packages" '
        { pkg = $1; $1 = ""; deps[pkg] = $0 }
        END {
            n = split(roots, queue, " ")
            for (i = 1; i <= n; i++) seen[queue[i]] = 1
            for (head = 1; head <= n; head++) {
                d = deps[queue[head]]
                gsub(/\([^)]*\)/, "", d); gsub(/\|/, ",", d)
                m = split(d, alt, ",")
                for (j = 1; j <= m; j++) {
                    x = alt[j]; gsub(/ /, "", x); sub(/:.*/, "", x)
                    if (x != "" && !(x in seen)) { seen[x] = 1; queue[++n] = x }
                }
            }
            for (p in seen) print p
        }' >"$TMP/closure"
    # Every library from the closure; the ones the binary names itself
    # (NEEDED) from the list, libc aside.
    n=0
    while read -r soname pkg; do
        grep -qx "$pkg" "$TMP/closure" ||
            fail "$BIN loads $soname from $pkg, which RUNTIME_PACKAGES ($packages) does not bring"
        n=$((n + 1))
    done <"$TMP/lib-packages"
    if command -v objdump >/dev/null 2>&1; then
        for soname in $(objdump -p "$BIN" | awk '$1 == "NEEDED" { print $2 }'); do
            pkg=$(awk -v s="$soname" '$1 == s { print $2 }' "$TMP/lib-packages")
            [ -n "$pkg" ] || fail "ldd does not resolve $soname, which $BIN needs"
            [ "$pkg" = libc6 ] && continue
            case " $packages " in
                *" $pkg "*) ;;
                *) fail "$BIN needs $soname from $pkg; list it in RUNTIME_PACKAGES ($packages)" ;;
            esac
        done
    fi
    pass "docker: RUNTIME_PACKAGES ($packages) provide all $n libraries $BIN loads (dpkg -S, $release)"
fi

# ---- lint --------------------------------------------------------------

if command -v shellcheck >/dev/null 2>&1; then
    shellcheck "$SBATCH" "$CLUSTER_SH" test/deploy_check.sh ||
        fail "shellcheck found the problems above"
    pass "lint: shellcheck $SBATCH $CLUSTER_SH test/deploy_check.sh"
else
    skip "lint: shellcheck is not installed"
fi
echo "deploy_check: all checks passed"
