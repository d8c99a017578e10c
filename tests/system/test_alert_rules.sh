#!/usr/bin/env bash
# tests/system/test_alert_rules.sh — the sample Prometheus alert rules (etc/hourglass-alerts.yml)
# are valid: `promtool check rules` accepts them, and their summaries read right for 1 and N
# (`promtool test rules tests/system/alert_rules_test.yml`). promtool comes with Debian's prometheus
# package, which scripts/test installs; a missing promtool is a failure, never a skip.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
rules=$here/../../etc/hourglass-alerts.yml
if ! command -v promtool >/dev/null; then
    echo "FAIL: promtool not installed (apt-get install prometheus; scripts/test installs it)"
    exit 1
fi
out=$(promtool check rules "$rules" 2>&1)
status=$?
echo "$out"
((status == 0)) || { echo "FAIL: promtool check rules exited $status"; exit 1; }
grep -q 'SUCCESS: [1-9][0-9]* rules found' <<<"$out" || { echo "FAIL: no rules found"; exit 1; }
# Their summaries render right for one and for several (promtool test rules).
out=$(promtool test rules "$here/alert_rules_test.yml" 2>&1)
status=$?
echo "$out"
((status == 0)) || { echo "FAIL: promtool test rules exited $status"; exit 1; }
echo "PASS"
