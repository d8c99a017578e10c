#!/usr/bin/python3
"""tests/system/test_protocol_doc.py — docs/protocol.md's redis-cli transcripts, run against a real broker.

Every fenced block of docs/protocol.md holding `$ … redis-cli -p 7379 …` lines is a transcript: each such line is
a command, the lines after it (up to the next `$` line or the block's end) the reply redis-cli prints. The blocks
run in the doc's order against one fresh hourglass-broker (free port, data in a temp dir), each command through
bash with `-p 7379` pointed at that broker and `--no-raw` added (redis-cli's terminal formatting, as a reader sees
it), and each reply is compared with the doc's. Exact, except for what legitimately varies:

- a message id (16 hex digits) of the doc stands for the id the broker gave: the first reply that shows it binds
  it, later replies must show the same id and later commands get it substituted; a command naming an id no
  earlier reply showed fails (the doc is not self-consistent), as do two doc ids standing for one real id;
- a 13-digit number starting with 1 in a reply is a wall-clock time in ms (any 13 digits match);
- runs of blanks compare as one (the doc aligns columns; redis-cli pads indices);
- `…` or `...` in a reply matches anything (a reply shown in part);
- two or more blanks then `# ` start a comment for the reader, to the end of the line (a `#` at the start of a
  line, as INFO's `# Stats`, is reply text; in a command line bash takes `# …` as its comment).

Markers, an HTML comment on the line(s) just before a block's opening fence:
- `<!-- doc-test: illustrative: REASON -->`: the block is not run (it needs what a test cannot have, REASON
  says what); counted and printed, never silently skipped;
- `<!-- doc-test: setup: CMD; CMD; … -->`: redis-cli commands run before the block (their replies must not be
  errors), for state the doc's text describes but its transcript does not show;
- `<!-- doc-test: users: NAME ROLES PASSWORD; … -->`: the block runs against a second broker of its own with a
  users-file of these users (made with hourglass-cli passwd).

Prints each command with ok/FAIL, a mismatch with the doc's reply and the real one, and the counts of commands run
and marked illustrative; exits 1 on any failure, also when a broker does not exit 0 on SIGTERM (a sanitizer's
report in the sanitizer build). Finds hourglass-broker and hourglass-cli in $HG_BUILDDIR (make
check sets it), else the current directory; a missing program or redis-cli is a failure, never a skip."""
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# HG_PROTOCOL_DOC: another copy of the page (to see the test fail on a changed line).
DOC = os.environ.get("HG_PROTOCOL_DOC", os.path.join(HERE, "..", "..", "docs", "protocol.md"))
DOC_NAME = os.environ.get("HG_PROTOCOL_DOC", "docs/protocol.md")
DOC_PORT = "7379"
MARKER = re.compile(r"^<!-- doc-test: (illustrative|setup|users): (.*?) -->$")
DOC_ID = re.compile(r"\b[0-9a-f]{16}\b")
WALL_MS = re.compile(r"\b1[0-9]{12}\b")
ELLIPSIS = re.compile(r"…|\.\.\.")
COMMENT = re.compile(r"\s{2,}#\s.*$")
# What a reply line of the doc is cut at: each is a pattern, the text between them is matched as it is.
REPLY_TOKEN = re.compile(r"(?P<id>%s)|(?P<ms>%s)|(?P<dots>%s)|(?P<blank>\s+)" %
                         (DOC_ID.pattern, WALL_MS.pattern, ELLIPSIS.pattern))


def program(name):
    for cand in (os.path.join(os.environ.get("HG_BUILDDIR", "."), name), os.path.join(HERE, "..", "..", name)):
        if os.access(cand, os.X_OK):
            return os.path.abspath(cand)
    print("FAIL: %s not found (build it: make %s)" % (name, name))
    sys.exit(1)


class Transcript:
    """One fenced block: its commands [(line number, command, [expected lines])] and its markers."""

    def __init__(self, line, markers):
        self.line, self.commands = line, []
        self.illustrative = markers.get("illustrative")
        self.setup = [c.strip() for c in markers.get("setup", "").split(";") if c.strip()]
        self.users = [u.split() for u in markers.get("users", "").split(";") if u.strip()]


def parse(path):
    """The transcripts of the doc, in order; a marker that precedes no transcript is an error."""
    transcripts, markers, block, fenced = [], {}, None, False
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    for n, line in enumerate(lines, 1):
        if line.startswith("```"):
            if not fenced:
                fenced, block = True, Transcript(n, markers)
                markers = {}
            else:
                fenced = False
                if block.commands:
                    transcripts.append(block)
                elif block.illustrative or block.setup or block.users:
                    sys.exit("FAIL: %s:%d: a doc-test marker before a block without redis-cli lines" % (path, n))
            continue
        if not fenced:
            m = MARKER.match(line.strip())
            if m:
                markers[m.group(1)] = m.group(2)
            elif line.strip() and markers:
                sys.exit("FAIL: %s:%d: a doc-test marker not right before a fenced block" % (path, n))
            continue
        if line.startswith("$ ") and re.search(r"(^\$ |\| )redis-cli -p %s\b" % DOC_PORT, line):
            block.commands.append((n, line[2:], []))
        elif block.commands:
            block.commands[-1][2].append(line)
    return transcripts


class Broker:
    """A hourglass-broker on a free port with its data in DIR; stopped by stop()."""

    def __init__(self, binary, workdir, *flags):
        self.dir = workdir
        os.makedirs(workdir)
        self.log = os.path.join(workdir, "broker.log")
        for _ in range(3):
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                self.port = s.getsockname()[1]
            with open(self.log, "a") as log:
                self.proc = subprocess.Popen([binary, "--port", str(self.port), "--dir",
                                              os.path.join(workdir, "data")] + list(flags),
                                             stdout=log, stderr=subprocess.STDOUT)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and self.proc.poll() is None:
                if redis_cli(self.port, ["PING"]) in ("PONG", "(error) NOAUTH Authentication required."):
                    return
                time.sleep(0.05)
            self.stop()
            if "Address already in use" not in open(self.log).read():
                break
        print("FAIL: hourglass-broker did not answer PING within 30 s; its log:\n" + open(self.log).read()[-3000:])
        sys.exit(1)

    def stop(self):
        """SIGTERM; its exit status (0: a clean stop; a sanitizer's report makes it non-zero)."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def redis_cli(port, args):
    out = subprocess.run(["redis-cli", "--no-raw", "-p", str(port)] + args, capture_output=True, text=True,
                         timeout=30)
    return (out.stdout + out.stderr).strip()


class Ids:
    """The doc's message ids and the broker's ids they stand for."""

    def __init__(self):
        self.real = {}

    def substitute(self, command):
        """command with every doc id replaced by its real id; (None, the unbound id) when one is unbound."""
        for doc_id in DOC_ID.findall(command):
            if doc_id not in self.real:
                return None, doc_id
        return DOC_ID.sub(lambda m: self.real[m.group(0)], command), None

    def pattern(self, expected):
        """A regex of the doc's reply lines (comments cut, blanks collapsed) and its new ids' group names."""
        parts, new = [], {}
        for line in expected:
            line = COMMENT.sub("", line).strip()
            if not line:
                continue
            pos, out = 0, []
            for m in REPLY_TOKEN.finditer(line):
                out.append(re.escape(line[pos:m.start()]))
                pos = m.end()
                if m.group("id"):
                    doc_id = m.group("id")
                    if doc_id in self.real:
                        out.append(re.escape(self.real[doc_id]))
                    elif doc_id in new:
                        out.append("(?P=%s)" % new[doc_id])
                    else:
                        new[doc_id] = "id%d" % len(new)
                        out.append("(?P<%s>[0-9a-f]{16})" % new[doc_id])
                elif m.group("ms"):
                    out.append("[0-9]{13}")
                elif m.group("dots"):
                    out.append(".*?")
                else:
                    out.append(" ")
            out.append(re.escape(line[pos:]))
            parts.append("".join(out))
        return " ".join(parts), new

    def bind(self, new, match):
        """Remember the ids a matched reply showed; an error text when one real id would have two doc ids."""
        for doc_id, group in new.items():
            real = match.group(group)
            for other, bound in self.real.items():
                if bound == real:
                    return "ids %s and %s of the doc stand for one message, %s" % (other, doc_id, real)
            self.real[doc_id] = real
        return None


def make_users_file(cli, workdir, users):
    path = os.path.join(workdir, "users")
    with open(path, "wb") as f:
        for name, roles, password in users:
            out = subprocess.run([cli, "passwd", "--cost", "10", name, roles], input=(password + "\n").encode(),
                                 capture_output=True)
            if out.returncode != 0:
                sys.exit("FAIL: hourglass-cli passwd %s %s: %s" % (name, roles, out.stderr.decode()))
            f.write(out.stdout)
    os.chmod(path, 0o600)
    return path


def main():
    if shutil.which("redis-cli") is None:
        print("FAIL: redis-cli not installed (apt-get install redis-tools)")
        return 1
    broker_bin, cli = program("hourglass-broker"), program("hourglass-cli")
    transcripts = parse(DOC)
    tmp = tempfile.mkdtemp(prefix="hg-protocol-doc-")
    started = [Broker(broker_bin, os.path.join(tmp, "plain"))]
    ids, failures, ran, marked, marked_blocks = Ids(), 0, 0, 0, 0
    try:
        for t in transcripts:
            where = "%s:%d" % (DOC_NAME, t.line)
            if t.illustrative:
                marked += len(t.commands)
                marked_blocks += 1
                print("--   %s: %d commands marked illustrative: %s" % (where, len(t.commands), t.illustrative))
                continue
            broker = started[0]
            if t.users:
                workdir = os.path.join(tmp, "users%d" % t.line)
                os.makedirs(workdir)
                users_file = make_users_file(cli, workdir, t.users)
                broker = Broker(broker_bin, os.path.join(workdir, "broker"), "--users-file", users_file)
                started.append(broker)
            for setup in t.setup:
                reply = redis_cli(broker.port, shlex.split(setup))
                if reply.startswith("(error)"):
                    print("FAIL %s: setup %s: %s" % (where, setup, reply))
                    failures += 1
            for line, command, expected in t.commands:
                ran += 1
                real, unbound = ids.substitute(command)
                if real is None:
                    print("FAIL %s:%d: $ %s\n     names id %s, which no earlier reply showed"
                          % (DOC_NAME, line, command, unbound))
                    failures += 1
                    continue
                real = real.replace("redis-cli -p %s" % DOC_PORT, "redis-cli --no-raw -p %d" % broker.port)
                out = subprocess.run(["bash", "-c", real], capture_output=True, text=True, timeout=60)
                reply = (out.stdout + out.stderr).rstrip("\n")
                pattern, new = ids.pattern(expected)
                match = re.fullmatch(pattern, " ".join(reply.split()), re.S)
                problem = ids.bind(new, match) if match else "the reply differs"
                if problem:
                    failures += 1
                    print("FAIL %s:%d: $ %s\n     %s\n     the doc:\n%s\n     the broker:\n%s"
                          % (DOC_NAME, line, command, problem, "\n".join("       " + e for e in expected),
                             "\n".join("       " + r for r in reply.split("\n"))))
                else:
                    print("ok   %s:%d: $ %s" % (DOC_NAME, line, command))
    finally:
        for b in started:
            status = b.stop()
            if status != 0:
                print("FAIL hourglass-broker (%s) exited %d on SIGTERM; its log:\n%s"
                      % (b.dir, status, open(b.log).read()[-3000:]))
                failures += 1
    print("%d commands run (%d failed), %d marked illustrative in %d blocks" % (ran, failures, marked,
                                                                               marked_blocks))
    if failures:
        print("broker logs kept in %s" % tmp)
        return 1
    shutil.rmtree(tmp)
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
