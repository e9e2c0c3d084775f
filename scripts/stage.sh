#!/bin/sh
# One stage of `make check`: runs the command after the stage's name and
# prints its wall time, so that a CI log shows where the time goes.
# Usage: sh scripts/stage.sh NAME COMMAND [ARG...]. Exits with the
# command's status.
name=$1
shift
start=$(date +%s)
status=0
"$@" || status=$?
took=$(($(date +%s) - start))
if [ "$status" -eq 0 ]; then
    echo "check: stage $name: $took s"
else
    echo "check: stage $name: $took s, failed (exit $status)"
fi
exit "$status"
