#!/bin/sh
# The whole test suite, from a fresh machine: installs what is missing, then
# make check: builds, lints, runs the unit and integration tests, the same
# under ASan+UBSan, the threaded ones under TSan, and the fuzz targets, each
# stage printing its wall and CPU time.
set -eu
cd "$(dirname "$0")/.."
sh scripts/install_deps.sh
make check
