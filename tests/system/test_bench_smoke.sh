#!/usr/bin/env bash
# tests/system/test_bench_smoke.sh — the level engine's benchmark still runs and its own
# checks hold: `levels-bench --quick` (every part at small sizes) exits 0 with leases written
# at once and with leases held in memory as the broker's default does (--lease-write-delay 100);
# a store call that fails or a count that comes out wrong (a message left behind by the
# pipeline, a depth read back wrong after open) makes it exit non-zero. Figures are printed,
# never judged: a slow machine passes. `fsync-bench --quick --seconds 1` prints its four cases
# (append and overwrite, alone and beside big files) and leaves nothing behind.
set -uo pipefail
builddir=${HG_BUILDDIR:-$PWD}
bench=$builddir/levels-bench
[[ -x $bench ]] || { echo "FAIL: $bench not built"; exit 1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/bench-smoke.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
failures=0
for delay in 0 100; do
    out=$tmp/levels-bench.$delay.out
    if ! TMPDIR=$tmp "$bench" --quick --lease-write-delay "$delay" >"$out" 2>&1; then
        echo "FAIL: levels-bench --quick --lease-write-delay $delay exited non-zero; its output:"
        cat "$out"
        failures=$((failures + 1))
        continue
    fi
    for part in raw pipeline seek open spread; do
        if ! grep -q "^$part " "$out"; then
            echo "FAIL: levels-bench --quick --lease-write-delay $delay printed no $part figures"
            failures=$((failures + 1))
        fi
    done
    grep -q "lease-write-delay $delay ms" "$out" || {
        echo "FAIL: levels-bench did not say it ran with lease-write-delay $delay"
        failures=$((failures + 1))
    }
    echo "ok   levels-bench --quick --lease-write-delay $delay: $(tail -1 "$out")"
done
fsync_bench=$builddir/fsync-bench
if [[ ! -x $fsync_bench ]]; then
    echo "FAIL: $fsync_bench not built"
    failures=$((failures + 1))
elif ! "$fsync_bench" --quick --seconds 1 --dir "$tmp" >"$tmp/fsync-bench.out" 2>&1; then
    echo "FAIL: fsync-bench --quick exited non-zero; its output:"
    cat "$tmp/fsync-bench.out"
    failures=$((failures + 1))
else
    cases=$(grep -cE '^fsync (append|overwrite) +(alone|beside) .* fsyncs .* p99 ' "$tmp/fsync-bench.out")
    if [[ $cases != 4 ]]; then
        echo "FAIL: fsync-bench printed $cases of its 4 cases:"
        cat "$tmp/fsync-bench.out"
        failures=$((failures + 1))
    elif compgen -G "$tmp/fsync-bench.*/" >/dev/null; then
        echo "FAIL: fsync-bench left its directory behind: $(echo "$tmp"/fsync-bench.*)"
        failures=$((failures + 1))
    else
        echo "ok   fsync-bench --quick: $(grep -m1 '^fsync append  *beside' "$tmp/fsync-bench.out" | tr -s ' ')"
    fi
fi
((failures == 0)) && echo PASS || exit 1
