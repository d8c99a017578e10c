#!/usr/bin/env bash
# tests/system/test_soak.sh — a 45-second scripts/soak against the programs of this build
# (--bindir): 60 orders/s from three shops (a rate a loaded machine keeps), a fault every 11 s, so
# each of the four kinds — the consumer's kill -9, KILL CONNECTION, the compensator's SIGSTOP, the
# broker's restart (its first is a kill -9) — happens once, one at a time (--fault-every's least:
# a SIGSTOP lasts 10 s); a sample every 3 s. Passes when the soak exits 0 with every order invariant holding (none
# cancelled early, no message lost: outbox done, group drained, DLQ empty; the broker's store passes
# --check-data after its stop), its table has the figures of every process (RSS, fds, threads, CPU),
# the broker's data dir and INFO fields and the orders' row counts, the four faults are listed, and
# its temp dir is removed at the end. It
# does not judge the slopes: half a minute is warm-up, not a soak. The soak polls with deadlines
# itself; about 70 s.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
builddir=${HG_BUILDDIR:-$PWD}
out=$(mktemp "${TMPDIR:-/tmp}/hg-test-soak-XXXXXX.log")
trap 'rm -f "$out"' EXIT

bash "$here/../../scripts/soak" --bindir "$builddir" --minutes 0.75 --rate 60 --faults --fault-every 11 --sample 3 >"$out" 2>&1
status=$?
cat "$out"
fail() { echo "FAIL: $*"; exit 1; }
((status == 0)) || fail "scripts/soak exited $status"
grep -q '^RESULT: every invariant holds$' "$out" || fail "no 'RESULT: every invariant holds' line"
! grep -q '^\[FAIL\]' "$out" || fail "a [FAIL] line"
oks=$(grep -c '^\[ OK \]' "$out")
((oks == 9)) || fail "$oks invariants OK, want 9"
grep -q '^\[ OK \] no order cancelled before its expiry: 0$' "$out" || fail "no check of early cancels"
grep -Eq '^\[ OK \] no message lost: 0 outbox rows not done; group order-cancel at the end: 0 ready, 0 retry-delayed, 0 in flight, 0 in its DLQ ' "$out" ||
    fail "no check that no message was lost (outbox, group drained, DLQ)"
grep -Eq "^\[ OK \] the broker's store checks after its stop \(exit 0\): --check-data exit 0: ok: " "$out" ||
    fail "no --check-data of the broker's store at the end"
for p in broker consumer compensator console mariadbd shop-0 shop-1 shop-2; do
    for f in rss_kb fds threads cpu_s; do
        grep -Eq "^$p(\([0-9]+\))? +$f +[0-9.]+ +[0-9.]+ +[0-9.]+ " "$out" || fail "no $f row for $p in the table"
    done
done
for f in data_dir_kb info_used_memory info_connected_clients topic_retained; do
    grep -Eq "^broker(\([0-9]+\))? +$f +[0-9]" "$out" || fail "no $f row for the broker"
done
grep -Eq '^mariadb +orders +[0-9]+ +[0-9]+ +([0-9]+) ' "$out" || fail "no orders row"
grep -q '^orders created a second: first third ' "$out" || fail "no order rate line"
grep -Eq '^CPU ms per order created, .* broker [0-9.]+ -> [0-9.]+;' "$out" || fail "no broker CPU per order"
grep -q 'fault at .*consumer kill -9, restarted' "$out" || fail "the consumer was not killed"
grep -q 'fault at .*KILL CONNECTION of [1-9][0-9]* MariaDB connections' "$out" || fail "no MariaDB connection was killed"
grep -q 'fault at .*compensator SIGSTOP' "$out" || fail "the compensator was not stopped"
grep -q 'fault at .*broker restart (kill -9)' "$out" || fail "the broker was not restarted after a kill -9"
grep -Eq '^consumer\(2\) +rss_kb' "$out" || fail "the table does not show the consumer's second pid"
dir=$(sed -n 's/^soak: stopped everything it started; removed \([^ ]*\) .*/\1/p' "$out")
[[ -n $dir ]] || fail "no line saying what the clean-up stopped and removed"
[[ ! -e $dir ]] || fail "the work dir $dir is still there"
echo "PASS: soak report OK"
