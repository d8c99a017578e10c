#!/usr/bin/env bash
# tests/system/test_demo_break.sh — the demo's invariant report fails when an invariant is broken:
# scripts/demo --break runs the shop with something broken on purpose, and the report must go red
# for it — exactly the checks named below [FAIL], every other one of the 10 [ OK ] — with exit
# status 1, and clean up as on any other run. Short runs (8 s of orders, a 3 s timeout), against the
# programs of this build (--bindir). In make check, four (about 16-25 s each):
#   cancel-paid     the consumer's claim without its status guard: paid orders get cancelled — the
#                   paid-order check and the stock check fail (and what follows from the stock: below);
#   cancellers-die  hourglass-consumer and hourglass-compensator killed for good (at 2 s, beside a
#                   2 s broker kill): orders stay pending — the overdue check, the drained check and
#                   the programs check fail, the two programs named as killed;
#   refund-unpaid   the consumer's side effects record a refund for every cancel — the refunds check;
#   backup-damaged  the online backup's copy overwritten in part once taken — the backup check.
# With --all (tests/system/test_demo_break.sh --all from the build directory, or
# HG_DEMO_BREAK_ALL=1 make check TESTS=tests/system/test_demo_break.sh), six more, about 3 min:
#   stock-twice     the stock return run twice — the stock check (and what follows, as cancel-paid);
#   consumer-dies   hourglass-consumer killed for good at 2 s — the drained and programs checks;
#   cancel-early    timeout messages sent again with no delay — the early-cancel check;
#   outbox-open     the consumer's side effects without the outbox statement — the outbox check;
#   bad-message     a timeout message whose payload is not an order id — the DLQ check;
#   rabbit-loses    on a private RabbitMQ node, its queues purged before its kill — the check that
#                   RabbitMQ kept what it confirmed.
# The demo stops waiting once the outcome is decided (an order overdue, or nothing left to cancel
# orders).
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
builddir=${HG_BUILDDIR:-$PWD}
all=${HG_DEMO_BREAK_ALL:-0}
[[ ${1:-} == --all ]] && all=1
out=$(mktemp "${TMPDIR:-/tmp}/hg-test-demo-break-XXXXXX.log")
trap 'rm -f "$out"' EXIT
failed=0
fail() { echo "FAIL: $*"; failed=1; }

# The report's 10 checks (broker transport), by how their line starts.
checks=("no paid order cancelled" "stock conserved per SKU" "every order cancelled by its expiry" "broker drained"
    "no order cancelled before its expiry" "outbox" "refunds to make" "DLQ of order-cancel empty" "online backup"
    "every program ran to the end")

# run_break WHAT "CHECK|CHECK…" "CHECK|…" ARGS... — the demo with --break WHAT: the checks of the
# first list (named by the start of their line, '|' between) must be [FAIL], those of the second may
# be (a consequence that depends on timing), every other one [ OK ]. Output in $out.
run_break() {
    local what=$1 want=$2 may=$3 c line state start=$SECONDS
    shift 3
    bash "$here/../../scripts/demo" --bindir "$builddir" --plain --rate 30 --duration 8 --timeout 3 \
        --break "$what" "$@" >"$out" 2>&1
    status=$?
    echo "==================== scripts/demo --break $what $* (exit $status, $((SECONDS - start)) s)"
    cat "$out"
    ((status == 1)) || fail "--break $what: scripts/demo exited $status, want 1"
    grep -q '^RESULT: [0-9]* invariant(s) FAILED$' "$out" || fail "--break $what: no 'RESULT: … FAILED' line"
    grep -q "^--break $what was on: the report caught the breakage" "$out" ||
        fail "--break $what: the report does not say it caught the breakage"
    (($(grep -c '^\[\( OK \|FAIL\)\] ' "$out") == ${#checks[@]})) ||
        fail "--break $what: $(grep -c '^\[\( OK \|FAIL\)\] ' "$out") check lines, want ${#checks[@]}"
    for c in "${checks[@]}"; do
        line=$(grep -m 1 "^\[\( OK \|FAIL\)\] $c" "$out")
        state=OK
        [[ $line == "[FAIL]"* ]] && state=FAIL
        if [[ -z $line ]]; then
            fail "--break $what: no line for the check '$c'"
        elif [[ "|$want|" == *"|$c|"* && $state != FAIL ]]; then
            fail "--break $what: the check '$c' did not fail"
        elif [[ "|$want|$may|" != *"|$c|"* && $state != OK ]]; then
            fail "--break $what: the check '$c' failed too, want only: $want${may:+ (and maybe $may)}"
        fi
    done
    grep -q '^demo: stopped everything it started; removed ' "$out" || fail "--break $what: no clean-up line"
    local dir
    dir=$(sed -n 's/^demo: stopped everything it started; removed \([^ ]*\) .*/\1/p' "$out")
    [[ -n $dir && ! -e $dir ]] || fail "--break $what: the work dir '$dir' is still there"
}

# cancel-paid and stock-twice cascade: a stock return that should not be (a paid order's, whose
# payment moved its items to sold; a second one) takes from reserved, which soon holds less than the
# pending orders' items, and the CHECK (reserved >= 0) refuses later cancels (to the DLQ: orders left
# pending, overdue, the broker not drained) and payments (the order service exits 1). Those checks
# fail for real; which of them, depends on timing.
stock_cascade="every order cancelled by its expiry|broker drained|DLQ of order-cancel empty|every program ran to the end"
run_break cancel-paid "no paid order cancelled|stock conserved per SKU" "$stock_cascade" --no-kill
grep -q '^\[FAIL\] no paid order cancelled: [1-9][0-9]* orders both paid and cancelled' "$out" ||
    fail "cancel-paid: the paid-order check did not fail with paid orders cancelled"

run_break cancellers-die "every order cancelled by its expiry|broker drained|every program ran to the end" "" \
    --kill-at 2 --down 2
grep -q '^demo: --break cancellers-die: hourglass-consumer and hourglass-compensator killed with SIGKILL' "$out" ||
    fail "cancellers-die: the kill is not announced"
grep -q '^\[FAIL\] every program ran to the end and stopped cleanly: .*hourglass-consumer killed by SIGKILL, hourglass-compensator killed by SIGKILL' "$out" ||
    fail "cancellers-die: the report does not name the killed programs"

run_break refund-unpaid "refunds to make" "" --no-kill
refunds=$(sed -n 's/^\[FAIL\] refunds to make: \([0-9]*\) (.*the service counted \([0-9]*\);.*/\1 \2/p' "$out")
read -r in_table counted <<<"$refunds"
((${in_table:-0} > ${counted:-0})) || fail "refund-unpaid: not more refunds in the table than the service counted ('$refunds')"

run_break backup-damaged "online backup" "" --no-kill
grep -q '^demo: --break backup-damaged: [0-9]* bytes at offset [0-9]* of backups/' "$out" ||
    fail "backup-damaged: the damage is not announced"

if ((all)); then
    run_break stock-twice "stock conserved per SKU" "$stock_cascade" --no-kill
    run_break consumer-dies "broker drained|every program ran to the end" "" --kill-at 2 --down 2
    run_break cancel-early "no order cancelled before its expiry" "" --no-kill
    grep -q '^\[FAIL\] no order cancelled before its expiry: [1-5]$' "$out" ||
        fail "cancel-early: not 1 to 5 orders cancelled early"
    run_break outbox-open "outbox" "" --no-kill
    run_break bad-message "DLQ of order-cancel empty" "" --no-kill
    grep -q '^\[FAIL\] DLQ of order-cancel empty: 1$' "$out" || fail "bad-message: not 1 message in the DLQ"
    # On a private RabbitMQ node (its checks: drained and "kept what it confirmed" for the backup's);
    # a longer run, as the purge takes seconds: about 1.5 min.
    if [[ -x /usr/lib/rabbitmq/bin/rabbitmq-server ]]; then
        checks[3]="RabbitMQ drained" checks[8]="RabbitMQ kept what it confirmed"
        run_break rabbit-loses "RabbitMQ kept what it confirmed" "" --rabbitmq --duration 30 --rate 20 --timeout 20
    else
        fail "rabbitmq-server is not installed: --break rabbit-loses not run (apt-get install rabbitmq-server)"
    fi
fi

((failed == 0)) || exit 1
if ((all)); then
    echo "PASS: the demo's report caught every --break mode, each in exactly its own checks"
else
    echo "PASS: the demo's report caught --break cancel-paid, cancellers-die, refund-unpaid and backup-damaged, each in exactly its own checks (--all: the six others)"
fi
