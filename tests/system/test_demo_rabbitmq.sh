#!/usr/bin/env bash
# tests/system/test_demo_rabbitmq.sh — a shortened scripts/demo --rabbitmq is part of make check: the
# same shop as tests/system/test_demo.sh (15 s of orders at 50/s, 5 % of the fast-path sends dropped)
# on a private RabbitMQ node instead of hourglass-broker, the node's process group killed (SIGKILL)
# at 7 s and restarted on the same ports 5 s later, against the programs of this build (--bindir).
# Passes when the demo exits 0 with every invariant of its report holding and the injections visible
# in it (sends dropped, the node killed and restarted, outbox rows relayed, the timeout messages
# RabbitMQ had confirmed before the kill delivered after it). A missing RabbitMQ is a failure. The
# node's start costs 5-40 s here; about 45 s in all.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
builddir=${HG_BUILDDIR:-$PWD}
fail() { echo "FAIL: $*"; exit 1; }
[[ -x /usr/lib/rabbitmq/bin/rabbitmq-server ]] ||
    fail "rabbitmq-server is not installed (apt-get install rabbitmq-server; scripts/test installs it)"
out=$(mktemp "${TMPDIR:-/tmp}/hg-test-demo-rabbitmq-XXXXXX.log")
trap 'rm -f "$out"' EXIT

bash "$here/../../scripts/demo" --rabbitmq --bindir "$builddir" --duration 15 --rate 50 --plain >"$out" 2>&1
status=$?
cat "$out"
((status == 0)) || fail "scripts/demo --rabbitmq exited $status"
grep -q '^RESULT: every invariant holds$' "$out" || fail "no 'RESULT: every invariant holds' line"
oks=$(grep -c '^\[ OK \]' "$out")
((oks == 10)) || fail "$oks invariants OK, want 10"
! grep -q '^\[FAIL\]' "$out" || fail "a [FAIL] line"
grep -q '^transport: RabbitMQ (amqp://)' "$out" || fail "the report does not say it ran on RabbitMQ"
grep -q 'demo: rabbitmq down: node killed with SIGKILL' "$out" || fail "the RabbitMQ node was not killed"
grep -q 'demo: rabbitmq up: restarted on port' "$out" || fail "the RabbitMQ node was not restarted"
confirmed=$(sed -n 's/^\[ OK \] RabbitMQ kept what it confirmed: the \([0-9]*\) timeout messages.*/\1/p' "$out")
after=$(sed -n 's/^\[ OK \] RabbitMQ kept what it confirmed: .*, \([0-9]*\) of them after the restart.*; 0 missing$/\1/p' "$out")
((${confirmed:-0} > 0)) || fail "no timeout message confirmed before the kill was checked ('${confirmed}')"
((${after:-0} > 0)) || fail "none of them was delivered after the restart ('${after}')"
grep -q '^not part of a RabbitMQ run: the online backup' "$out" || fail "no line on the online backup"
dropped=$(sed -n 's/.*; \([0-9]*\) of [0-9]* fast-path sends dropped.*/\1/p' "$out")
relayed=$(sed -n 's/.*the compensator relayed \([0-9]*\) outbox rows.*/\1/p' "$out")
((${dropped:-0} > 0)) || fail "no fast-path send was dropped ('${dropped}')"
((${relayed:-0} > 0)) || fail "the compensator relayed nothing ('${relayed}')"
grep -q '^  timeout-message ' "$out" || fail "no lateness row for timeout-message"
echo "PASS: demo --rabbitmq report OK ($dropped sends dropped, $relayed rows relayed, $confirmed confirmed messages kept across the kill, $after delivered after it)"
