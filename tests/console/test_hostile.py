"""tests/console/test_hostile.py — hostile text through the console: what the
broker and MariaDB hold, and what a client sends, is shown as text and
answered with JSON, never run as HTML nor answered 500.

Run by tests/integration/test_console ("hostile"); needs only its set-up and
makes the rest itself: topics and groups whose names are markup
(<script>…, "><img/src=x/onerror=…>, javascript:…), a message in each with a
key and a payload holding markup, U+202E (right-to-left override), NUL and
other control bytes, bytes that are not UTF-8, an emoji and 64 KiB of text,
parked in its group's DLQ with a reason holding the same; in MariaDB an overdue
order whose outbox row's last_error is markup, and one cancelled by hand
through the API with a reason that is.

In Debian's chromium (headless, python3-selenium) as alice (admin): every
page that shows them — the overview, topics, the DLQ list, a group's DLQ, one
parked message, a message by id and by topic and key, the overdue orders and
one order, the error panel of a lookup whose id is markup — must fire no
alert, hold no element the server's text made (no img, no script but the
page's own, no on* attribute, no javascript: link), and not overflow the
window sideways; a key holding U+202E must not turn the text after it around.
Then the API called directly with hostile parameters: every reply valid JSON,
a bad parameter a 4xx naming it, never a 500, and the console still up.
"""
import json
import os
import tempfile
import urllib.parse

from console_test import BASE, PASSWORDS, Client, Resp, check, finish, sql

from selenium import webdriver
from selenium.common.exceptions import NoAlertPresentException, TimeoutException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import WebDriverWait

MARKUP = ['<script>alert(1)</script>', '"><img src=x onerror=alert(1)>', 'javascript:alert(1)']
# names are printable ASCII without blanks (msg_check_name)
NAMES = ['<script>alert(1)</script>', '"><img/src=x/onerror=alert(1)>', 'javascript:alert(1)']
RLO = "\u202e"
EMOJI = "\U0001F4A3"
# bytes: markup, RLO, NUL and other control bytes, not UTF-8 (a lone 0xff, a cut sequence, an overlong), an emoji
NASTY = lambda m: (m.encode() + b" " + RLO.encode() + b"evil\x00nul\x01\x07\x1b[31m\x7f \xff\xfe\xc3 \xc0\xaf "
                   + EMOJI.encode() + b" tail")
def ACTING(ch):
    """A character the page must show as an escape: it would act, not show."""
    o = ord(ch)
    return ((o < 0x20 and ch not in "\t\n") or 0x7f <= o <= 0x9f or o in (0x61c, 0x200e, 0x200f)
            or 0x202a <= o <= 0x202e or 0x2066 <= o <= 0x2069)


BIG = ("A" * 1000 + " ") * 64  # about 64 KiB, with breaks

# ------------------------------------------------------------------ set-up through the broker and MariaDB
broker = Resp()
made = []  # (topic, group, id, key bytes)
for i, name in enumerate(NAMES):
    group = "g" + name
    broker.call("GROUP", "CREATE", group, name, "FROM", "NOW", "MAXRETRY", "0")
    key = NASTY(MARKUP[i])
    payload = NASTY(MARKUP[i]) + b"\n" + BIG.encode() + NASTY(MARKUP[i])
    mid = broker.call("SEND", name, payload, "KEY", key)
    pulled = broker.call("PULL", group, name, "COUNT", "1", "BLOCK", "5000") or []
    if not check([m[0] for m in pulled] == [mid], "set-up: a message of topic %r delivered to %r" % (name, group)):
        finish()
    broker.call("NACK", group, mid, "REASON", NASTY(MARKUP[i]))
    made.append((name, group, mid, key))
FIND_KEY = MARKUP[1] + " " + RLO + "lave " + EMOJI
find_id = broker.call("SEND", NAMES[0], "findable", "KEY", FIND_KEY, "DELAY", "1h")
broker.close()

sql("INSERT INTO orders (id, user_id, status, created_at, expire_at) VALUES "
    "(9001, 7, 'pending', NOW(6) - INTERVAL 2 HOUR, NOW(6) - INTERVAL 1 HOUR), "
    "(9002, 7, 'pending', NOW(6) - INTERVAL 2 HOUR, NOW(6) - INTERVAL 1 HOUR)")
sql("SET NAMES utf8mb4; INSERT INTO order_timeout_msg (order_id, expire_at, status, attempts, next_attempt_at, last_error) VALUES "
    "(9001, NOW(6) - INTERVAL 1 HOUR, 'sent', 3, NOW(6), "
    "'\"><img src=x onerror=alert(1)> <script>alert(1)</script> \u202eevil \U0001F4A3')")

admin = Client()
check(admin.login("alice")[0] == 200, "alice logs in")
CANCEL_REASON = '"><img src=x onerror=alert(9)>' + RLO + "x"
st, doc, _ = admin.post("/api/orders/9002/cancel", {"reason": CANCEL_REASON})
check(st == 200 and doc.get("outcome") == "cancelled", "order 9002 cancelled with a reason that is markup (%s %r)"
      % (st, doc))

# ------------------------------------------------------------------ the JSON API: every reply is JSON


def valid_json(path, params=None, want=200):
    st, doc, _ = admin.get(path, params)
    ok = check(st == want and isinstance(doc, (dict, list)), "GET %s %r: %s, valid JSON (%s)"
               % (path, params, want, st if isinstance(doc, (dict, list)) else repr(doc)[:200]))
    return doc if ok else None


valid_json("/api/overview")
doc = valid_json("/api/topics")
if doc:
    names = [t["topic"] for t in doc["topics"]]
    check(all(n in names for n in NAMES), "the topics list holds the markup names as they are")
valid_json("/api/dlq")
for name, group, mid, key in made:
    d = valid_json("/api/dlq/" + urllib.parse.quote(group, safe=""))
    if d:
        m = d["messages"][0]
        check(m["key"].startswith(key.split(b" ")[0].decode()), "the DLQ's key holds the markup: %r" % m["key"][:40])
        check("\u00ff" in m["key"] or "\\u00ff" in json.dumps(m["key"]), "a byte 0xff comes as \\u00ff")
    valid_json("/api/dlq/" + urllib.parse.quote(group, safe="") + "/" + mid)
    valid_json("/api/msg/" + mid)
valid_json("/api/msg", {"topic": NAMES[0], "key": FIND_KEY})
valid_json("/api/orders/overdue", {"limit": 1000})
valid_json("/api/orders/9001")
valid_json("/api/orders/9002")

# ------------------------------------------------------------------ the browser
profile = tempfile.mkdtemp(prefix="chromium-", dir=os.environ.get("HG_WORKDIR"))
opts = webdriver.ChromeOptions()
opts.binary_location = "/usr/bin/chromium"
for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,800",
          "--user-data-dir=" + profile, "--no-first-run", "--disable-extensions"):
    opts.add_argument(a)
opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
driver.set_window_size(1280, 800)
wait = WebDriverWait(driver, 20)
ARTIFACTS = os.environ["HG_ARTIFACTS"]
os.makedirs(ARTIFACTS, exist_ok=True)

INJECTED = """
const bad = [];
for (const e of document.querySelectorAll('*')) {
  for (const a of e.attributes) if (/^on/i.test(a.name)) bad.push(e.tagName + '[' + a.name + ']');
  if (e.tagName === 'SCRIPT' && e.getAttribute('src') !== '/app.js') bad.push('script ' + e.outerHTML.slice(0, 80));
  if (e.tagName === 'IMG' && e.getAttribute('src') !== '/favicon.svg') bad.push('img ' + e.outerHTML.slice(0, 80));
  if (e.tagName === 'A' && /^\\s*javascript:/i.test(e.getAttribute('href') || '')) bad.push('a ' + e.outerHTML.slice(0, 80));
  if (e.tagName === 'IFRAME' || e.tagName === 'OBJECT' || e.tagName === 'EMBED') bad.push(e.tagName);
}
return bad;
"""


def page(path, expect, what):
    """Open path, wait until #main holds expect, and check it is harmless."""
    driver.get(BASE + path)
    try:
        wait.until(EC.text_to_be_present_in_element((By.CSS_SELECTOR, "#main"), expect))
        shown = True
    except TimeoutException:
        shown = False
    text = driver.execute_script("return document.getElementById('main').innerText")
    check(shown, "%s: %r shown on %s (%r)" % (what, expect, path, text[:300]))
    acting = sorted({"U+%04X" % ord(ch) for ch in text if ACTING(ch)})
    check(acting == [], "%s: no control or bidirectional character shown raw (%s)" % (what, ", ".join(acting)))
    try:
        driver.switch_to.alert.dismiss()
        check(False, "%s: an alert fired" % what)
    except NoAlertPresentException:
        check(True, "%s: no alert" % what)
    bad = driver.execute_script(INJECTED)
    check(bad == [], "%s: no element made of server text (%r)" % (what, bad))
    over = driver.execute_script("return [document.documentElement.scrollWidth, window.innerWidth]")
    check(over[0] <= over[1], "%s: the page does not overflow sideways (%d px wide, the window %d)" % (what, over[0], over[1]))
    driver.save_screenshot(os.path.join(ARTIFACTS, "hostile-" + what.replace(" ", "_").replace("/", "_") + ".png"))
    return text


try:
    driver.get(BASE + "/")
    wait.until(EC.visibility_of_element_located((By.CSS_SELECTOR, "#login-user")))
    driver.find_element(By.CSS_SELECTOR, "#login-user").send_keys("alice")
    driver.find_element(By.CSS_SELECTOR, "#login-password").send_keys(PASSWORDS["alice"])
    driver.find_element(By.CSS_SELECTOR, "#login-submit").click()
    wait.until(EC.visibility_of_element_located((By.CSS_SELECTOR, "#card-sends")))

    page("/", NAMES[0], "overview")
    page("/topics", NAMES[1], "topics")
    page("/dlq", NAMES[2], "dlq list")
    for i, (name, group, mid, key) in enumerate(made):
        seg = urllib.parse.quote(group, safe="")
        page("/dlq/" + seg, "tail", "dlq of group %d" % i)
        page("/dlq/" + seg + "/" + mid, "tail", "parked message %d" % i)
        page("/messages?id=" + mid, name, "message %d by id" % i)
        text = page("/dlq/" + seg + "/" + mid, "\\u202E", "parked message %d, its escapes" % i)
        check("\\u0000" in text and "\\u001B" in text, "parked message %d: NUL and ESC shown as \\u0000, \\u001B" % i)
    page("/messages?" + urllib.parse.urlencode({"topic": NAMES[0], "key": FIND_KEY}), find_id, "message by key")
    page("/messages?" + urllib.parse.urlencode({"topic": NAMES[0], "key": made[0][3]}), "NUL byte",
         "a key holding NUL: the lookup's error")
    page("/messages?id=" + urllib.parse.quote('"><img src=x onerror=alert(1)>'), "img", "message lookup error")
    page("/orders", "9001", "overdue orders")
    page("/orders/9001", "last_error" if False else "9001", "order 9001")
    page("/orders/9002", "9002", "order 9002")
    page("/orders/" + urllib.parse.quote('"><img src=x onerror=alert(1)>'), "img", "order lookup error")
    page("/dlq/" + urllib.parse.quote("<img src=x onerror=alert(1)>", safe=""), "invalid byte", "a group name refused")
finally:
    driver.quit()

# ------------------------------------------------------------------ hostile parameters straight to the API
LONG = "x" * 12000


def bad_param(method, path, params, name, want=400):
    if method == "GET":
        st, doc, _ = admin.get(path, params)
    else:
        st, doc, _ = admin.post(path, params)
    err = doc.get("error", "") if isinstance(doc, dict) else ""
    check(400 <= st < 500 and (name is None or name in err),
          "%s %s %r: a 4xx naming %r (%s %r)" % (method, path, {k: (v[:40] if isinstance(v, str) else v)
                                                              for k, v in (params or {}).items()}
                                                 if isinstance(params, dict) else params, name, st,
                                                 str(doc)[:200]))


g0 = "/api/dlq/" + urllib.parse.quote(made[0][1], safe="")
bad_param("GET", g0, {"count": "abc"}, "count")
bad_param("GET", g0, {"count": "-1"}, "count")
bad_param("GET", g0, {"count": "99999999999999999999999"}, "count")
bad_param("GET", g0, {"count": "1e3"}, "count")
bad_param("GET", g0, [("count", "1"), ("count", "2")], "count")
bad_param("GET", g0, {"after": LONG}, "after")
bad_param("GET", g0, {"after": "é" + EMOJI}, "after")
bad_param("GET", "/api/orders/overdue", {"limit": "abc"}, "limit")
bad_param("GET", "/api/orders/overdue", [("limit", "1"), ("limit", "2")], "limit")
bad_param("GET", "/api/orders/overdue", {"older_than": "soon"}, "older_than")
bad_param("GET", "/api/orders/overdue", {"after": "<img src=x onerror=alert(1)>"}, "after")
bad_param("GET", "/api/orders/" + urllib.parse.quote("é" + EMOJI), None, None)
bad_param("GET", "/api/orders/99999999999999999999999", None, None)
bad_param("GET", "/api/orders/-1", None, None)
bad_param("GET", "/api/msg/" + urllib.parse.quote("é" + EMOJI), None, None)
bad_param("GET", "/api/msg/" + urllib.parse.quote('"><img src=x onerror=alert(1)>'), None, None)
bad_param("GET", "/api/msg", {"topic": "t", "key": LONG}, "key")
bad_param("GET", "/api/msg", [("topic", "a"), ("topic", "b"), ("key", "k")], "topic")
bad_param("GET", "/api/msg", {"topic": "x" * 300, "key": "k"}, "topic")
bad_param("GET", "/api/topics", {"after": "x" * 300}, "topic name")
bad_param("GET", "/api/topics", [("after", "a"), ("after", "b")], "after")
bad_param("GET", "/api/jobs/abc", None, None)
bad_param("GET", "/api/jobs/99999999999999999999999", None, None)
bad_param("GET", "/api/dlq/" + urllib.parse.quote("x" * 300), None, "group")
bad_param("POST", "/api/orders/9001/cancel", {"reason": "r" * 65}, "reason")
bad_param("POST", "/api/orders/9001/cancel", [("reason", "a"), ("reason", "b")], "reason")
bad_param("POST", "/api/orders/9001/cancel?reason=a", {"reason": "b"}, "reason")
bad_param("POST", g0 + "/requeue", {"id": "<img src=x onerror=alert(1)>"}, "id")
bad_param("POST", g0 + "/drop", {"all": "1", "confirm": "lots"}, "confirm")
bad_param("POST", "/api/backup", {"name": "../" + EMOJI}, None)
bad_param("POST", "/api/backup", [("name", "a"), ("name", "b")], "name")
st, doc, _ = admin.get("/api/dlq", {"q": "y" * 15000})
check(st < 500, "a 15 KB query string: no 5xx (%s)" % st)
with open(os.environ["HG_CONSOLE_LOG"], "rb") as f:
    log = f.read()
check(b"\x1b" not in log and b"\x00" not in log and b"\r" not in log,
      "the console's log holds no ESC, NUL or CR from the hostile text")
st, doc, _ = admin.post("/api/orders/9001/cancel", {"reason": "hostile-done"})  # leave no overdue order behind
check(st == 200 and doc.get("outcome") == "cancelled", "order 9001 cancelled at the end (%s)" % st)
st, doc, _ = admin.get("/api/session")
check(st == 200 and doc.get("logged_in"), "the console is still up and the session live (%s)" % st)
finish()
