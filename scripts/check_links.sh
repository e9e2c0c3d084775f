#!/bin/sh
# Every relative link in the docs resolves: make lint runs this.
#
#   sh scripts/check_links.sh [FILE.md ...]
#
# Without arguments it checks README.md, docs/*.md and bench/README.md. A
# link [text](path) must name a file or directory that exists, relative to
# the file it is in; [text](path#anchor) and [text](#anchor) must also name
# a heading of that markdown file, by GitHub's rule (lower case, punctuation
# dropped, spaces as hyphens). Links to other sites (scheme:...) are not
# followed; links inside fenced code blocks are not links. Each broken link
# is one line on stderr, FILE:LINE: target: reason; exit 1 if there is any.
set -eu
cd "$(dirname "$0")/.."

if [ $# -eq 0 ]; then
    set -- README.md docs/*.md bench/README.md
fi

# The anchors of a markdown file, one a line.
anchors() {
    awk '
        /^```/ { fence = !fence; next }
        fence { next }
        /^#+ / {
            t = $0
            sub(/^#+ +/, "", t)
            sub(/ +#* *$/, "", t)
            t = tolower(t)
            gsub(/[^a-z0-9 _-]/, "", t)
            gsub(/ /, "-", t)
            print t
        }' "$1"
}

# FILE LINE TARGET, one link a line, from outside fenced code blocks.
links() {
    awk -v f="$1" '
        /^```/ { fence = !fence; next }
        fence { next }
        {
            s = $0
            while (match(s, /\]\([^) ]+\)/)) {
                print f, NR, substr(s, RSTART + 2, RLENGTH - 3)
                s = substr(s, RSTART + RLENGTH)
            }
        }' "$1"
}

bad=0
for file in "$@"; do
    if [ ! -f "$file" ]; then
        echo "check_links: $file: no such file" >&2
        bad=1
        continue
    fi
    dir=$(dirname "$file")
    links "$file" >"${TMPDIR:-/tmp}/check_links.$$"
    while read -r f line target; do
        case $target in
            *:*) continue ;;    # http:, https:, mailto:
        esac
        path=${target%%#*}
        anchor=
        case $target in
            *#*) anchor=${target#*#} ;;
        esac
        if [ -z "$path" ]; then
            dest=$f
        else
            dest=$dir/$path
        fi
        if [ ! -e "$dest" ]; then
            echo "$f:$line: $target: no such file ($dest)" >&2
            bad=1
            continue
        fi
        if [ -n "$anchor" ]; then
            case $dest in
                *.md) ;;
                *) continue ;;
            esac
            if ! anchors "$dest" | grep -qxF -- "$anchor"; then
                echo "$f:$line: $target: $dest has no heading \"#$anchor\"" >&2
                bad=1
            fi
        fi
    done <"${TMPDIR:-/tmp}/check_links.$$"
    rm -f "${TMPDIR:-/tmp}/check_links.$$"
done
exit $bad
