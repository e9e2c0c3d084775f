#!/bin/sh
# Line and branch coverage of lib/, per file, from a tree built with
# --coverage (make coverage builds it, then runs this).
#
#   scripts/coverage.sh BUILD_DIR
#
# Clears the tree's old counts, runs the whole suite over it (DT_SUITES and
# DT_SKIP_SUITES narrow it as for make test; the roles the integration suites
# start are the tree's own dtrain, so role code counts: a process writes its
# counts when it exits, so a role killed by SIGKILL adds none), then prints
# one row per lib/ file and the total, and writes an annotated copy of each
# file to BUILD_DIR/coverage/index.html.
# Exit status: 0; 1 when a test failed or lib/'s line coverage is under
# COVERAGE_MIN percent (default 90); 2 for a bad argument.
set -eu

build=${1:?usage: scripts/coverage.sh BUILD_DIR}
min=${COVERAGE_MIN:-90}
if [ ! -x "$build/check_all" ] || [ ! -x "$build/dtrain" ]; then
    echo "coverage: $build/check_all or $build/dtrain missing (make coverage builds them)" >&2
    exit 2
fi
command -v gcovr >/dev/null || {
    echo "coverage: gcovr missing: run scripts/install_deps.sh" >&2
    exit 2
}

find "$build" -name '*.gcda' -delete
status=0
DTRAIN_BIN="$(cd "$build" && pwd)/dtrain" "$build/check_all" || status=1

mkdir -p "$build/coverage"
# gcovr reads each object's counts (-j2: two gcov at a time) for the lib/
# sources only; the summary is JSON, the table is made from it below.
gcovr -j 2 -r . --object-directory "$build" --filter 'lib/' \
    --json-summary "$build/coverage/summary.json" \
    --html-details "$build/coverage/index.html" --html-title "dtrain lib/ coverage"

python3 - "$build/coverage/summary.json" "$min" <<'PY' || status=1
import json, sys
summary, minimum = json.load(open(sys.argv[1])), float(sys.argv[2])
def pct(covered, total):
    return 100.0 * covered / total if total else 100.0
def row(name, d):
    lines = pct(d["line_covered"], d["line_total"])
    branches = pct(d["branch_covered"], d["branch_total"])
    print(f"{name:<20} {lines:6.1f}% {d['line_covered']:>6}/{d['line_total']:<6}"
          f" {branches:6.1f}% {d['branch_covered']:>6}/{d['branch_total']:<6}"
          f"{'  < %g%%' % minimum if lines < minimum else ''}")
print(f"{'file':<20} {'lines':>7} {'covered':>13} {'branches':>8} {'taken':>13}")
for f in sorted(summary["files"], key=lambda f: f["filename"]):
    row(f["filename"], f)
row("total lib/", summary)
total = pct(summary["line_covered"], summary["line_total"])
if total < minimum:
    print(f"coverage: lib/ has {total:.1f}% of its lines covered, under {minimum:g}%",
          file=sys.stderr)
    sys.exit(1)
PY
echo "coverage: annotated sources in $build/coverage/index.html"
exit $status
