#!/usr/bin/env bash
# tests/system/test_alert_rules.sh — the sample Prometheus alert rules (etc/hourglass-alerts.yml)
# are valid: `promtool check rules` accepts them, and their summaries read right for 1 and N
# (`promtool test rules tests/system/alert_rules_test.yml`), and every metric they name is one a daemon
# serves (a row of docs/metrics.md). promtool comes with Debian's prometheus
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
# Every metric the rules (and their test's series) name is one the daemons serve: listed in docs/metrics.md,
# which test_broker_delivery, test_order_consumer and test_compensator keep equal to their /metrics pages. A
# histogram's _bucket, _sum and _count series belong to its family.
metrics_doc=$here/../../docs/metrics.md
# shellcheck disable=SC2016 # the backquotes are the table's, not a command substitution
documented=$(sed -n 's/^| `\([a-z_:][a-z0-9_:]*\)` | \([a-z]*\) |.*/\1 \2/p' "$metrics_doc")
[[ -n $documented ]] || { echo "FAIL: no metric rows in $metrics_doc"; exit 1; }
missing=0
for file in "$rules" "$here/alert_rules_test.yml"; do
    while read -r name; do
        family=$name
        if ! grep -qx "$name [a-z]*" <<<"$documented"; then
            family=${name%_bucket}; family=${family%_sum}; family=${family%_count}
            grep -qx "$family histogram" <<<"$documented" || family=
        fi
        if [[ -z $family ]]; then
            echo "FAIL: $(basename "$file") names $name, which no daemon serves (not in docs/metrics.md)"
            missing=$((missing + 1))
        fi
    done < <(grep -oE '\b(hourglass|process)_[a-z0-9_]+' "$file" | sort -u)
done
((missing == 0)) || exit 1
echo "every metric the alert rules name is served (docs/metrics.md)"
# Their summaries render right for one and for several (promtool test rules).
out=$(promtool test rules "$here/alert_rules_test.yml" 2>&1)
status=$?
echo "$out"
((status == 0)) || { echo "FAIL: promtool test rules exited $status"; exit 1; }
echo "PASS"
