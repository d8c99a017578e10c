#!/usr/bin/env bash
# tests/system/test_first_order_args.sh — examples/first-order (docs/getting-started.md step 4) answers
# --help with its options (exit 0) and refuses a bad option or value with one line naming it (exit 2), before
# it connects to anything: no broker or database is needed. Runs the program of this build.
set -uo pipefail
builddir=${HG_BUILDDIR:-$PWD}
prog=$builddir/examples/first-order/first-order
[[ -x $prog ]] || { echo "FAIL: $prog not built"; exit 1; }
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# expect STATUS LINE ARGS... — its exit status, and its first line (stdout, then stderr), exactly.
expect() {
    local want=$1 line=$2 out status
    shift 2
    out=$("$prog" "$@" 2>&1 </dev/null)
    status=$?
    if ((status != want)) || [[ ${out%%$'\n'*} != "$line" ]]; then
        fail "first-order $*: exit $status, '${out%%$'\n'*}'; want exit $want, '$line'"
    else
        echo "ok   first-order $*: exit $status: ${out%%$'\n'*}"
    fi
}

expect 0 "usage: HG_MYSQL_PASSWORD=... first-order --mysql-socket PATH --mysql-user USER [--mysql-database shop]" --help
expect 0 "usage: HG_MYSQL_PASSWORD=... first-order --mysql-socket PATH --mysql-user USER [--mysql-database shop]" \
    --mysql-user hg_shop -h
expect 2 "first-order: --timeout-ms wants a whole number from 1 to 86400000, not '3s'" --timeout-ms 3s
expect 2 "first-order: --wait wants a whole number from 1 to 86400, not '0'" --wait 0
expect 2 "first-order: --order-id wants a whole number from 1 to 18446744073709551615, not '99999999999999999999'" \
    --order-id 99999999999999999999
expect 2 "first-order: --wait wants a value: options come in pairs, --name value (see first-order --help)" --wait
expect 2 "first-order: unknown option --bogus (see first-order --help)" --bogus 1

if ((failures)); then
    echo "FAIL: $failures case(s)"
    exit 1
fi
echo "PASS"
