#!/bin/sh
# Runs two commands at once: BESIDE in the background, its output held back
# and printed whole once both have ended (so the two never interleave), and
# MAIN in the foreground. Prints each one's wall time; exits 0 only when
# both succeeded, else names the one that failed and exits with its status
# (MAIN's when both failed).
#
# usage: sh scripts/beside.sh NAME 'BESIDE' MAIN_NAME MAIN [ARG...]
#
# Why: `make check`'s suite stages keep about one of two cores busy (most
# of their time is spent waiting on the processes they start), so the
# linter and the next trees' builds fit beside them instead of after them.
# The suites are written to hold on a loaded machine (every wait is on an
# event with a deadline); this load is lighter than the two CPU hogs they
# are checked beside.
set -u
[ $# -ge 4 ] || { echo "beside: usage: $0 NAME 'BESIDE' MAIN_NAME MAIN [ARG...]" >&2; exit 2; }
name=$1
beside=$2
main_name=$3
shift 3

out=$(mktemp "${TMPDIR:-/tmp}/dtrain-beside.XXXXXX") || exit 1
start=$(date +%s)
(
    sh -c "$beside"
    echo $? >"$out.rc"
    echo $(($(date +%s) - start)) >"$out.took"
) >"$out" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null; rm -f "$out" "$out.rc" "$out.took"' INT TERM

main_rc=0
"$@" || main_rc=$?
main_took=$(($(date +%s) - start))
wait "$pid"
beside_rc=$(cat "$out.rc" 2>/dev/null || echo 1)
beside_took=$(cat "$out.took" 2>/dev/null || echo "?")
echo "beside: $name's output (it ran beside $main_name):"
cat "$out"
rm -f "$out" "$out.rc" "$out.took"
echo "beside: $main_name: $main_took s$([ "$main_rc" -eq 0 ] || echo ", failed (exit $main_rc)");" \
    "$name: $beside_took s$([ "$beside_rc" -eq 0 ] || echo ", failed (exit $beside_rc)")"
[ "$main_rc" -ne 0 ] && exit "$main_rc"
exit "$beside_rc"
