#!/usr/bin/env bash
# tests/system/test_demo_break.sh — the demo's invariant report fails when an invariant is broken:
# scripts/demo --break runs the shop with something broken on purpose, and the report must go red
# for it, with exit status 1, and clean up as on any other run. Two short runs (8 s of orders, a
# 3 s timeout, no broker kill), against the programs of this build (--bindir):
#   cancel-paid     the consumer's claim without its status guard: paid orders get cancelled — the
#                   report must fail "no paid order cancelled" and the stock check;
#   cancellers-die  hourglass-consumer and hourglass-compensator killed for good (at 2 s, beside a
#                   2 s broker kill): orders stay pending — the report must fail the overdue check
#                   and name the two programs as killed.
# The demo stops waiting once the outcome is decided (an order overdue, or nothing left to cancel
# orders): about 25 s each.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
builddir=${HG_BUILDDIR:-$PWD}
out=$(mktemp "${TMPDIR:-/tmp}/hg-test-demo-break-XXXXXX.log")
trap 'rm -f "$out"' EXIT
failed=0
fail() { echo "FAIL: $*"; failed=1; }

# run_break WHAT ARGS... — the demo with --break WHAT; its output in $out, its status in $status.
run_break() {
    local what=$1
    shift
    bash "$here/../../scripts/demo" --bindir "$builddir" --plain --rate 30 --duration 8 --timeout 3 \
        --break "$what" "$@" >"$out" 2>&1
    status=$?
    echo "==================== scripts/demo --break $what $* (exit $status)"
    cat "$out"
    ((status == 1)) || fail "--break $what: scripts/demo exited $status, want 1"
    grep -q '^RESULT: [0-9]* invariant(s) FAILED$' "$out" || fail "--break $what: no 'RESULT: … FAILED' line"
    grep -q "^--break $what was on: the report caught the breakage" "$out" ||
        fail "--break $what: the report does not say it caught the breakage"
    grep -q '^demo: stopped everything it started; removed ' "$out" || fail "--break $what: no clean-up line"
    local dir
    dir=$(sed -n 's/^demo: stopped everything it started; removed \([^ ]*\) .*/\1/p' "$out")
    [[ -n $dir && ! -e $dir ]] || fail "--break $what: the work dir '$dir' is still there"
}

run_break cancel-paid --no-kill
grep -q '^\[FAIL\] no paid order cancelled: [1-9][0-9]* orders both paid and cancelled' "$out" ||
    fail "cancel-paid: the paid-order check did not fail with paid orders cancelled"
grep -q '^\[FAIL\] stock conserved per SKU' "$out" || fail "cancel-paid: the stock check did not fail"

run_break cancellers-die --kill-at 2 --down 2
grep -q '^demo: --break cancellers-die: hourglass-consumer and hourglass-compensator killed with SIGKILL' "$out" ||
    fail "cancellers-die: the kill is not announced"
grep -q '^\[FAIL\] every order cancelled by its expiry' "$out" || fail "cancellers-die: the overdue check did not fail"
grep -q '^\[FAIL\] every program ran to the end and stopped cleanly: .*hourglass-consumer killed by SIGKILL, hourglass-compensator killed by SIGKILL' "$out" ||
    fail "cancellers-die: the report does not name the killed programs"

((failed == 0)) || exit 1
echo "PASS: the demo's report caught --break cancel-paid and --break cancellers-die"
