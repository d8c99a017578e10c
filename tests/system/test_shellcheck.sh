#!/usr/bin/env bash
# tests/system/test_shellcheck.sh — the tree's shell is shellcheck-clean: scripts/ (the demo, the
# soak, the test command, the benches, gen-config-docs) and what they source (scripts/lib/*.sh), the shell
# tests (tests/system/*.sh, tests/integration/*.sh), the fuzz runner and .ci/run, every finding of
# every severity. A missing shellcheck is a failure (apt-get install shellcheck; scripts/test
# installs it). A second or two.
set -uo pipefail
srcdir=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
command -v shellcheck >/dev/null ||
    { echo "FAIL: shellcheck is not installed (apt-get install shellcheck; scripts/test installs it)"; exit 1; }
cd "$srcdir" || exit 1
files=(scripts/demo scripts/soak scripts/test scripts/hourglass-bench scripts/levels-bench scripts/gen-config-docs
       scripts/lib/*.sh tests/system/*.sh tests/integration/*.sh tests/fuzz/run .ci/run)
if ! shellcheck -x "${files[@]}"; then
    echo "FAIL: shellcheck found the above in ${files[*]}"
    exit 1
fi
echo "PASS: shellcheck-clean: ${files[*]}"
