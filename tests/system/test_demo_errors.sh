#!/usr/bin/env bash
# tests/system/test_demo_errors.sh — scripts/demo refuses what it cannot do with one clear line, before it
# starts anything: bad options exit 2 naming the option and the value; a temp dir it cannot write
# (TMPDIR missing, or /tmp not writable by the user) exits 1 naming the directory and what to do. Each case
# runs against the programs of this build (--bindir) and leaves nothing behind. A few seconds.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
builddir=${HG_BUILDDIR:-$PWD}
demo=$here/../../scripts/demo
tmp=$(mktemp -d "${TMPDIR:-/tmp}/hg-test-demo-errors-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# expect STATUS LINE [ENV=VALUE...] -- ARGS... — run the demo: its exit status and its last stderr line, exactly.
expect() {
    local want=$1 pattern=$2 envs=()
    shift 2
    while [[ $1 != -- ]]; do envs+=("$1"); shift; done
    shift
    env "${envs[@]}" bash "$demo" --bindir "$builddir" "$@" >"$tmp/out" 2>"$tmp/err" </dev/null
    local status=$? last
    last=$(tail -n 1 "$tmp/err")
    if ((status != want)) || [[ $last != "$pattern" ]]; then
        fail "scripts/demo $*${envs[*]:+ (${envs[*]})}: exit $status, '$last'; want exit $want, '$pattern'"
        sed 's/^/    /' "$tmp/out" "$tmp/err" | tail -n 5
    else
        echo "ok   scripts/demo $*${envs[*]:+ (${envs[*]})}: exit $status: $last"
    fi
}

expect 2 "scripts/demo: --rate wants a whole number (orders per second above 0), not 'fast'" -- --rate fast
expect 2 "scripts/demo: unknown argument '--rat' (see --help)" -- --rat 5
touch "$tmp/file"
expect 2 "scripts/demo: --keep $tmp/file: not a directory" -- --keep "$tmp/file"
expect 1 "scripts/demo: FAILED: cannot create a file in $tmp/none (no such directory; from TMPDIR): set TMPDIR to a directory you can write to, or give --keep DIR" \
    "TMPDIR=$tmp/none" --
left=$(find "$tmp" -mindepth 1 -name 'hg-demo-*')
[[ -z $left ]] || fail "left behind: $left"

if ((failures)); then
    echo "FAIL: $failures case(s)"
    exit 1
fi
echo "PASS"
