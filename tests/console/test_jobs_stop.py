"""tests/console/test_jobs_stop.py — SIGTERM while a console job and a login
wait on a stopped broker: logs in, stops the broker (SIGSTOP of
HG_BROKER_PID), starts a purge (a job) and posts a login (its AUTH waits on
the broker, on a thread of its own), then sends SIGTERM to the console
itself: the login's client gets an answer or a close within LOGIN_STOP_S —
the job's and the login's waits end at once (the stop fd), not after the
job's 10 minutes or the login's read timeout — and the console exits within
STOP_S (its stop bound: the sampler's INFO in flight on the stopped broker
ends within broker-timeout, 5 s).
tests/integration/test_console then reaps the console (exit 0), checks the
log and sends SIGCONT to the broker.
"""
import os
import signal
import socket
import time

from console_test import ENV, PASSWORDS, Client, check, finish, raw_login

CONSOLE = int(ENV["HG_CONSOLE_PID"])
LOGIN_STOP_S = 1.0
STOP_S = 5.0 + 3.0  # broker-timeout, and a margin for a loaded machine

alice = Client()
check(alice.login("alice")[0] == 200, "alice logs in")
os.kill(int(ENV["HG_BROKER_PID"]), signal.SIGSTOP)
status, doc, _ = alice.post("/api/topics/stop-me/delete", {"purge": "1"})
check(status == 202 and doc.get("job", {}).get("state") == "running",
      "a purge on the stopped broker: 202, running: %s %s" % (status, doc))

sock = raw_login("bob", PASSWORDS["bob"], "127.0.0.21")
# the console has read the login once it serves a request sent after it
check(alice.get("/api/session")[0] == 200, "the session answers while the login waits on the stopped broker")
sock.settimeout(0.3)
try:
    early = sock.recv(100)
except socket.timeout:
    early = None
check(early is None, "the login waits on the stopped broker (no answer yet: %r)" % early)

t0 = time.monotonic()
os.kill(CONSOLE, signal.SIGTERM)
sock.settimeout(STOP_S + 5)
raw = b""
try:
    while True:
        part = sock.recv(65536)
        if not part:
            break
        raw += part
except OSError as e:
    raw += b"(%s)" % str(e).encode()
took = time.monotonic() - t0
sock.close()
check(took < LOGIN_STOP_S and (raw == b"" or raw.startswith(b"HTTP/1.1 503")),
      "SIGTERM while the login waits: its connection is answered 503 or closed within %.0f s (%.2f s: %r)" %
      (LOGIN_STOP_S, took, raw[:80]))


def exited():
    try:
        with open("/proc/%d/stat" % CONSOLE) as f:
            return f.read().split(") ", 1)[1][0] in "ZX"
    except OSError:
        return True


end = time.monotonic() + STOP_S + 5
while not exited() and time.monotonic() < end:
    time.sleep(0.02)
took = time.monotonic() - t0
check(exited() and took < STOP_S, "the console has exited %.2f s after SIGTERM (within %.0f s)" % (took, STOP_S))
finish()
