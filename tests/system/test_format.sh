#!/usr/bin/env bash
# tests/system/test_format.sh — every C source and header of the tree is laid out as
# .clang-format says (CONTRIBUTING.md, "Style"): clang-format --dry-run --Werror over all of them
# in one call, and on each file alone when that fails, so a change that drifts fails here with
# the files and lines to fix, instead of piling up. The files are
# git's tracked ones in a checkout, else every .c/.h below the source directories (a build
# inside the tree leaves none of its own there: config.h sits at the top). A missing
# clang-format is a failure (scripts/test installs it).
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(cd "$here/../.." && pwd)
command -v clang-format >/dev/null || { echo "FAIL: clang-format not installed (apt-get install clang-format)"; exit 1; }
cd "$top" || exit 1
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    mapfile -t files < <(git ls-files '*.c' '*.h')
else
    mapfile -t files < <(find base bench broker cli common compensator console consumer db examples include levels lib \
        proto tests -name '*.[ch]' | sort)
fi
((${#files[@]} > 0)) || { echo "FAIL: no C files found under $top"; exit 1; }
# One call over every file is the fast path (a few seconds instead of one process per file);
# only when it fails is each file checked on its own, so the messages name every file to fix.
if clang-format --dry-run --Werror "${files[@]}" >/dev/null 2>&1; then
    echo "ok   ${#files[@]} files as .clang-format lays them out ($(clang-format --version))"
    echo PASS
    exit 0
fi
bad=0
for f in "${files[@]}"; do
    if ! out=$(clang-format --dry-run --Werror "$f" 2>&1); then
        echo "FAIL: $f is not as .clang-format lays it out (run clang-format -i $f):"
        head -20 <<<"$out"
        bad=$((bad + 1))
    fi
done
if ((bad > 0)); then
    echo "FAIL: $bad of ${#files[@]} files"
    exit 1
fi
echo "ok   ${#files[@]} files as .clang-format lays them out ($(clang-format --version))"
echo PASS
