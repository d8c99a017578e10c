"""tests/console/test_browser.py — hourglass-console in a real browser:
Debian's chromium, headless, driven by python3-selenium through
chromium-driver. Run by tests/integration/test_console, alone or after the
other scripts: it needs only that harness's set-up (orders 301-304 overdue,
303 pending with its message delayed 1 h, dlq-b parked in the DLQ of
order-cancel, the compensator) and makes the rest itself through the
broker (the group "." with a parked message, the topic browser-stray),
never what another script left.

As a person would: the login page without the menu or "Log out"; log in as alice, a real user of the broker (role
admin); the overview with live, non-zero figures from the
broker and MariaDB; requeue a DLQ message; find a message by topic and key;
cancel an overdue order by hand and see it cancelled in the database with
reason manual; open the DLQ of group "." (a name no path segment can
carry, as ".."; the page treats both alike) and requeue its message; an address with a bad % escape says so. A screenshot of every page at 1280x800 and of two in a narrow
window (390x844) goes to HG_ARTIFACTS; the page must not overflow the narrow
window sideways; the browser's console log must hold no error.
"""
import os
import re
import tempfile
import threading
import time

from console_test import BASE, PASSWORDS, Resp, check, finish, sql, traffic_until

from selenium import webdriver
from selenium.common.exceptions import TimeoutException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import WebDriverWait

ARTIFACTS = os.environ["HG_ARTIFACTS"]
os.makedirs(ARTIFACTS, exist_ok=True)

# What this script needs beyond the harness's set-up, made here: a message parked in the DLQ of group "." (its
# own group and topic: test_api.py's group ".." may or may not exist, and is none of this script's business).
broker = Resp()
broker.call("GROUP", "CREATE", ".", "browser-dot", "FROM", "NOW", "MAXRETRY", "0")
dot_id = broker.call("SEND", "browser-dot", "dot-1", "KEY", "dot-1")
pulled = broker.call("PULL", ".", "browser-dot", "COUNT", "1", "BLOCK", "5000") or []
if not check([m[0] for m in pulled] == [dot_id], "set-up: dot-1 delivered to group '.' (%r)" % pulled):
    finish()
broker.call("NACK", ".", dot_id, "REASON", "parked in group .")
broker.close()

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
console_errors = []


def collect_log():
    for entry in driver.get_log("browser"):
        if entry.get("level") in ("SEVERE", "ERROR"):
            console_errors.append(entry.get("message"))


def shot(name):
    path = os.path.join(ARTIFACTS, name + ".png")
    driver.save_screenshot(path)
    print("     screenshot " + path, flush=True)
    collect_log()


def css(selector):
    return driver.find_element(By.CSS_SELECTOR, selector)


def wait_css(selector, what):
    try:
        return wait.until(EC.visibility_of_element_located((By.CSS_SELECTOR, selector)))
    except TimeoutException:
        check(False, "%s: no %s on %s" % (what, selector, driver.current_url))
        shot("failed-" + selector.strip("#.").replace(" ", "_"))
        return None


def wait_text(selector, text, what):
    try:
        wait.until(EC.text_to_be_present_in_element((By.CSS_SELECTOR, selector), text))
        return True
    except TimeoutException:
        found = driver.find_elements(By.CSS_SELECTOR, selector)
        check(False, "%s: %r not in %s (%r)" % (what, text, selector, found[0].text if found else None))
        return False


def text_of(selector):
    """The text of the element now, read in one script call: the overview
    re-renders itself every 5 s, so a held element reference may go stale."""
    return driver.execute_script("const e = document.querySelector(arguments[0]); return e ? e.innerText : '';",
                                 selector)


def number(selector):
    """The figure of an overview card, as an int (-1 when it is not one)."""
    try:
        return int(text_of(selector + " .value").replace(",", ""))
    except ValueError:
        return -1


def rates():
    """The last sends/deliveries/acks per second in the rates chart's legend."""
    text = text_of("#rates")
    out = {}
    for name in ("sends", "deliveries", "acks"):
        m = re.search(name + r"/s: ([0-9.,]+)", text)
        out[name] = float(m.group(1).replace(",", "")) if m else -1.0
    return out


def no_sideways_overflow(what):
    wide = driver.execute_script("return document.documentElement.scrollWidth - window.innerWidth")
    check(wide <= 1, "%s: the page fits the window's width (overflow %spx)" % (what, wide))


try:
    # ------------------------------------------------------------ login
    driver.get(BASE + "/")
    if wait_css("#login-user", "the login form"):
        shot("01-login")
        # logged out: no menu, no "Log out" (their hidden attribute must win over the stylesheet's display rules)
        check(not css("#nav").is_displayed(), "the login page shows no menu")
        check(not css("#logout").is_displayed() and not css("#who").is_displayed(),
              "the login page shows no \"Log out\"")
        css("#login-user").send_keys("alice")
        css("#login-password").send_keys(PASSWORDS["alice"])
        css("#login-submit").click()

    # ------------------------------------------------------------ overview (with live traffic)
    stop_traffic = threading.Event()
    traffic = threading.Thread(target=traffic_until, args=(stop_traffic,), daemon=True)
    traffic.start()
    if wait_css("#card-sends", "the overview after login"):
        check("alice" in text_of("#who-name"), "logged in as alice")
        check(css("#nav").is_displayed() and css("#logout").is_displayed(), "logged in: the menu and \"Log out\"")
        deadline = time.time() + 30
        while time.time() < deadline and min(rates().values()) <= 0:
            time.sleep(0.5)  # the page refreshes itself every 5 s
        wait_css("#card-sends", "the refreshed overview")
        check(min(rates().values()) > 0, "sends, deliveries and acks per second are live: %s" % rates())
        figures = {k: number("#card-" + k) for k in ("sends", "deliveries", "acks", "pending", "overdue", "dlq")}
        check(all(v > 0 for v in figures.values()), "the overview shows live, non-zero figures: %s" % figures)
        check(len(driver.find_elements(By.CSS_SELECTOR, "#rates polyline")) >= 1, "the rates chart draws lines")
        check(len(driver.find_elements(By.CSS_SELECTOR, "#depth rect")) >= 1, "the level depth bars")
        check(len(driver.find_elements(By.CSS_SELECTOR, "#histogram rect")) >= 1, "the lateness histogram")
        check("past expiry" in text_of("#alerts"), "the alerts name the overdue orders")
        comp = text_of("#compensator-table")
        check("relay" in comp and "failed" in comp and "monitor" in comp and " ago" in comp,
              "the compensator's layers with their last run and outcome: %r" % comp)
        # Back up now: the name and the click in one script call (the page re-renders itself every 5 s)
        check("Back up now" in text_of("#backup"), "the admin sees the backup panel: %r" % text_of("#backup"))
        driver.execute_script("const n = document.querySelector('#backup-name'); n.value = 'from-browser';"
                              "n.dispatchEvent(new Event('input')); document.querySelector('#backup-now').click();")
        if wait_text("#backup-result", "Backup started", "Back up now"):
            deadline = time.time() + 30
            while time.time() < deadline and not ("from-browser" in text_of("#backup-status")
                                                   and "ok" in text_of("#backup-status")):
                time.sleep(0.5)
            check("from-browser" in text_of("#backup-status") and "last whole copy" in text_of("#backup-status"),
                  "the overview shows the copy's outcome: %r" % text_of("#backup-status"))
        shot("02-overview-1280x800")
        driver.set_window_size(1280, 1700)
        shot("02b-overview-whole-page")
        driver.set_window_size(1280, 800)
    stop_traffic.set()
    traffic.join(10)

    # ------------------------------------------------------------ DLQ: requeue one
    driver.find_element(By.CSS_SELECTOR, "#nav a[data-view=dlq]").click()
    if wait_css("#dlq-groups", "the DLQ groups"):
        shot("03-dlq-groups")
        driver.find_element(By.LINK_TEXT, "order-cancel").click()
    if wait_css("#dlq-table", "the DLQ of order-cancel"):
        before = len(driver.find_elements(By.CSS_SELECTOR, "#dlq-table tbody tr"))
        rows = [r for r in driver.find_elements(By.CSS_SELECTOR, "#dlq-table tbody tr") if "dlq-b" in r.text]
        check(len(rows) == 1 and "test: parked b" in rows[0].text, "dlq-b is listed with its reason")
        shot("04-dlq-order-cancel")
        if rows:
            rows[0].find_element(By.CSS_SELECTOR, "input[type=checkbox]").click()
            css("#requeue-selected").click()
            if wait_text("#dlq-status", "Requeued 1 message", "requeue dlq-b"):
                after = len(driver.find_elements(By.CSS_SELECTOR, "#dlq-table tbody tr"))
                check(after == before - 1, "the DLQ lists one message fewer (%d -> %d)" % (before, after))
                check(all("dlq-b" not in r.text for r in driver.find_elements(By.CSS_SELECTOR, "#dlq-table tbody tr")),
                      "dlq-b left the DLQ")
                shot("05-dlq-requeued")

    # ------------------------------------------------------------ topics: delete one with its retained messages
    broker = Resp()
    for i in range(2):
        broker.call("SEND", "browser-stray", "kept-%d" % i)
    broker.close()
    driver.find_element(By.CSS_SELECTOR, "#nav a[data-view=topics]").click()
    if wait_css("#topics-table", "the topics"):
        check("order-timeout" in text_of("#topics-table") and "order-cancel" in text_of("#topics-table"),
              "the topics with their groups are listed")
        shot("05b-topics")
        rows = [r for r in driver.find_elements(By.CSS_SELECTOR, "#topics-table tbody tr")
                if r.get_attribute("data-topic") == "browser-stray"]
        check(len(rows) == 1 and "Delete with messages" in rows[0].text, "browser-stray can be deleted with its messages")
        if rows:
            rows[0].find_element(By.CSS_SELECTOR, "button").click()
            if wait_css("#dialog-ok", "the confirmation"):
                check("2 messages" in text_of("#dialog-text"), "the confirmation names the count: %r"
                      % text_of("#dialog-text"))
                css("#dialog-ok").click()
                if wait_text("#topics-status", "Deleted topic browser-stray", "delete browser-stray"):
                    check("browser-stray" not in text_of("#topics-table"), "browser-stray left the list")
    # the purge ran as a console job: the overview lists it with its outcome
    driver.find_element(By.CSS_SELECTOR, "#nav a[data-view=overview]").click()
    if wait_text("#jobs-table", "delete topic browser-stray with its retained messages", "the console's jobs"):
        row = [r for r in driver.find_elements(By.CSS_SELECTOR, "#jobs-table tbody tr")
               if "browser-stray" in r.text]
        check(len(row) == 1 and "done" in row[0].text and "deleted 1" in row[0].text and "alice" in row[0].text,
              "the overview's jobs panel shows the purge, done, by alice: %r" % [r.text for r in row])
        driver.execute_script("arguments[0].scrollIntoView()", css("#jobs"))
        shot("05c-overview-jobs")

    # ------------------------------------------------------------ messages: find by key
    driver.find_element(By.CSS_SELECTOR, "#nav a[data-view=messages]").click()
    if wait_css("#find-form", "the message finder"):
        css("#find-topic").send_keys("order-timeout")
        css("#find-key").send_keys("303")
        css("#find-submit").click()
        if wait_css("#msg-table", "the messages of key 303"):
            text = css("#msg-table").text
            check("delayed" in text and "order-timeout" in text, "key 303: its message, delayed")
            check("topic=order-timeout" in driver.current_url and "key=303" in driver.current_url,
                  "the search is a link: %s" % driver.current_url)
            shot("06-messages-find")

    # ------------------------------------------------------------ orders: cancel by hand
    driver.find_element(By.CSS_SELECTOR, "#nav a[data-view=orders]").click()
    if wait_css("#overdue-table", "the overdue orders"):
        text = css("#overdue-table").text
        check("303" in text and "304" in text and "not-sent" in text, "the overdue list with why")
        shot("07-orders-overdue")
        driver.find_element(By.CSS_SELECTOR, "#overdue-table tr[data-order='303'] a").click()
    if wait_css("#cancel-order", "order 303's page with its cancel button"):
        check("delayed" in css("main").text, "order 303 says its message is delayed")
        shot("08-order-303")
        css("#cancel-order").click()
        wait_css("#dialog-ok", "the confirmation")
        check("Cancel order 303" in css("#dialog-text").text, "the confirmation names the order")
        shot("09-order-confirm")
        css("#dialog-ok").click()
        if wait_text("#order-status", "Outcome: cancelled", "the outcome"):
            check(css("#order-reason").text == "manual", "the page shows reason manual")
            check(css("#order-status-value").text == "cancelled", "and status cancelled")
            shot("10-order-303-cancelled")
        check(sql("SELECT CONCAT(status, '/', cancel_reason) FROM orders WHERE id = 303") == "cancelled/manual",
              "order 303 is cancelled in the database with reason manual")

    # ------------------------------------------------------------ a link opens its view directly
    driver.get(BASE + "/dlq/order-cancel")
    wait_css("#dlq-table", "a direct link to /dlq/order-cancel")

    # ------------------------------------------------------------ a group named . (dot-1 parked in its DLQ, above)
    driver.get(BASE + "/dlq")
    if wait_css("#dlq-groups", "the DLQ groups"):
        links = [a for a in driver.find_elements(By.CSS_SELECTOR, "#dlq-groups a") if a.text == "."]
        check(len(links) == 1, "the group '.' is listed")
        if links:
            links[0].click()
            if wait_text("#main h1", "DLQ of .", "the DLQ of group '.' opens (a '.' segment would resolve away)"):
                check(text_of("#main h1").strip().endswith("DLQ of .") and "dot-1" in text_of("#dlq-table") and
                      re.search(r"[?&]group=\.(&|$)", driver.current_url) is not None,
                      "it lists dot-1, at %s" % driver.current_url)
                shot("05d-dlq-dot")
                driver.find_element(By.CSS_SELECTOR, "#dlq-table tbody td.mono a").click()
                if wait_css("#requeue-one", "the parked message of group '.'"):
                    check("dot-1" in text_of("#main"), "its page shows dot-1")
                    css("#requeue-one").click()
                    wait_text("#main", "Requeued 1 message", "requeue it from the DLQ of group '.'")
    # ------------------------------------------------------------ a bad % escape in the address
    driver.get(BASE + "/orders/%E0%A4%A")
    wait_text("#main", "a bad % escape in the address", "a bad % escape: a page that says so, never a blank one")

    # ------------------------------------------------------------ a narrow window
    driver.set_window_size(390, 844)
    driver.get(BASE + "/")
    if wait_css("#card-sends", "the overview in a narrow window"):
        time.sleep(0.5)
        no_sideways_overflow("overview at 390px")
        shot("11-overview-narrow")
    driver.get(BASE + "/orders/302")
    if wait_css("#order-detail", "order 302 in a narrow window"):
        no_sideways_overflow("order page at 390px")
        shot("12-order-narrow")
    driver.get(BASE + "/orders")
    if wait_css("main h1", "the orders in a narrow window"):
        no_sideways_overflow("orders at 390px")
        shot("13-orders-narrow")

    collect_log()
    check(not console_errors, "no errors in the browser's console: %s" % console_errors)
finally:
    driver.quit()
finish()
