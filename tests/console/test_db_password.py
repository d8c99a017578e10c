"""tests/console/test_db_password.py — mysql-password-file: a rotated MariaDB
password is read again at the reconnect.

Run by tests/integration/test_console against a console of its own that
connects to MariaDB as 'rotator' with mysql-password-file
(HG_MYSQL_PASSWORD_FILE, holding pw-one). The order pages answer; then the
password is rotated the way an operator does it — ALTER USER, the new one
written to the file, the console's connections killed (KILL CONNECTION) —
and the next order page answers 200 again (the console used to keep the
password read at start-up: every reconnect was refused, 1045, until a
restart), as does the overview's database half (the sampler's handle).
SIGHUP reads the file too: a password rotated without a connection killed
is taken before the next call. A file that cannot be read keeps the last
good password, warned about once.
"""
import os
import signal
import time

from console_test import Client, check, finish, log_contains, sql

PWFILE = os.environ["HG_MYSQL_PASSWORD_FILE"]


def log_count(text):
    with open(os.environ["HG_CONSOLE_LOG"], encoding="utf-8", errors="replace") as f:
        return f.read().count(text)


def write_password(text):
    with open(PWFILE, "w", encoding="utf-8") as f:
        f.write(text + "\n")


def kill_rotator():
    """KILL CONNECTION every connection of the MariaDB user rotator; how many."""
    ids = sql("SELECT GROUP_CONCAT(id) FROM information_schema.processlist WHERE user='rotator'")
    killed = 0
    for i in ids.split(",") if ids and ids != "NULL" else []:
        try:
            sql("KILL CONNECTION %d" % int(i))
            killed += 1
        except RuntimeError:
            pass  # it ended meanwhile
    return killed


def rotate(new):
    sql("ALTER USER 'rotator'@'localhost' IDENTIFIED BY '%s'" % new)
    write_password(new)
    return kill_rotator()


def db_ok(client, deadline_s=30):
    """The overview's database half, polled until ok (at most deadline_s): (ok, error)."""
    end = time.time() + deadline_s
    while True:
        status, o, _ = client.get("/api/overview")
        ok = status == 200 and o["db"]["ok"]
        if ok or time.time() > end:
            return ok, (o.get("db") if status == 200 else status)
        time.sleep(0.2)


bob = Client()
status, _, _ = bob.login("bob")
check(status == 200, "bob logs in: %s" % status)
status, o, _ = bob.get("/api/orders/306")
check(status == 200 and o["id"] == 306, "order 306 read as rotator with pw-one: %s %s" % (status, str(o)[:200]))
check(db_ok(bob)[0], "the overview's database half is up")

# Rotated: the server's password, the file, the connections cut.
killed = rotate("pw-two")
check(killed >= 1, "the console's MariaDB connections killed (%d)" % killed)
status, o, _ = bob.get("/api/orders/306")
check(status == 200 and o.get("id") == 306,
      "the next order page after the rotation answers with the new password: %s %s" % (status, str(o)[:200]))
status, d, _ = bob.get("/api/orders/overdue")
check(status == 200 and isinstance(d.get("orders"), list), "and the overdue list: %s %s" % (status, str(d)[:200]))
# The sampler's handle: connected again as rotator (the page's and its own: two), then its samples say ok.
end = time.time() + 30
while sql("SELECT COUNT(*) FROM information_schema.processlist WHERE user='rotator'") != "2" and time.time() < end:
    time.sleep(0.1)
ok, why = db_ok(bob)
check(ok and sql("SELECT COUNT(*) FROM information_schema.processlist WHERE user='rotator'") == "2",
      "the sampler's handle reconnected with the new password too; the overview's database half is up: %s" % why)
check(log_contains("holds another password"), "the new password is logged (not the password itself)")
check(not log_contains("pw-two"), "the password itself is never logged")

# SIGHUP reads the file too: rotated without a connection killed, the
# handles open again with the new one before their next call.
sql("ALTER USER 'rotator'@'localhost' IDENTIFIED BY 'pw-three'")
write_password("pw-three")
before = sql("SELECT GROUP_CONCAT(id ORDER BY id) FROM information_schema.processlist WHERE user='rotator'")
os.kill(int(os.environ["HG_CONSOLE_PID"]), signal.SIGHUP)
end = time.time() + 30
while log_count("holds another password") < 2 and time.time() < end:
    time.sleep(0.1)
check(log_count("holds another password") == 2, "SIGHUP: the rotated file read again, logged")
status, o, _ = bob.get("/api/orders/306")
check(status == 200, "the next order page answers: %s %s" % (status, str(o)[:200]))
end = time.time() + 30
while time.time() < end:
    after = sql("SELECT GROUP_CONCAT(id ORDER BY id) FROM information_schema.processlist WHERE user='rotator'")
    if after != "NULL" and not set(after.split(",")) & set(before.split(",")) and len(after.split(",")) == 2:
        break
    time.sleep(0.1)
check(not set(after.split(",")) & set(before.split(",")),
      "both handles connected again with pw-three (connections %s, before %s)" % (after, before))

# A file that cannot be read (removed: root reads a mode-0 file): the last
# good password stays, one warning, not one per attempt.
os.remove(PWFILE)
kill_rotator()
for _ in range(3):
    status, o, _ = bob.get("/api/orders/306")
check(status == 200, "no file: the last good password (pw-three) still connects: %s %s" % (status, str(o)[:200]))
warned = log_count("mysql-password-file: cannot read the password file")
check(warned == 1, "warned once, not per attempt (%d)" % warned)
write_password("pw-three")
os.chmod(PWFILE, 0o600)

finish()
