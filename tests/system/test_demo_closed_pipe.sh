#!/usr/bin/env bash
# tests/system/test_demo_closed_pipe.sh — when the demo's reader goes away (scripts/demo | head -3), the demo
# exits quietly and still stops everything it started: nothing on its stderr (no 'write error: Broken
# pipe', no 'interrupted' line), exit status 141 (SIGPIPE's, as any program whose reader left), its work dir
# (named in the first line head kept) removed and no process left naming it (polled, deadline 60 s). Runs
# against the programs of this build (--bindir); the reader leaves a few seconds in. About 10 s.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
builddir=${HG_BUILDDIR:-$PWD}
demo=$here/../../scripts/demo
tmp=$(mktemp -d "${TMPDIR:-/tmp}/hg-test-demo-closed-pipe-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() {
    echo "FAIL: $*"
    for f in "$tmp"/head.out "$tmp"/demo.err; do [[ -s $f ]] && { echo "  $f:"; sed 's/^/    /' "$f"; }; done
    exit 1
}

# The whole pipeline returns once the demo has exited (head leaves first, the demo finds out at its next write).
bash "$demo" --bindir "$builddir" --duration 10 --no-kill --plain 2>"$tmp/demo.err" </dev/null |
    head -n 3 >"$tmp/head.out"
statuses=("${PIPESTATUS[@]}")
(($(wc -l <"$tmp/head.out") == 3)) || fail "head did not get its 3 lines"
work=$(sed -n 's/^demo: .* work dir \(\/[^:]*\): .*/\1/p' "$tmp/head.out" | head -n 1)
[[ -n $work ]] || fail "no work dir named in the lines head kept"
[[ ! -s $tmp/demo.err ]] || fail "the demo wrote on stderr after its reader went away"
((statuses[0] == 141)) || fail "scripts/demo exited ${statuses[0]}, want 141 (SIGPIPE: its reader went away)"

gone() { [[ ! -e $work ]] && ! pgrep -f -- "$work/" >/dev/null; }
deadline=$((SECONDS + 60))
until gone; do
    if ((SECONDS >= deadline)); then
        mapfile -t left < <(pgrep -f -- "$work/")
        ((${#left[@]})) && kill "${left[@]}" 2>/dev/null # not to be left running: found by its work dir
        rm -rf "$work"
        fail "after its reader went away the demo left ${left[*]:+processes ${left[*]} and }$work"
    fi
    sleep 0.2
done
echo "PASS: scripts/demo | head -3: exit 141, nothing on stderr, everything it started stopped and $work removed"
