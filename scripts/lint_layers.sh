#!/bin/sh
# Part of `make lint`: includes point down the layers, never up. Each module
# of lib/ (a .c/.h pair, named without the suffix) sits in one layer; a file
# may include a header of its own layer or of a layer below, never above. The
# layers, bottom to top (docs/hacking.md, "Layers", says what each holds):
#
#   core   allocation, errors, logging, text, hashing, tensors, files, threads,
#          spans of messages, metric registries
#   data   readers of training files and the batches drawn from them
#   ml     models, optimizers, tables of rows, the consistency modes
#   store  checkpoints (safetensors) and TensorBoard event files
#   net    the RPC layer over gRPC, tokens and identities, the wire codec
#   conf   the cluster and the job configuration
#   ps     the parameter server and its client
#   roles  the chief, workers, the evaluator, predict and the monitor
#   cmd    the binary's argv parsing (cmd/)
#
# A module missing from the map below fails too, so a new file is placed on
# purpose. Generated headers (*.pb.h) are the codec's and system headers
# (<...>) are not checked.
#
# Usage: sh scripts/lint_layers.sh [FILE...] (default: lib/*.[ch] cmd/*.c).
#        sh scripts/lint_layers.sh --self-test: plants an upward include in a
#        copy of lib/ and checks that the lint fails on it, naming the file.
# Exits 1 on a finding.
set -u

layer_map='
core: alloc err log spin text hash crc32c tensor span fileio memstat pool jsonpos metrics train_metrics loss_watch
data: libsvm reader data_format sparse_reader data sparse criteo_gen
ml: optim consistency model sparse_model sparse_acc table
store: safetensors checkpoint dirlock summary
net: rpc_common rpc_internal rpc_auth rpc_client rpc_server auth admission conn codec codec_internal codec_tensor metrics_http
conf: cluster placement job
ps: ps ps_internal ps_store ps_pull ps_push ps_sync ps_rows ps_status ps_client ps_metrics
roles: heartbeat worker chief evaluator sparse_eval predict monitor session api api_internal api_model api_session
cmd: dtrain
'

if [ "${1:-}" = --self-test ]; then
    dir=$(mktemp -d "${TMPDIR:-/tmp}/lint_layers.XXXXXX") || exit 1
    trap 'rm -rf "$dir"' EXIT
    mkdir "$dir/lib" "$dir/cmd"
    cp lib/*.c lib/*.h "$dir/lib/" && cp cmd/*.c "$dir/cmd/" || exit 1
    printf '#include "worker.h"\n' >>"$dir/lib/tensor.h"
    script=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
    out=$(cd "$dir" && sh "$script" 2>&1)
    case $out in
    *"lib/tensor.h:"*"worker.h"*) echo "lint_layers: self-test passed" ;;
    *)
        echo "lint_layers: self-test: a planted upward include (tensor.h -> worker.h) passed" >&2
        exit 1
        ;;
    esac
    exit 0
fi

if [ $# -eq 0 ]; then
    set -- lib/*.c lib/*.h cmd/*.c
fi
printf '%s\n' "$layer_map" | awk -v files="$*" '
    BEGIN { n = 0 }
    /^[a-z]+:/ {
        name = substr($1, 1, length($1) - 1)
        rank[name] = ++n
        for (i = 2; i <= NF; i++) { layer[$i] = name }
        next
    }
    END {
        nf = split(files, list, " ")
        bad = 0
        for (f = 1; f <= nf; f++) {
            path = list[f]
            mod = path
            sub(/^.*\//, "", mod)
            sub(/\.[ch]$/, "", mod)
            if (!(mod in layer)) {
                printf "%s: module \"%s\" is in no layer (add it to scripts/lint_layers.sh)\n", path, mod
                bad = 1
                continue
            }
            line = 0
            while ((getline text < path) > 0) {
                line++
                if (text !~ /^[ \t]*#[ \t]*include[ \t]*"/) continue
                inc = text
                sub(/^[^"]*"/, "", inc)
                sub(/".*$/, "", inc)
                if (inc ~ /\.pb\.h$/) continue
                # The public header (include/dtrain.h) is the contract of the library:
                # lib/api*.c implement it through lib/api_internal.h, the only
                # file that includes it, and which only they include.
                if (inc ~ /^\.\.\/include\//) { if (mod != "api_internal") { printf "%s:%d: includes the public header; only lib/api_internal.h may\n", path, line; bad = 1 }; continue }
                if (inc == "api_internal.h" && mod !~ /^api/) { printf "%s:%d: includes api_internal.h; only lib/api*.c may\n", path, line; bad = 1; continue }
                imod = inc
                sub(/^.*\//, "", imod)
                sub(/\.h$/, "", imod)
                if (!(imod in layer)) {
                    printf "%s:%d: includes \"%s\", a module in no layer\n", path, line, inc
                    bad = 1
                } else if (rank[layer[imod]] > rank[layer[mod]]) {
                    printf "%s:%d: %s (%s) includes \"%s\" (%s): an include up the layers\n", path, line, mod, layer[mod], inc, layer[imod]
                    bad = 1
                }
            }
            close(path)
        }
        exit bad
    }'
status=$?
[ $status -eq 0 ] || echo "lint: an include points up a layer (scripts/lint_layers.sh)" >&2
exit $status
