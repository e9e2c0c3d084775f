#!/bin/sh
# Installs dtrain's build and test dependencies from Debian's packages, only
# those that are missing. Needs root (or sudo) for apt-get.
set -eu

# clang and its runtime build the libFuzzer targets (make fuzz);
# dataset-fashion-mnist is the real-data example and its tests; openssl makes
# the TLS certificates (scripts/make_certs.sh, the tls suite); shellcheck
# lints the deploy scripts (test/deploy_check.sh); gcovr reports make
# coverage's figures; python3-numpy reads a checkpoint back in the
# checkpoint suite, as a user's numpy would, and python3-torch runs the
# PyTorch helper's tests and examples/fashion_cnn.py; libmicrohttpd-dev serves
# /metrics; prometheus (its server and promtool) scrapes and checks it in
# the metrics suite.
PKGS="build-essential pkg-config libgrpc-dev nanopb libnanopb-dev libcjson-dev check \
libopenblas-dev zlib1g-dev python3 python3-numpy python3-torch dataset-fashion-mnist clang libclang-rt-14-dev \
openssl shellcheck gcovr libmicrohttpd-dev prometheus"

missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0

echo "install_deps: installing:$missing" >&2
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q >&2
# shellcheck disable=SC2086
$SUDO apt-get install -y -q --no-install-recommends $missing >&2
