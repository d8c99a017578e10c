#!/usr/bin/env bash
# tests/system/test_bench_smoke.sh — the level engine's benchmark still runs and its own
# checks hold: `levels-bench --quick` (every part at small sizes) exits 0 with leases written
# at once and with leases held in memory as the broker's default does (--lease-write-delay 100);
# a store call that fails or a count that comes out wrong (a message left behind by the
# pipeline, a depth read back wrong after open) makes it exit non-zero. Figures are printed,
# never judged: a slow machine passes. `fsync-bench --quick --seconds 1` prints its four cases
# (append and overwrite, alone and beside big files) and leaves nothing behind. hourglass-floor
# serves a quick mixed run of hourglass-bench and refuses bad commands by name; that run's broker
# starts on a warmed log (--mixed-warm-log 2: the flood's segments recycled into spares, INFO
# log_spare_segments).
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
    for part in raw pipeline seek open spread clog clogcold cq; do
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
# hourglass-floor (bench/floor_server.c): the bench's own client drives it through a quick mixed
# run (a PULL reply of the wrong shape or an ACK that releases the wrong count makes hourglass-bench
# exit non-zero), and its refusals name the problem.
floor=$builddir/hourglass-floor hbench=$builddir/hourglass-bench
# shellcheck source=scripts/lib/stack.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib/stack.sh"
if [[ ! -x $floor || ! -x $hbench ]]; then
    echo "FAIL: $floor or $hbench not built"
    failures=$((failures + 1))
else
    fport=$(hg_free_port)
    mkdir -p "$tmp/floor"
    "$floor" --port "$fport" --dir "$tmp/floor" --log-mib 16 2>"$tmp/floor/floor.err" &
    fpid=$!
    trap 'kill "$fpid" 2>/dev/null; rm -rf "$tmp"' EXIT
    floor_up() { [[ $(redis-cli -p "$fport" PING 2>/dev/null) == PONG ]]; }
    if ! hg_wait_for 30 "hourglass-floor to answer PING" floor_up; then
        echo "FAIL: hourglass-floor did not start: $(cat "$tmp/floor/floor.err")"
        failures=$((failures + 1))
    elif ! "$hbench" --only mixed --quick --floor-port "$fport" --mixed-warm-log 2 >"$tmp/floor.out" 2>&1; then
        echo "FAIL: hourglass-bench --only mixed --quick --floor-port --mixed-warm-log 2 exited non-zero; its output:"
        cat "$tmp/floor.out"
        failures=$((failures + 1))
    elif ! grep -qE '^RESULT .*mixed_floor_overlap_rps=[1-9]' "$tmp/floor.out" ||
        ! grep -qE '^  floor: append .* [1-9][0-9]* delivered' "$tmp/floor.out"; then
        echo "FAIL: hourglass-bench printed no floor rate or deliveries:"
        cat "$tmp/floor.out"
        failures=$((failures + 1))
    else
        echo "ok   hourglass-floor beside hourglass-bench --only mixed --quick: $(grep -m1 '^  floor: append' "$tmp/floor.out" | tr -s ' ')"
    fi
    # a recycled segment at least beside the pre-writer's one spare
    if ! grep -qE '^  log warmed: ([2-9]|[1-9][0-9]+) spare segments when the flood began' "$tmp/floor.out"; then
        echo "FAIL: hourglass-bench --mixed-warm-log 2 did not start its flood on recycled spares:"
        cat "$tmp/floor.out"
        failures=$((failures + 1))
    else
        echo "ok   hourglass-bench --mixed-warm-log 2: $(grep -m1 '^  log warmed' "$tmp/floor.out" | tr -s ' ')"
    fi
    declare -A refusals=(
        ["SEND t p DELAY 5x"]='unknown unit "x"'
        ["SEND t p KEY k"]="SEND option 'KEY' is not served by the floor"
        ["PULL g t COUNT 0"]="the count must be at least 1"
        ["ACK g xyz"]="'xyz' is not a message id"
        ["NOPE"]="unknown command 'NOPE'"
    )
    for cmd in "${!refusals[@]}"; do
        # shellcheck disable=SC2086 # the command's words
        got=$(redis-cli -p "$fport" $cmd 2>&1)
        if [[ $got != *"${refusals[$cmd]}"* ]]; then
            echo "FAIL: hourglass-floor answered '$cmd' with '$got', not an error naming '${refusals[$cmd]}'"
            failures=$((failures + 1))
        fi
    done
    echo "ok   hourglass-floor refuses ${#refusals[@]} bad commands by name"
fi
((failures == 0)) && echo PASS || exit 1
