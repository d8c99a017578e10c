"""tests/console/test_jobs.py — the broker commands that run for minutes
(DLQ … ALL, TOPIC DEL … PURGE) run as console jobs, off the event loop: with
the broker stopped (SIGSTOP of HG_BROKER_PID), a purge is answered 202 at
once and stays running, while the session, the page, the overview and the
job's own status answer at once; JOBS_RUNNING_MAX (4) jobs run at most, the
fifth is refused 429 and audited; SIGCONT, and every job ends with its own
outcome. Run by tests/integration/test_console (which sends SIGCONT again
afterwards, whatever happened here).
"""
import os
import signal
import time

from console_test import ENV, Client, Resp, check, finish, log_contains

BROKER = int(ENV["HG_BROKER_PID"])
FAST_S = 1.0  # "at once"; the job itself waits on the broker for minutes


def timed(fn, *args):
    t0 = time.monotonic()
    out = fn(*args)
    return out, time.monotonic() - t0


alice = Client()
check(alice.login("alice")[0] == 200, "alice logs in")
broker = Resp()
for i in range(40):
    broker.call("SEND", "purge-me", "kept-%d" % i)  # no group: kept for retention
broker.close()

os.kill(BROKER, signal.SIGSTOP)
try:
    (status, doc, _), took = timed(alice.post, "/api/topics/purge-me/delete", {"purge": "1"})
    job = doc.get("job", {}) if isinstance(doc, dict) else {}
    check(status == 202 and job.get("state") == "running" and took < FAST_S,
          "the broker stopped: the purge is answered 202 in %.0f ms, running: %s %s" % (took * 1000, status, doc))
    for path in ("/api/session", "/api/jobs/%s" % job.get("id"), "/api/jobs", "/api/overview", "/"):
        (st, d, _), took = timed(alice.get, path)
        check(st == 200 and took < FAST_S, "meanwhile GET %s answers at once: %s in %.0f ms" % (path, st, took * 1000))
    st, d, _ = alice.get("/api/jobs/%s" % job.get("id"))
    check(d["job"]["state"] == "running" and d["job"]["ended_ms"] is None and d["job"]["result"] is None and
          d["job"]["what"] == "delete topic purge-me with its retained messages", "the job is running: %s" % d)
    others = []
    for i in range(3):
        st, d, _ = alice.post("/api/topics/ghost-%d/delete" % i, {"purge": "1"})
        check(st == 202, "job %d of 4 starts: %s %s" % (i + 2, st, d))
        others.append(d.get("job", {}).get("id"))
    (st, d, _), took = timed(alice.post, "/api/topics/ghost-9/delete", {"purge": "1"})
    check(st == 429 and "4 jobs are running already" in d.get("error", "") and took < FAST_S,
          "a fifth while four run: 429 at once: %s %s" % (st, d))
    check(log_contains("refused topic delete topic=ghost-9 purge=1: 4 console jobs are running"),
          "and the refusal is audited")
finally:
    os.kill(BROKER, signal.SIGCONT)

deadline = time.time() + 60
while True:
    st, d, _ = alice.get("/api/jobs")
    mine = [j for j in d.get("jobs", []) if j["id"] in [job.get("id")] + others]
    if all(j["state"] != "running" for j in mine) or time.time() > deadline:
        break
    time.sleep(0.1)
by_id = {j["id"]: j for j in mine}
first = by_id.get(job.get("id"), {})
check(first.get("state") == "done" and first.get("result") == {"topic": "purge-me", "deleted": 1} and
      first["ended_ms"] >= first["started_ms"], "SIGCONT: the purge ends, done: %s" % first)
check(all(by_id.get(i, {}).get("state") == "failed" and by_id[i]["status"] == 404 for i in others),
      "and each ghost job with its own outcome, 404: %s" % [by_id.get(i) for i in others])
check("purge-me" not in {t["topic"] for t in alice.get("/api/topics")[1]["topics"]}, "purge-me is gone")
check(log_contains("topic delete topic=purge-me purge=1 deleted=1 (job %s," % job.get("id")),
      "the end is audited with the user")
finish()
