#!/usr/bin/env bash
# tests/system/test_http_get.sh — scripts/lib/stack.sh's hg_http_get (the soak's and the demo's
# /metrics and /healthz reads) gives up after HG_HTTP_DEADLINE seconds: against a server that
# accepts and never answers it returns 1 in about that time, saying so on stderr, where it
# used to wait for ever (a hung endpoint made the soak's samples 13-16 s apart); a server that
# answers still gives its body, and a port where nothing listens is 1 at once. A listener whose
# accept queue is full (backlog 0, one connection queued: the kernel drops every further SYN)
# is 1 at the deadline too, said, where the connect waited out the kernel's SYN retransmits
# (about 130 s); a server that accepts and closes at once is 1, said, where the request's
# write killed hg_http_get's shell with SIGPIPE (141) or read as an empty body. Each server is
# a python3 listener of this test on a free port of its own (port 0), stopped by pid.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(cd "$here/../.." && pwd)
# shellcheck source=scripts/lib/stack.sh
. "$top/scripts/lib/stack.sh"
command -v python3 >/dev/null || { echo "FAIL: python3 not installed"; exit 1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test_http_get.XXXXXX") || exit 1
server_pid=""
# shellcheck disable=SC2317  # invoked by the trap
cleanup() {
    [[ -n $server_pid ]] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
fail=0

# serve MODE — a listener on 127.0.0.1:0 in the background (server_pid); its port into port.
# MODE hang: accept and never answer; MODE answer: one HTTP/1.0 reply "ok" to each request;
# MODE full: never accept, the queue (backlog 0) full with one connection of its own;
# MODE close: accept and close at once, nothing read.
serve() {
    rm -f "$tmp/port"
    python3 - "$1" "$tmp/port" <<'PY' &
import socket, sys, time
mode, portfile = sys.argv[1], sys.argv[2]
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(0 if mode == "full" else 8)
if mode == "full":
    queued = socket.create_connection(s.getsockname())
with open(portfile + ".new", "w") as f:
    f.write(str(s.getsockname()[1]))
import os
os.rename(portfile + ".new", portfile)
held = []
while mode == "full":
    time.sleep(60)
while True:
    c, _ = s.accept()
    if mode == "close":
        c.close()
        continue
    if mode == "hang":
        held.append(c)  # kept open, never read nor answered
        continue
    # the whole request first, as an HTTP server reads it: bash writes it a line at a time, and
    # a close with unread lines resets the connection (hg_http_get's next write: SIGPIPE, 141)
    request = b""
    while b"\r\n\r\n" not in request:
        part = c.recv(4096)
        if not part:
            break
        request += part
    c.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nok 42\n")
    c.close()
PY
    server_pid=$!
    hg_wait_for 30 "the test's $1 server to listen" test -s "$tmp/port" || exit 1
    port=$(<"$tmp/port")
}
stop_server() { kill "$server_pid" 2>/dev/null; wait "$server_pid" 2>/dev/null; server_pid=""; }

# 1. a server that accepts and never answers: 1 within the deadline (+ slack for a loaded machine)
serve hang
export HG_HTTP_DEADLINE=2
t0=$SECONDS
( out=$(hg_http_get "$port" /metrics 2>"$tmp/stderr"); echo "rc=$? out=$out" >"$tmp/result" ) &
waiter=$!
hg_wait_for 30 "hg_http_get against a hung server to return" test -s "$tmp/result" || true
kill "$waiter" 2>/dev/null
wait "$waiter" 2>/dev/null
took=$((SECONDS - t0))
result=$(cat "$tmp/result" 2>/dev/null)
if [[ $result != "rc=1 out=" ]] || ((took > 12)); then
    echo "FAIL: hg_http_get against a server that never answers: '${result:-still waiting after ${took} s}' after ${took} s, want rc=1 within about 2 s"
    fail=1
elif ! grep -q "127.0.0.1:$port/metrics: no whole reply within 2 s" "$tmp/stderr"; then
    echo "FAIL: hg_http_get's timeout is not said on stderr: '$(cat "$tmp/stderr")'"
    fail=1
else
    echo "ok   hg_http_get gives up on a server that never answers after ${took} s: $(cat "$tmp/stderr")"
fi
stop_server

# 2. a server that answers: the body, as before
serve answer
if body=$(hg_http_get "$port" /healthz) && [[ $body == "ok 42" ]]; then
    echo "ok   hg_http_get returns the body of an answer: '$body'"
else
    echo "FAIL: hg_http_get against an answering server: rc=$? body='${body:-}'"
    fail=1
fi
stop_server

# 3. nothing listens (the port the answering server just left): 1
if hg_http_get "$port" /healthz >/dev/null 2>&1; then
    echo "FAIL: hg_http_get succeeded on port $port where nothing listens"
    fail=1
else
    echo "ok   hg_http_get is 1 where nothing listens"
fi

# 4. a full accept queue (the SYN dropped): 1 at the deadline, said, not after the kernel's retries
serve full
t0=$SECONDS
rm -f "$tmp/result"
( out=$(hg_http_get "$port" /metrics 2>"$tmp/stderr"); echo "rc=$? out=$out" >"$tmp/result" ) &
waiter=$!
hg_wait_for 30 "hg_http_get against a full accept queue to return" test -s "$tmp/result" || true
kill "$waiter" 2>/dev/null
wait "$waiter" 2>/dev/null
took=$((SECONDS - t0))
result=$(cat "$tmp/result" 2>/dev/null)
if [[ $result != "rc=1 out=" ]] || ((took > 12)); then
    echo "FAIL: hg_http_get against a full accept queue: '${result:-still waiting after ${took} s}' after ${took} s, want rc=1 within about 2 s"
    fail=1
elif ! grep -q "127.0.0.1:$port/metrics: no connection within 2 s" "$tmp/stderr"; then
    echo "FAIL: hg_http_get's connect timeout is not said on stderr: '$(cat "$tmp/stderr")'"
    fail=1
else
    echo "ok   hg_http_get gives up a connect that never completes after ${took} s: $(cat "$tmp/stderr")"
fi
stop_server

# 5. a server that accepts and closes at once, 10 times (the reset races the request's write):
# 1 each time, said, and never SIGPIPE (141) nor an empty body
serve close
results=""
for _ in 1 2 3 4 5 6 7 8 9 10; do
    out=$(hg_http_get "$port" /metrics 2>"$tmp/stderr")
    rc=$?
    results+="rc=$rc out='$out' stderr='$(cat "$tmp/stderr")'"$'\n'
done
if [[ $(grep -c "^rc=1 out='' stderr='hg_http_get: 127.0.0.1:$port/metrics: the [a-z ]*" <<<"$results") != 10 ]]; then
    echo "FAIL: hg_http_get against a server that closes at once, want rc=1 said each time:"
    echo "$results"
    fail=1
else
    echo "ok   hg_http_get is 1 against a server that closes at once, 10 of 10: $(sort -u <<<"${results//$port/PORT}" | sed -n "s/.*stderr='\(.*\)'/\1/p" | sort -u | paste -sd '|')"
fi
stop_server

((fail == 0)) && echo PASS
exit "$fail"
