"""tests/console/test_sessions.py — who a session is, after its login.

- A user name that spells the broker's "no users" reply (anyone can type
  one) is a wrong login, never the no-users fallback.
- A login posted from another site (the browser's Sec-Fetch-Site; from an
  older browser, an Origin that is not the console's) is refused: login CSRF.
- A login ends the session the browser held before (session rotation).
- Roles change under a session: alice (admin) is demoted to viewer in the
  broker's users file (SIGHUP): her open session's next action, the manual
  cancel that never reaches the broker, is refused 403; removed from the
  file, her session ends (401) at its next action, and her sessions that
  only poll the overview or the jobs end within the console's roles-recheck
  (HG_ROLES_RECHECK_S: the case starts its console with a short one).
  The file is put back.
- Sessions per user: a tenth login of bob ends his least recently used
  session; the table never fills, alice still logs in.
- A Cookie header with a stale hg_session before the live one finds the
  live one. A stale cookie alone is cleared (Set-Cookie Max-Age=0) by its
  401 and by GET /api/session's {"logged_in":false}.
- The DLQ drop's confirmation is a whole number ("2abc" is refused).
- An audit line stays one line whatever the operator typed.
- A login opens one broker connection (the broker's
  total_connections_received grows by one): its AUTH is the session
  connection's own.

Run by tests/integration/test_console after its set-up (HG_USERS_FILE and
its variants .alice-viewer and .no-alice, HG_BROKER_PID for the SIGHUP,
HG_ROLES_RECHECK_S the console's roles-recheck in seconds).
"""
import json
import os
import shutil
import signal
import time
import urllib.request

from console_test import BASE, ENV, Client, Resp, check, finish, log_contains, sql

USERS = ENV["HG_USERS_FILE"]
BROKER_PID = int(ENV["HG_BROKER_PID"])


def use_users(variant):
    """Put the users file variant ("" for the original) in place and SIGHUP
    the broker."""
    src = USERS + ".orig" if variant == "" else USERS + "." + variant
    tmp = USERS + ".tmp"
    shutil.copyfile(src, tmp)
    os.replace(tmp, USERS)
    os.kill(BROKER_PID, signal.SIGHUP)


def wait_login(user, want, deadline_s=30):
    """Poll fresh logins of user until want(status, doc) holds; the last
    (status, doc)."""
    end = time.time() + deadline_s
    while True:
        status, doc, _ = Client().login(user)
        if want(status, doc) or time.time() > end:
            return status, doc
        time.sleep(0.1)


# ---------------------------------------------------------------- the no-users reply typed as a name
for name in ["without any users", "x' failed: ERR AUTH called without any users configured (see users-file)"]:
    status, doc, headers = Client().login(name, "whatever")
    check(status == 401 and doc.get("error") == "login refused: wrong user name or password" and
          "Set-Cookie" not in headers,
          "a user named %r: a wrong login, not the no-users fallback (%s %s)" % (name[:40], status, doc))

# ---------------------------------------------------------------- login from another site
for site in ["cross-site", "same-site"]:
    status, doc, headers = Client().login("alice", headers={"Sec-Fetch-Site": site})
    check(status == 403 and "Set-Cookie" not in headers,
          "a login posted from another site (Sec-Fetch-Site: %s): 403, no cookie (%s %s)" % (site, status, doc))
status, _, _ = Client().login("alice", headers={"Sec-Fetch-Site": "same-origin"})
check(status == 200, "the console's own page (Sec-Fetch-Site: same-origin) logs in (%s)" % status)
# a browser too old for Sec-Fetch-Site still sends Origin: a cross-site form post, as such a browser makes it
HOSTPORT = BASE.split("://", 1)[1]
for origin in ["http://evil.example", "http://evil.example:" + HOSTPORT.rsplit(":", 1)[1], "null",
               "https://" + HOSTPORT + ".evil.example"]:
    status, doc, headers = Client().login("alice", headers={"Origin": origin})
    check(status == 403 and "Set-Cookie" not in headers and "Origin" in (doc or {}).get("error", ""),
          "a login form posted from Origin %s (no Sec-Fetch-Site): 403 naming it, no cookie (%s %s)" %
          (origin, status, doc))
status, _, _ = Client().login("alice", headers={"Origin": BASE})
check(status == 200, "a login whose Origin is the console's own (%s) logs in (%s)" % (BASE, status))
check(log_contains("posted from http://evil.example (Origin)"), "the refused Origin is audited")

# ---------------------------------------------------------------- sessions per user
# (before the roles change: its three wrong passwords come early in the broker's count of this address's
# failures, each held back 0.8-3.2 s rather than 5 s)
bobs = []
for i in range(10):
    c = Client()
    status, _, _ = c.login("bob")
    check(status == 200, "bob's login %d: 200 (%s)" % (i + 1, status))
    bobs.append(c)
    time.sleep(0.002)  # distinct last-use times
alive = [c.get("/api/session")[1].get("logged_in") for c in bobs]
check(alive[:2] == [False, False] and all(alive[2:]),
      "ten logins of bob: his two least recently used sessions ended, eight live (%s)" % alive)
check(log_contains("session of bob ended: a new login of the same user"), "the ending is logged")
# a wrong password typed for bob ends none of his sessions
live_before = [c.get("/api/session")[1].get("logged_in") for c in bobs]
for i in range(3):
    status, _, _ = Client().login("bob", "wrong-password")
    check(status == 401, "a wrong password for bob: 401 (%s)" % status)
live_after = [c.get("/api/session")[1].get("logged_in") for c in bobs]
check(live_after == live_before, "failed logins as bob end none of his sessions (%s, before %s)" %
      (live_after, live_before))
for i in range(40):
    Client().login("bob")
status, _, _ = Client().login("alice")
check(status == 200, "after 50 logins of bob, alice still logs in (%s)" % status)

# ---------------------------------------------------------------- roles change under a session
shutil.copyfile(USERS, USERS + ".orig")
alice = Client()
status, doc, _ = alice.login("alice")
check(status == 200 and doc["roles"] == ["admin"], "alice logs in as admin (%s %s)" % (status, doc))
# two more sessions of alice that only ever ask for what never reaches the broker: the overview, the jobs
watchers = {"/api/overview": Client(), "/api/jobs": Client()}
for w in watchers.values():
    check(w.login("alice")[0] == 200, "alice logs in again (a session that only watches)")
ROLES_RECHECK_S = float(ENV["HG_ROLES_RECHECK_S"])  # the console's --roles-recheck
# a poll comes every second, and a loaded machine is slow to answer: the margin a session may end past the period
RECHECK_MARGIN_S = 5
order = 305
before = sql("SELECT status FROM orders WHERE id = %d" % order)
try:
    use_users("alice-viewer")
    status, doc = wait_login("alice", lambda s, d: s == 200 and d.get("roles") == ["viewer"])
    check(status == 200 and doc.get("roles") == ["viewer"], "after the reload a fresh login of alice is a viewer")
    t0 = time.time()
    status, doc, _ = alice.post("/api/orders/%d/cancel" % order)
    check(status == 403 and "role admin" in doc.get("error", ""),
          "the demoted admin's open session: the manual cancel is refused 403 (%s %s)" % (status, doc))
    check(sql("SELECT status FROM orders WHERE id = %d" % order) == before, "order %d is as it was" % order)
    check(time.time() - t0 < 5, "the roles were asked again in %.2f s" % (time.time() - t0))
    status, doc, _ = alice.get("/api/session")
    check(status == 200 and doc.get("roles") == ["viewer"] and not doc.get("can_act"),
          "her session now says viewer (%s)" % doc)
    check(log_contains("session of alice: roles viewer now (were admin)"), "the change of roles is logged")

    use_users("no-alice")
    status, doc = wait_login("alice", lambda s, d: s == 401)
    removed = time.time()  # each session's last roles check was before this: its next is due roles-recheck after
    check(status == 401, "after the next reload alice cannot log in (%s)" % status)
    status, doc, _ = alice.post("/api/orders/%d/cancel" % order)
    check(status == 401 and "no longer accepts" in doc.get("error", ""),
          "the removed user's open session ends at its next action: 401 (%s %s)" % (status, doc))
    status, doc, _ = alice.get("/api/session")
    check(status == 200 and doc == {"logged_in": False}, "and it is gone (%s)" % doc)
    check(log_contains("session of alice ended: the broker no longer accepts the user"), "the end is logged")
    check(sql("SELECT status FROM orders WHERE id = %d" % order) == before, "order %d is still as it was" % order)
    # the removed user's sessions that only poll the overview or the jobs (as the page does, every 5 s) end too,
    # at the first request after their roles are due to be asked again
    ended = {}
    end = removed + ROLES_RECHECK_S + 20
    while len(ended) < len(watchers) and time.time() < end:
        for path, w in watchers.items():
            if path not in ended:
                status, doc, _ = w.get(path)
                if status != 200:
                    ended[path] = (status, doc, time.time() - removed)
        time.sleep(1)
    for path, w in watchers.items():
        status, doc, after = ended.get(path, (200, None, time.time() - removed))
        check(status == 401 and "no longer accepts" in (doc or {}).get("error", ""),
              "a removed user's session polling %s ends: 401 (%s %s)" % (path, status, doc))
        check(after <= ROLES_RECHECK_S + RECHECK_MARGIN_S,
              "it ended %.1f s after the broker refused alice, within roles-recheck %g s and %d s of margin" %
              (after, ROLES_RECHECK_S, RECHECK_MARGIN_S))
        check(w.get("/api/session")[1] == {"logged_in": False}, "and that session is gone")
finally:
    use_users("")
status, doc = wait_login("alice", lambda s, d: s == 200 and d.get("roles") == ["admin"])
check(status == 200 and doc.get("roles") == ["admin"], "the users file put back: alice is an admin again")

# ---------------------------------------------------------------- two hg_session cookies
fresh = Client()
fresh.login("bob")
token = fresh.session_token()
req = urllib.request.Request(BASE + "/api/session",
                             headers={"Cookie": "hg_session=%s; hg_session=%s" % ("0" * 64, token)})
with urllib.request.urlopen(req, timeout=30) as res:
    doc = json.loads(res.read())
check(doc.get("logged_in") is True and doc.get("user") == "bob",
      "a stale hg_session before the live one: the live one is found (%s)" % doc)

# ---------------------------------------------------------------- a login ends the browser's previous session
browser = Client()
browser.login("bob")
old_token = browser.session_token()
status, doc, _ = browser.login("carol")
new_token = browser.session_token()
check(status == 200 and new_token != old_token, "a second login in the same browser: a new session id")
req = urllib.request.Request(BASE + "/api/session", headers={"Cookie": "hg_session=%s" % old_token})
with urllib.request.urlopen(req, timeout=30) as res:
    doc = json.loads(res.read())
    cleared = res.headers.get("Set-Cookie", "")
check(doc == {"logged_in": False}, "and the session it held before is ended, not left valid (%s)" % doc)
check(cleared.startswith("hg_session=;") and "Max-Age=0" in cleared.split("; ") and "Path=/" in cleared.split("; "),
      "GET /api/session with that stale cookie clears it (Set-Cookie: %s)" % cleared)

# ---------------------------------------------------------------- a stale cookie's 401 clears it
anon = Client()
status, doc, rh = anon.get("/api/overview", headers={"Cookie": "hg_session=%s" % old_token})
cleared = rh.get("Set-Cookie", "")
check(status == 401 and cleared.startswith("hg_session=;") and "Max-Age=0" in cleared.split("; ") and
      "Path=/" in cleared.split("; ") and "Secure" not in cleared.split("; "),
      "a stale hg_session's 401 clears it: Set-Cookie with Max-Age=0 (%s %s)" % (status, cleared))
status, doc, rh = anon.get("/api/overview")
check(status == 401 and rh.get("Set-Cookie") is None,
      "a 401 without any cookie sets none (%s %s)" % (status, rh.get("Set-Cookie")))
check(browser.get("/api/session")[1].get("user") == "carol", "the new one is carol's")
check(log_contains("session of bob ended: a new login (of carol) from its browser"), "the end is logged")

# ---------------------------------------------------------------- the drop's confirmation, the audit line
admin = Client()
admin.login("alice")
status, doc, _ = admin.get("/api/dlq/junk2")
total = doc.get("total", 0) if status == 200 else 0
status, doc, _ = admin.post("/api/dlq/junk2/drop", {"all": "1", "confirm": "%dabc" % total})
check(status == 409, "confirm=%dabc is not a number: 409 (%s %s)" % (total, status, doc))
status, doc, _ = admin.post("/api/orders/999999/cancel", {"reason": "x\naudit: user=root forged"})
check(status == 404, "a cancel (of no order) with a newline in its reason: 404 (%s)" % status)
with open(ENV["HG_CONSOLE_LOG"], encoding="utf-8", errors="replace") as f:
    forged = [line for line in f if line.startswith("audit: user=root forged")]
check(not forged and log_contains("reason=x?audit: user=root forged"),
      "the audit line stays one line (the newline written as ?)")

# ---------------------------------------------------------------- one broker connection per login
def connections_received(r):
    info = r.call("INFO")
    for line in info.splitlines():
        if line.startswith("total_connections_received:"):
            return int(line.split(":", 1)[1])
    return None


broker = Resp()
before = connections_received(broker)
status = Client().login("bob")[0]
after = connections_received(broker)
broker.close()
check(status == 200 and before is not None and after - before == 1,
      "a login opens one broker connection, the session's (AUTH with the credentials on it): %s connections for "
      "it (%s)" % (None if before is None else after - before, status))

finish()
