"""tests/console/test_https.py — hourglass-console serving https
(https-cert-file, https-key-file) in front of a TLS-only broker
(hourglass+tls:// with tls-ca-cert-file). Run by
tests/integration/test_console: the certificate chains to a throwaway CA
(HG_CA_FILE, made by tests/helpers/tls_certs.c); the broker has no users and
the console's no-users-role is viewer.

Checks: the page and the API over https, verified against the CA; the
session cookie is Secure and named __Host-hg_session (Path=/, no Domain;
a cookie without the prefix is not the session; a stale one's 401 clears
it); the overview's sampler and the session's own
connection reach the broker over TLS; CSRF and the role gate work as over
http; plain http and TLS 1.1 on the https port get nothing; TLS 1.2 is
enough; a trickled head is answered 408 inside TLS after header-timeout; a
connection past max-connections is closed unanswered (no handshake).
"""
import http.client
import socket
import ssl
import time
import urllib.parse
import warnings

from console_test import BASE, Client, check, finish, tls_context

check(BASE.startswith("https://"), "the console under test serves https: %s" % BASE)
host, port = urllib.parse.urlsplit(BASE).hostname, urllib.parse.urlsplit(BASE).port

anon = Client()
status, doc, headers = anon.get("/")
check(status == 200 and "<title>Hourglass console</title>" in doc, "GET / over https, certificate verified")

# ---------------------------------------------------------------- login and the cookie
c = Client()
status, doc, headers = c.login("anyone", "anything")
check(status == 200 and doc["roles"] == ["viewer"] and doc["no_users"] and not doc["can_act"],
      "login on a broker without users, no-users-role viewer: %s %s" % (status, doc))
cookie = headers.get("Set-Cookie", "")
attrs = cookie.split("; ")
check("Secure" in attrs and "HttpOnly" in attrs and "SameSite=Strict" in attrs,
      "over https the session cookie is Secure; HttpOnly; SameSite=Strict: %s" % cookie.split(";", 1)[1:])
check(cookie.startswith("__Host-hg_session=") and "Path=/" in attrs and
      not any(a.lower().startswith("domain=") for a in attrs),
      "and named with the __Host- prefix: Secure, Path=/, no Domain (%s)" % (attrs[:1] + attrs[1:]))
token = c.session_token() or ""
status, _, _ = Client().get("/api/session", headers={"Cookie": "__Host-hg_session=%s" % token})
check(status == 200 and len(token) == 64, "the __Host-hg_session cookie names the session (%s)" % status)
status, _, rh = Client().get("/api/overview", headers={"Cookie": "hg_session=%s" % token})
check(status == 401, "over https a cookie without the prefix (one any http page of the domain could plant) is "
      "not the session: %s" % status)
status, _, rh = Client().get("/api/overview", headers={"Cookie": "__Host-hg_session=%s" % ("0" * 64)})
cleared = rh.get("Set-Cookie", "")
check(status == 401 and cleared.startswith("__Host-hg_session=;") and "Max-Age=0" in cleared.split("; ") and
      "Secure" in cleared.split("; ") and "Path=/" in cleared.split("; "),
      "a stale __Host-hg_session's 401 clears it: Set-Cookie with Max-Age=0, Secure, Path=/ (%s %s)" %
      (status, cleared))

# ---------------------------------------------------------------- the broker over TLS
deadline = time.time() + 30
while True:
    status, o, _ = c.get("/api/overview")
    if status == 200 and o["broker"]["ok"] and o["db"]["ok"] and len(o["history"]) >= 2 or time.time() > deadline:
        break
    time.sleep(0.3)
check(status == 200 and o["broker"]["ok"] and o["broker"]["uri"].startswith("hourglass+tls://"),
      "the overview's sampler reads INFO from the TLS-only broker: %s" % (o["broker"] if status == 200 else status))
check(len(o.get("levels", [])) == 18, "and its 18 levels")
status, d, _ = c.get("/api/dlq")
check(status == 200 and "groups" in d, "the session's own broker connection (GROUP LIST) goes over TLS: %s" % status)
status, f, _ = c.get("/api/msg", {"topic": "nothing", "key": "none"})
check(status == 200 and f["messages"] == [], "FIND over TLS: %s %s" % (status, f))

# ---------------------------------------------------------------- the gate, as over http
status, doc, _ = c.post("/api/dlq/g/requeue", {"all": "1"}, csrf=False)
check(status == 403 and "CSRF" in doc["error"], "a POST without the CSRF token: 403")
status, doc, _ = c.post("/api/dlq/g/requeue", {"all": "1"})
check(status == 403 and "role admin" in doc["error"], "a viewer's action: 403 %s" % doc)
status, doc, headers = c.post("/api/logout")
check(status == 200 and "Max-Age=0" in headers.get("Set-Cookie", ""), "logout over https")

# ---------------------------------------------------------------- what the port refuses
plain = http.client.HTTPConnection(host, port, timeout=10)
try:
    plain.request("GET", "/")
    res = plain.getresponse()
    check(False, "plain http on the https port got an answer: %s" % res.status)
except (http.client.HTTPException, OSError) as e:
    check(True, "plain http on the https port gets no answer (%s)" % type(e).__name__)
finally:
    plain.close()


def handshake(ctx):
    """None when a TLS handshake with ctx succeeds, else the error's text."""
    conn = http.client.HTTPSConnection(host, port, timeout=10, context=ctx)
    try:
        conn.request("GET", "/app.css")
        conn.getresponse().read()
        return None
    except (ssl.SSLError, OSError) as e:
        return str(e)
    finally:
        conn.close()


ctx12 = tls_context()
ctx12.maximum_version = ssl.TLSVersion.TLSv1_2
err = handshake(ctx12)
check(err is None, "TLS 1.2 is accepted (%s)" % err)
ctx11 = tls_context()
ctx11.set_ciphers("DEFAULT@SECLEVEL=0")  # so that this client does offer TLS 1.1
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    ctx11.minimum_version = ssl.TLSVersion.TLSv1
    ctx11.maximum_version = ssl.TLSVersion.TLSv1_1
err = handshake(ctx11)
check(err is not None and "protocol version" in err, "TLS 1.1 is refused by the console's alert: %s" % err)

# ---------------------------------------------------------------- header-timeout 2s, max-connections 8 over TLS
SESSION = b"GET /api/session HTTP/1.1\r\nHost: %s:%d\r\n\r\n" % (host.encode(), port)


def tls_socket():
    return tls_context().wrap_socket(socket.create_connection((host, port), timeout=10), server_hostname=host)


def read_all(s, deadline_s=10):
    """Every byte s receives until the console closes it (or deadline_s): (bytes, seconds it took)."""
    t0, out = time.monotonic(), b""
    s.settimeout(deadline_s)
    try:
        while True:
            part = s.recv(65536)
            if not part:
                break
            out += part
    except (OSError, ssl.SSLError):
        pass
    return out, time.monotonic() - t0


slow = tls_socket()
slow.sendall(b"GET /api/session HTTP/1.1\r\n")
got, took = read_all(slow)
slow.close()
check(got.startswith(b"HTTP/1.1 408 Request Timeout\r\n") and b"header-timeout 2000 ms" in got and 1.5 <= took <= 6,
      "a head trickled over TLS: answered 408 inside TLS after header-timeout 2s (%.1f s: %r)" % (took, got[:60]))

held = []
for _ in range(8):
    s = tls_socket()
    s.sendall(SESSION)
    s.settimeout(10)
    held.append((s, s.recv(65536)))
check(all(first.startswith(b"HTTP/1.1 200") for _, first in held), "8 kept-alive TLS connections served")
try:
    extra = tls_socket()
    extra.sendall(SESSION)
    got, _ = read_all(extra)
    extra.close()
except (OSError, ssl.SSLError) as e:
    got = b""
check(got == b"", "one past max-connections 8 over https: closed unanswered, no handshake only to refuse (%r)" % got[:60])
for s, _ in held:
    s.close()
finish()
