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
  (GET http://evil.example/… with a Host of ours).
- A form or query that does not parse (a part without '=') is 400 naming the
  part, not 415 (it is form-encoded) nor a bare "bad query".

Run by tests/integration/test_console after its set-up.
"""
import json
import socket
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

finish()
