#!/usr/bin/env bash
# Long, seeded chaos runs by hand: the chaos suite of `make check` (one ps,
# the chief and worker 1, each SIGKILLed at seeded moments, the chief also
# mid-save, the ps with the chief at once), with more faults, a longer job
# and several seeds in a row. Each run is bounded in time and logged; at the
# end a table sums up every run, then the totals. Exit status: 0 every run
# passed, 1 one failed (the seed that repeats it is printed), 2 a bad flag,
# 130 interrupted.
set -euo pipefail

usage() {
    cat <<'TXT'
usage: scripts/chaos.sh [--kills N] [--seed S] [--runs R] [--job-secs T]
                        [--build DIR] [--keep]

Runs the chaos suite (DT_SUITES=chaos) once per seed and prints a summary.

  --kills N     faults per job, 5..64 (default 12); the job's end may come
                before all are made
  --seed S      first seed, a decimal number (default: random, printed)
  --runs R      jobs, seeds S, S+1, ..., S+R-1, 1..10000 (default 1)
  --job-secs T  undisturbed length of each job, 20..3600 s (default 60)
  --build DIR   build tree with dtrain and check_all (default build);
                built with make when missing
  --keep        keep every run's log and job dir (default: a failed run's)
  --help        this text
TXT
}

die() {
    echo "chaos.sh: $*; see scripts/chaos.sh --help" >&2
    exit 2
}

# "$1 <= $2" for decimal strings without leading zeros, of any length.
le() {
    [ ${#1} -lt ${#2} ] || { [ ${#1} -eq ${#2} ] && [[ ! $1 > $2 ]]; }
}

# Prints value $2 of flag $1 as a plain decimal when it is one from $3 to $4.
number() {
    case "$2" in
        '' | *[!0-9]*) die "$1 takes a decimal number, not \"$2\"" ;;
    esac
    local v=${2#"${2%%[!0]*}"}
    v=${v:-0}
    if ! le "$3" "$v" || ! le "$v" "$4"; then die "$1 must be from $3 to $4, not $2"; fi
    echo "$v"
}

max_seed=9223372036854775807 # what shell arithmetic holds (the suite takes up to 2^64-1)
kills=12 seed="" runs=1 job_secs=60 build=build keep=0
while [ $# -gt 0 ]; do
    flag=$1 value="" inline=0
    case "$1" in
        --*=*) flag=${1%%=*} value=${1#*=} inline=1 ;;
    esac
    case "$flag" in
        --kills | --seed | --runs | --job-secs | --build)
            if [ $inline = 0 ]; then
                [ $# -ge 2 ] || die "$flag needs a value"
                value=$2
                shift
            fi
            case "$flag" in
                --kills) kills=$(number "$flag" "$value" 5 64) ;;
                --seed) seed=$(number "$flag" "$value" 0 $max_seed) ;;
                --runs) runs=$(number "$flag" "$value" 1 10000) ;;
                --job-secs) job_secs=$(number "$flag" "$value" 20 3600) ;;
                --build)
                    case "$value" in
                        '' | -*) die "--build needs a directory, not \"$value\"" ;;
                    esac
                    build=$value
                    ;;
            esac
            ;;
        --keep | --help | -h)
            [ $inline = 0 ] || die "$flag takes no value"
            case "$flag" in
                --keep) keep=1 ;;
                *) usage && exit 0 ;;
            esac
            ;;
        *) die "unknown argument \"$1\"" ;;
    esac
    shift
done
random=""
if [ -z "$seed" ]; then
    seed=$(od -An -N4 -tu4 /dev/urandom | tr -d ' \n')
    random=" (random: --seed $seed repeats)"
fi
[ "$seed" -le $((max_seed - (runs - 1))) ] || die "--seed $seed with --runs $runs goes past $max_seed"

# The build tree, relative to where the script was started; make is given
# it relative to the repository when it is inside it, as the Makefile's
# BUILD usually is.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
build_dir=$(realpath -m -- "$build")
dtrain=$build_dir/dtrain check_all=$build_dir/check_all
if [ ! -x "$dtrain" ] || [ ! -x "$check_all" ]; then
    make_build=${build_dir#"$root"/}
    echo "chaos.sh: building $make_build/dtrain and $make_build/check_all" >&2
    make -C "$root" -j2 BUILD="$make_build" "$make_build/dtrain" "$make_build/check_all" >&2 ||
        { echo "chaos.sh: the build failed" >&2 && exit 1; }
fi

# Each run is bounded twice: the suite's Check timeout (300 s, times the
# multiplier) and, should the runner itself hang, timeout(1) a minute later.
budget=$((300 + 4 * job_secs + 20 * kills))
multiplier=$(((budget + 299) / 300))
bound=$((multiplier * 300 + 60))

out=$(mktemp -d "${TMPDIR:-/tmp}/dtrain-chaos.XXXXXX")
seeds=$seed
[ "$runs" = 1 ] || seeds="$seed..$((seed + runs - 1))"
echo "chaos.sh: $runs run(s), seed $seeds$random, $kills faults per job, jobs of $job_secs s," \
    "each run bounded to $bound s; logs in $out"

# A run's "chaos summary:" line as fields ([seed]=..., [result]=...).
declare -A f
read_summary() {
    f=()
    local line words kv
    line=$(grep -m 1 '^chaos summary: ' "$1" || true)
    read -ra words <<<"${line#chaos summary: }"
    for kv in "${words[@]}"; do
        f[${kv%%=*}]=${kv#*=}
    done
}

child="" interrupted=0
on_signal() {
    interrupted=1
    if [ -n "$child" ]; then kill -TERM "$child" 2>/dev/null || true; fi
}
trap on_signal INT TERM

# One row of the table: seed, result, wall time, faults made/asked, kills of
# each role, double and mid-save kills, final step/max_steps.
row='%-20s %-6s %6s %7s %4s %6s %7s %7s %9s %21s'
rows=() failed_seeds=() why=()
done_runs=0 passed=0 t_faults=0 t_ps=0 t_chief=0 t_worker=0 t_double=0 t_mid=0
t_start=$SECONDS
for ((i = 0; i < runs; i++)); do
    s=$((seed + i))
    log=$out/seed-$s.log jobdir=$out/seed-$s
    mkdir -p "$jobdir"
    echo "chaos.sh: run $((i + 1))/$runs, seed $s"
    t0=$SECONDS
    rc=0
    # The job's dir (role logs, checkpoints) goes under $jobdir, kept by the
    # suite (DT_KEEP_TMP) and removed here when the run passed.
    env -u CK_RUN_SUITE -u CK_RUN_CASE -u CK_INCLUDE_TAGS -u CK_EXCLUDE_TAGS \
        -u DT_SKIP_SUITES CK_FORK=yes CK_TIMEOUT_MULTIPLIER="$multiplier" \
        DT_SUITES=chaos DTRAIN_BIN="$dtrain" DT_CHAOS_SEED="$s" DT_CHAOS_KILLS="$kills" \
        DT_CHAOS_JOB_SECS="$job_secs" TMPDIR="$jobdir" DT_KEEP_TMP=1 \
        timeout -k 30 $bound "$check_all" >"$log" 2>&1 &
    child=$!
    wait "$child" || rc=$?
    if [ $interrupted = 1 ]; then
        wait "$child" 2>/dev/null || true
    fi
    child=""
    secs=$((SECONDS - t0))
    done_runs=$((done_runs + 1))

    read_summary "$log"
    result=FAIL reason=""
    if [ $interrupted = 1 ]; then
        result=STOP reason="interrupted"
    elif [ $rc = 0 ] && [ "${f[result]:-}" = pass ]; then
        result=pass
    elif [ $rc = 124 ] || [ $rc = 137 ]; then
        reason="the runner did not end within $bound s"
    else
        # Check's line for the failure: file:line:F|E:case:test:iteration: message
        reason=$(grep -m 1 -E '^[^ :]+:[0-9]+:[FE]:' "$log" | cut -d: -f7- | cut -c2-200 || true)
        reason=${reason:-"exit status $rc${f[result]:+, result=${f[result]}}"}
    fi
    # shellcheck disable=SC2059 # $row is the format
    rows+=("$(printf "$row" "$s" "$result" "${secs}s" \
        "${f[faults]:--}/${f[kills]:-$kills}" "${f[kills_ps]:--}" "${f[kills_chief]:--}" \
        "${f[kills_worker]:--}" "${f[double_kills]:--}" "${f[mid_save_kills]:--}" \
        "${f[final_step]:--}/${f[max_steps]:--}")")
    t_faults=$((t_faults + ${f[faults]:-0}))
    t_ps=$((t_ps + ${f[kills_ps]:-0})) t_chief=$((t_chief + ${f[kills_chief]:-0}))
    t_worker=$((t_worker + ${f[kills_worker]:-0}))
    t_double=$((t_double + ${f[double_kills]:-0})) t_mid=$((t_mid + ${f[mid_save_kills]:-0}))
    if [ $result = pass ]; then
        passed=$((passed + 1))
        if [ $keep = 0 ]; then rm -rf "$log" "$jobdir"; fi
    else
        failed_seeds+=("$s")
        why+=("$reason")
    fi
    echo "chaos.sh: seed $s: $result in ${secs}s${reason:+: $reason}"
    [ $interrupted = 0 ] || break
done

echo
echo "chaos summary ($kills faults per job, jobs of $job_secs s undisturbed)"
# shellcheck disable=SC2059 # $row is the format
{
    printf "$row\n" seed result wall faults ps chief worker double mid-save final/max_steps
    printf '%s\n' "${rows[@]}"
    printf "$row\n" "total: $done_runs run(s)" "$passed ok" "$((SECONDS - t_start))s" \
        "$t_faults" "$t_ps" "$t_chief" "$t_worker" "$t_double" "$t_mid" ""
} | sed 's/ *$//'

if [ ${#failed_seeds[@]} -gt 0 ]; then
    echo
    echo "chaos.sh: ${#failed_seeds[@]} of $done_runs run(s) did not pass:"
    for ((i = 0; i < ${#failed_seeds[@]}; i++)); do
        s=${failed_seeds[i]}
        echo "  seed $s: ${why[i]}"
        echo "    log: $out/seed-$s.log (job dir: $out/seed-$s)"
        echo "    repeat: scripts/chaos.sh --seed $s --kills $kills --job-secs $job_secs --build $build"
    done
    [ $interrupted = 0 ] || exit 130
    exit 1
fi
if [ $keep = 1 ]; then
    echo "chaos.sh: logs kept in $out"
else
    rmdir "$out" 2>/dev/null || true
fi
[ $interrupted = 0 ] || exit 130
