"""tests/console/test_api.py — every endpoint of hourglass-console's /api
(docs/console.md) over HTTP, including the refused ones: no session, no CSRF
token, no role admin; logins of the broker's real users (alice admin, bob
viewer, carol producer): a wrong password and an unknown user get the same
refusal, and every action of the viewer is refused and audited. Run by tests/integration/test_console after its
set-up (see there for the seeded orders 301-306, the DLQ of order-cancel
with 302, dlq-a, dlq-b, dlq-c, the groups junk and junk2 with two parked
messages each, and
the delayed message of topic revoke-me with key rv). Also BACKUP from the
overview: refused for a viewer and for a bad name, the copy's outcome shown.
The Host check, %00 in a path, a group named "..", what evhttp answers
itself. Needs only the harness's set-up, no other script's leftovers; it
counts that set-up exactly (four parked in the DLQ of order-cancel, four
orders past expiry), so it runs first.
"""
import os
import socket
import time

from console_test import BASE, ENV, Client, Resp, check, finish, log_contains, sql

# ---------------------------------------------------------------- no session
anon = Client()
status, doc, _ = anon.get("/api/session")
check(status == 200 and doc == {"logged_in": False}, "GET /api/session without a session: not logged in")
for method, path in [("GET", "/api/overview"), ("GET", "/api/dlq"),
                     ("GET", "/api/orders/overdue"), ("POST", "/api/orders/301/cancel"),
                     ("POST", "/api/dlq/order-cancel/requeue")]:
    status, doc, _ = anon.request(method, path, {"all": "1"} if method == "POST" else None)
    check(status == 401 and doc.get("error") == "not logged in", "%s %s without a session: 401 (%s)" %
          (method, path, status))
status, doc, headers = anon.get("/")
check(status == 200 and "<title>Hourglass console</title>" in doc, "GET / serves the page")
check("default-src 'self'" in (headers.get("Content-Security-Policy") or ""), "the page carries a CSP of 'self'")
check(headers.get("X-Frame-Options") == "DENY", "and X-Frame-Options DENY")
status, doc, _ = anon.get("/orders/301")
check(status == 200 and "app.js" in doc, "an app route (/orders/301) serves the page too: a link that loads")
status, doc, headers = anon.get("/app.js")
check(status == 200 and "text/javascript" in headers.get("Content-Type", ""), "GET /app.js")
for method in ["PUT", "DELETE", "OPTIONS", "PATCH", "TRACE"]:
    status, doc, headers = anon.request(method, "/api/overview")
    check(status == 405 and doc == {"error": "GET or POST only"} and
          headers.get("Content-Type", "").startswith("application/json"),
          "%s /api/overview: 405 with the API's JSON error (%s %r)" % (method, status, doc))
# What evhttp answers itself, before any callback of the console's (libevent 2.1 has no hook): its HTML page,
# as docs/console.md says. Pinned here so that a change shows.
try:
    status, doc, headers = anon.request("POST", "/api/login", {"user": "x" * 70000}, csrf=False)
    ctype = headers.get("Content-Type")
except OSError as e:  # the connection closed before the whole body was written
    status, ctype = None, str(e)
check(status == 413 and ctype == "text/html",
      "a body over 64 KiB: evhttp's own 413, in HTML (documented) (%s %s)" % (status, ctype))

# ---------------------------------------------------------------- the Host header (DNS rebinding)
# The console runs with allowed-hosts "console.test, Ops.Example.org": IP literals, localhost and those names
# are served; any other name (a page that re-pointed its DNS name at 127.0.0.1) is refused 421, naming it.
port = BASE.rsplit(":", 1)[1]
for host in ["evil.example", "evil.example:" + port, "127.0.0.1.evil.example", "localhost.evil.example",
             "console.test.evil.example", "[::1", ""]:
    status, doc, headers = anon.get("/api/session", headers={"Host": host})
    check(status == 421 and isinstance(doc, dict) and ("host '%s' is not this console's" % host) in doc.get("error", ""),
          "Host %r: 421 with a JSON error naming it (%s %s)" % (host, status, doc))
status, doc, headers = Client().login("alice", "alice-Secret-1", headers={"Host": "rebound.example:" + port})
check(status == 421 and "Set-Cookie" not in headers, "a login for another host: 421, no session (%s %s)" % (status, doc))
status, doc, _ = anon.get("/orders/301", headers={"Host": "rebound.example"})
check(status == 421 and isinstance(doc, str) and "host 'rebound.example' is not this console's" in doc,
      "the page for another host: 421 in text (%s %r)" % (status, doc))
for host in ["127.0.0.1:" + port, "127.0.0.1", "localhost:" + port, "LocalHost.", "[::1]:" + port, "[::1]",
             "console.test:" + port, "CONSOLE.TEST", "ops.example.org", "ops.example.org.:" + port]:
    status, doc, _ = anon.get("/api/session", headers={"Host": host})
    check(status == 200 and doc == {"logged_in": False}, "Host %r: served (%s %s)" % (host, status, doc))
with socket.create_connection(("127.0.0.1", int(port)), timeout=30) as s:
    s.sendall(b"GET /api/session HTTP/1.0\r\n\r\n")
    raw = b""
    while True:
        part = s.recv(65536)
        if not part:
            break
        raw += part
check(raw.split(b" ", 2)[1:2] == [b"200"] and raw.endswith(b'{"logged_in":false}'),
      "HTTP/1.0 without a Host header: served (browsers always send one): %r" % raw[:40])
check(log_contains("refused a request for host 'evil.example' from 127.0.0.1"), "a refused Host is logged")
# A page that keeps trying cannot flood the log: one line per 10 s at most, the next one counting the rest.
started = time.monotonic()
refused = sum(anon.get("/api/session", headers={"Host": "flood%d.example" % i})[0] == 421 for i in range(200))
elapsed = time.monotonic() - started
check(refused == 200, "%d of 200 requests for flood<n>.example refused 421" % refused)
with open(ENV["HG_CONSOLE_LOG"], encoding="utf-8", errors="replace") as f:
    refusal_lines = sum("refused a request for host" in line for line in f)
allowed = 2 + int(elapsed // 10)  # the first test's line, and one per 10 s window the loop spanned
check(refusal_lines <= allowed,
      "200 refused Hosts in %.1f s: %d log lines, at most %d" % (elapsed, refusal_lines, allowed))

# ---------------------------------------------------------------- login
status, doc, _ = anon.login("", "x")
check(status == 400, "login with an empty user: 400 (%s)" % status)
status, doc, _ = anon.request("POST", "/api/login", None, headers={"Content-Type": "application/json"})
check(status in (400, 415), "login without a form body: refused (%s)" % status)
status, doc, _ = anon.get("/api/login")
check(status == 405, "GET /api/login: 405 (%s)" % status)

# a wrong password, an unknown user, an empty password: one answer, which part was wrong is not said
refusals = []
for user, password in [("alice", "wrong-password"), ("mallory", "alice-Secret-1"), ("bob", "")]:
    status, doc, headers = Client().login(user, password)
    refusals.append((status, doc.get("error") if isinstance(doc, dict) else doc))
    check(status == 401 and "Set-Cookie" not in headers, "login %s with a wrong password: 401, no cookie (%s)" %
          (user, status))
check(len(set(refusals)) == 1 and refusals[0][1] == "login refused: wrong user name or password",
      "the three refusals are the same answer, naming neither part: %s" % refusals)
check(log_contains("audit: login refused: user=mallory") and log_contains("audit: login refused: user=alice"),
      "refused logins are audited with the user name given")

alice = Client()
status, doc, headers = alice.login("alice")
check(status == 200 and doc["user"] == "alice" and doc["roles"] == ["admin"] and doc["can_act"] and
      not doc["no_users"], "alice logs in with her broker password, role admin from the broker: %s %s" %
      (status, doc))
cookie = headers.get("Set-Cookie", "")
check("HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie,
      "the session cookie is HttpOnly; SameSite=Strict: %s" % cookie.split("=", 1)[0])
check("Secure" not in cookie, "over plain http the cookie is not Secure (the browser would drop it)")
check(len(doc.get("csrf", "")) == 64, "a CSRF token of 32 random bytes")
status, doc, _ = alice.get("/api/session")
check(status == 200 and doc["user"] == "alice" and doc["csrf"] == alice.csrf, "GET /api/session")
check(log_contains("audit: user=alice") and log_contains("login roles=admin"), "the login is in the audit log")

bob = Client()
status, doc, _ = bob.login("bob")
check(status == 200 and doc["roles"] == ["viewer"] and not doc["can_act"] and not doc["no_users"],
      "bob logs in read-only, role viewer from the broker: %s" % doc)
check(log_contains("audit: user=bob") and log_contains("login roles=viewer"), "bob's login is audited")

carol = Client()
status, doc, _ = carol.login("carol")
check(status == 200 and doc["roles"] == ["producer"] and not doc["can_act"], "carol (producer) logs in read-only")
status, doc, _ = carol.get("/api/dlq")
check(status == 403 and "NOPERM" in doc.get("error", ""),
      "the broker itself refuses what carol's role may not run (GROUP LIST): 403 %s" % doc)

# ---------------------------------------------------------------- overview
deadline = time.time() + 30
while True:
    status, o, _ = alice.get("/api/overview")
    if status == 200 and len(o["history"]) >= 3 and o["lateness"]["histogram"] or time.time() > deadline:
        break
    time.sleep(0.3)
check(status == 200 and o["broker"]["ok"] and o["db"]["ok"], "overview: broker and database up")
check(o["totals"]["sends"] >= 44 and o["totals"]["deliveries"] >= 44 and o["totals"]["acks"] >= 40,
      "overview: live counters (sends %s, deliveries %s, acks %s)" %
      (o["totals"]["sends"], o["totals"]["deliveries"], o["totals"]["acks"]))
check(len(o["levels"]) == 18 and any(l["depth"] > 0 for l in o["levels"]),
      "overview: 18 levels, one holding the delayed messages")
groups = {g["group"]: g for g in o["groups"]}
check(groups.get("order-cancel", {}).get("dlq") == 4 and groups.get("junk", {}).get("dlq") == 2 and
      groups.get("junk2", {}).get("dlq") == 2,
      "overview: DLQ depth per group (order-cancel 4, junk 2): %s" % groups)
check(o["orders"]["pending"] >= 5 and o["orders"]["overdue"] == 4,
      "overview: pending %s, overdue %s (301-304)" % (o["orders"]["pending"], o["orders"]["overdue"]))
check(len(o["history"]) >= 3 and "sends_per_s" in o["history"][-1], "overview: samples kept (%d)" % len(o["history"]))
check(any(b["count"] > 0 for b in o["lateness"]["histogram"]), "overview: the broker's lateness histogram")
texts = " | ".join(a["text"] for a in o["alerts"])
check("4 pending orders past expiry" in texts and "group order-cancel: 4 messages in the DLQ" in texts,
      "overview: alerts firing: %s" % texts)
status, _, _ = bob.get("/api/overview")
check(status == 200, "a viewer sees the overview")

# ---------------------------------------------------------------- the compensator's layers (compensator-metrics)
# A real hourglass-compensator runs the relay and the monitor as bob (a viewer): the relay's SEND of order
# 304's outbox row is refused at every run; the monitor's DLQ and overdue alerts hold.
deadline = time.time() + 30
while True:
    status, o, _ = alice.get("/api/overview")
    comp = o.get("compensator", {}) if status == 200 else {}
    layers = {l["layer"]: l for l in comp.get("layers", [])}
    active = {a["alert"]: a["active"] for a in comp.get("alerts", [])}
    relay, monitor = layers.get("relay", {}), layers.get("monitor", {})
    if (relay.get("outcome") == "failed" and relay.get("error") and monitor.get("outcome") == "ok" and
            active.get("dlq-depth", 0) > 0 and active.get("overdue-pending", 0) > 0) or time.time() > deadline:
        break
    time.sleep(0.3)
check(comp.get("configured") and comp.get("ok") and comp.get("error") is None,
      "overview: the compensator's /metrics is read: %s" % {k: comp.get(k) for k in ("configured", "ok", "error")})
check(set(layers) == {"relay", "monitor"}, "overview: the compensator's enabled layers: %s" % sorted(layers))
check(relay.get("outcome") == "failed" and relay.get("consecutive_failures", 0) >= 1 and
      "NOPERM" in (relay.get("error") or ""),
      "overview: the relay's last run failed, with its error from /healthz: %s" % relay)
check(monitor.get("outcome") == "ok" and monitor.get("last_run_ms") and
      abs(o["now_ms"] - monitor["last_run_ms"]) < 15000 and monitor.get("duration_ms", -1) >= 0,
      "overview: the monitor's last run, recent, ok, with its duration: %s" % monitor)
check(active.get("dlq-depth", 0) >= 1 and active.get("overdue-pending", 0) >= 1,
      "overview: the compensator's alerts active: %s" % active)
texts = " | ".join(a["text"] for a in o["alerts"])
check("compensator layer relay: its last run failed" in texts and "compensator alert dlq-depth firing" in texts and
      "compensator alert overdue-pending firing" in texts, "overview: the compensator's failures and alerts are "
      "in the alerts: %s" % texts)

# ---------------------------------------------------------------- %00 in a name: refused, never cut
# Decoded, a NUL would cut "order-cancel%00junk" to order-cancel: the page of another group, or an action on it.
for path in ["/api/dlq/order-cancel%00junk", "/api/dlq/order-cancel%00", "/api/orders/301%00x"]:
    status, doc, _ = alice.get(path)
    check(status == 400 and "holds %00, a NUL byte" in doc.get("error", "") and "segment 2" in doc.get("error", ""),
          "GET %s: 400 naming the segment with %%00 (%s %s)" % (path, status, doc))
status, doc, _ = alice.post("/api/dlq/order-cancel%00x/drop", {"all": "1", "confirm": "4"})
check(status == 400 and "holds %00" in doc.get("error", ""), "a drop of order-cancel%%00x: 400 (%s %s)" % (status, doc))
status, doc, _ = alice.get("/api/msg", {"topic": "order-timeout\0x", "key": "303"})
check(status == 400 and "bad query: it holds %00" in doc.get("error", ""), "a query with %%00: 400 (%s %s)" % (status, doc))
status, doc, _ = alice.post("/api/msg/revoke", {"topic": "revoke-me\0x", "key": "rv"})
check(status == 400 and "bad form: it holds %00" in doc.get("error", ""), "a form with %%00: 400 (%s %s)" % (status, doc))

# ---------------------------------------------------------------- DLQ
status, d, _ = alice.get("/api/dlq")
check(status == 200 and any(g["group"] == "order-cancel" and g["dlq"] == 4 for g in d["groups"]), "GET /api/dlq")
status, p1, _ = alice.get("/api/dlq/order-cancel", {"count": 2})
check(status == 200 and len(p1["messages"]) == 2 and p1["total"] == 4 and p1["next"],
      "a DLQ page of 2 of 4 with a next id")
status, p2, _ = alice.get("/api/dlq/order-cancel", {"count": 2, "after": p1["next"]})
check(status == 200 and len(p2["messages"]) == 2 and p2["next"] is None, "the second and last page")
parked = {m["payload"]: m for m in p1["messages"] + p2["messages"]}
check(set(parked) == {"302", "dlq-a", "dlq-b", "dlq-c"}, "the four parked messages: %s" % sorted(parked))
m = parked.get("dlq-a", {})
check(m.get("reason") == "test: parked a" and m.get("reconsume") == 1 and m.get("parked_ms", 0) > 0,
      "reason, reconsume and time parked: %s" % m)
status, one, _ = alice.get("/api/dlq/order-cancel/" + m["id"])
check(status == 200 and one["id"] == m["id"] and one["key"] == "ka", "GET one parked message")
check(alice.get("/api/dlq/order-cancel/0000000000000001")[0] == 404, "one that is not parked: 404")
check(alice.get("/api/dlq/order-cancel/xyz")[0] == 400, "a bad id: 400")
check(alice.get("/api/dlq/order-cancel", {"count": 0})[0] == 400, "count 0: 400")

status, doc, _ = alice.post("/api/dlq/order-cancel/requeue", {"id": m["id"]}, csrf=False)
check(status == 403 and "CSRF" in doc["error"], "requeue without the CSRF token: 403 (%s)" % status)
status, doc, _ = alice.post("/api/dlq/order-cancel/requeue", {"id": m["id"]}, csrf=False,
                            headers={"X-CSRF-Token": "0" * 64})
check(status == 403, "requeue with a wrong CSRF token: 403")
check(log_contains("refused /api/dlq/order-cancel/requeue: missing or wrong CSRF token"), "the refusal is audited")
# every action of a viewer: 403 naming the missing role, audited, nothing changed
status, doc, _ = bob.get("/api/dlq/order-cancel")
check(status == 200 and doc["total"] == 4, "a viewer sees the DLQ")
viewer_actions = [("/api/dlq/order-cancel/requeue", {"id": m["id"]}),
                  ("/api/dlq/order-cancel/requeue", {"all": "1"}),
                  ("/api/dlq/order-cancel/drop", {"id": m["id"]}),
                  ("/api/dlq/junk/drop", {"all": "1", "confirm": "2"}),
                  ("/api/msg/%s/revoke" % m["id"], {}),
                  ("/api/msg/revoke", {"topic": "revoke-me", "key": "rv"}),
                  ("/api/orders/301/cancel", {"reason": "manual"}),
                  ("/api/topics/revoke-me/delete", {"purge": "1"})]
for path, params in viewer_actions:
    status, doc, _ = bob.post(path, params)
    check(status == 403 and doc.get("error") == "user bob may not act: the role admin is needed",
          "viewer bob: POST %s refused 403 with a clear message: %s %s" % (path, status, doc))
    check(log_contains("audit: user=bob from=127.0.0.1 refused %s: no role admin" % path),
          "and the refusal of %s is audited with the user" % path)
check(alice.get("/api/dlq/order-cancel")[1]["total"] == 4 and alice.get("/api/dlq/junk")[1]["total"] == 2,
      "nothing moved by the refused requeues and drops")

status, doc, _ = alice.post("/api/dlq/order-cancel/requeue", {"id": m["id"]})
check(status == 200 and doc["requeued"] == 1 and doc["missing"] == [], "requeue one: %s" % doc)
status, doc, _ = alice.post("/api/dlq/order-cancel/requeue", {"id": [m["id"], "0000000000000001"]})
check(status == 200 and doc["requeued"] == 0 and len(doc["missing"]) == 2, "requeue what is gone: 0, missing")
check(alice.post("/api/dlq/order-cancel/requeue", {"id": m["id"], "all": "1"})[0] == 400, "id and all: 400")
check(log_contains("dlq requeue group=order-cancel ids=1 moved=1"), "the requeue is audited with the user")
status, doc, _ = alice.post("/api/dlq/order-cancel/drop", {"id": parked["dlq-c"]["id"]})
check(status == 200 and doc["dropped"] == 1, "drop one: %s" % doc)

status, doc, _ = alice.post("/api/dlq/junk/drop", {"all": "1"})
check(status == 409 and "holds 2 messages" in doc["error"], "drop all without confirm: 409 naming the count")
status, doc, _ = alice.post("/api/dlq/junk/drop", {"all": "1", "confirm": "5"})
check(status == 409, "drop all with the wrong count: 409")
status, job = alice.job("/api/dlq/junk/drop", {"all": "1", "confirm": "2"})
check(status == 202 and job.get("state") == "done" and job["result"] == {"group": "junk", "dropped": 2} and
      job["user"] == "alice" and job["what"] == "drop all 2 of the DLQ of group junk" and job["ended_ms"] >= job[
          "started_ms"], "drop all confirmed with the count: a job (202), done: %s %s" % (status, job))
drop_job = job.get("id")
check(log_contains("dlq drop all group=junk: started (job %s)" % drop_job) and
      log_contains("dlq drop all group=junk dropped=2 (job %s," % drop_job),
      "drop all is audited when it starts and when it ends, with the user")
status, job = alice.job("/api/dlq/junk2/requeue", {"all": "1"})
check(status == 202 and job.get("state") == "done" and job["result"] == {"group": "junk2", "requeued": 2},
      "requeue all: a job, done: %s" % job)
check(alice.get("/api/dlq/junk2")[1]["total"] == 0, "the DLQ of junk2 is empty")
status, job = alice.job("/api/dlq/nosuchgroup/requeue", {"all": "1"})
check(status == 400 and "no such group" in job.get("error", ""),
      "requeue all of an unknown group: 400 before any job: %s %s" % (status, job))
# the jobs, as anyone logged in sees them
status, doc, _ = bob.get("/api/jobs")
ids = [j["id"] for j in doc.get("jobs", [])]
check(status == 200 and len(ids) >= 2 and ids == sorted(ids, reverse=True) and drop_job in ids,
      "a viewer lists the console's jobs, newest first: %s" % ids)
status, doc, _ = bob.get("/api/jobs/%s" % drop_job)
check(status == 200 and doc["job"]["result"] == {"group": "junk", "dropped": 2}, "and reads one: %s" % doc)
for bad in ("999999", "0", "abc", "1x"):
    status, doc, _ = alice.get("/api/jobs/" + bad)
    check(status == 404 and "no job" in doc.get("error", ""), "GET /api/jobs/%s: 404 (%s %s)" % (bad, status, doc))
status, doc, headers = alice.post("/api/jobs", {})
check(status == 405 and headers.get("Allow") == "GET", "POST /api/jobs: 405, Allow: GET (%s %s)" % (status, doc))
check(anon.get("/api/jobs")[0] == 401, "the jobs without a session: 401")

# ---------------------------------------------------------------- a group named .. (no path segment can carry it)
# Browsers resolve a ".." segment away, percent-encoded or not: the segment is left empty and the name is the
# parameter group (docs/console.md, "Names in paths"). Two messages parked in the DLQ of group "..".
broker = Resp()
broker.call("GROUP", "CREATE", "..", "dots", "FROM", "NOW", "MAXRETRY", "0")
for payload in ("dots-1", "dots-2"):
    mid = broker.call("SEND", "dots", payload, "KEY", payload)
    broker.call("PULL", "..", "dots", "COUNT", "1", "BLOCK", "5000")
    broker.call("NACK", "..", mid, "REASON", "parked in group ..")
broker.close()
status, doc, _ = alice.get("/api/dlq", {"group": ".."})
check(status == 200 and doc.get("group") == ".." and doc.get("total") == 2 and
      sorted(m["payload"] for m in doc.get("messages", [])) == ["dots-1", "dots-2"],
      "GET /api/dlq?group=..: the DLQ of group '..' (%s %s)" % (status, doc))
dots = {m["payload"]: m["id"] for m in doc.get("messages", [])} if status == 200 else {}
status, doc, _ = alice.get("/api/dlq//%s" % dots.get("dots-1"), {"group": ".."})
check(status == 200 and doc.get("payload") == "dots-1", "GET /api/dlq//ID?group=..: one of its messages (%s %s)" %
      (status, doc))
status, doc, _ = alice.post("/api/dlq//requeue", {"group": "..", "id": dots.get("dots-1")})
check(status == 200 and doc.get("group") == ".." and doc.get("requeued") == 1,
      "POST /api/dlq//requeue group=..: requeued (%s %s)" % (status, doc))
check(alice.get("/api/dlq", {"group": ".."})[1].get("total") == 1, "one message left in the DLQ of '..'")
status, doc, _ = alice.post("/api/dlq//requeue", {"id": dots.get("dots-2")})
check(status == 400 and "group: empty" in doc.get("error", ""),
      "an empty group segment without the parameter: 400 (%s %s)" % (status, doc))
status, doc, _ = alice.post("/api/topics//delete", {"topic": "."})
check(status == 404 and "'.'" in doc.get("error", ""), "POST /api/topics//delete topic=.: the topic '.' (none: 404) "
      "(%s %s)" % (status, doc))
status, d, _ = alice.get("/api/dlq")
check(status == 200 and any(g["group"] == "order-cancel" for g in d["groups"]) and
      any(g["group"] == ".." for g in d["groups"]), "GET /api/dlq without the parameter: still the list of groups")

# ---------------------------------------------------------------- messages
status, f, _ = alice.get("/api/msg", {"topic": "order-timeout", "key": "303"})
check(status == 200 and len(f["messages"]) == 1 and f["messages"][0]["state"] == "delayed",
      "FIND order-timeout 303: one delayed message: %s" % f)
if status == 200 and f["messages"]:
    mid = f["messages"][0]["id"]
    status, g, _ = alice.get("/api/msg/" + mid)
    check(status == 200 and g["payload"] == "303" and g["state"] == "delayed" and g["level"] > 0,
          "GET the message: payload, state, level: %s" % g)
check(alice.get("/api/msg/zz")[0] == 400, "GET a bad id: 400")
check(alice.get("/api/msg", {"topic": "order-timeout"})[0] == 400, "FIND without a key: 400")
status, doc, _ = bob.post("/api/msg/revoke", {"topic": "revoke-me", "key": "rv"})
check(status == 403, "a viewer may not revoke: %s" % status)
status, doc, _ = alice.post("/api/msg/revoke", {"topic": "revoke-me", "key": "rv"})
check(status == 200 and doc["revoked"] == 1 and doc["delayed"] == 1, "revoke by topic and key: %s" % doc)
status, f, _ = alice.get("/api/msg", {"topic": "revoke-me", "key": "rv"})
check(status == 200 and f["messages"] == [], "and it is gone")
check(log_contains("revoke topic=revoke-me key=rv revoked=1"), "the revoke is audited")

# ---------------------------------------------------------------- orders
status, d, _ = alice.get("/api/orders/overdue")
ids = [o["id"] for o in d.get("orders", [])] if status == 200 else []
check(ids == [301, 302, 303, 304], "overdue orders oldest first: %s" % ids)
late = {o["id"]: o["late"] for o in d.get("orders", [])}
check(late == {301: "no-message", 302: "in-dlq", 303: "delayed", 304: "not-sent"},
      "why each is late (lost, in the DLQ, delayed, never sent): %s" % late)
status, page, _ = alice.get("/api/orders/overdue", {"limit": 3})
check(status == 200 and len(page["orders"]) == 3 and page["next"], "a page of 3 with a cursor")
status, rest, _ = alice.get("/api/orders/overdue", {"limit": 3, "after": page["next"]})
check(status == 200 and [o["id"] for o in rest["orders"]] == [304] and rest["next"] is None, "and the rest")
check(alice.get("/api/orders/overdue", {"older_than": "soon"})[0] == 400, "older_than not a duration: 400")
check(alice.get("/api/orders/overdue", {"after": "bogus"})[0] == 400, "a bad cursor: 400")
status, d, _ = alice.get("/api/orders/overdue", {"older_than": "270s"})
check(status == 200 and [o["id"] for o in d["orders"]] == [301], "older_than 270s: only 301")
status, o, _ = alice.get("/api/orders/301")
check(status == 200 and o["status"] == "pending" and o["items"] and o["outbox"]["status"] == "sent",
      "order 301: items, outbox row: %s" % (o if status != 200 else o["items"]))
check(alice.get("/api/orders/99999")[0] == 404, "no such order: 404")
check(alice.get("/api/orders/abc")[0] == 400, "not an order id: 400")

status, doc, _ = bob.post("/api/orders/301/cancel", {"reason": "manual"})
check(status == 403, "a viewer may not cancel: %s" % status)
status, doc, _ = alice.post("/api/orders/301/cancel", {"reason": "manual"}, csrf=False)
check(status == 403, "cancel without the CSRF token: 403")
check(sql("SELECT status FROM orders WHERE id = 301") == "pending", "301 still pending after the refusals")
status, doc, _ = alice.post("/api/orders/301/cancel")
check(status == 200 and doc["outcome"] == "cancelled" and doc["order"]["cancel_reason"] == "manual",
      "alice cancels 301 by hand: %s" % (doc if status != 200 else doc["outcome"]))
check(sql("SELECT CONCAT(status, '/', cancel_reason) FROM orders WHERE id = 301") == "cancelled/manual",
      "in the database: cancelled with reason manual")
check(sql("SELECT status FROM order_timeout_msg WHERE order_id = 301") == "done", "its outbox row done")
status, doc, _ = alice.post("/api/orders/301/cancel")
check(status == 200 and doc["outcome"] == "not-pending", "again: not-pending, nothing changed")
check(alice.post("/api/orders/99999/cancel")[0] == 404, "cancel no such order: 404")
check(alice.post("/api/orders/302/cancel", {"reason": ""})[0] == 400, "an empty reason: 400")
check(log_contains("user=alice") and log_contains("order cancel id=301 reason=manual outcome=cancelled"),
      "the cancel is in the audit log with the user")
check(log_contains("refused /api/orders/301/cancel: missing or wrong CSRF token"), "and so is the refused one")

# ---------------------------------------------------------------- topics
broker = Resp()
for i in range(3):
    broker.call("SEND", "stray", "kept-%d" % i)  # no group: kept for retention
broker.close()
status, doc, _ = bob.get("/api/topics")
check(status == 200, "a viewer lists the topics: %s" % status)
status, doc, _ = alice.get("/api/topics")
topics = {t["topic"]: t for t in doc.get("topics", [])}
check(status == 200 and topics.get("stray", {}).get("retained") == 3 and topics["stray"]["groups"] == [] and
      topics.get("order-timeout", {}).get("groups") == ["order-cancel"] and doc["next"] is None,
      "GET /api/topics: counts and group names: %s" % {k: topics.get(k) for k in ("stray", "order-timeout")})
status, doc, _ = alice.post("/api/topics/stray/delete")
check(status == 400 and "TOPIC DEL topic PURGE deletes them" in doc.get("error", ""),
      "delete a topic with retained messages without purge: 400 with the broker's reason: %s" % doc)
status, job = alice.job("/api/topics/order-timeout/delete", {"purge": "1"})
check(status == 202 and job.get("state") == "failed" and job.get("status") == 400 and
      "1 group bound to it" in job.get("error", "") and job.get("result") is None,
      "purge a topic with a group: the job fails with the broker's reason, as 400: %s" % job)
check(log_contains("topic delete topic=order-timeout purge=1 failed: broker: ERR"),
      "and the failure is audited: %s" % job)
check(alice.post("/api/topics/stray/delete", {"purge": "yes"})[0] == 400, "purge=yes: 400")
status, doc, _ = alice.post("/api/topics/" + "t" * 300 + "/delete", {"purge": "1"})
check(status == 400 and doc.get("error") == "topic: longer than 255 bytes",
      "purge of a 300-byte topic: 400 before any job (never a command on a cut name): %s %s" % (status, doc))
status, job = alice.job("/api/topics/stray/delete", {"purge": "1"})
check(status == 202 and job.get("state") == "done" and job["result"] == {"topic": "stray", "deleted": 1},
      "delete with purge: a job, done: %s %s" % (status, job))
check(alice.post("/api/topics/stray/delete")[0] == 404, "delete it again: 404")
status, job = alice.job("/api/topics/stray/delete", {"purge": "1"})
check(job.get("state") == "failed" and job.get("status") == 404 and job.get("error") == "no topic 'stray'",
      "purge it again: the job fails 404: %s" % job)
check("stray" not in {t["topic"] for t in alice.get("/api/topics")[1]["topics"]}, "stray is gone from the list")
check(log_contains("topic delete topic=stray purge=1 deleted=1 (job"), "the delete is in the audit log with the user")

# ---------------------------------------------------------------- backup
status, o, _ = alice.get("/api/overview")
check(status == 200 and o["backup"]["last_status"] == "none" and not o["backup"]["in_progress"],
      "overview: no backup yet: %s" % o.get("backup"))
status, doc, _ = bob.post("/api/backup", {"name": "by-bob"})
check(status == 403, "viewer bob may not start a backup: %s" % status)
status, doc, _ = alice.post("/api/backup", {"name": "a/b"})
check(status == 400 and "may hold only letters, digits" in doc.get("error", ""),
      "a backup name with a slash: 400 with the broker's reason: %s %s" % (status, doc))
check(alice.post("/api/backup", {})[0] == 400, "a backup without a name: 400")
status, doc, _ = alice.post("/api/backup", {"name": "from-console"})
check(status == 202 and "Backup started" in doc.get("started", ""), "alice starts a backup: %s %s" % (status, doc))
deadline = time.time() + 60
while time.time() < deadline:
    o = alice.get("/api/overview")[1]
    if o["backup"]["name"] == "from-console" and o["backup"]["last_status"] == "ok" and not o["backup"]["in_progress"]:
        break
    time.sleep(0.2)
check(o["backup"]["last_status"] == "ok" and o["backup"]["last_ok_ms"] > 0 and o["backup"]["last_error"] == "",
      "the overview shows the whole copy: %s" % o["backup"])
check(os.path.isdir(os.path.join(ENV["HG_WORKDIR"], "backups", "from-console")), "the copy is in backup-dir")
status, doc, _ = alice.post("/api/backup", {"name": "from-console"})
check(status == 400 and "already exists" in doc.get("error", ""), "the same name again: 400: %s" % doc)
check(log_contains("backup name=from-console: Backup started"), "the backup is in the audit log with the user")

# ---------------------------------------------------------------- the rest
check(alice.get("/api/nothing")[0] == 404, "an unknown API: 404")
status, doc, headers = alice.post("/api/logout")
check(status == 200 and "Max-Age=0" in headers.get("Set-Cookie", ""), "logout clears the cookie")
check(alice.get("/api/session")[1] == {"logged_in": False}, "and ends the session")
check(alice.get("/api/overview")[0] == 401, "the old cookie opens nothing")
finish()
