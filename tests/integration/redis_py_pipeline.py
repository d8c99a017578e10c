#!/usr/bin/python3
"""tests/integration/redis_py_pipeline.py PORT — redis-py (Debian's python3-redis)
against hourglass-broker, unmodified: the default pipeline() (a MULTI/EXEC
transaction), a non-transactional pipeline, CLIENT INFO / CLIENT LIST as
redis-py parses them. Prints one "ok ..." line per check; exits 1 on the
first failure with what it got. Run by tests/integration/test_redis_cli.sh."""
import re
import sys

import redis

port = int(sys.argv[1])
r = redis.Redis(host="127.0.0.1", port=port, socket_timeout=20)


def check(name, cond, got):
    if not cond:
        print("FAIL: %s: got %r" % (name, got))
        sys.exit(1)
    print("ok   %s" % name)


ID = re.compile(rb"^[0-9a-f]{16}$")

# The default pipeline: MULTI, the SENDs, EXEC — one reply per SEND, all ids.
p = r.pipeline()
for i in range(5):
    p.execute_command("SEND", "pyorders", "order %d" % i, "KEY", "py%d" % i, "DELAY", "1h")
ids = p.execute()
check("pipeline(): 5 replies", len(ids) == 5, ids)
check("pipeline(): every reply is an id", all(ID.match(x) for x in ids), ids)
check("pipeline(): distinct ids", len(set(ids)) == 5, ids)
for i, mid in enumerate(ids):
    found = r.execute_command("FIND", "pyorders", "py%d" % i)
    check("FIND py%d finds the pipelined message" % i, len(found) == 1 and found[0][1] == mid, found)

# A doomed transaction: a refused command inside it discards all of it.
p = r.pipeline()
p.execute_command("SEND", "pyorders", "x", "KEY", "doomed")
p.execute_command("PULL", "g", "pyorders")
try:
    p.execute()
    check("a PULL inside MULTI dooms the transaction", False, "no error")
except redis.exceptions.ResponseError as e:
    check("a PULL inside MULTI dooms the transaction", "EXECABORT" in str(e) or "not allowed" in str(e), str(e))
check("nothing of the doomed transaction was stored", r.execute_command("FIND", "pyorders", "doomed") == [],
      r.execute_command("FIND", "pyorders", "doomed"))

# Without a transaction: plain pipelining.
p = r.pipeline(transaction=False)
p.execute_command("SEND", "pyorders", "plain")
p.execute_command("PING")
got = p.execute()
check("pipeline(transaction=False)", len(got) == 2 and ID.match(got[0]) and got[1] in (True, b"PONG"), got)

# CLIENT INFO / CLIENT LIST as redis-py parses them (every integer field present).
info = r.client_info()
check("client_info() parses", isinstance(info.get("omem"), int) and isinstance(info.get("id"), int), info)
clients = r.client_list()
check("client_list() parses", len(clients) >= 1 and "omem" in clients[0], clients)
check("client_setname / client_getname", r.client_setname("pytest") and r.client_getname() in (b"pytest", "pytest"),
      r.client_getname())
print("all redis-py checks passed")
