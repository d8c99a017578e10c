"""tests/console/test_session_ttl.py — the session cookie lives as long as
the session: against a console with session-ttl 3s, in a cookie jar that
honours Max-Age as a browser does.

- The login's cookie has Max-Age=3.
- Every reply to a request of the live session sends the cookie again with
  Max-Age=3 (the use moved the server's expiry), so a session used every
  second is still logged in 6 s after its login: the jar still holds the
  cookie, and the server the session.
- Unused for longer than 3 s, it ends (the server says not logged in even
  to the old cookie sent by hand, and clears that cookie: Max-Age=0).

Run by tests/integration/test_console (its "session ttl" test) against the
second console it starts with --session-ttl 3s.
"""
import json
import time
import urllib.request

from console_test import BASE, Client, check, finish

bob = Client()
status, doc, headers = bob.login("bob")
cookie = headers.get("Set-Cookie", "")
check(status == 200 and "Max-Age=3;" in cookie + ";", "the login's cookie has Max-Age=3 (%s)" % cookie.split(";", 1)[-1])
token = bob.session_token()
t0 = time.time()
lost_at, not_resent = None, []
while time.time() - t0 < 6.5 and lost_at is None:
    time.sleep(1)
    status, doc, headers = bob.get("/api/session")
    if not (status == 200 and doc.get("logged_in") is True):
        lost_at = time.time() - t0
    elif not ("hg_session=%s" % token in headers.get("Set-Cookie", "") and "Max-Age=3" in headers.get("Set-Cookie", "")):
        not_resent.append(round(time.time() - t0, 1))
check(lost_at is None, "a session used every second is still logged in %.1f s after its login (session-ttl 3s): "
      "the browser kept the cookie (lost %s)" % (time.time() - t0, "at %.1f s" % lost_at if lost_at else "never"))
check(not not_resent, "every reply to the live session sent the cookie again with Max-Age=3 (not at %s s)" % not_resent)
status, doc, headers = bob.get("/api/nothing")
check(status == 404 and "Max-Age=3" in headers.get("Set-Cookie", ""),
      "an error reply to the live session sends the cookie again too (%s)" % status)

time.sleep(4)
status, doc, _ = bob.get("/api/session")
check(status == 200 and doc == {"logged_in": False}, "unused for 4 s, the session has ended (%s)" % doc)
req = urllib.request.Request(BASE + "/api/session", headers={"Cookie": "hg_session=%s" % token})
with urllib.request.urlopen(req, timeout=30) as res:
    doc = json.loads(res.read())
    resent = res.headers.get("Set-Cookie") or ""
check(doc == {"logged_in": False} and resent.startswith("hg_session=;") and "Max-Age=0" in resent.split("; "),
      "the server ended it too: its old cookie sent by hand opens nothing, and is cleared (%s, Set-Cookie: %s)" %
      (doc, resent))
finish()
