"""tests/console/test_login_flood.py — logins run off the event loop, bounded.

- A password guesser without any account (127.0.0.5) posts wrong passwords
  in a loop; the broker answers each only after its failure delay (200 ms
  doubling up to 5 s for the console's address). Meanwhile a logged-in
  operator's GET /api/overview is answered within FAST_S every time, and a
  correct login from another address (127.0.0.6) succeeds. Past
  LOGIN_FREE_FAILURES failures in a row the guesser's address waits: 429
  with Retry-After, at once, before the broker is asked.
- The broker stopped (SIGSTOP of HG_BROKER_PID), so logins wait on it: four
  logins from four addresses wait at once; a fifth is refused 429 at once,
  naming the limit, with Retry-After; a second login from an address whose
  login waits is refused 429 at once; one client closes its socket before
  its answer: its login is stopped at once (the broker still stopped) and
  makes no session. SIGCONT: the three that stayed are answered 200, and
  the console serves on.

Clients come from several loopback addresses (127.0.0.0/8 is all local on
Linux): the console's backoff is per client address. Run by
tests/integration/test_console (which sends SIGCONT to the broker afterwards,
whatever happened here).
"""
import json
import os
import signal
import threading
import time

from console_test import ENV, PASSWORDS, Client, check, finish, log_contains, raw_login

BROKER = int(ENV["HG_BROKER_PID"])
FAST_S = 0.5  # a logged-in operator's request while logins wait on the broker
LOGINS_MAX = 4  # console/login.c
LOGIN_FREE_FAILURES = 3  # console/login.c


class RawLogin:
    """One POST /api/login on a connection of its own from source (a
    loopback address): send() at once, answer() waits for the reply."""

    def __init__(self, user, password, source):
        self.sock = raw_login(user, password, source)
        self.t0 = time.monotonic()

    def answer(self):
        """(status, headers (lower-case names), document, seconds since the
        send); status None when the console closed without a reply."""
        raw = b""
        try:
            while True:
                part = self.sock.recv(65536)
                if not part:
                    break
                raw += part
        except OSError:
            pass
        took = time.monotonic() - self.t0
        self.sock.close()
        head, _, body = raw.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ", 2) if raw else []
        status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None
        hdrs = {}
        for line in lines[1:]:
            k, _, v = line.partition(b":")
            hdrs[k.strip().lower().decode()] = v.strip().decode("latin1")
        try:
            doc = json.loads(body) if body else None
        except ValueError:
            doc = body.decode("utf-8", "replace")
        return status, hdrs, doc, took

    def leave(self):
        self.sock.close()


def login(user, password, source):
    return RawLogin(user, password, source).answer()


operator = Client()
check(operator.login("alice")[0] == 200, "the operator (alice) logs in")

# ---------------------------------------------------------------- a guesser, while an operator works
guesses = []  # (status, retry-after, seconds)
done = threading.Event()


def guesser():
    end = time.monotonic() + 90
    t_first_429 = None
    while time.monotonic() < end:
        status, hdrs, doc, took = login("alice", "guess-%d" % len(guesses), "127.0.0.5")
        guesses.append((status, hdrs.get("retry-after"), took, (doc or {}).get("error") if isinstance(doc, dict)
                        else doc))
        if status == 429 and t_first_429 is None:
            t_first_429 = time.monotonic()
        if t_first_429 is not None and time.monotonic() - t_first_429 > 2:
            break  # it has hammered its backoff for a while
        time.sleep(0.02)
    done.set()


thread = threading.Thread(target=guesser)
thread.start()
waits = []
other = None
while not done.is_set():
    t0 = time.monotonic()
    status, _, _ = operator.get("/api/overview")
    waits.append((status, time.monotonic() - t0))
    if other is None and len(guesses) >= 1:  # the broker's delay is on: a right password from elsewhere
        other = login("bob", PASSWORDS["bob"], "127.0.0.6")
    time.sleep(0.05)
thread.join()
slowest = max(w for _, w in waits) if waits else None
check(waits and all(s == 200 for s, _ in waits) and slowest < FAST_S,
      "while a guesser posted %d logins (%d answered 401 after the broker's delay, up to %.1f s each), the operator's "
      "%d GET /api/overview were each answered within %.0f ms (the slowest: %.0f ms)" %
      (len(guesses), sum(1 for g in guesses if g[0] == 401), max([g[2] for g in guesses if g[0] == 401] or [0]),
       len(waits), FAST_S * 1000, (slowest or 0) * 1000))
print("measured: the slowest of %d overview requests during the guesser: %.0f ms" % (len(waits), (slowest or 0) * 1000))
check(other is not None and other[0] == 200 and isinstance(other[2], dict) and other[2].get("user") == "bob",
      "meanwhile a right password from another address (127.0.0.6) logs in: %s in %.0f ms" %
      (other and other[0], (other and other[3] or 0) * 1000))
statuses = [g[0] for g in guesses]
first_429 = statuses.index(429) if 429 in statuses else None
check(first_429 is not None and statuses[:first_429].count(401) == LOGIN_FREE_FAILURES + 1 and
      set(statuses[:first_429]) == {401},
      "the guesser's first %d wrong passwords are 401, then its address waits: 429 (%s)" %
      (LOGIN_FREE_FAILURES + 1, statuses[:12]))
refused = [g for g in guesses if g[0] == 429]
check(refused and all(g[2] < FAST_S and g[1] is not None and int(g[1]) >= 1 for g in refused) and
      "failed logins in a row from 127.0.0.5" in (refused[0][3] or ""),
      "each 429 is answered at once, with Retry-After, naming the address (%d of them, the first: %s)" %
      (len(refused), refused[0] if refused else None))
check(log_contains("failed logins in a row from 127.0.0.5: its next login waits"), "the backoff is logged")

# ---------------------------------------------------------------- the limits, the broker stopped
os.kill(BROKER, signal.SIGSTOP)
try:
    waiting = [RawLogin("bob", PASSWORDS["bob"], "127.0.0.%d" % (11 + i)) for i in range(LOGINS_MAX)]
    # the console reads each before it serves a request sent after them all
    for _ in range(2):
        check(operator.get("/api/session")[0] == 200, "the operator's session answers while the logins wait")
    status, hdrs, doc, took = login("bob", PASSWORDS["bob"], "127.0.0.15")
    check(status == 429 and took < FAST_S and hdrs.get("retry-after") == "1" and
          "at most %d at once" % LOGINS_MAX in (doc or {}).get("error", ""),
          "a fifth login while %d wait on the broker: 429 at once, Retry-After, naming the limit (%s %s %s, %.0f ms)" %
          (LOGINS_MAX, status, hdrs.get("retry-after"), doc, took * 1000))
    status, hdrs, doc, took = login("bob", PASSWORDS["bob"], "127.0.0.11")
    check(status == 429 and took < FAST_S and "one at a time per address" in (doc or {}).get("error", ""),
          "a second login from an address whose login waits: 429 at once (%s %s, %.0f ms)" % (status, doc, took * 1000))
    (st, _, _), took = (lambda t0: (operator.get("/api/overview"), time.monotonic() - t0))(time.monotonic())
    check(st == 200 and took < FAST_S, "the overview answers at once meanwhile (%.0f ms)" % (took * 1000))
    # a client that does not wait for its answer: the console sees its socket close (evhttp 2.1 itself reads
    # nothing from a connection whose request waits for its reply), stops the login's AUTH at once, while the
    # broker is still stopped, and makes no session
    left_line = "login of bob from 127.0.0.14: the client left before the broker answered (stopped"
    t0 = time.monotonic()
    waiting[-1].leave()
    end = t0 + 10
    while not log_contains(left_line) and time.monotonic() < end:
        time.sleep(0.01)
    took = time.monotonic() - t0
    check(log_contains(left_line) and took < 2,
          "a client that closes its socket while its login waits on the stopped broker: seen, the login's AUTH "
          "stopped, in %.0f ms (want under 2 s; the broker stays stopped)" % (took * 1000))
    print("measured: a login's client closed its socket: the login stopped %.0f ms later" % (took * 1000))
finally:
    os.kill(BROKER, signal.SIGCONT)
answers = [w.answer() for w in waiting[:-1]]
check(all(a[0] == 200 and a[2].get("user") == "bob" for a in answers),
      "SIGCONT: the three logins that waited are answered 200 (%s)" % [(a[0], round(a[3], 2)) for a in answers])
# the three logins answered and audited, the one that left never is: no session is made for nobody
end = time.time() + 5
while sum(log_contains("audit: user=bob from=127.0.0.%d login" % (11 + i)) for i in range(3)) < 3 and \
        time.time() < end:
    time.sleep(0.1)
check(not log_contains("audit: user=bob from=127.0.0.14 login") and log_contains(left_line) and
      log_contains("no session made"), "the login whose client left made no session (not audited as a login)")
check(operator.get("/api/session")[1].get("user") == "alice", "and the console serves on")
check(Client().login("carol")[0] == 200, "a login after it all: 200")
finish()
