#!/usr/bin/python3
"""tests/integration/test_redis_py.py — an order service's use of hourglass-broker through redis-py
(Debian 12's python3-redis 4.3.4), unmodified: what docs/protocol.md "Using Hourglass from Python" shows.

Starts its own brokers, each on a free port in a temp dir: a plain one (SEND with DELAY/AT/LEVEL/KEY/DEDUP,
PULL COUNT/BLOCK, TOUCH/ACK/NACK, GET/FIND/REVOKE, GROUP CREATE/LIST/DEL, DLQ, INFO, 1 000 pipelined SENDs
with and without MULTI/EXEC, a blocking PULL cut by the client's socket timeout, a restart under a
connected client), then one with a users file (made by hourglass-cli passwd) and a TLS port whose
certificate a CA made here with openssl signs (AUTH user+password, NOAUTH/WRONGPASS/NOPERM as redis-py's
exceptions, rediss:// with the CA, a client certificate whose CN logs it in). Each check prints "ok   …" or
"FAIL …"; exits 1 when any failed.

Finds the programs as $HG_BROKER / $HG_CLI, else in $HG_BUILDDIR (make check sets it), else next to this
script's ../../. A missing program, redis-py or openssl is a failure, never a skip."""
import fcntl
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

try:
    import redis
except ImportError:
    print("FAIL: redis-py is not installed (apt-get install python3-redis)")
    sys.exit(1)

failures = []
ID = re.compile(rb"^[0-9a-f]{16}$")


def check(ok, what, got=None):
    """Record one check: print it, remember a failure (with what was got)."""
    print(("ok   " if ok else "FAIL ") + what + ("" if ok or got is None else ": got %r" % (got,)), flush=True)
    if not ok:
        failures.append(what)
    return ok


def raises(fn, exc):
    """The exception fn() raises when it is an exc, else a description of what happened instead."""
    try:
        return "no exception, returned %r" % (fn(),)
    except exc as e:
        return e
    except Exception as e:  # noqa: BLE001 — the wrong class is the failure to report
        return "%s.%s: %s" % (type(e).__module__, type(e).__name__, e)


def poll(fn, deadline_s, what):
    """fn() until it returns something true, at most deadline_s; that value, or None (a failed check)."""
    end = time.monotonic() + deadline_s
    while True:
        v = fn()
        if v:
            return v
        if time.monotonic() > end:
            check(False, what + " within %d s" % deadline_s)
            return None
        time.sleep(0.05)


def program(env, name):
    here = os.path.dirname(os.path.abspath(__file__))
    for cand in (os.environ.get(env), os.path.join(os.environ.get("HG_BUILDDIR", "."), name), "./" + name,
                 os.path.join(here, "..", "..", name)):
        if cand and os.access(cand, os.X_OK):
            return os.path.abspath(cand)
    print("FAIL: %s not found (set %s or build it: make %s)" % (name, env, name))
    sys.exit(1)


BROKER = program("HG_BROKER", "hourglass-broker")
CLI = program("HG_CLI", "hourglass-cli")
if shutil.which("openssl") is None:
    print("FAIL: openssl not installed (apt-get install openssl)")
    sys.exit(1)
TMP = tempfile.mkdtemp(prefix="hg-redispy-")


_received = {}


def recv_all(sock):
    """Everything sock has received so far (kept across calls), read without waiting."""
    buf = _received.setdefault(sock.fileno(), bytearray())
    sock.setblocking(False)
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            buf += chunk
    except BlockingIOError:
        pass
    finally:
        sock.setblocking(True)
    return bytes(buf)


PORT_CLAIM_DIR = "/tmp/hg-test-ports"  # the C tests' tu_free_port claims its ports here too
port_claims = []  # open lock files: each claim lasts until this process ends


def claim_port(port):
    """Claim port among this machine's test processes (an flock on PORT_CLAIM_DIR/PORT, as tu_free_port takes, kept
    until the process ends): False when another process holds it; True when claimed or when no lock file can be made
    (the bind then stands alone)."""
    try:
        os.makedirs(PORT_CLAIM_DIR, mode=0o1777, exist_ok=True)
        f = open(os.path.join(PORT_CLAIM_DIR, str(port)), "a")
    except OSError:
        return True
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.close()
        return False
    port_claims.append(f)
    return True


def free_port():
    """A port on 127.0.0.1 for a broker to bind: below the kernel's ephemeral range (an outgoing connection's local
    end may take a port of that range before the broker binds it), claimed against the other tests running at once,
    and free right now (bound without SO_REUSEADDR)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            high = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        high = 32768
    for _ in range(1000):
        if high - 10000 < 1000:
            break
        port = random.randrange(10000, high)
        if not claim_port(port):
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue
    with socket.socket() as s:  # no room below the ephemeral range
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Broker:
    """One hourglass-broker process: its port(s), data dir and log under TMP."""

    def __init__(self, name, *flags, tls=False):
        self.name, self.flags, self.tls = name, list(flags), tls
        self.dir = os.path.join(TMP, name)
        self.log = os.path.join(TMP, name + ".log")
        self.proc = None
        self.port = self.tls_port = None

    def start(self, keep_ports=False):
        """Start it (on new free ports unless keep_ports) and wait for PING; exits the test when it never answers."""
        for _ in range(3):
            if not keep_ports or self.port is None:
                self.port = free_port()
                self.tls_port = free_port() if self.tls else None
            args = [BROKER, "--port", str(self.port), "--dir", self.dir] + self.flags
            if self.tls:
                args += ["--tls-port", str(self.tls_port)]
            with open(self.log, "a") as log:
                self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
            end = time.monotonic() + 30
            while time.monotonic() < end and self.proc.poll() is None:
                try:
                    if redis.Redis(port=self.port, socket_timeout=2).ping():
                        return
                except redis.exceptions.RedisError:
                    time.sleep(0.05)
            self.stop()
            with open(self.log) as f:
                if "Address already in use" not in f.read() or keep_ports:
                    break
        print("FAIL: hourglass-broker %s did not answer PING; its log:" % self.name)
        print(open(self.log).read()[-4000:])
        cleanup()
        sys.exit(1)

    def stop(self, sig=signal.SIGTERM):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


brokers = []


def cleanup():
    for b in brokers:
        b.stop(signal.SIGKILL)
    if failures:
        for b in brokers:
            print("--- %s.log (tail) ---" % b.name)
            print(open(b.log).read()[-3000:])
    shutil.rmtree(TMP, ignore_errors=True)


# ---------------------------------------------------------------------------------------------------------
# A plain broker: the order service's producer and the cancel consumer, as docs/protocol.md shows them.
plain = Broker("plain")
brokers.append(plain)
plain.start()
r = redis.Redis(port=plain.port, socket_timeout=20, client_name="order-service")
check(r.client_getname() in (b"order-service", "order-service"), "client_name= at connect (CLIENT SETNAME)",
      r.client_getname())

# Produce: one timeout per order, keyed by the order id.
t0 = time.time()
mid = r.execute_command("SEND", "order-timeout", "1001", "KEY", "1001", "DELAY", "1s")
check(bool(ID.match(mid)), "SEND … DELAY 1s replies a 16-hex-digit id (bytes)", mid)
check(r.execute_command("SEND", "order-timeout", "1001", "KEY", "1001", "DEDUP") == [mid, 1],
      "SEND … KEY k DEDUP of a live key replies [its id, 1]",
      r.execute_command("SEND", "order-timeout", "1001", "KEY", "1001", "DEDUP"))
first = r.execute_command("SEND", "order-timeout", "1002", "KEY", "1002", "DEDUP", "LEVEL", "1")
check(isinstance(first, list) and len(first) == 2 and ID.match(first[0]) and first[1] == 0,
      "SEND … DEDUP of a new key replies [id, 0]", first)
at = r.execute_command("SEND", "order-timeout", "1003", "KEY", "1003", "AT", str(int(time.time() * 1000) + 1000))
check(bool(ID.match(at)), "SEND … AT unix-ms", at)
found = r.execute_command("FIND", "order-timeout", "1001")
check(len(found) == 1 and found[0][:6] == [b"id", mid, b"state", b"delayed", b"topic", b"order-timeout"],
      "FIND topic key: [[id, …, state, delayed, …]]", found)
e = raises(lambda: r.execute_command("SEND", "order-timeout", "x", "LEVEL", "99"), redis.ResponseError)
check(isinstance(e, redis.ResponseError) and "LEVEL must be" in str(e), "a bad SEND raises ResponseError naming it",
      e)

# Consume: nothing before it is due, then the three of them; TOUCH, ACK, NACK.
early = r.execute_command("PULL", "order-cancel", "order-timeout", "COUNT", "10")
# On a loaded machine a second may have passed already: then only the reply's due times are checked.
check(early == [] if time.time() - t0 < 0.9 else all(m[5] <= time.time() * 1000 for m in early),
      "PULL before the delay passed: nothing not yet due", early)
got = list(early)
end = time.monotonic() + 30
while len(got) < 3 and time.monotonic() < end:
    got += r.execute_command("PULL", "order-cancel", "order-timeout", "COUNT", "10", "BLOCK", "5000")
waited = time.time() - t0
check(len(got) == 3, "PULL … COUNT 10 BLOCK 5000 delivers the 3 due messages", got)
check(waited >= 0.9, "not delivered before the 1 s delay (%.2f s)" % waited)
by_key = {m[2]: m for m in got}
m1001 = by_key.get(b"1001", [b"?"] * 6)
check(m1001[0] == mid and m1001[1] == b"order-timeout" and m1001[3] == b"1001" and m1001[4] == 0
      and isinstance(m1001[5], int),
      "a PULLed message is [id, topic, key, payload, reconsume, due_ms]", m1001)
deadline = r.execute_command("TOUCH", "order-cancel", mid, "LEASE", "60s")
check(isinstance(deadline, int) and deadline > time.time() * 1000 + 50000, "TOUCH … LEASE 60s: the new deadline",
      deadline)
check(r.execute_command("ACK", "order-cancel", mid) == 1, "ACK: 1")
check(r.execute_command("ACK", "order-cancel", mid) == 0, "ACK again: 0")
nack_id = by_key.get(b"1002", [b"0" * 16])[0]
retry_due = r.execute_command("NACK", "order-cancel", nack_id, "DELAY", "1s", "REASON", "deadlock")
check(isinstance(retry_due, int) and retry_due > time.time() * 1000, "NACK … DELAY 1s: the retry's due time",
      retry_due)
dlq_id = by_key.get(b"1003", [b"0" * 16])[0]
check(r.execute_command("NACK", "order-cancel", dlq_id, "DLQ", "REASON", "not an order") == 0, "NACK … DLQ: 0")
check(r.execute_command("DLQ", "LEN", "order-cancel") == 1, "DLQ LEN: 1")
dlq = r.execute_command("DLQ", "LIST", "order-cancel")
check(len(dlq) == 1 and dlq[0][0] == dlq_id and dlq[0][4] == b"not an order",
      "DLQ LIST: [id, key, payload, …, reason, …]", dlq)
check(r.execute_command("DLQ", "REQUEUE", "order-cancel", "ALL") == 1, "DLQ REQUEUE … ALL: 1")
again = []
end = time.monotonic() + 30
while len(again) < 2 and time.monotonic() < end:
    again += r.execute_command("PULL", "order-cancel", "order-timeout", "COUNT", "10", "BLOCK", "5000")
check(sorted(m[0] for m in again) == sorted([nack_id, dlq_id]), "the NACKed and the requeued message come back",
      again)
check(r.execute_command("ACK", "order-cancel", *[m[0] for m in again]) == 2, "ACK of two ids: 2")
info = r.info("stats")
check(info.get("acks") == 3 and info.get("dlq_moves") == 1, "r.info('stats') parses: acks 3, dlq_moves 1", info)
check(r.info().get("redis_version") is not None, "r.info() parses")

# The order was paid: revoke its timeout by key.
paid = r.execute_command("SEND", "order-timeout", "1004", "KEY", "1004", "DELAY", "30m")
rv = r.execute_command("REVOKE", "order-timeout", "KEY", "1004")
check(rv[:2] == [b"revoked", 1], "REVOKE topic KEY k: [revoked, 1, …]", rv)
check(r.execute_command("GET", paid)[:4] == [b"id", paid, b"state", b"gone"], "GET of the revoked id: state gone",
      r.execute_command("GET", paid))

# Groups.
check(r.execute_command("GROUP", "CREATE", "audit", "order-timeout", "FROM", "NOW") == b"OK",
      "GROUP CREATE … FROM NOW: OK")
groups = {g[1]: g for g in r.execute_command("GROUP", "LIST")}
check(set(groups) == {b"order-cancel", b"audit"}, "GROUP LIST: both groups", groups)
check(r.execute_command("GROUP", "DEL", "audit") == 1, "GROUP DEL: 1")

# 1 000 SENDs in one round trip, plain and as one MULTI/EXEC transaction (redis-py's default pipeline()).
for transaction in (False, True):
    with r.pipeline(transaction=transaction) as p:
        for i in range(1000):
            p.execute_command("SEND", "bulk", "order %d" % i, "KEY", "%d-%d" % (transaction, i), "DELAY", "1h")
        ids = p.execute()
    check(len(ids) == 1000 and len(set(ids)) == 1000 and all(ID.match(x) for x in ids),
          "pipeline(transaction=%s) of 1000 SENDs: 1000 distinct ids" % transaction, ids[:3])
p = r.pipeline()
p.execute_command("SEND", "bulk", "x", "KEY", "doomed")
p.execute_command("PULL", "g", "bulk")
e = raises(p.execute, redis.ResponseError)
check(isinstance(e, redis.ResponseError), "a PULL inside pipeline() (MULTI) raises ResponseError", e)
check(r.execute_command("FIND", "bulk", "doomed") == [], "… and stores nothing of the transaction")
e = raises(lambda: redis.Redis(port=plain.port, db=1).ping(), redis.ResponseError)
check(isinstance(e, redis.ResponseError) and "DB index is out of range" in str(e), "db=1 (SELECT 1) is refused", e)

# CLIENT LIST as Redis fills it: multi= the commands queued inside MULTI (it said 1), laddr= the broker's end (it
# said ?). A connection of its own holds the transaction open while another lists it.
with socket.create_connection(("127.0.0.1", plain.port)) as inmulti:
    inmulti.sendall(b"CLIENT SETNAME inmulti\r\nMULTI\r\n" + b"SEND t x\r\n" * 3)
    poll(lambda: b"+QUEUED\r\n" * 3 in recv_all(inmulti), 30, "three SENDs queued inside MULTI")
    line = [c for c in r.client_list() if c["name"] == "inmulti"]
    check(len(line) == 1 and line[0]["multi"] == "3" and line[0]["flags"] == "x",
          "CLIENT LIST of a connection inside MULTI with 3 SENDs queued: multi=3, flags=x", line)
    check(len(line) == 1 and line[0]["laddr"] == "127.0.0.1:%d" % plain.port, "CLIENT LIST's laddr: the broker's end",
          line)
    inmulti.sendall(b"DISCARD\r\n")

# A blocking PULL cut by the client's socket timeout: redis-py closes the connection, the broker cancels the
# PULL, so the next message goes to the group's other consumer (not leased to the dead connection).
short = redis.Redis(port=plain.port, socket_timeout=1)
e = raises(lambda: short.execute_command("PULL", "cut", "cut-topic", "BLOCK", "10000"), redis.exceptions.TimeoutError)
check(isinstance(e, redis.exceptions.TimeoutError), "PULL … BLOCK 10000 with socket_timeout=1: TimeoutError", e)
poll(lambda: r.info("clients").get("blocked_clients") == 0, 10, "the cut PULL is no longer blocked")
cut_id = r.execute_command("SEND", "cut-topic", "after the timeout")
got = r.execute_command("PULL", "cut", "cut-topic", "BLOCK", "5000")
check(len(got) == 1 and got[0][0] == cut_id, "the next consumer gets the message at once", got)

# A blocked PULL during a clean stop gets its (empty) reply; the broker restarted under the client: redis-py
# reconnects on the next command, and the delayed messages are still there.
result = {}


def blocked_pull():
    try:
        result["reply"] = redis.Redis(port=plain.port, socket_timeout=30).execute_command(
            "PULL", "waiter", "nothing-here", "BLOCK", "20000")
    except redis.RedisError as err:
        result["reply"] = err


waiter = threading.Thread(target=blocked_pull)
waiter.start()
poll(lambda: r.info("clients").get("blocked_clients") == 1, 10, "the PULL is blocked")
plain.stop()
waiter.join(30)
check(result.get("reply") == [], "a PULL blocked over SIGTERM is answered [] before the broker exits",
      result.get("reply"))
e = raises(r.ping, redis.exceptions.ConnectionError)
check(isinstance(e, redis.exceptions.ConnectionError), "while it is down: ConnectionError", e)
plain.start(keep_ports=True)
check(r.ping() is True, "after the restart the same Redis object reconnects")
check(len(r.execute_command("FIND", "bulk", "0-999")) == 1, "the pipelined messages survived the restart")
plain.stop()

# ---------------------------------------------------------------------------------------------------------
# Users and TLS: a CA of our own signs the broker's certificate (docs/security.md).
def run(*args, stdin=None):
    out = subprocess.run(args, input=stdin, capture_output=True, cwd=TMP)
    if out.returncode != 0:
        print("FAIL: %s: %s" % (" ".join(args), out.stderr.decode(errors="replace")))
        cleanup()
        sys.exit(1)
    return out.stdout


run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
    "-subj", "/CN=hourglass test CA")
run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "broker.key", "-out", "broker.csr", "-subj",
    "/CN=localhost")
with open(os.path.join(TMP, "san.cnf"), "w") as f:
    f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
run("openssl", "x509", "-req", "-in", "broker.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-out",
    "broker.pem", "-days", "2", "-extfile", "san.cnf")
# A client certificate whose CN is a user: with tls-auth-clients-user cn it logs in without a password.
run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "client.key", "-out", "client.csr", "-subj",
    "/CN=canceller")
run("openssl", "x509", "-req", "-in", "client.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-out",
    "client.pem", "-days", "2")
users = b"".join(run(CLI, "passwd", "--cost", "10", name, roles, stdin=pw + b"\n")
                 for name, roles, pw in ((b"shop", b"producer", b"shop-pw"), (b"canceller", b"consumer", b"cancel-pw")))
users_file = os.path.join(TMP, "users")
with open(users_file, "wb") as f:
    f.write(users)
os.chmod(users_file, 0o600)
CA = os.path.join(TMP, "ca.pem")
secure = Broker("secure", "--users-file", users_file, "--tls-cert-file", os.path.join(TMP, "broker.pem"),
                "--tls-key-file", os.path.join(TMP, "broker.key"), "--tls-ca-cert-file", CA, "--tls-auth-clients",
                "optional", "--tls-auth-clients-user", "cn", tls=True)
brokers.append(secure)
secure.start()

e = raises(lambda: redis.Redis(port=secure.port).execute_command("SEND", "t", "x"), redis.AuthenticationError)
check(isinstance(e, redis.AuthenticationError), "no AUTH: AuthenticationError (NOAUTH)", e)
e = raises(lambda: redis.Redis(port=secure.port, username="shop", password="wrong").ping(), redis.ResponseError)
check(isinstance(e, redis.ResponseError) and str(e).startswith("WRONGPASS"), "a wrong password: WRONGPASS", e)
shop = redis.Redis(port=secure.port, username="shop", password="shop-pw")
sent = shop.execute_command("SEND", "orders", "2001", "KEY", "2001")
check(bool(ID.match(sent)), "username=/password=: SEND as the producer", sent)
e = raises(lambda: shop.execute_command("PULL", "g", "orders"), redis.exceptions.NoPermissionError)
check(isinstance(e, redis.exceptions.NoPermissionError), "a producer's PULL: NoPermissionError (NOPERM)", e)
hello = shop.execute_command("HELLO", "2", "AUTH", "shop", "shop-pw")
check(hello[hello.index(b"roles") + 1] == [b"producer"], "HELLO 2 AUTH: the user's roles", hello)
tls = redis.Redis(host="localhost", port=secure.tls_port, ssl=True, ssl_ca_certs=CA, username="canceller",
                  password="cancel-pw", socket_timeout=20)
got = tls.execute_command("PULL", "order-cancel", "orders", "BLOCK", "5000")
check(len(got) == 1 and got[0][0] == sent, "over TLS (ssl_ca_certs= our CA): the consumer PULLs", got)
url = redis.from_url("rediss://shop:shop-pw@localhost:%d/0?ssl_ca_certs=%s" % (secure.tls_port, CA))
check(bool(ID.match(url.execute_command("SEND", "orders", "2002"))), "from_url('rediss://user:pass@…')")
by_cert = redis.Redis(host="localhost", port=secure.tls_port, ssl=True, ssl_ca_certs=CA, socket_timeout=20,
                      ssl_certfile=os.path.join(TMP, "client.pem"), ssl_keyfile=os.path.join(TMP, "client.key"))
check(by_cert.execute_command("ACL", "WHOAMI") == b"canceller", "ssl_certfile= with CN=canceller: logged in as it",
      by_cert.execute_command("ACL", "WHOAMI"))
check(by_cert.execute_command("ACK", "order-cancel", sent) == 1, "… and may ACK as the consumer")
e = raises(lambda: redis.Redis(port=secure.tls_port, ssl=True, socket_timeout=5).ping(), redis.ConnectionError)
check(isinstance(e, redis.ConnectionError) and "CERTIFICATE_VERIFY_FAILED" in str(e),
      "TLS without our CA: the certificate is refused", e)
e = raises(lambda: redis.Redis(port=secure.tls_port, socket_timeout=5).ping(), redis.ResponseError)
check(isinstance(e, redis.ResponseError) and "TLS only" in str(e), "plaintext on the TLS port is told so", e)

cleanup()
if failures:
    print("%d check(s) failed:" % len(failures))
    for f in failures:
        print("  - " + f)
    sys.exit(1)
print("all redis-py checks passed")
