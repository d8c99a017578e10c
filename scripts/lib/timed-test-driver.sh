#!/bin/sh
# scripts/lib/timed-test-driver.sh — automake's LOG_DRIVER for every test
# (tests/include.am): runs the real driver given as its first arguments and
# records the test's wall time, which automake's parallel harness does not.
#
#   timed-test-driver.sh SHELL DRIVER [automake driver options] -- TEST [ARGS]
#
# The time (seconds, two decimals) is appended as a ":wall-seconds:" line to
# the test's .trs file (the harness reads only the fields it knows and ignores
# the rest) and as a last "wall time" line to its .log. The .trs and .log sit
# in the build directory, so this works in-tree, in a VPATH build and in make
# distcheck (the source tree read-only), and 'make clean' removes them with
# the rest of the results. scripts/test reads the .trs lines back: the longest
# tests after each make check, and one machine-readable line a test.
#
# Exits with the real driver's status. When the driver was interrupted it
# removed the .trs and .log itself, and nothing is appended.

if test $# -lt 2; then
    echo "timed-test-driver.sh: usage: timed-test-driver.sh SHELL DRIVER [DRIVER-OPTIONS] -- TEST" >&2
    exit 99
fi
driver_shell=$1 driver=$2
shift 2

log_file='' trs_file='' prev=''
for arg in "$@"; do
    case "$prev" in
        --log-file) log_file=$arg ;;
        --trs-file) trs_file=$arg ;;
    esac
    test "$arg" = -- && break
    prev=$arg
done

started=$(date +%s%N)
"$driver_shell" "$driver" "$@"
status=$?
ended=$(date +%s%N)

# Nanoseconds to seconds with two decimals, in integer shell arithmetic.
elapsed=$(((ended - started) / 10000000))
seconds=$((elapsed / 100)).$(printf '%02d' $((elapsed % 100)))
if test -n "$trs_file" && test -f "$trs_file"; then
    echo ":wall-seconds: $seconds" >>"$trs_file"
fi
if test -n "$log_file" && test -f "$log_file"; then
    echo "wall time: $seconds s" >>"$log_file"
fi
exit $status
