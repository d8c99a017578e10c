"""tests/console/console_test.py — what the console's test scripts share.

Run by tests/integration/test_console (never by hand without its set-up):
the environment names the console (HG_CONSOLE_URL, http:// or https://;
HG_CA_FILE: the CA its https certificate chains to), its log
(HG_CONSOLE_LOG), the broker's users and their passwords (HG_USERS,
"name=password;..."), the broker (HG_BROKER_PORT, and HG_BROKER_AUTH
"user=password" for the traffic), the database (HG_MYSQL_SOCKET,
HG_MYSQL_DATABASE) and where artifacts go (HG_ARTIFACTS).

Standard library only (Debian's python3): an HTTP(S) client that keeps the
session cookie and sends the CSRF token on POSTs (Client: its login() and
session_token() are every script's login and session cookie), a login
posted on a raw socket of its own (raw_login), a check() that counts
failures instead of stopping at the first, and SQL through the `mariadb`
command-line client.
"""
import http.cookiejar
import json
import os
import socket
import ssl
import subprocess
import time
import sys
import urllib.error
import urllib.parse
import urllib.request

ENV = os.environ
failures = []


def check(ok, what):
    """Record one check: print it, remember a failure."""
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)
    return ok


def finish():
    """Exit 0 when every check passed, 1 otherwise (naming the failures)."""
    if failures:
        print("%d check(s) failed:" % len(failures))
        for f in failures:
            print("  - " + f)
        sys.exit(1)
    print("all checks passed")
    sys.exit(0)


BASE = ENV["HG_CONSOLE_URL"]
PASSWORDS = dict(kv.split("=", 1) for kv in ENV.get("HG_USERS", "").split(";") if kv)


def tls_context():
    """The client side of the console's https: verify against HG_CA_FILE."""
    ctx = ssl.create_default_context(cafile=ENV["HG_CA_FILE"]) if ENV.get("HG_CA_FILE") else None
    return ctx


class Client:
    """One browser-like client of the console: cookies kept, CSRF sent."""

    def __init__(self):
        self.base = BASE
        self.jar = http.cookiejar.CookieJar()
        handlers = [urllib.request.HTTPCookieProcessor(self.jar)]
        if BASE.startswith("https:"):
            handlers.append(urllib.request.HTTPSHandler(context=tls_context()))
        self.opener = urllib.request.build_opener(*handlers)
        self.csrf = None

    def request(self, method, path, params=None, csrf=True, headers=None):
        """(status, document, response headers) of one request."""
        url = self.base + path
        data = None
        hdrs = dict(headers or {})
        if method == "GET" and params:
            url += "?" + urllib.parse.urlencode(params, doseq=True)
        elif method == "POST":
            data = urllib.parse.urlencode(params or {}, doseq=True).encode()
            hdrs.setdefault("Content-Type", "application/x-www-form-urlencoded")
            if csrf and self.csrf:
                hdrs["X-CSRF-Token"] = self.csrf
        req = urllib.request.Request(url, data=data, method=method, headers=hdrs)
        try:
            with self.opener.open(req, timeout=30) as res:
                body, status, rh = res.read(), res.status, res.headers
        except urllib.error.HTTPError as e:
            body, status, rh = e.read(), e.code, e.headers
        try:
            doc = json.loads(body) if body else None
        except ValueError:
            doc = body.decode("utf-8", "replace")
        return status, doc, rh

    def get(self, path, params=None, headers=None):
        return self.request("GET", path, params, headers=headers)

    def post(self, path, params=None, csrf=True, headers=None):
        return self.request("POST", path, params, csrf, headers)

    def job(self, path, params=None, deadline_s=60):
        """POST an action the console runs as a job (202 {"job": …}), then poll
        GET /api/jobs/{id} until it has ended (at most deadline_s): the POST's
        status and the last job document (the POST's error document when it
        was refused)."""
        status, doc, _ = self.post(path, params)
        if status != 202 or not isinstance(doc, dict) or "job" not in doc:
            return status, doc
        job = doc["job"]
        end = time.time() + deadline_s
        while job.get("state") == "running" and time.time() < end:
            time.sleep(0.05)
            st, d, _ = self.get("/api/jobs/%d" % job["id"])
            if st != 200:
                return st, d
            job = d["job"]
        return status, job

    def login(self, user, password=None, headers=None):
        """POST /api/login as user, with the broker password of HG_USERS
        unless given, and headers (a dict) besides the form's: (status,
        document, response headers). On 200 the session cookie is in the
        jar and its CSRF token is sent on this client's next POSTs."""
        if password is None:
            password = PASSWORDS[user]
        status, doc, rh = self.post("/api/login", {"user": user, "password": password}, csrf=False,
                                    headers=headers)
        if status == 200:
            self.csrf = doc["csrf"]
        return status, doc, rh

    def session_token(self):
        """The session cookie's value in the jar (hg_session; over https
        __Host-hg_session), or None before a login."""
        name = "__Host-hg_session" if self.base.startswith("https:") else "hg_session"
        return next((c.value for c in self.jar if c.name == name), None)


def raw_login(user, password, source, timeout=30):
    """POST /api/login as user on a connection of its own from source (a
    loopback address, for the console's per-address limits), without
    waiting for the reply: the socket (timeout seconds for each of its
    calls), the request sent (Connection: close)."""
    parts = urllib.parse.urlsplit(BASE)
    body = urllib.parse.urlencode({"user": user, "password": password}).encode()
    sock = socket.create_connection((parts.hostname, parts.port), timeout=timeout, source_address=(source, 0))
    sock.sendall(b"POST /api/login HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/x-www-form-urlencoded"
                 b"\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (parts.port, len(body), body))
    return sock


def sql(query):
    """The first column of the first row of query, as text ('' when none)."""
    out = subprocess.run(["mariadb", "-S", ENV["HG_MYSQL_SOCKET"], "-u", "root", "-N", "-B",
                          ENV["HG_MYSQL_DATABASE"], "-e", query],
                         capture_output=True, text=True, timeout=30)
    if out.returncode != 0:
        raise RuntimeError("mariadb: " + out.stderr.strip())
    first = out.stdout.split("\n", 1)[0]
    return first.split("\t", 1)[0]


def log_contains(text):
    with open(ENV["HG_CONSOLE_LOG"], encoding="utf-8", errors="replace") as f:
        return text in f.read()


class Resp:
    """A minimal RESP client of the broker (HG_BROKER_PORT, logged in as
    HG_BROKER_AUTH when set), for traffic."""

    def __init__(self):
        import socket
        self.sock = socket.create_connection(("127.0.0.1", int(ENV["HG_BROKER_PORT"])), timeout=30)
        self.f = self.sock.makefile("rb")
        if ENV.get("HG_BROKER_AUTH"):
            self.call("AUTH", *ENV["HG_BROKER_AUTH"].split("=", 1))

    def call(self, *args):
        out = b"*%d\r\n" % len(args)
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out += b"$%d\r\n%s\r\n" % (len(a), a)
        self.sock.sendall(out)
        return self._read()

    def _read(self):
        line = self.f.readline().rstrip(b"\r\n")
        kind, rest = line[:1], line[1:]
        if kind in (b"+", b"-"):
            if kind == b"-":
                raise RuntimeError(rest.decode())
            return rest.decode()
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self.f.read(n + 2)[:-2]
            return data.decode("utf-8", "replace")
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self._read() for _ in range(n)]
        raise RuntimeError("unexpected reply %r" % line)

    def close(self):
        self.sock.close()


def traffic_until(stop, topic="traffic", group="tg"):
    """Send, pull and ack a few messages every 100 ms until stop (a
    threading.Event) is set: live rates for the overview."""
    r = Resp()
    try:
        while not stop.is_set():
            for i in range(5):
                r.call("SEND", topic, "live-%d" % i)
            msgs = r.call("PULL", group, topic, "COUNT", "100", "BLOCK", "50") or []
            ids = [m[0] for m in msgs]
            if ids:
                r.call("ACK", group, *ids)
            stop.wait(0.1)
    finally:
        r.close()
