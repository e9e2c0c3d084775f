#!/bin/sh
# The slowest test cases of a run made with DT_XML_DIR=DIR (make test, asan
# and tsan pass it on as DIR/<tree>): one line per case, seconds, suite and
# case, slowest first. Usage: sh scripts/slowest.sh DIR [N] (N: 20).
set -eu
dir=$1
n=${2:-20}
for f in "$dir"/*.xml; do
    suite=$(basename "$f" .xml)
    awk -v suite="$suite" '
        /<id>/ { sub(/.*<id>/, ""); sub(/<\/id>.*/, ""); id = $0 }
        /<duration>/ { sub(/.*<duration>/, ""); sub(/<\/duration>.*/, "");
                       if (id != "") printf "%8.2f  %s %s\n", $0, suite, id; id = "" }' "$f"
done | sort -rn | head -n "$n"
