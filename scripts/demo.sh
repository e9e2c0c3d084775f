#!/bin/sh
# The demo in one command: installs what the build needs (only if missing),
# builds dtrain, then trains the linear model on a local cluster of one ps,
# the chief and one worker (scripts/launch_local.sh; its flags pass through,
# e.g. scripts/demo.sh --log-dir /tmp/run1 -- --set max_steps=500).
set -eu

cd "$(dirname "$0")/.."

if ! pkg-config --exists grpc gpr libcjson openblas zlib check 2>/dev/null ||
    ! command -v nanopb_generator.py >/dev/null 2>&1; then
    echo "demo: installing dependencies" >&2
    sh scripts/install_deps.sh
fi

jobs=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)
make -j"$jobs"

exec bash scripts/launch_local.sh "$@"
