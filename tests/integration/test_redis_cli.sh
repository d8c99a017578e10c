#!/usr/bin/env bash
# tests/integration/test_redis_cli.sh — stock redis-cli and redis-benchmark (Debian's
# redis-tools) drive hourglass-broker unmodified: the wire-compatibility proof.
#
# Starts the broker on a free port in a mktemp dir, runs the basic flows with redis-cli
# (PING, SEND, PULL, ACK, GROUP LIST, LEVELS, INFO, DLQ LEN, errors, a stdin pipeline),
# 1000 SENDs with redis-benchmark, an interactive redis-cli in tmux (the hint for SEND,
# help SEND, Tab completion: COMMAND DOCS), redis-py's default pipeline() (MULTI/EXEC) and
# CLIENT INFO/LIST (redis_py_pipeline.py), MULTI/DISCARD by hand, then SHUTDOWN; exits
# non-zero on any mismatch.
# The broker is killed on exit by a trap; its log is printed when something failed.
#
# Finds the broker as $HG_BROKER, else ./hourglass-broker (make check runs from the
# build dir), else next to this script's ../../. A missing redis-cli is a failure,
# never a skip.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
broker=${HG_BROKER:-}
if [[ -z $broker ]]; then
    for cand in ./hourglass-broker "$here/../../hourglass-broker"; do
        if [[ -x $cand ]]; then broker=$cand; break; fi
    done
fi
if [[ -z $broker || ! -x $broker ]]; then
    echo "FAIL: hourglass-broker not found (set HG_BROKER or build it: make hourglass-broker)" >&2
    exit 1
fi
for tool in redis-cli redis-benchmark; do
    if ! command -v "$tool" >/dev/null; then
        echo "FAIL: $tool not installed (apt-get install redis-tools)" >&2
        exit 1
    fi
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/hg-rediscli-XXXXXX")
pid=""
failures=0
cleanup() {
    if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
        kill "$pid" 2>/dev/null
        for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$pid" 2>/dev/null
    fi
    if ((failures > 0)) && [[ -f $tmp/broker.log ]]; then
        echo "--- broker.log ---"
        tail -n 50 "$tmp/broker.log"
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT

fail() {
    echo "FAIL: $*"
    failures=$((failures + 1))
}

# expect NAME GOT WANT — exact comparison
expect() {
    if [[ $2 == "$3" ]]; then
        echo "ok   $1"
    else
        fail "$1: got '$2', want '$3'"
    fi
}

# expect_match NAME GOT REGEX
expect_match() {
    if [[ $2 =~ $3 ]]; then
        echo "ok   $1"
    else
        fail "$1: got '$2', want a match of /$3/"
    fi
}

# A port nothing listens on right now (bash /dev/tcp probe).
free_port() {
    local p
    for _ in $(seq 200); do
        p=$((20000 + RANDOM % 40000))
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
            echo "$p"
            return 0
        fi
    done
    return 1
}

port=""
for attempt in 1 2 3; do
    port=$(free_port) || { echo "FAIL: no free port" >&2; exit 1; }
    "$broker" --port "$port" --dir "$tmp/data" >>"$tmp/broker.log" 2>&1 &
    pid=$!
    ready=0
    for _ in $(seq 300); do   # up to 30 s
        if [[ $(redis-cli -p "$port" PING 2>/dev/null) == PONG ]]; then ready=1; break; fi
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    ((ready)) && break
    kill -9 "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    pid=""
    grep -q "Address already in use" "$tmp/broker.log" || break
done
if [[ -z $pid ]]; then
    failures=1
    echo "FAIL: hourglass-broker did not answer PING" >&2
    exit 1
fi
echo "broker pid $pid on port $port"

rc() { redis-cli -p "$port" "$@" 2>&1; }

# --- basic flows ----------------------------------------------------------------------
expect "PING" "$(rc PING)" "PONG"
expect "ECHO" "$(rc ECHO 'hello world')" "hello world"

id1=$(rc SEND orders 'order 1001' KEY k1)
expect_match "SEND returns a 16-hex-digit id" "$id1" '^[0-9a-f]{16}$'

# PULL: raw output is one line per element: id topic key payload reconsume due_ms
mapfile -t pulled < <(rc PULL g orders COUNT 10)
expect "PULL gives one message (6 lines)" "${#pulled[@]}" "6"
expect "PULL id" "${pulled[0]:-}" "$id1"
expect "PULL topic" "${pulled[1]:-}" "orders"
expect "PULL key" "${pulled[2]:-}" "k1"
expect "PULL payload" "${pulled[3]:-}" "order 1001"
expect "PULL reconsume" "${pulled[4]:-}" "0"
expect_match "PULL due_ms" "${pulled[5]:-}" '^[0-9]{13}$'

expect "ACK" "$(rc ACK g "$id1")" "1"
expect "ACK again" "$(rc ACK g "$id1")" "0"

id2=$(rc SEND orders later LEVEL 1)
expect_match "SEND LEVEL 1" "$id2" '^[0-9a-f]{16}$'
id3=$(rc SEND orders chained DELAY 2s)
expect_match "SEND DELAY 2s" "$id3" '^[0-9a-f]{16}$'
start_ms=$(date +%s%3N)
mapfile -t pulled < <(rc PULL g orders COUNT 10 BLOCK 10000)
end_ms=$(date +%s%3N)
expect "PULL BLOCK gets the LEVEL 1 message" "${pulled[0]:-}" "$id2"
if ((${#pulled[@]} >= 6 && end_ms < ${pulled[5]})); then
    fail "PULL BLOCK returned before due_ms (${pulled[5]} > $end_ms)"
fi
echo "     (blocked $((end_ms - start_ms)) ms)"
mapfile -t pulled < <(rc PULL g orders BLOCK 10000)
expect "PULL BLOCK gets the DELAY 2s message" "${pulled[0]:-}" "$id3"
expect "ACK two" "$(rc ACK g "$id2" "$id3")" "2"
expect "PULL BLOCK timeout is empty" "$(rc PULL g orders BLOCK 300)" ""

# NACK and the DLQ
expect "GROUP CREATE" "$(rc GROUP CREATE strict orders FROM NOW MAXRETRY 0)" "OK"
id4=$(rc SEND orders doomed)
mapfile -t pulled < <(rc PULL strict orders)
expect "PULL strict" "${pulled[0]:-}" "$id4"
expect "NACK to the DLQ answers 0" "$(rc NACK strict "$id4" REASON 'bad order')" "0"
expect "DLQ LEN" "$(rc DLQ LEN strict)" "1"
mapfile -t dlq < <(rc DLQ LIST strict)
expect "DLQ LIST id" "${dlq[0]:-}" "$id4"
expect "DLQ LIST reason" "${dlq[4]:-}" "bad order"
expect "DLQ REQUEUE ALL" "$(rc DLQ REQUEUE strict ALL)" "1"
expect "DLQ LEN after requeue" "$(rc DLQ LEN strict)" "0"

# GROUP LIST: flat pairs per group, sorted by name
mapfile -t groups < <(rc GROUP LIST)
expect "GROUP LIST first pair" "${groups[0]:-} ${groups[1]:-}" "group g"
expect "GROUP LIST topic" "${groups[2]:-} ${groups[3]:-}" "topic orders"
joined=" ${groups[*]} "
expect_match "GROUP LIST has group strict" "$joined" ' group strict topic orders '
expect_match "GROUP LIST inflight field" "$joined" ' inflight [0-9]+ '

# LEVELS: 18 rows of 4
mapfile -t levels < <(rc LEVELS)
expect "LEVELS lines" "${#levels[@]}" "72"
expect "LEVELS row 1" "${levels[0]:-} ${levels[1]:-}" "1 1000"
expect "LEVELS row 18" "${levels[68]:-} ${levels[69]:-}" "18 7200000"

# INFO
info=$(rc INFO | tr -d '\r')
expect_match "INFO has # Server" "$info" '# Server'
expect_match "INFO has connected_clients" "$info" 'connected_clients:[0-9]+'
expect_match "INFO has # Stats" "$info" '# Stats'
expect_match "INFO server" "$(rc INFO server | tr -d '\r')" 'hourglass_version:'

# Errors are errors
expect_match "unknown command" "$(rc FROBNICATE x)" 'unknown command'
expect_match "wrong arity" "$(rc SEND onlytopic)" "wrong number of arguments for 'send' command"

# Several commands on stdin, one connection
mapfile -t piped < <(printf 'PING\nSEND piped one\nSEND piped two\nDLQ LEN strict\n' | redis-cli -p "$port")
expect "stdin pipeline: 4 replies" "${#piped[@]}" "4"
expect "stdin pipeline PING" "${piped[0]:-}" "PONG"
expect_match "stdin pipeline SEND" "${piped[1]:-}" '^[0-9a-f]{16}$'

# --- redis-benchmark: 1000 SENDs, 4 connections, pipeline 16 --------------------------
if redis-benchmark -p "$port" -n 1000 -c 4 -P 16 -q SEND bench payload >"$tmp/bench.out" 2>&1; then
    echo "ok   redis-benchmark: $(tr '\r' '\n' <"$tmp/bench.out" | grep -v '^$' | tail -n 1)"
else
    fail "redis-benchmark exited with $?: $(tail -n 3 "$tmp/bench.out")"
fi
n=$(rc PULL counter bench COUNT 1000 | wc -l)
expect "all 1000 redis-benchmark SENDs arrived (6 lines each)" "$n" "6000"

# --- interactive redis-cli in tmux: hints, help and completion from COMMAND DOCS -----------
if ! command -v tmux >/dev/null; then
    fail "tmux not installed (apt-get install tmux)"
else
    sock="$tmp/tmux.sock"
    # pane_has TEXT: poll the pane (up to 10 s) until its text contains TEXT
    pane_has() {
        local i
        for i in $(seq 100); do
            if tmux -S "$sock" capture-pane -p -t hg 2>/dev/null | grep -qF -- "$1"; then return 0; fi
            sleep 0.1
        done
        return 1
    }
    TERM=xterm tmux -S "$sock" new-session -d -s hg -x 200 -y 30 "redis-cli -p $port"
    if ! pane_has "127.0.0.1:$port>"; then
        fail "interactive redis-cli: no prompt ($(tmux -S "$sock" capture-pane -p -t hg 2>&1 | tail -n 3))"
    else
        tmux -S "$sock" send-keys -t hg "SEND "
        if pane_has "SEND topic payload [KEY k [DEDUP]]"; then
            echo "ok   interactive redis-cli shows the hint for SEND"
        else
            fail "no hint for SEND: $(tmux -S "$sock" capture-pane -p -t hg | grep -F 'SEND' | tail -n 1)"
        fi
        tmux -S "$sock" send-keys -t hg C-u "help SEND" Enter
        if pane_has "enqueue a delayed message"; then
            echo "ok   interactive redis-cli: help SEND shows its summary"
        else
            fail "help SEND: $(tmux -S "$sock" capture-pane -p -t hg | tail -n 5)"
        fi
        tmux -S "$sock" send-keys -t hg "REVO" Tab
        if pane_has "REVOKE"; then
            echo "ok   interactive redis-cli completes REVO to REVOKE"
        else
            fail "Tab completion: $(tmux -S "$sock" capture-pane -p -t hg | tail -n 2)"
        fi
    fi
    tmux -S "$sock" kill-server 2>/dev/null
fi
docs=$(rc COMMAND DOCS GET)
expect_match "COMMAND DOCS GET has its summary" "$docs" 'where a message is'

# --- redis-py (python3-redis): the default pipeline() is MULTI/EXEC; CLIENT INFO/LIST -----
if /usr/bin/python3 -c 'import redis' 2>/dev/null; then
    if /usr/bin/python3 "$here/redis_py_pipeline.py" "$port" >"$tmp/py.out" 2>&1; then
        sed 's/^/     /' "$tmp/py.out" | tail -n 3
        echo "ok   redis-py pipeline, transaction and CLIENT checks"
    else
        fail "redis-py: $(cat "$tmp/py.out" | tail -n 5)"
    fi
else
    fail "python3-redis not installed (apt-get install python3-redis)"
fi

# MULTI / EXEC / DISCARD by hand
mapfile -t tx < <(printf 'MULTI\nSEND tx one\nSEND tx two\nEXEC\n' | redis-cli -p "$port")
expect "MULTI: OK QUEUED QUEUED, then two ids" "${tx[0]:-} ${tx[1]:-} ${tx[2]:-} ${#tx[@]}" "OK QUEUED QUEUED 5"
expect_match "EXEC answers ids" "${tx[3]:-}" '^[0-9a-f]{16}$'
mapfile -t tx < <(printf 'MULTI\nSEND tx three\nDISCARD\nEXEC\n' | redis-cli -p "$port")
expect "DISCARD, then EXEC without MULTI" "${tx[2]:-} ${tx[3]:-}" "OK ERR EXEC without MULTI"

# --- SHUTDOWN -------------------------------------------------------------------------
rc SHUTDOWN >/dev/null
status=""
for _ in $(seq 150); do
    if ! kill -0 "$pid" 2>/dev/null; then
        wait "$pid"
        status=$?
        break
    fi
    sleep 0.1
done
expect "SHUTDOWN: the broker exited with status" "$status" "0"
pid=""

if ((failures > 0)); then
    echo "$failures check(s) failed"
    exit 1
fi
echo "all redis-cli checks passed"
exit 0
