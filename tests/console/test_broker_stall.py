"""tests/console/test_broker_stall.py — the console while the broker does
not answer: the broker is stopped (SIGSTOP of HG_BROKER_PID). Once the
overview's sampler has waited broker-timeout on it (the overview's
broker.silent_ms), the broker's pages answer 503 at once, saying so, instead
of each holding every other request for broker-timeout; the order pages
answer at once without the broker's half, saying why; an overdue order is
cancelled by hand meanwhile (the fallback when the message path is down).
SIGCONT: the broker's pages answer again. Run by
tests/integration/test_console (which sends SIGCONT again afterwards,
whatever happened here).
"""
import os
import signal
import time

from console_test import ENV, Client, check, finish, log_contains

BROKER = int(ENV["HG_BROKER_PID"])
FAST_S = 1.0  # "at once"; a request that waited on the broker would take broker-timeout
TIMEOUT_S = 5  # the console's broker-timeout (its default)


def timed(fn, *args):
    t0 = time.monotonic()
    out = fn(*args)
    return out, time.monotonic() - t0


def silent_ms(client):
    st, o, _ = client.get("/api/overview")
    return o["broker"]["silent_ms"] if st == 200 else None


alice = Client()
check(alice.login("alice")[0] == 200, "alice logs in")
check(silent_ms(alice) is None, "the broker answers: silent_ms is null")

os.kill(BROKER, signal.SIGSTOP)
try:
    # before the sampler has noticed: a page of overdue orders waits for the broker once, not once per order
    (st, d, _), took = timed(alice.get, "/api/orders/overdue")
    orders = d.get("orders", []) if st == 200 else []
    check(st == 200 and len(orders) >= 2 and took < 2 * TIMEOUT_S - 1 and not orders[-1]["broker_known"] and
          orders[-1]["broker_error"].startswith("not asked: the broker"),
          "the overdue orders with the broker just stopped: %d orders in %.1f s (one broker-timeout of %d s at most, "
          "not one per order): %s" % (len(orders), took, TIMEOUT_S, [(o["id"], o["broker_error"]) for o in orders]))
    deadline = time.time() + 60
    while silent_ms(alice) is None and time.time() < deadline:
        time.sleep(0.2)
    silent = silent_ms(alice)
    check(silent is not None, "the broker stopped: the overview says it has not answered for %s ms" % silent)
    texts = " | ".join(a["text"] for a in alice.get("/api/overview")[1].get("alerts", []))
    check("the broker has not answered for" in texts and "refused at once" in texts,
          "and an alert says what that means for the pages: %s" % texts)
    for path in ("/api/dlq", "/api/dlq/order-cancel", "/api/topics"):
        (st, d, _), took = timed(alice.get, path)
        check(st == 503 and "the broker has not answered for" in d.get("error", "") and took < FAST_S,
              "GET %s: 503 at once (%.0f ms): %s" % (path, took * 1000, d))
    (st, d, _), took = timed(Client().login, "bob")
    check(st == 503 and "the broker has not answered for" in d.get("error", "") and took < FAST_S,
          "a new login: 503 at once (%.0f ms), the session already open goes on: %s" % (took * 1000, d))
    (st, d, _), took = timed(alice.get, "/api/msg", {"topic": "order-timeout", "key": "302"})
    check(st == 503 and took < FAST_S, "a message search: 503 at once (%.0f ms)" % (took * 1000))
    (st, d, _), took = timed(alice.post, "/api/dlq/junk2/requeue", {"all": "1"})
    check(st == 503 and took < FAST_S, "a requeue of all: 503 at once, no job (%.0f ms): %s" % (took * 1000, d))
    (st, d, _), took = timed(alice.get, "/api/orders/overdue")
    orders = d.get("orders", []) if st == 200 else []
    check(st == 200 and took < FAST_S and orders and
          all(o["broker_error"].startswith("not asked: the broker has not answered for") and not o["broker_known"]
              for o in orders), "the overdue orders at once (%.0f ms), each saying why the broker was not asked: %s" %
          (took * 1000, [(o["id"], o["broker_error"]) for o in orders]))
    if orders:
        oid = orders[0]["id"]
        (st, d, _), took = timed(alice.post, "/api/orders/%s/cancel" % oid, {"reason": "manual"})
        check(st == 200 and d.get("outcome") == "cancelled" and took < FAST_S and
              d["order"]["broker_error"].startswith("not asked: the broker has not answered"),
              "order %s cancelled by hand while the broker is stopped (%.0f ms): %s" % (oid, took * 1000, d))
        check(log_contains("order cancel id=%s reason=manual outcome=cancelled" % oid), "and audited")
finally:
    os.kill(BROKER, signal.SIGCONT)

deadline = time.time() + 60
while silent_ms(alice) is not None and time.time() < deadline:
    time.sleep(0.2)
check(silent_ms(alice) is None, "SIGCONT: the broker answers the sampler again")
st, d, _ = alice.get("/api/dlq/order-cancel")
check(st == 200, "and its pages answer again: %s" % st)
st, d, _ = alice.get("/api/orders/overdue")
check(st == 200 and all(o["broker_known"] for o in d.get("orders", [])),
      "the order pages ask the broker again: %s" % [(o["id"], o["broker_error"]) for o in d.get("orders", [])])
finish()
