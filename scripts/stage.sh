#!/bin/sh
# One stage of `make check`: runs the command after the stage's name and
# prints its wall time and the CPU time (user + system) it and its
# children used, so that a CI log shows where the time goes, and what a
# stage would take on a quieter machine. Usage: sh scripts/stage.sh NAME
# COMMAND [ARG...]. Exits with the command's status.
name=$1
shift
start=$(date +%s)
status=0
"$@" || status=$?
took=$(($(date +%s) - start))
# `times`, in this shell: its own, then its children's user and system time.
cpu_file=${TMPDIR:-/tmp}/dtrain-stage.$$
times >"$cpu_file"
cpu=$(awk 'NR == 2 {
    n = split($1 " " $2, f, /[ ms]+/); t = 0
    for (i = 1; i + 1 <= n; i += 2) t += f[i] * 60 + f[i + 1]
    printf "%.0f", t }' "$cpu_file")
rm -f "$cpu_file"
if [ "$status" -eq 0 ]; then
    echo "check: stage $name: $took s (CPU $cpu s)"
else
    echo "check: stage $name: $took s (CPU $cpu s), failed (exit $status)"
fi
exit "$status"
