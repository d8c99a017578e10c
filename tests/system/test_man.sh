#!/usr/bin/env bash
# tests/system/test_man.sh — the six manual pages of this build render: `man -l` (man-db,
# which scripts/test installs) formats each with no warning, groff -ww finds nothing to
# complain about, and every page has its NAME, SYNOPSIS, DESCRIPTION, SEE ALSO and EXIT STATUS
# (the library's section-3 page: RETURN VALUE) and no
# @placeholder@ left by the build. A missing man is a failure, never a skip.
set -uo pipefail
builddir=${HG_BUILDDIR:-$PWD}
pages=(man/hourglass-broker.8 man/hourglass-consumer.8 man/hourglass-compensator.8 man/hourglass-cli.1
    man/hourglass-console.8 man/libhourglass.3)
for tool in man groff; do
    command -v "$tool" >/dev/null || { echo "FAIL: $tool not installed (apt-get install man-db)"; exit 1; }
done
failures=0
for p in "${pages[@]}"; do
    f=$builddir/$p
    if [[ ! -f $f ]]; then echo "FAIL: $p not built"; failures=$((failures + 1)); continue; fi
    text=$(LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -l "$f" 2>"$builddir/$p.warnings")
    status=$?
    warnings=$(cat "$builddir/$p.warnings"; groff -man -Tutf8 -ww -z "$f" 2>&1)
    rm -f "$builddir/$p.warnings"
    problem=""
    ((status == 0)) || problem="man -l exited $status"
    [[ -z $warnings ]] || problem="warnings: $warnings"
    outcome="EXIT STATUS"
    [[ $p == *.3 ]] && outcome="RETURN VALUE"
    for section in NAME SYNOPSIS DESCRIPTION "$outcome" "SEE ALSO"; do
        grep -q "^$section" <<<"$text" || problem="no $section section"
    done
    grep -q '@[a-zA-Z_]*@' "$f" && problem="an @placeholder@ is left"
    if [[ -n $problem ]]; then
        echo "FAIL: $p: $problem"
        failures=$((failures + 1))
    else
        echo "ok   $p: $(wc -l <<<"$text") lines"
    fi
done
((failures == 0)) && echo PASS || exit 1
