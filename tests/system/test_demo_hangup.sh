#!/usr/bin/env bash
# tests/system/test_demo_hangup.sh — a closed terminal stops the demo cleanly even when its output goes
# through a pipe (scripts/demo 2>&1 | tee run.log): the hang-up reaches the whole pipeline, the tee is gone,
# and the demo must still stop MariaDB and the daemons it started and remove its work dir. The pipeline runs
# in a session of its own (setsid), SIGHUP goes to its process group once the order service runs, and the
# test polls (deadline 60 s) for the work dir to be gone and no process to name it. About 20 s.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
builddir=${HG_BUILDDIR:-$PWD}
demo=$here/../../scripts/demo
tmp=$(mktemp -d "${TMPDIR:-/tmp}/hg-test-demo-hangup-XXXXXX")
log=$tmp/run.log
pipeline_pid=""
# shellcheck disable=SC2317  # invoked by the trap
finish() {
    if [[ -n $pipeline_pid ]] && kill -0 "$pipeline_pid" 2>/dev/null; then kill -KILL -- "-$pipeline_pid" 2>/dev/null; fi
    rm -rf "$tmp"
}
trap finish EXIT
fail() { echo "FAIL: $*"; [[ -f $log ]] && sed 's/^/    /' "$log" | tail -n 15; exit 1; }
command -v setsid >/dev/null || fail "setsid not installed"

# Run in the background of a non-interactive shell (not a group leader), setsid execs without forking: its
# pid is the pipeline's bash, leader of the new session and process group. Single quotes: that bash expands.
# shellcheck disable=SC2016
setsid bash -c 'bash "$0" --bindir "$1" --duration 30 --no-kill --plain 2>&1 | tee "$2" >/dev/null' \
    "$demo" "$builddir" "$log" </dev/null >/dev/null 2>&1 &
pipeline_pid=$!

# poll SECONDS WHAT COMMAND... — until COMMAND succeeds, or fail naming WHAT.
poll() {
    local deadline=$((SECONDS + $1)) what=$2
    shift 2
    until "$@"; do ((SECONDS < deadline)) || fail "no $what within the deadline"; sleep 0.2; done
}
running() { grep -q 'demo: .*running the order service' "$log" 2>/dev/null; }
poll 120 "'running the order service' line" running
work=$(sed -n 's/^demo: .* work dir \(\/[^:]*\): .*/\1/p' "$log" | head -n 1)
[[ -n $work && -d $work ]] || fail "no work dir named in the log ('$work')"
pgrep -f -- "$work/" >/dev/null || fail "no process runs in $work before the hang-up"

kill -HUP -- "-$pipeline_pid" || fail "cannot send SIGHUP to the pipeline's process group $pipeline_pid"
gone() { [[ ! -e $work ]] && ! pgrep -f -- "$work/" >/dev/null; }
if ! (poll 60 "clean-up" gone); then
    mapfile -t left < <(pgrep -f -- "$work/")
    # Not to be left running: what the demo started, found by its work dir.
    ((${#left[@]})) && kill "${left[@]}" 2>/dev/null
    sleep 1
    rm -rf "$work"
    fail "after SIGHUP to 'scripts/demo 2>&1 | tee' the demo left ${left[*]:+processes ${left[*]} and }$work"
fi
echo "PASS: SIGHUP to 'scripts/demo 2>&1 | tee': everything it started stopped and $work removed"
