#!/bin/sh
# Part of `make lint`: every heap allocation in lib/ and cmd/ goes through
# lib/alloc (dt_malloc, dt_calloc, dt_realloc, dt_strdup, dt_aligned_alloc),
# the door the alloc suite makes fail one allocation at a time. A direct call
# to the C library's allocators would be memory that suite can never take
# away, so this fails on one, naming file:line.
#
# Usage: sh scripts/lint_alloc.sh [FILE...] (default: lib/*.[ch] cmd/*.c,
# less lib/alloc.c, the door itself). Exits 1 when it finds a call.
#
# A call is the name followed by "(", not preceded by a letter, digit or "_"
# (so dt_malloc and cJSON_malloc pass). Text inside /* */ on one line and
# after // is left out, so a comment may name the functions.
set -u
if [ $# -eq 0 ]; then
    for f in lib/*.c lib/*.h cmd/*.c; do
        [ "$f" = lib/alloc.c ] || set -- "$@" "$f"
    done
fi
found=$(awk '
    {
        line = $0
        gsub(/\/\*([^*]|\*+[^*\/])*\*+\//, "", line)
        sub(/\/\/.*/, "", line)
        if (line ~ /(^|[^A-Za-z0-9_])(malloc|calloc|realloc|reallocarray|strdup|strndup|aligned_alloc|posix_memalign|memalign|valloc|pvalloc|asprintf|vasprintf)[ \t]*\(/)
            printf "%s:%d: %s\n", FILENAME, FNR, $0
    }' "$@")
if [ -n "$found" ]; then
    printf '%s\n' "$found"
    echo "lint: allocation outside lib/alloc.c (use dt_malloc and friends, lib/alloc.h)" >&2
    exit 1
fi
