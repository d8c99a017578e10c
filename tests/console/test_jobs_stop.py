"""tests/console/test_jobs_stop.py — leaves a console job waiting on a
stopped broker: logs in, stops the broker (SIGSTOP of HG_BROKER_PID) and
starts a purge. tests/integration/test_console then sends SIGTERM to the
console, which must end the job's wait (its stop fd) and exit 0 at once,
not after the job's 10 minutes, and sends SIGCONT to the broker.
"""
import os
import signal

from console_test import ENV, Client, check, finish

alice = Client()
check(alice.login("alice")[0] == 200, "alice logs in")
os.kill(int(ENV["HG_BROKER_PID"]), signal.SIGSTOP)
status, doc, _ = alice.post("/api/topics/stop-me/delete", {"purge": "1"})
check(status == 202 and doc.get("job", {}).get("state") == "running",
      "a purge on the stopped broker: 202, running: %s %s" % (status, doc))
finish()
