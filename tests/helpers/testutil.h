/*
 * tests/helpers/testutil.h — helpers every test uses.
 *
 * A fresh temp directory per test, a free TCP port, polling with a deadline
 * (never sleep-and-hope), a child's output, a private MariaDB server on a
 * unix socket, and the CUnit plumbing: main(), suite tables and assertions
 * with formatted messages; for the benchmarks that link it, a microsecond
 * clock and a fatal-error exit.
 * Every function that can fail returns 0 / -1 and writes the cause into
 * err[errlen]; tests turn that into a CUnit failure that prints the cause.
 */
#ifndef HG_TESTUTIL_H
#define HG_TESTUTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* The commit-log segment size of every store a test opens and every broker a
 * test starts (store_options_t.segment_bytes, the broker's commitlog-segment-size):
 * a segment is written out whole when first used, and the default's 128 MiB per
 * test directory would be most of a suite's time and disk. At least the largest
 * batch a test writes: STORE_BATCH_MAX_BYTES (4 MiB) plus one 4 MiB payload. */
#define TU_SEGMENT_BYTES (UINT64_C(16) << 20)

/* The furthest byte written in any file of the store directory dir: a file's
 * size, but for a commit-log segment (clog-*.seg, pre-written whole with
 * zeros) the end of its last non-zero byte. A test that fills the "disk" with
 * RLIMIT_FSIZE sets the limit just past it (a write at an offset past the limit
 * fails with EFBIG, inside a pre-written file too). -1 when dir cannot be read. */
long long tu_store_bytes_used(const char *dir);

/* Create a fresh directory under $TMPDIR (or /tmp) named hg-<tag>-XXXXXX and
 * write its path into path[pathlen]. Returns 0 / -1. */
int tu_mkdtemp(const char *tag, char *path, size_t pathlen);

/* Remove a directory tree (like rm -rf). Returns 0 / -1. Refuses paths not
 * under the temp directory, so a bug can never delete something else. */
int tu_rmtree(const char *path);

/* A TCP port on 127.0.0.1 that is free right now: a random one from
 * TU_PORT_LOW up to the kernel's ephemeral range (ip_local_port_range),
 * which a bind (without SO_REUSEADDR) proves free. Never one of the
 * ephemeral range: any outgoing connection's local end may take such a
 * port between the pick and the program's bind (the demo lost its
 * compensator's metrics port to the consumer's connection that way).
 * Claimed among the test processes of this machine (a lock file in
 * /tmp/hg-test-ports, held until 64 later picks of this process or its
 * end), so two tests running at once never pick the same port in the window
 * before its program binds it. Returns the port, or -1. */
int tu_free_port(void);

/* Monotonic milliseconds, and wall-clock milliseconds since the epoch. */
uint64_t tu_now_mono_ms(void);
uint64_t tu_now_wall_ms(void);

/* Monotonic microseconds (a benchmark's timer). */
uint64_t tu_now_mono_us(void);

/* A benchmark's fatal error: "prog: <the formatted message>" and a newline to
 * stderr, then exit(1). Does not return. */
void tu_die(const char *prog, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));

/* CPU seconds (user + system) process pid has used so far, from
 * /proc/PID/stat; -1 when it cannot be read. */
double tu_proc_cpu_secs(pid_t pid);

/* Poll cond(ctx) every interval until it returns nonzero or deadline_ms passes.
 * Returns 0 when the condition became true, -1 on timeout. */
int tu_poll_until(int (*cond)(void *ctx), void *ctx, int deadline_ms, int interval_ms);

/* Wait up to deadline_ms for child pid to exit (polling every 10 ms): its
 * exit status, or -1 when it did not exit in time (then it is killed with
 * SIGKILL and reaped) or was killed by a signal. *ms gets the time waited. */
int tu_wait_exit(pid_t pid, int deadline_ms, uint64_t *ms);

/* Poll the file at path (a daemon's log) every 20 ms until it contains text
 * or deadline_ms passes: 0 found, -1 not (or the file unreadable). */
int tu_wait_file_contains(const char *path, const char *text, int deadline_ms);

/* Write text into the file at path (replacing it). Returns 0 / -1. */
int tu_write_file(const char *path, const char *text);

/* Run argv[0] (a path) with argv, stdin inherited, stdout and stderr both
 * into out[outlen] (NUL-terminated; what does not fit is read and dropped, so
 * the child never blocks on a full pipe). Returns the exit status, or -1 when
 * it did not exit normally or could not be started. */
int tu_run_capture(const char *const *argv, char *out, size_t outlen);

/* An argument vector built word by word — the tests' hourglass-cli runs: a
 * fixed front (the program, --uri …), the words a caller's varargs gave, the
 * flags that follow. At most TU_ARGV_MAX words, always NULL-terminated; a
 * word beyond that is dropped and remembered, and tu_run_capture_argv
 * refuses to run such a vector (a test never runs a command cut short). */
#define TU_ARGV_MAX 64
typedef struct tu_argv {
    const char *word[TU_ARGV_MAX + 1]; /* borrowed: the strings outlive the run */
    size_t n;
    int overflow; /* words were dropped */
} tu_argv_t;

/* An empty vector. */
void tu_argv_init(tu_argv_t *a);

/* Append word (not NULL). */
void tu_argv_add(tu_argv_t *a, const char *word);

/* Append words[0..] up to their NULL (words may be NULL: nothing). */
void tu_argv_add_list(tu_argv_t *a, const char *const *words);

/* Append ap's const char * arguments up to their NULL (ap is used up: the
 * caller va_ends it). */
void tu_argv_add_va(tu_argv_t *a, va_list ap);

/* 0 when a holds every word it was given, else -1 with the cause on stderr
 * (the first word named). */
int tu_argv_check(const tu_argv_t *a);

/* tu_run_capture of a's words: the exit status, or -1 (tu_argv_check failed,
 * or tu_run_capture's -1). */
int tu_run_capture_argv(const tu_argv_t *a, char *out, size_t outlen);

/* GET path from 127.0.0.1:port over HTTP/1.0; the whole response (status
 * line, headers, body) into out[outlen], NUL-terminated, cut to fit. Returns
 * the HTTP status, or -1 when the connection or the status line failed, or
 * when the server had not closed after TU_HTTP_DEADLINE_MS (said on stderr;
 * what came is in out): a daemon that accepts and never answers fails the
 * test instead of hanging it. So do tu_http_request and tu_http_get_host. */
#define TU_HTTP_DEADLINE_MS 30000
int tu_http_get(int port, const char *path, char *out, size_t outlen);

/* tu_http_request with a deadline of deadline_ms in place of
 * TU_HTTP_DEADLINE_MS. */
int tu_http_request_within(int port, const char *req, int rl, char *out, size_t outlen, int deadline_ms);

/* Send req (rl bytes: a whole request, head and body, as the test wrote it)
 * to 127.0.0.1:port and read the response until the server closes; as
 * tu_http_get. For a request the other helpers cannot write (two Host
 * headers). */
int tu_http_request(int port, const char *req, int rl, char *out, size_t outlen);

/* GET path from 127.0.0.1:port with the given Host header over HTTP/1.1
 * (NULL: no Host, over HTTP/1.0), Connection: close; as tu_http_get. */
int tu_http_get_host(int port, const char *path, const char *host, char *out, size_t outlen);

/* Connect to 127.0.0.1:port, send a request line and header lines of 1000
 * bytes each, without the empty line that ends them, until the peer stops
 * reading or closes, or limit bytes are sent. Returns how many bytes went
 * out (-1: no connection); the peer's first reply bytes (within 10 s) in
 * reply[replylen], "" when none. */
long tu_http_flood_headers(int port, size_t limit, char *reply, size_t replylen);

/* Open n connections to 127.0.0.1:port into fds[n] (the caller closes
 * them) and send a GET /healthz on the last one: 1 when it was answered 200
 * within 10 s (the reply in reply[replylen]), 0 when not, -1 (none left open)
 * when a connect failed. A connection cap's test: the n are accepted and
 * counted before the next. */
int tu_http_fill(int port, int n, int *fds, char *reply, size_t replylen);

/* A slowloris client: a GET of /metrics on 127.0.0.1:port sent a byte every
 * 200 ms (the head never ends), until the server answers or closes, or
 * limit_s pass. Its answer in reply[replylen] (empty: none); returns the
 * seconds it took, -1 when the connect failed. */
double tu_http_trickle(int port, double limit_s, char *reply, size_t replylen);

/* Poll GET path (tu_http_get) every interval_ms until it answers status
 * want: 0 then, -1 when deadline_ms passed first. The last response is in
 * out[outlen] either way. */
int tu_poll_http_status(int port, const char *path, int want, int deadline_ms, int interval_ms, char *out,
                        size_t outlen);

/* How many times text occurs in the first 4 MiB of the file at path (-1
 * when it cannot be read). */
int tu_file_count(const char *path, const char *text);

/* Watch GET path (tu_http_get) every interval_ms for span_ms, as a
 * load balancer's probe would: *answered counts the 200 and 503 answers,
 * and the return value the 503s. The first 503's response goes into
 * first[firstlen] (left empty when there was none) and how long after the
 * start it came, in seconds, into *first_s. */
int tu_watch_http_503(int port, const char *path, int span_ms, int interval_ms, int *answered, char *first,
                      size_t firstlen, double *first_s);

/* Compare the metric families of page (a daemon's /metrics text: its
 * "# TYPE NAME TYPE" lines) with the table under "## daemon" in
 * docs/metrics.md (HG_SRCDIR): a family served but not listed, listed but
 * not served, or served with another type than the table's is printed to
 * stderr, naming it. Returns how many differ (0: the same), -1 when the
 * page has no family or the file or its section cannot be read (printed). */
int tu_metrics_doc_diff(const char *page, const char *daemon);

/* A blocking TCP connection to 127.0.0.1:port (close-on-exec), or -1 with
 * errno. Each attempt waits at most LOOPBACK_DIAL_TRY_MS and a stalled one is
 * made again from a new port, LOOPBACK_DIAL_TRIES times
 * (tests/helpers/loopback_dial.h): a lost loopback SYN costs 1 s, not the
 * kernel's 127 s of retransmits; running out of tries is said on stderr. */
int tu_tcp_connect(int port);

/* What tu_tcp_connect_with sets on each attempt's socket before its
 * connect. */
typedef struct tu_dial_opts {
    const char *source; /* local IPv4 address to connect from ("127.0.0.2"); NULL: the kernel's choice */
    int rcvbuf;         /* SO_RCVBUF in bytes, set before the SYN so the window offered follows it; 0: default */
} tu_dial_opts_t;

/* tu_tcp_connect, each attempt's socket first given opts (NULL: none). A
 * source address that cannot be bound or a buffer size refused ends it: -1
 * with that errno, said on stderr naming the address or the size. */
int tu_tcp_connect_with(int port, const tu_dial_opts_t *opts);

/* This machine's first non-loopback IPv4 address, into buf. 0, or -1 when
 * it has none. A connection to it from this machine has that address as its
 * peer: what a client from another host looks like to a server. */
int tu_own_ipv4(char *buf, size_t len);

/* A private MariaDB server: mariadb-install-db into dir/data, mariadbd with
 * skip-networking (unless tcp_port) on dir/mysql.sock, run as the current user (root is fine).
 * tu_mariadb_start waits (poll, generous deadline) until it accepts
 * connections. On failure it returns -1 and err holds the server's own error
 * (the tail of its log), so a test fails with the real cause — never skips. */
#define TU_MARIADB_MAX_EXTRA 8
typedef struct tu_mariadb {
    char dir[512];    /* the temp dir holding data, socket, log */
    char socket[600]; /* unix socket path to connect with */
    pid_t pid;        /* mariadbd pid, 0 when stopped */
    /* Set before tu_mariadb_start, or NULL: up to TU_MARIADB_MAX_EXTRA more
     * mariadbd flags, NULL-terminated (a bench's --log-bin, say). */
    const char *const *extra_args;
    /* Set before tu_mariadb_start, or NULL: mount a tmpfs of this size
     * (mount(8)'s size=, "64m"; needs root, as CI runs) on DIR/data before
     * the install, so that a test can fill the server's disk (the datadir
     * takes ~45 MB once the server runs). tu_mariadb_stop unmounts it. */
    const char *tmpfs_size;
    int tmpfs_mounted; /* set by tu_mariadb_start */
    /* Set before tu_mariadb_start, or 0: listen on 127.0.0.1:tcp_port as
     * well (tu_free_port) instead of --skip-networking — for a test of what
     * only TCP has (TLS: --ssl-* flags in extra_args). */
    int tcp_port;
} tu_mariadb_t;

int tu_mariadb_start(tu_mariadb_t *db, char *err, size_t errlen);
/* Start mariadbd again on db's existing dir (same flags, socket, data), as
 * a service manager restarts a server that aborted, and wait until it
 * accepts connections (crash recovery included). The old process must have
 * exited (it is reaped here); -1 with the cause in err otherwise, or when
 * the new one dies or does not answer in time (the tail of its log). */
int tu_mariadb_restart(tu_mariadb_t *db, char *err, size_t errlen);
/* Stop the server (SIGTERM, wait, SIGKILL after a deadline) and remove its dir. */
void tu_mariadb_stop(tu_mariadb_t *db);

/* The main() of every CUnit test program: initialise the registry, call
 * add_suites() (which adds suites and tests and returns 0, or -1 on a CUnit
 * error), run everything in verbose basic mode and return the exit code —
 * 0 when nothing failed, 1 otherwise. CU_basic_run_tests alone returns success
 * even when assertions fail, so the failure count is read before the registry
 * is cleaned up (CONTRIBUTING.md). argv[1], when given, names one suite to run;
 * argv[2], one test of it (its full name). Each case's line ends with its wall
 * time: "passed (12.3 s)" or "FAILED (12.3 s)". */
int tu_cunit_main(int argc, char **argv, int (*add_suites)(void));

/* A suite of a CUnit program: its name and its tests, a table ending with
 * {NULL, NULL}. */
typedef struct tu_test {
    const char *name;
    void (*fn)(void);
} tu_test_t;

typedef struct tu_suite {
    const char *name;
    const tu_test_t *tests;
} tu_suite_t;

/* Add suite name with its tests (a table ending with {NULL, NULL}); init /
 * cleanup run once around the suite, setup / teardown around every test
 * (each may be NULL). Returns 0, or -1 on a CUnit error. For add_suites. */
int tu_add_suite(const char *name, int (*init)(void), int (*cleanup)(void), void (*setup)(void), void (*teardown)(void),
                 const tu_test_t *tests);

/* tu_cunit_main for a program whose suites are a table: adds suites[0..n-1]
 * (each with setup/teardown around every test; both may be NULL) and runs
 * them like tu_cunit_main. Returns the exit code. */
int tu_suites_main(int argc, char **argv, const tu_suite_t *suites, size_t n, void (*setup)(void),
                   void (*teardown)(void));

/* One CUnit assertion, in two halves so that a passing check never touches
 * its message: tu_check_passed_at records a pass at file:line;
 * tu_check_failed_at formats the printf message and writes it (with
 * file:line) to stderr at once and into CUnit's failure list (CUnit copies
 * it); fatal ends the test (the suite's teardown still runs). Use them
 * through the macros below. */
void tu_check_passed_at(const char *file, int line);
void tu_check_failed_at(int fatal, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* TU_CHECK(n == 3, "PULL returned %d messages, want 3", n). The condition is
 * evaluated once, first. The message's arguments are evaluated only when it
 * is false, and after it: a message may print what the condition's calls
 * wrote, and an argument valid only on failure (an index the condition
 * guards: TU_CHECK(i == 0 || a[i - 1] < a[i], "%d", a[i - 1])) is safe. So
 * an argument must never carry a side effect the test needs: it runs on
 * failure only. The compiler checks the format against the arguments at
 * every call site all the same. TU_REQUIRE ends the test when the condition
 * is false. */
#define TU_CHECK(cond, ...)   TU_ASSERT_AT_(cond, 0, __LINE__, __VA_ARGS__)
#define TU_REQUIRE(cond, ...) TU_ASSERT_AT_(cond, 1, __LINE__, __VA_ARGS__)

/* The same, reported at line (a helper's caller's __LINE__). */
#define TU_CHECK_AT(cond, line, ...)   TU_ASSERT_AT_(cond, 0, line, __VA_ARGS__)
#define TU_REQUIRE_AT(cond, line, ...) TU_ASSERT_AT_(cond, 1, line, __VA_ARGS__)

/* The four above: the message (__VA_ARGS__) appears only in the failing
 * branch. */
#define TU_ASSERT_AT_(cond, fatal, line, ...)                           \
    do {                                                                \
        int tu_ok_ = (cond) ? 1 : 0;                                    \
        if (tu_ok_)                                                     \
            tu_check_passed_at(__FILE__, (line));                       \
        else                                                            \
            tu_check_failed_at((fatal), __FILE__, (line), __VA_ARGS__); \
    } while (0)

#endif
