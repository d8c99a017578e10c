#!/usr/bin/env bash
# tests/integration/test_redis_cli.sh — stock redis-cli and redis-benchmark (Debian's
# redis-tools) drive hourglass-broker unmodified: the wire-compatibility proof.
#
# Starts the broker on a free port in a mktemp dir, runs the basic flows with redis-cli
# (PING, SEND, PULL, ACK, GROUP LIST, LEVELS, INFO, DLQ LEN, errors, a stdin pipeline),
# 1000 SENDs with redis-benchmark, an interactive redis-cli in tmux (the hint for SEND,
# help SEND, Tab completion: COMMAND DOCS), redis-py's default pipeline() (MULTI/EXEC) and
# CLIENT INFO/LIST (redis_py_pipeline.py), MULTI/DISCARD by hand, then SHUTDOWN; then a
# second broker with a users file made by `hourglass-cli passwd`: redis-cli --user/--pass,
# NOAUTH/NOPERM/WRONGPASS, and hourglass-cli with URI credentials and --password-file;
# exits non-zero on any mismatch.
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
# shellcheck disable=SC2317  # invoked by the EXIT trap
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

# start_broker DATADIR [FLAGS...] — start the broker on a free port (sets pid, port);
# exits the script when it does not answer PING (PING needs no AUTH).
start_broker() {
    local data=$1
    shift
    port=""
    for _ in 1 2 3; do
        port=$(free_port) || { echo "FAIL: no free port" >&2; exit 1; }
        "$broker" --port "$port" --dir "$data" "$@" >>"$tmp/broker.log" 2>&1 &
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
}

start_broker "$tmp/data"
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
if ((${#pulled[@]} >= 6 && end_ms < pulled[5])); then
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
        for _ in $(seq 100); do
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
        fail "redis-py: $(tail -n 5 "$tmp/py.out")"
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

# --- users: redis-cli --user/--pass, hourglass-cli passwd and credentials -------------
cli=${HG_CLI:-$(dirname "$broker")/hourglass-cli}
if [[ ! -x $cli ]]; then
    fail "hourglass-cli not found next to the broker ($cli)"
else
    for u in "shop producer" "ops admin"; do
        read -r name role <<<"$u"
        printf 'pw-%s\n' "$name" | "$cli" passwd --cost 10 "$name" "$role" >>"$tmp/users" || fail "hourglass-cli passwd $name"
    done
    # shellcheck disable=SC2016  # a regular expression: its $ are literal
    expect_match "passwd line" "$(head -n 1 "$tmp/users")" '^shop producer \$scrypt\$ln=10,r=8,p=1\$[0-9a-f]{32}\$[0-9a-f]{64}$'
    start_broker "$tmp/data2" --users-file "$tmp/users"
    ru() { redis-cli -p "$port" --no-auth-warning "$@" 2>&1; }
    expect "no AUTH: PING" "$(ru PING)" "PONG"
    expect_match "no AUTH: SEND refused" "$(ru SEND t p)" '^NOAUTH'
    expect_match "redis-cli --user shop SEND" "$(ru --user shop --pass pw-shop SEND t p)" '^[0-9a-f]{16}$'
    expect_match "redis-cli --user shop PULL refused" "$(ru --user shop --pass pw-shop PULL g t)" \
        "^NOPERM User shop \(roles: producer\) has no permissions to run the 'pull' command"
    expect_match "redis-cli wrong password" "$(ru --user ops --pass nope PING)" 'WRONGPASS'
    expect "redis-cli --user ops CONFIG GET" "$(ru --user ops --pass pw-ops CONFIG GET port | tail -n 1)" "$port"
    expect_match "URI credentials" "$("$cli" --uri "hourglass://ops:pw-ops@127.0.0.1:$port" ping 2>/dev/null)" "^PONG"
    expect_match "URI credentials: the warning on stderr" \
        "$("$cli" --uri "hourglass://ops:pw-ops@127.0.0.1:$port" ping 2>&1 >/dev/null)" \
        '^Warning: using a password on the command line may not be safe'
    printf 'pw-shop\n' >"$tmp/shop.pw"
    expect_match "--user and --password-file" \
        "$("$cli" --uri "hourglass://127.0.0.1:$port" --user shop --password-file "$tmp/shop.pw" send t x 2>&1)" \
        '^[0-9a-f]{16}$'
    # Never retried: the broker logs each refused AUTH (before it answers),
    # so one cli run adds exactly one line, however slow the machine is.
    refused_before=$(grep -c "AUTH failed" "$tmp/broker.log")
    out=$("$cli" --uri "hourglass://ops:wrong@127.0.0.1:$port" ping 2>&1)
    code=$?
    refused_after=$(grep -c "AUTH failed" "$tmp/broker.log")
    expect "a wrong password: exit status 1" "$code" "1"
    expect_match "a wrong password: the message" "$out" "authentication as 'ops' failed: WRONGPASS"
    expect "a refused AUTH is not retried (one more AUTH failed line)" "$((refused_after - refused_before))" "1"
    # shellcheck disable=SC2016  # a hash's $ are literal
    printf 'shop producer $scrypt$ln=15\n' >"$tmp/bad-users"
    out=$("$broker" --check-config --users-file "$tmp/bad-users" 2>&1)
    expect "--check-config with a bad users file: exit status" "$?" "2"
    expect_match "--check-config names file:line" "$out" "bad-users:1: user 'shop': bad scrypt parameters"
    # An address the broker could not listen on is refused by --check-config, naming the key.
    out=$("$broker" --check-config --allow-remote yes --bind 300.1.1.1 2>&1)
    expect "--check-config with bind 300.1.1.1: exit status" "$?" "2"
    expect_match "--check-config names bind" "$out" "bind '300.1.1.1' is not an IP address"
    out=$("$broker" --check-config --allow-remote yes --metrics-port 9 --metrics-bind no-such-host.invalid 2>&1)
    expect "--check-config with an unresolvable metrics-bind: exit status" "$?" "2"
    expect_match "--check-config names metrics-bind" "$out" "metrics-bind 'no-such-host.invalid' is not an IP address and does not resolve"
    kill "$pid"
    wait "$pid"
    expect "the broker with users stopped with status" "$?" "0"
    pid=""
fi

if ((failures > 0)); then
    echo "$failures check(s) failed"
    exit 1
fi
echo "all redis-cli checks passed"
exit 0
