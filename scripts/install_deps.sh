#!/bin/sh
# Installs dtrain's build and test dependencies from Debian's packages, only
# those that are missing. Needs root (or sudo) for apt-get.
set -eu

PKGS="build-essential pkg-config libgrpc-dev nanopb libnanopb-dev libcjson-dev check \
libopenblas-dev zlib1g-dev python3 dataset-fashion-mnist"

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
