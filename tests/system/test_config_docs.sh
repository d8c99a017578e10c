#!/usr/bin/env bash
# tests/system/test_config_docs.sh — the configuration reference in docs/operations.md is the
# daemons' config tables: regenerate it from this build's hourglass-broker, hourglass-consumer
# and hourglass-compensator (--help-markdown) into a temp file and diff (scripts/gen-config-docs
# --check). Fails with the diff when a key, default or help text changed without the docs; the
# fix is to run scripts/gen-config-docs and commit the result.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
builddir=${HG_BUILDDIR:-$PWD}
bash "$here/../../scripts/gen-config-docs" --bindir "$builddir" --check || exit 1
# Every key of every table is there (a marker pair that lost its table would still diff clean
# only if the table were empty: count the rows against --help).
for prog in hourglass-broker hourglass-consumer hourglass-compensator hourglass-console; do
    want=$("$builddir/$prog" --help | grep -c '^  --[a-z]' || true)
    got=$(awk -v p="$prog" 'index($0, "<!-- BEGIN GENERATED CONFIG " p " ") == 1 { on = 1; next }
                            $0 == "<!-- END GENERATED CONFIG " p " -->" { on = 0 }
                            on && /^\| `/ { n++ } END { print n + 0 }' "$here/../../docs/operations.md")
    # --help also lists --config, --check-config, --help, --version (and --once) above the keys.
    keys=$("$builddir/$prog" --help-markdown | grep -c '^| `')
    if ((got != keys || got == 0)); then
        echo "FAIL: $prog: $got rows in docs/operations.md, $keys keys in its table"
        exit 1
    fi
    echo "ok   $prog: $keys keys documented (--help shows $want option lines)"
done
echo "PASS"
