#!/usr/bin/env bash
# tests/system/test_demo.sh — a shortened scripts/demo is part of make check: 15 s of orders at
# 50/s with the broker killed (SIGKILL) at 7 s for 5 s and 5 % of the fast-path sends dropped,
# against the programs of this build (--bindir: no package install, no build). Passes when the
# demo exits 0 with every invariant of its report holding and the injections visible in it
# (sends dropped, the broker killed and restarted, outbox rows relayed, an online backup checked),
# the DLQ depth read before the kill shown marked stale while the broker is down, the web console started, the work dir removed at the end, and no report line naming a path in it.
# The demo polls with deadlines itself; about 35 s.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
builddir=${HG_BUILDDIR:-$PWD}
out=$(mktemp "${TMPDIR:-/tmp}/hg-test-demo-XXXXXX.log")
trap 'rm -f "$out"' EXIT

bash "$here/../../scripts/demo" --bindir "$builddir" --duration 15 --rate 50 --plain >"$out" 2>&1
status=$?
cat "$out"
fail() { echo "FAIL: $*"; exit 1; }
((status == 0)) || fail "scripts/demo exited $status"
grep -q '^RESULT: every invariant holds$' "$out" || fail "no 'RESULT: every invariant holds' line"
oks=$(grep -c '^\[ OK \]' "$out")
((oks == 10)) || fail "$oks invariants OK, want 10"
! grep -q '^\[FAIL\]' "$out" || fail "a [FAIL] line"
grep -q 'demo: broker down: killed with SIGKILL' "$out" || fail "the broker was not killed"
grep -q 'demo: broker up: restarted on port' "$out" || fail "the broker was not restarted"
# While the broker is down its DLQ cannot be read: the progress lines keep the last depth read, marked
# with when and why (never a bare '-').
down_lines=$(grep -c '^demo: t=.* | broker down$' "$out")
((down_lines > 0)) || fail "no progress line while the broker was down"
stale_lines=$(grep -cE '^demo: t=.* dlq [0-9]+ \(read at [0-9]+s; broker down\) .* \| broker down$' "$out")
((stale_lines == down_lines)) || fail "$stale_lines of the $down_lines progress lines while the broker was down say 'dlq N (read at Ns; broker down)'"
! grep -q ' dlq - ' "$out" || fail "a progress line says 'dlq -'"
grep -q '^\[ OK \] online backup .*--check-data of the copy: ok: ' "$out" || fail "no checked online backup"
dropped=$(sed -n 's/.*; \([0-9]*\) of [0-9]* fast-path sends dropped.*/\1/p' "$out")
relayed=$(sed -n 's/.*the compensator relayed \([0-9]*\) outbox rows.*/\1/p' "$out")
((${dropped:-0} > 0)) || fail "no fast-path send was dropped ('${dropped}')"
((${relayed:-0} > 0)) || fail "the compensator relayed nothing ('${relayed}')"
grep -q '^  timeout-message ' "$out" || fail "no lateness row for timeout-message"
grep -q 'web console: http://127.0.0.1:[0-9]*/' "$out" || fail "the web console was not started"
dir=$(sed -n 's/^demo: stopped everything it started; removed \([^ ]*\) .*/\1/p' "$out")
[[ -n $dir ]] || fail "no line saying what the clean-up stopped and removed"
[[ ! -e $dir ]] || fail "the work dir $dir is still there"
# The report is read after the work dir is gone: none of its lines names a path in it.
! grep '^\[' "$out" | grep -F "$dir/" || fail "a report line names a path in the work dir (removed at the end)"
echo "PASS: demo report OK ($dropped sends dropped, $relayed rows relayed)"
