#!/bin/sh
# Synthetic click logs in the Criteo display-ads layout, from a hidden
# logistic model (lib/criteo_gen.h), without a download: builds dtrain when
# it is missing, then runs `dtrain gen-criteo` with the flags given, e.g.
#   scripts/gen_criteo.sh --rows 1000000 --seed 7 --out data/criteo-1m.txt.gz
# The last line on stderr is the hidden model's log loss on the rows
# written: the best a trained model can expect on them.
# BUILD=dir picks another build tree (default: build).
set -eu

cd "$(dirname "$0")/.."
build=${BUILD:-build}

if [ ! -x "$build/dtrain" ]; then
    jobs=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)
    make -j"$jobs" BUILD="$build" "$build/dtrain" >&2
fi

exec "$build/dtrain" gen-criteo "$@"
