"""tests/console/test_http.py — the HTTP layer as a clumsy client or an
attacker speaks it, over raw sockets (what urllib would tidy up).

- HEAD: headers only, with the Content-Length a GET would have, so the next
  reply on a kept-alive connection is read as a reply (a body after a HEAD
  reply would be read as the start of the next one).
- 405 for the wrong one of GET and POST on every path the API knows (not 404,
  not the other path's 400), with an Allow header; the page's 405 too.
- Request smuggling through a proxy in front: two Content-Length headers that
  differ, two Host headers, a header name with a blank before its colon: 400,
  and the connection closed (the rest of its bytes is never a request).
- The Host check covers a request target in absolute form
  (GET http://evil.example/… with a Host of ours). An HTTP/1.1 request
  without Host is 400 naming it (RFC 9112 3.2); HTTP/1.0 without it is served.
- A form or query that does not parse (a part without '=') is 400 naming the
  part, not 415 (it is form-encoded) nor a bare "bad query".
- Slowloris: a client trickling its head (a line a second) or sending
  nothing is closed, unanswered, header-timeout after its first byte (the
  accept), while a request on another connection is answered meanwhile; a
  kept-alive connection idle after a reply is not cut by it; a connection
  past max-connections is closed at once, and a client gets in again once
  the others go. A client that sent a byte of its request is answered 408
  Request Timeout (one that sent nothing is closed unanswered), one past
  max-connections 503 with Retry-After, both with Connection: close and read
  whole even when the client had sent its request already.
- SIGHUP (the console's config file rewritten): a new header-timeout for
  requests begun after it (one begun before keeps its own), a lower
  max-connections for new connections (the open ones stay and are served).

Run by tests/integration/test_console after its set-up.
"""
import json
import os
import signal
import socket
import time
import urllib.error
import urllib.parse
import urllib.request

from console_test import BASE, Client, check, finish

HOST, PORT = urllib.parse.urlsplit(BASE).hostname, urllib.parse.urlsplit(BASE).port
OURS = b"Host: 127.0.0.1:%d\r\n" % PORT


def exchange(data, timeout=10):
    """Send data on a fresh connection; every byte the console answers until
    it closes (or timeout): (bytes, closed_by_server)."""
    with socket.create_connection((HOST, PORT), timeout=timeout) as s:
        s.sendall(data)
        out = b""
        try:
            while True:
                part = s.recv(65536)
                if not part:
                    return out, True
                out += part
        except socket.timeout:
            return out, False


def replies(raw, heads=()):
    """Split raw into replies: [(status, headers dict (lower-case names), body)];
    heads: the indexes of replies to a HEAD (no body whatever the length)."""
    out = []
    while raw:
        head, sep, rest = raw.partition(b"\r\n\r\n")
        if not sep:
            out.append((None, {}, raw))
            break
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None
        hdrs = {}
        for line in lines[1:]:
            k, _, v = line.partition(b":")
            hdrs[k.strip().lower().decode()] = v.strip().decode("latin1")
        n = 0 if len(out) in heads else int(hdrs.get("content-length", len(rest)))
        out.append((status, hdrs, rest[:n]))
        raw = rest[n:]
    return out


def error_of(body):
    try:
        return json.loads(body).get("error")
    except ValueError:
        return None


# ---------------------------------------------------------------- HEAD
for path, want in [(b"/favicon.svg", 200), (b"/", 200), (b"/api/session", 405)]:
    raw, _ = exchange(b"HEAD " + path + b" HTTP/1.1\r\n" + OURS + b"\r\nGET /api/session HTTP/1.1\r\n" + OURS +
                      b"Connection: close\r\n\r\n")
    rs = replies(raw, heads=(0,))
    check(len(rs) == 2 and rs[0][0] == want and rs[1][0] == 200 and rs[1][2] == b'{"logged_in":false}',
          "HEAD %s: %d, headers only; the next request on the connection answered as itself: %r" %
          (path.decode(), want, [(r[0], r[2][:40]) for r in rs]))
    if path == b"/favicon.svg" and rs:
        _, get_doc, get_headers = Client().request("GET", "/favicon.svg")
        check(rs[0][1].get("content-length") == get_headers.get("Content-Length"),
              "HEAD /favicon.svg: the Content-Length of the GET (%s, GET %s)" %
              (rs[0][1].get("content-length"), get_headers.get("Content-Length")))
    if want == 405 and rs:
        check(rs[0][1].get("allow") == "GET, POST", "HEAD /api/session: Allow: GET, POST (%s)" % rs[0][1].get("allow"))

# ---------------------------------------------------------------- 405 for the other method, with Allow
admin = Client()
admin.login("alice")
for method, path, allow in [("GET", "/api/logout", "POST"), ("POST", "/api/overview", "GET"),
                            ("POST", "/api/session", "GET"), ("GET", "/api/backup", "POST"),
                            ("GET", "/api/orders/301/cancel", "POST"), ("POST", "/api/orders/301", "GET"),
                            ("POST", "/api/orders/overdue", "GET"), ("GET", "/api/dlq/order-cancel/requeue", "POST"),
                            ("GET", "/api/dlq/order-cancel/drop", "POST"), ("POST", "/api/dlq/order-cancel", "GET"),
                            ("POST", "/api/dlq", "GET"), ("GET", "/api/msg/revoke", "POST"),
                            ("GET", "/api/msg/0000000000000001/revoke", "POST"), ("POST", "/api/msg", "GET"),
                            ("GET", "/api/topics/junk/delete", "POST"), ("POST", "/api/topics", "GET"),
                            ("POST", "/api/jobs", "GET"), ("POST", "/api/jobs/1", "GET"),
                            ("GET", "/api/login", "POST"), ("PUT", "/api/session", "GET, POST"),
                            ("DELETE", "/api/orders/301", "GET, POST")]:
    status, doc, headers = admin.request(method, path)
    check(status == 405 and isinstance(doc, dict) and "error" in doc and headers.get("Allow") == allow,
          "%s %s: 405 with Allow: %s (%s %s, Allow %s)" % (method, path, allow, status, doc, headers.get("Allow")))
status, doc, headers = admin.request("GET", "/api/orders/301/frob")
check(status == 404, "GET /api/orders/301/frob: still 404, no such API (%s %s)" % (status, doc))
status, doc, headers = admin.request("POST", "/", {"a": "b"})
check(status == 405 and headers.get("Allow") == "GET, HEAD",
      "POST / (the page): 405 with Allow: GET, HEAD (%s, Allow %s)" % (status, headers.get("Allow")))

# ---------------------------------------------------------------- smuggling: ambiguous framing or Host
form = b"Content-Type: application/x-www-form-urlencoded\r\n"
smuggled = b"GET /api/session HTTP/1.1\r\n" + OURS + b"\r\n"
for what, req in [
    ("two Content-Length headers that differ",
     b"POST /api/login HTTP/1.1\r\n" + OURS + form + b"Content-Length: 6\r\nContent-Length: 0\r\n\r\nuser=x" +
     smuggled),
    ("two Host headers",
     b"GET /api/session HTTP/1.1\r\n" + OURS + b"Host: evil.example\r\n\r\n" + smuggled),
    ("a blank before a header name's colon",
     b"GET /api/session HTTP/1.1\r\nHost : evil.example\r\n\r\n" + smuggled),
]:
    raw, closed = exchange(req)
    rs = replies(raw)
    check(len(rs) == 1 and rs[0][0] == 400 and error_of(rs[0][2]) is not None and closed,
          "%s: 400 naming it, the connection closed, nothing more served: %r" %
          (what, [(r[0], r[2][:80]) for r in rs]))
raw, closed = exchange(b"POST /api/login HTTP/1.1\r\n" + OURS + form +
                       b"Content-Length: 6\r\nContent-Length: 6\r\nConnection: close\r\n\r\nuser=x")
rs = replies(raw)
check(len(rs) == 1 and rs[0][0] == 401, "two equal Content-Length headers: served (%r)" % [(r[0], r[2][:60]) for r in rs])

raw, _ = exchange(b"GET http://evil.example/api/session HTTP/1.1\r\n" + OURS + b"Connection: close\r\n\r\n")
rs = replies(raw)
check(len(rs) == 1 and rs[0][0] == 421 and "evil.example" in (error_of(rs[0][2]) or ""),
      "an absolute-form target naming another host: 421 (%r)" % [(r[0], r[2][:80]) for r in rs])
raw, _ = exchange(b"GET http://127.0.0.1:%d/api/session HTTP/1.1\r\n" % PORT + OURS + b"Connection: close\r\n\r\n")
rs = replies(raw)
check(len(rs) == 1 and rs[0][0] == 200, "an absolute-form target naming the console: served (%r)" %
      [(r[0], r[2][:80]) for r in rs])

# ---------------------------------------------------------------- Host: required of HTTP/1.1 (RFC 9112 3.2)
for target, is_api in [(b"/api/session", True), (b"/orders/301", False),
                       (b"http://127.0.0.1:%d/api/session" % PORT, True)]:
    raw, _ = exchange(b"GET " + target + b" HTTP/1.1\r\nConnection: close\r\n\r\n")
    rs = replies(raw)
    why = (error_of(rs[0][2]) if is_api else rs[0][2].decode("utf-8", "replace")) if rs else None
    check(len(rs) == 1 and rs[0][0] == 400 and why is not None and "without a Host header" in why,
          "HTTP/1.1 GET %s without Host: 400 naming it (%r)" % (target.decode(), [(r[0], r[2][:100]) for r in rs]))
raw, _ = exchange(b"GET /api/session HTTP/1.0\r\n\r\n")
rs = replies(raw)
check(len(rs) == 1 and rs[0][0] == 200, "HTTP/1.0 without Host: still served (%r)" % [(r[0], r[2][:60]) for r in rs])
raw, _ = exchange(b"GET /api/session HTTP/1.1\r\n\r\nGET /api/session HTTP/1.1\r\n" + OURS +
                  b"Connection: close\r\n\r\n")
rs = replies(raw)
check(len(rs) == 2 and rs[0][0] == 400 and rs[1][0] == 200,
      "after that 400 the kept-alive connection serves its next request (%r)" % [(r[0], r[2][:60]) for r in rs])

# ---------------------------------------------------------------- a form or query that does not parse
for body, part in [("id", "id"), ("id=0000000000000001&&all=1", ""), ("%%%", "%%%")]:
    req = urllib.request.Request(BASE + "/api/dlq/order-cancel/requeue", data=body.encode(), method="POST",
                                 headers={"Content-Type": "application/x-www-form-urlencoded",
                                          "X-CSRF-Token": admin.csrf})
    try:
        with admin.opener.open(req, timeout=30) as res:
            status, doc = res.status, json.loads(res.read())
    except urllib.error.HTTPError as e:
        status, doc = e.code, json.loads(e.read())
    check(status == 400 and ("'%s'" % part) in doc.get("error", "") and "form" in doc.get("error", ""),
          "a form body %r: 400 naming the part %r (%s %s)" % (body, part, status, doc))
status, doc, _ = admin.request("GET", "/api/dlq/order-cancel?count=5&b")
check(status == 400 and "'b'" in (doc or {}).get("error", "") and "query" in (doc or {}).get("error", ""),
      "a query ?count=5&b: 400 naming the part 'b' (%s %s)" % (status, doc))
status, doc, _ = admin.request("GET", "/api/dlq/order-cancel?count=5&")
check(status == 200, "a query with a trailing '&': served (%s %s)" % (status, str(doc)[:80]))

# ---------------------------------------------------------------- slowloris: header-timeout, max-connections
HEADER_TIMEOUT = 3.0  # tests/integration/test_console.c starts this console with --header-timeout 3s
MAX_CONNECTIONS = 40  # and --max-connections 40
SESSION = b"GET /api/session HTTP/1.1\r\n" + OURS


def closed_by_server(s):
    """Whether the console has closed s (EOF or reset), without waiting: (closed, bytes it sent first)."""
    s.setblocking(False)
    try:
        data = s.recv(65536)
        return data == b"" or closed_by_server(s)[0], data
    except BlockingIOError:
        return False, b""
    except ConnectionResetError:
        return True, b""
    finally:
        s.setblocking(True)


def read_reply(s, timeout=10):
    """One reply off kept-alive s: (status, body)."""
    s.settimeout(timeout)
    raw = b""
    while b"\r\n\r\n" not in raw:
        part = s.recv(65536)
        if not part:
            return None, raw
        raw += part
    rs = replies(raw)
    status, hdrs, body = rs[0]
    n = int(hdrs.get("content-length", "0"))
    while len(body) < n:
        part = s.recv(65536)
        if not part:
            break
        body += part
    return status, body


def served():
    """A whole request on a fresh connection: its status (None when none came)."""
    try:
        raw, _ = exchange(SESSION + b"Connection: close\r\n\r\n", timeout=10)
    except OSError:
        return None
    rs = replies(raw)
    return rs[0][0] if rs else None


def log_has(text, deadline_s=10):
    until = time.monotonic() + deadline_s
    while time.monotonic() < until:
        with open(os.environ["HG_CONSOLE_LOG"], errors="replace") as f:
            if text in f.read():
                return True
        time.sleep(0.1)
    return False


# a head trickled a line a second: closed, unanswered, about header-timeout after the accept (evhttp's own
# timeout, 30 s without a byte, never fires); a request on another connection is answered meanwhile
slow = socket.create_connection((HOST, PORT), timeout=10)
t0 = time.monotonic()
slow.sendall(b"GET /api/session HTTP/1.1\r\n")
closed_at, got, answered, next_line, n = None, b"", None, t0 + 1, 0
while time.monotonic() - t0 < 20:
    closed, data = closed_by_server(slow)
    got += data
    if closed:
        closed_at = time.monotonic() - t0
        break
    if answered is None and time.monotonic() - t0 > 1:
        answered = served()
    if time.monotonic() >= next_line:
        try:
            slow.sendall(b"X-Slow-%d: 1\r\n" % n)
        except OSError:
            pass  # closed: the next look sees it
        n, next_line = n + 1, next_line + 1
    time.sleep(0.05)
slow.close()
rs = replies(got)
check(closed_at is not None and HEADER_TIMEOUT - 0.5 <= closed_at <= HEADER_TIMEOUT + 4,
      "a trickled head: closed after header-timeout %.1f s (closed after %s s)" %
      (HEADER_TIMEOUT, closed_at and round(closed_at, 2)))
check(len(rs) == 1 and rs[0][0] == 408 and rs[0][1].get("connection") == "close" and
      b"header-timeout 3000 ms" in rs[0][2] and rs[0][1].get("content-length") == str(len(rs[0][2])),
      "and answered 408 Request Timeout, Connection: close, naming header-timeout (%r)" % got[:300])
check(answered == 200, "and a request on another connection meanwhile: answered (%s)" % answered)
check(log_has("header-timeout 3000 ms"), "the close is logged naming header-timeout")

# a connection that sends nothing: closed about header-timeout after the accept
silent = socket.create_connection((HOST, PORT), timeout=10)
t0 = time.monotonic()
closed_at, got = None, b""
while time.monotonic() - t0 < 20:
    closed, data = closed_by_server(silent)
    got += data
    if closed:
        closed_at = time.monotonic() - t0
        break
    time.sleep(0.05)
silent.close()
check(closed_at is not None and HEADER_TIMEOUT - 0.5 <= closed_at <= HEADER_TIMEOUT + 4 and got == b"",
      "a connection that sends nothing (a preconnect): closed unanswered after header-timeout (after %s s, got %r)" %
      (closed_at and round(closed_at, 2), got[:80]))

# a kept-alive connection idle after its reply: past header-timeout it is still open and serves the next request
kept = socket.create_connection((HOST, PORT), timeout=10)
kept.sendall(SESSION + b"\r\n")
first, _ = read_reply(kept)
until = time.monotonic() + HEADER_TIMEOUT + 2
closed = False
while time.monotonic() < until and not closed:
    closed = closed_by_server(kept)[0]
    time.sleep(0.1)
second = None
if not closed:
    kept.sendall(SESSION + b"\r\n")
    second, _ = read_reply(kept)
kept.close()
check(first == 200 and not closed and second == 200,
      "an idle kept-alive connection: not cut by header-timeout, its next request served (%s, closed %s, %s)" %
      (first, closed, second))

# max-connections open (fresh ones, well within header-timeout): one more is closed at once, unanswered, and the
# ones open stay open; once they close, a client gets in again
def refused_reply(s, deadline_s=2):
    """Wait for the console to close s: (seconds until it did or None, the bytes it sent first)."""
    t0, got = time.monotonic(), b""
    while time.monotonic() - t0 < deadline_s:
        closed, data = closed_by_server(s)
        got += data
        if closed:
            return time.monotonic() - t0, got
        time.sleep(0.02)
    return None, got


def is_503(got):
    rs = replies(got)
    return (len(rs) == 1 and rs[0][0] == 503 and rs[0][1].get("connection") == "close" and
            rs[0][1].get("retry-after", "").isdigit() and b"max-connections" in rs[0][2])


def past_the_cap(cap=MAX_CONNECTIONS):
    """cap fresh connections, then one more: (seconds until the extra one was closed or None, what it was sent,
    how many of the others are still open, the others)."""
    held = [socket.create_connection((HOST, PORT), timeout=10) for _ in range(cap)]
    extra = socket.create_connection((HOST, PORT), timeout=10)
    closed_at, got = refused_reply(extra)
    extra.close()
    return closed_at, got, sum(1 for h in held if not closed_by_server(h)[0]), held


# the connections closed above may not be gone on the console's side yet (it reads their EOF): try again until
# all max-connections were open, within a deadline
until = time.monotonic() + 15
while True:
    closed_at, got, still_open, held = past_the_cap()
    if (closed_at is not None and still_open == MAX_CONNECTIONS) or time.monotonic() > until:
        break
    for h in held:
        h.close()
    time.sleep(0.2)
check(closed_at is not None and closed_at < 1.5,
      "connection %d past max-connections %d: closed at once (after %s s)" %
      (MAX_CONNECTIONS + 1, MAX_CONNECTIONS, closed_at and round(closed_at, 2)))
check(is_503(got), "and answered 503 with Retry-After and Connection: close, naming max-connections (%r)" % got[:400])
check(still_open == MAX_CONNECTIONS, "and the %d before it still open (%d)" % (MAX_CONNECTIONS, still_open))
# one that sent its whole request before it was seen: the 503 still reaches it (a lingering close, not a reset)
extra = socket.create_connection((HOST, PORT), timeout=10)
extra.sendall(SESSION + b"\r\n")
closed_at, got = refused_reply(extra, 5)
extra.close()
check(closed_at is not None and is_503(got), "one more that sent its request at once: its 503 read whole, then closed "
      "(%s, %r)" % (closed_at, got[:120]))
# a flood past the cap whose clients never read nor close: 64 (CONNS_CLOSING_MAX) are answered and linger (2 s at
# most each), the rest are closed at once unanswered, so the flood cannot hold a descriptor per refusal
flood = [socket.create_connection((HOST, PORT), timeout=10) for _ in range(100)]
outcomes = [refused_reply(f, 5) for f in flood]
for f in flood:
    f.close()
answered = sum(1 for closed, got in outcomes if closed is not None and is_503(got))
unanswered = sum(1 for closed, got in outcomes if closed is not None and got == b"")
check(answered + unanswered == 100 and 1 <= answered <= 64 and unanswered >= 36,
      "a flood of 100 past max-connections that never close: %d answered 503 (64 at most), %d closed unanswered" %
      (answered, unanswered))
for h in held:
    h.close()
status, until = None, time.monotonic() + 10
while time.monotonic() < until and status != 200:
    status = served()
    if status != 200:
        time.sleep(0.1)
check(status == 200, "once they close, a client gets in again (%s)" % status)
check(log_has("max-connections 40"), "the refusal is logged naming max-connections")

# ---------------------------------------------------------------- SIGHUP reloads header-timeout and max-connections
CONF = os.environ["HG_CONSOLE_CONFIG"]
with open(CONF) as f:
    ORIGINAL_CONF = f.read()


def reload(text, expect):
    """Write the console's configuration file and send SIGHUP; whether the log says expect within a deadline."""
    with open(CONF, "w") as f:
        f.write(text)
    os.kill(int(os.environ["HG_CONSOLE_PID"]), signal.SIGHUP)
    return log_has(expect)


def kept_alive():
    """A connection that was served one request and is kept alive (between requests: no deadline)."""
    s = socket.create_connection((HOST, PORT), timeout=10)
    s.sendall(SESSION + b"\r\n")
    return s, read_reply(s)[0]


# a request that started before the reload keeps the header-timeout it started under; one after gets the new one
before, first = kept_alive()
before.sendall(b"GET /api/session HTTP/1.1\r\n")  # its next request, begun
check(first == 200 and served() == 200, "a request begun under header-timeout 3s (the console has read it: a "
      "request on a later connection was served)")
t_reload = time.monotonic()
check(reload("[http]\nheader-timeout = 1s\nmax-connections = 40\n", "SIGHUP: header-timeout 3s -> 1s"),
      "SIGHUP: header-timeout 3s -> 1s logged")
after = socket.create_connection((HOST, PORT), timeout=10)
t_after = time.monotonic()
after.sendall(b"GET /api/session HTTP/1.1\r\n")
after_closed, after_got = refused_reply(after, 10)
after.close()
before_closed, before_got = refused_reply(before, 10)
before.close()
check(after_closed is not None and after_closed < 2.5 and b"header-timeout 1000 ms" in after_got and
      replies(after_got)[0][0] == 408,
      "a request begun after the reload: 408 after the new header-timeout 1s (after %s s: %r)" %
      (after_closed and round(after_closed, 2), after_got[-90:]))
check(before_closed is not None and b"header-timeout 3000 ms" in before_got and replies(before_got)[0][0] == 408,
      "the request begun before it: 408 under the header-timeout it began with, 3s (%r)" % before_got[-90:])

# a lower max-connections: the connections open stay open and are served; a new one past it is refused 503
held = []
for _ in range(5):
    s, status = kept_alive()
    held.append((s, status))
check(all(status == 200 for _, status in held), "5 kept-alive connections served")
check(reload("[http]\nheader-timeout = 1s\nmax-connections = 3\n", "SIGHUP: max-connections 40 -> 3"),
      "SIGHUP: max-connections 40 -> 3 logged")
extra = socket.create_connection((HOST, PORT), timeout=10)
closed_at, got = refused_reply(extra)
extra.close()
check(closed_at is not None and is_503(got) and b"max-connections 3" in got,
      "a new connection past the lowered max-connections 3: 503 (%s, %r)" % (closed_at, got[-100:]))
again = []
for s, _ in held:
    s.sendall(SESSION + b"\r\n")
    again.append(read_reply(s)[0])
    s.close()
check(again == [200] * 5, "and the 5 open before it still served (%s)" % again)
check(reload(ORIGINAL_CONF, "SIGHUP: max-connections 3 -> 40"), "the configuration restored (SIGHUP)")
status, until = None, time.monotonic() + 10
while time.monotonic() < until and status != 200:
    status = served()
check(status == 200, "then a new connection is served again (%s)" % status)

finish()
