#!/usr/bin/env bash
# Runs a command (a test stage of `make check`) and fails when it created,
# changed, removed or read anything under the checkout's logs/: the tests
# run every role in a temp dir of their own, and the checkout's logs/ is
# the user's (scripts/demo.sh leaves its job there).
#
# usage: scripts/logs_guard.sh COMMAND [ARG...]
#
# Before the command: when logs/linear holds no checkpoint state file, a
# finished job is made there (scripts/launch_local.sh on free ports, the
# demo's job), as `./scripts/demo.sh` leaves it: a role that reads it (a ps
# without a job config looking for the latest checkpoint of the default log
# dir) then sees a finished job and its test fails. A manifest is taken of
# every file and dir under logs/ (type, size, mtime, SHA-256), and every
# atime is set to the epoch: on a relatime or strictatime mount, a later
# read of any of them moves its atime, so reading shows too (probed first;
# on a noatime mount only the planted job catches readers).
# After the command: any difference is named, one line per path, and the
# exit status is 1; else the command's own status. What this script made,
# it removes.
set -u

cd "$(dirname "$0")/.." || exit 1
[ $# -ge 1 ] || { echo "logs_guard: usage: $0 COMMAND [ARG...]" >&2; exit 2; }

BIN=${DTRAIN_BIN:-build/dtrain}
work=$(mktemp -d "${TMPDIR:-/tmp}/dtrain-logs-guard.XXXXXX") || exit 1
planted=0
made_logs=0

# shellcheck disable=SC2317 # called by the trap
cleanup() {
    rm -rf "$work"
    if [ "$planted" = 1 ]; then
        rm -rf logs/linear
        [ "$made_logs" = 1 ] && rmdir logs 2>/dev/null
    fi
}
trap cleanup EXIT

# A TCP port on 127.0.0.1 that nothing listens on (a connect is refused).
free_port() {
    local p
    for _ in $(seq 200); do
        p=$((20000 + RANDOM % 40000))
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
            echo "$p"
            return 0
        fi
    done
    return 1
}

plant() {
    [ -d logs ] || made_logs=1
    planted=1
    local ps chief worker
    for _ in 1 2 3; do
        if ! ps=$(free_port) || ! chief=$(free_port) || ! worker=$(free_port); then
            break
        fi
        if [ "$ps" = "$chief" ] || [ "$ps" = "$worker" ] || [ "$chief" = "$worker" ]; then
            continue
        fi
        if DTRAIN_BIN=$BIN bash scripts/launch_local.sh --log-dir logs/linear --ps-port "$ps" \
            --chief-port "$chief" --worker-port "$worker" >"$work/plant.log" 2>&1 &&
            [ -f logs/linear/checkpoint ]; then
            return 0
        fi
        rm -rf logs/linear
    done
    echo "logs_guard: could not make a finished job in logs/linear; the last try said:" >&2
    tail -n 20 "$work/plant.log" >&2
    exit 1
}

# One line per path under logs/: type, size, mtime, SHA-256 of a file.
manifest() {
    find logs -printf '%y %s %T@ %p\n' | LC_ALL=C sort -k4 | while read -r type size mtime path; do
        sum=-
        [ "$type" = f ] && sum=$(sha256sum <"$path" | cut -d' ' -f1)
        printf '%s %s %s %s %s\n' "$path" "$type" "$size" "$mtime" "$sum"
    done
}

# Paths of the manifest $1 whose atime is no longer the epoch (read since
# reset_atimes; what was created since is named as created).
read_paths() {
    find logs -printf '%A@ %p\n' | awk 'NR == FNR { known[$1] = 1; next }
        $1 + 0 != 0 { t = $1; sub(/^[^ ]+ /, ""); if ($0 in known) print }' "$1" - | LC_ALL=C sort
}

reset_atimes() {
    find logs -exec touch -a -h -d @0 {} +
}

# 1 when reading a file here moves its atime (relatime or strictatime).
atime_works() {
    local probe=logs/.logs_guard_probe
    echo probe >"$probe" && touch -a -d @0 "$probe" && cat "$probe" >/dev/null
    local a
    a=$(stat -c %X "$probe")
    rm -f "$probe"
    [ "$a" != 0 ]
}

# The whole run in one function, read before it runs: bash reads a script
# as it goes, and an edit to this file during a long stage would otherwise
# shift what it reads next.
main() {
    [ -f logs/linear/checkpoint ] || plant
    watch_reads=0
    atime_works && watch_reads=1
    manifest >"$work/before"
    [ "$watch_reads" = 1 ] && reset_atimes

    status=0
    "$@" || status=$?

    bad=0
    if [ "$watch_reads" = 1 ]; then
        read_paths "$work/before" >"$work/read"
        if [ -s "$work/read" ]; then
            sed 's/^/logs_guard: read during the stage: /' "$work/read" >&2
            bad=1
        fi
    fi
    manifest >"$work/after"
    if ! cmp -s "$work/before" "$work/after"; then
        awk 'NR == FNR { before[$1] = $0; next }
             { after[$1] = $0 }
             END {
                 for (p in before)
                     if (!(p in after)) print "logs_guard: removed during the stage: " p
                     else if (before[p] != after[p]) print "logs_guard: changed during the stage: " p
                 for (p in after)
                     if (!(p in before)) print "logs_guard: created during the stage: " p
             }' "$work/before" "$work/after" | LC_ALL=C sort >&2
        bad=1
    fi
    if [ "$bad" = 1 ]; then
        echo "logs_guard: a test touched the checkout's logs/ (above); tests must keep to their temp dirs" >&2
        [ "$status" = 0 ] && status=1
    fi
    return "$status"
}

main "$@"
exit $?
