#!/bin/sh
# The whole test suite, from a fresh machine: installs what is missing, builds,
# runs the unit and integration tests, then the same under ASan+UBSan.
set -eu
cd "$(dirname "$0")/.."
sh scripts/install_deps.sh
make check
