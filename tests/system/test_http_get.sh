#!/usr/bin/env bash
# tests/system/test_http_get.sh — scripts/lib/stack.sh's hg_http_get (the soak's and the demo's
# /metrics and /healthz reads) gives up after HG_HTTP_DEADLINE seconds: against a server that
# accepts and never answers it returns 1 in about that time, saying so on stderr, where it
# used to wait for ever (a hung endpoint made the soak's samples 13-16 s apart); a server that
# answers still gives its body, and a port where nothing listens is 1 at once. Each server is
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
# MODE hang: accept and never answer; MODE answer: one HTTP/1.0 reply "ok" to each request.
serve() {
    rm -f "$tmp/port"
    python3 - "$1" "$tmp/port" <<'PY' &
import socket, sys, time
mode, portfile = sys.argv[1], sys.argv[2]
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(8)
with open(portfile + ".new", "w") as f:
    f.write(str(s.getsockname()[1]))
import os
os.rename(portfile + ".new", portfile)
held = []
while True:
    c, _ = s.accept()
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

((fail == 0)) && echo PASS
exit "$fail"
