"""tests/console/test_stall.py — the console keeps answering while MariaDB
is stalled: the private MariaDB (HG_MYSQL_PID) is stopped with SIGSTOP, so
the overview's sampler waits on its order counts (on its own thread, with its
own database handle); meanwhile the overview (from the last sample, saying
what the sampler waits on), the broker's pages and the session answer at
once. Once the sampler has waited mysql-read-timeout (4 s in that test), the
order pages answer 503 at once too, instead of each waiting that long. Then
SIGCONT, and the sampler catches up. Run by
tests/integration/test_console (which sends SIGCONT again afterwards,
whatever happened here).
"""
import os
import signal
import time

from console_test import Client, check, finish

PID = int(os.environ["HG_MYSQL_PID"])
FAST_S = 1.0  # what "at once" means here; the sampler's database call waits up to mysql-read-timeout (60 s)


def timed(client, path, params=None):
    t0 = time.monotonic()
    status, doc, _ = client.get(path, params)
    return status, doc, time.monotonic() - t0


alice = Client()
status, doc, _ = alice.login("alice")
check(status == 200, "alice logs in before the stall")
status, o, _ = alice.get("/api/overview")
check(status == 200 and o["db"]["ok"] and o["sampler"]["waiting_ms"] < 5000, "before: the database is up")
interval_s = o["interval_ms"] / 1000.0

os.kill(PID, signal.SIGSTOP)
try:
    slowest = 0.0
    deadline = time.time() + 30
    while True:
        status, o, took = timed(alice, "/api/overview")
        slowest = max(slowest, took)
        s = o.get("sampler", {}) if status == 200 else {}
        if (s.get("waiting_on") == "the database (order counts)" and s["waiting_ms"] > 4000 * interval_s) or \
                time.time() > deadline:
            break
        time.sleep(0.2)
    check(s.get("waiting_on") == "the database (order counts)" and s["waiting_ms"] > 4000 * interval_s,
          "MariaDB stopped: the sampler waits on the database (%s)" % s)
    check(slowest < FAST_S, "every overview meanwhile answered at once (slowest %.0f ms)" % (slowest * 1000))
    texts = " | ".join(a["text"] for a in o.get("alerts", []))
    check("the overview's sampler has waited" in texts and "on the database (order counts)" in texts,
          "the overview says so: %s" % texts)
    check(o.get("broker", {}).get("ok") and len(o.get("levels", [])) == 18,
          "and still shows the last sample's broker figures")
    for path, params in [("/api/dlq", None), ("/api/dlq/order-cancel", None),
                         ("/api/msg", {"topic": "order-timeout", "key": "302"}), ("/api/session", None), ("/", None)]:
        status, doc, took = timed(alice, path, params)
        check(status == 200 and took < FAST_S,
              "GET %s while MariaDB is stopped: %s in %.0f ms" % (path, status, took * 1000))
    # past mysql-read-timeout (4 s): an order page would wait that long for nothing, holding every other request
    deadline = time.time() + 60
    while (o.get("db") or {}).get("silent_ms") is None and time.time() < deadline:
        time.sleep(0.2)
        status, o, _ = alice.get("/api/overview")
    check(o["db"]["silent_ms"] is not None and o["db"]["silent_ms"] >= 0,
          "the overview says the database has not answered for %s ms" % o["db"].get("silent_ms"))
    check(any("the database has not answered for" in a["text"] for a in o.get("alerts", [])),
          "and an alert says the order pages are refused meanwhile")
    for method, path in [("GET", "/api/orders/overdue"), ("GET", "/api/orders/303"),
                         ("POST", "/api/orders/304/cancel")]:
        t0 = time.monotonic()
        status, doc, _ = alice.request(method, path, {} if method == "POST" else None)
        took = time.monotonic() - t0
        check(status == 503 and "the database has not answered for" in doc.get("error", "") and took < FAST_S,
              "%s %s while MariaDB is silent: 503 at once (%.0f ms): %s" % (method, path, took * 1000, doc))
    status, doc, took = timed(alice, "/api/dlq/order-cancel")
    check(status == 200 and took < FAST_S, "and the broker's pages still answer (%.0f ms)" % (took * 1000))
    stalled_sample = alice.get("/api/overview")[1]["sampler"]["last_sample_ms"] or 0
finally:
    os.kill(PID, signal.SIGCONT)

deadline = time.time() + 60
while True:  # a sample taken after SIGCONT, with the database's counts
    status, o, _ = alice.get("/api/overview")
    if status == 200 and (o["sampler"]["last_sample_ms"] or 0) > stalled_sample and o["db"]["ok"] or \
            time.time() > deadline:
        break
    time.sleep(0.2)
check(status == 200 and (o["sampler"]["last_sample_ms"] or 0) > stalled_sample and o["db"]["ok"] and
      o["orders"]["pending"] is not None and not any("sampler has waited" in a["text"] for a in o["alerts"]),
      "SIGCONT: the sampler publishes a new sample with the database's counts, the alert is gone (%s)" %
      o.get("sampler"))
check(o["db"]["silent_ms"] is None, "and the database is not silent any more")
status, doc, _ = alice.get("/api/orders/overdue")
check(status == 200, "the order pages answer again: %s" % status)
finish()
