#!/usr/bin/env bash
# tests/system/test_shellcheck.sh — the demo's shell is shellcheck-clean: scripts/demo, what it
# sources (scripts/lib/*.sh) and the tests that run it (tests/system/test_demo*.sh), every finding
# of every severity. A missing shellcheck is a failure (apt-get install shellcheck; scripts/test
# installs it). A second or two.
set -uo pipefail
srcdir=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
command -v shellcheck >/dev/null ||
    { echo "FAIL: shellcheck is not installed (apt-get install shellcheck; scripts/test installs it)"; exit 1; }
cd "$srcdir" || exit 1
files=(scripts/demo scripts/lib/*.sh tests/system/test_demo*.sh tests/system/test_shellcheck.sh)
if ! shellcheck -x "${files[@]}"; then
    echo "FAIL: shellcheck found the above in ${files[*]}"
    exit 1
fi
echo "PASS: shellcheck-clean: ${files[*]}"
