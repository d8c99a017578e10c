"""tests/console/test_login_timeout.py — a login against a hung broker is
answered within login-timeout: the broker is stopped (SIGSTOP of
HG_BROKER_PID; it still accepts TCP connections, its kernel does, and never
answers AUTH) and a login is posted at once, before the overview's sampler
has noticed (it refuses new logins at once after that). Its answer comes
within the console's login-timeout (HG_LOGIN_TIMEOUT_S) and a margin, 504,
naming the broker's address and the bound; meanwhile a logged-in operator's
session and the page answer at once. SIGCONT: a login goes through again.
Before login-timeout the login waited 21 s for AUTH, then once more after the
reconnect retry: about 42 s. Run by tests/integration/test_console against a
console of its own (which sends SIGCONT to the broker afterwards, whatever
happened here).
"""
import json
import os
import signal
import time

from console_test import ENV, PASSWORDS, Client, check, finish, log_contains, raw_login

BROKER = int(ENV["HG_BROKER_PID"])
BOUND_S = float(ENV["HG_LOGIN_TIMEOUT_S"])
MARGIN_S = 1.5  # the thread's end and the loop's answer, on a loaded machine
FAST_S = 0.5  # the operator's requests meanwhile


def answer(sock):
    """(status, document) of the login's reply; status None when closed
    without one (or nothing within the socket's 60 s)."""
    raw = b""
    try:
        while True:
            part = sock.recv(65536)
            if not part:
                break
            raw += part
    except OSError:
        pass
    sock.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    parts = head.split(b"\r\n")[0].split(b" ", 2) if raw else []
    status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None
    try:
        doc = json.loads(body) if body else {}
    except ValueError:
        doc = {"raw": body.decode("utf-8", "replace")}
    return status, doc


def timed(fn, *args):
    t0 = time.monotonic()
    out = fn(*args)
    return out, time.monotonic() - t0


alice = Client()
check(alice.login("alice")[0] == 200, "alice logs in")

os.kill(BROKER, signal.SIGSTOP)
try:
    t0 = time.monotonic()
    sock = raw_login("bob", PASSWORDS["bob"], "127.0.0.31", timeout=60)
    for path in ("/api/session", "/"):
        (st, _, _), took = timed(alice.get, path)
        check(st == 200 and took < FAST_S,
              "GET %s while the login waits on the stopped broker: %s within %.0f ms (%.0f ms)" %
              (path, st, FAST_S * 1000, took * 1000))
    status, doc = answer(sock)
    took = time.monotonic() - t0
    print("measured: a login against the stopped broker answered %s after %.2f s (login-timeout %g s)" %
          (status, took, BOUND_S))
    want = "the broker at 127.0.0.1:%s did not answer within %g s (login-timeout)" % (ENV["HG_BROKER_PORT"], BOUND_S)
    check(status == 504 and want in doc.get("error", ""),
          "the login is refused 504 naming the broker and the bound: %s %s" % (status, doc))
    check(BOUND_S - 0.2 <= took <= BOUND_S + MARGIN_S,
          "and answered after login-timeout, %g s (within %.1f s more): %.2f s" % (BOUND_S, MARGIN_S, took))
    check(log_contains("audit: login refused: user=bob from=127.0.0.31: " + want), "the refusal is audited")
finally:
    os.kill(BROKER, signal.SIGCONT)

# SIGCONT: the broker answers again (the sampler may have noticed the silence meanwhile: wait until it has not)
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    st, doc, _ = Client().login("bob")
    if st == 200:
        break
    time.sleep(0.2)
check(st == 200, "SIGCONT: a login goes through again (%s %s)" % (st, doc))
finish()
