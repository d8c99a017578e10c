"""tests/console/test_history.py — the overview's history is a ring of
history / sample-interval + 1 samples: once full it keeps that many, the
newest, oldest first, however long the console runs (docs/console.md,
"Memory"), while that is at most 1000 samples: past that neighbouring
samples share a point (console/history.c; tests/unit/test_console_history).

Against a console with sample-interval 200ms and history 1s (6 samples):
the overview is read until the sampler has taken more than twice that many
samples (the ring has wrapped at least twice), then its history holds
exactly 6 samples, their times strictly increasing, the last the newest
sample seen.

Run by tests/integration/test_console (its "history" test) against the
console it starts with --sample-interval 200ms --history 1s.
"""
import time

from console_test import Client, check, finish

CAP = 6  # history 1s / sample-interval 200ms + 1

bob = Client()
status, _, _ = bob.login("bob")
check(status == 200, "bob logs in (%s)" % status)
newest, seen, doc = None, set(), None
deadline = time.time() + 60
while time.time() < deadline and len(seen) <= 2 * CAP + 1:
    status, doc, _ = bob.get("/api/overview")
    if status == 200 and doc["history"]:
        newest = doc["history"][-1]["t_ms"]
        seen.add(newest)
    time.sleep(0.1)
check(len(seen) > 2 * CAP + 1, "the sampler took %d samples within 60 s (more than %d)" % (len(seen), 2 * CAP + 1))
status, doc, _ = bob.get("/api/overview")
times = [x["t_ms"] for x in doc["history"]] if status == 200 else []
check(len(times) == CAP, "the history keeps %d samples once full: %d" % (CAP, len(times)))
check(all(a < b for a, b in zip(times, times[1:])), "oldest first, strictly increasing: %s" % times)
check(times and times[-1] >= newest, "the last is the newest (%s, newest seen before %s)" % (times[-1:], newest))
finish()
