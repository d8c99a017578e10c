/*
 * tests/helpers/broker_proc.h — run the real hourglass-broker for a test.
 *
 * bp_start makes a fresh temp dir (hg-broker-XXXXXX), picks free ports, starts
 * the broker on 127.0.0.1 with its data in DIR/data and its stderr in
 * DIR/broker.log, and waits (polling, generous deadline) until it answers
 * PING. bp_stop / bp_kill9 / bp_restart control it; bp_restart reuses the
 * same dir, ports and flags. bp_destroy stops it, prints its log when the
 * test failed (see bp_set_failure_counter) and removes the dir.
 *
 * The binary is $HG_BROKER when set, else HG_BUILDDIR "/hourglass-broker".
 * $HG_KEEP_TMP=1 keeps the temp dirs for a post-mortem.
 *
 * The broker child runs in its own session with PR_SET_PDEATHSIG(SIGKILL):
 * a test that crashes leaves no broker behind. Start it from a thread that
 * outlives it (the main thread).
 *
 * Errors: 0 / -1 with the cause (and the tail of the broker's log when it
 * helps) in err[errlen].
 */
#ifndef HG_TESTS_BROKER_PROC_H
#define HG_TESTS_BROKER_PROC_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "tests/helpers/resp_client.h"
#include "tests/helpers/testutil.h"

/* The broker's flag names (docs/broker.md). */
#define BP_FLAG_PORT         "--port"
#define BP_FLAG_DIR          "--dir"
#define BP_FLAG_METRICS_PORT "--metrics-port"
#define BP_FLAG_SEGMENT_SIZE "--commitlog-segment-size" /* TU_SEGMENT_BYTES */

#define BP_MAX_EXTRA         32    /* most extra flags */
#define BP_START_DEADLINE_MS 60000 /* start (or restart after kill -9) to first PONG */
#define BP_STOP_DEADLINE_MS  30000 /* SIGTERM to exit, then SIGKILL */

typedef struct bp_broker {
    char dir[512];         /* the temp dir */
    char data_dir[600];    /* DIR/data: the broker's data directory */
    char log_path[600];    /* DIR/broker.log: the broker's stdout+stderr */
    char binary[512];      /* the program run */
    int port;              /* RESP port on 127.0.0.1 */
    int metrics_port;      /* HTTP /metrics port */
    pid_t pid;             /* 0 when not running */
    int last_status;       /* wait status of the last exit */
    int exit_expected;     /* the last exit was asked for (stop, kill9, wait_exit) */
    int died_unexpectedly; /* it exited without being asked, at some point */
    int nextra;
    char *extra[BP_MAX_EXTRA];
    long nofile; /* > 0: RLIMIT_NOFILE (soft and hard) of the child, set before exec
                  * (bp_start_limited; bp_restart keeps it) */
    unsigned failures_at_start;
    uint64_t start_ms; /* monotonic ms: fork to first PONG of the last (re)start */
} bp_broker_t;

/* Tell bp_start/bp_destroy how to count test failures (e.g.
 * CU_get_number_of_failures): bp_destroy prints the broker's log when the
 * count grew since bp_start. */
void bp_set_failure_counter(unsigned (*fn)(void));

/* Start a broker in a fresh temp dir. extra: further flags, a NULL-terminated
 * array (may be NULL), e.g. {"--fsync", "no", NULL}. Returns 0 once it
 * answered PING, or -1 (nothing left running, dir removed). */
int bp_start(bp_broker_t *b, const char *const *extra, char *err, size_t errlen);

/* bp_start with RLIMIT_NOFILE (soft and hard) nofile for the broker, as
 * `ulimit -n nofile` would give it (0: this process's limit). */
int bp_start_limited(bp_broker_t *b, long nofile, const char *const *extra, char *err, size_t errlen);

/* bp_start with the extra flags as NULL-terminated varargs. */
int bp_startl(bp_broker_t *b, char *err, size_t errlen, ...) __attribute__((sentinel));

/* Start again on the same dir, ports and flags (after bp_stop or bp_kill9);
 * waits for PING. Returns 0 / -1. */
int bp_restart(bp_broker_t *b, char *err, size_t errlen);

/* Start without waiting for PING (for measuring). Returns 0 / -1. */
int bp_spawn(bp_broker_t *b, char *err, size_t errlen);

/* Poll until the broker answers PING or exits or deadline_ms passes.
 * Returns 0 / -1. */
int bp_wait_ready(bp_broker_t *b, int deadline_ms, char *err, size_t errlen);

/* SIGTERM and wait for the exit; SIGKILL after BP_STOP_DEADLINE_MS.
 * Returns 0 when it exited by itself with status 0, else -1 (err says how it
 * ended). A broker that is not running returns 0. */
int bp_stop(bp_broker_t *b, char *err, size_t errlen);

/* SIGKILL and reap. Returns 0 / -1. */
int bp_kill9(bp_broker_t *b);

/* Wait up to deadline_ms for the broker to exit by itself (after SHUTDOWN).
 * Returns 0 when it exited with status 0, -1 otherwise (err says how). */
int bp_wait_exit(bp_broker_t *b, int deadline_ms, char *err, size_t errlen);

/* 1 when the process is still running (reaps it when it is not). */
int bp_alive(bp_broker_t *b);

/* Stop (if running), print the log when the test failed, remove the dir
 * (unless $HG_KEEP_TMP). Safe on a zeroed or already destroyed struct.
 * Returns 0, or -1 when the broker did not end well: it ignored SIGTERM or
 * exited non-zero on it (e.g. a sanitizer report at exit), or it had died
 * on its own earlier (not by bp_kill9 / bp_stop / an awaited SHUTDOWN); the
 * cause and the log go to stderr. */
int bp_destroy(bp_broker_t *b);

/* Print the last max_bytes of the broker's log to f, with a heading. */
void bp_print_log(const bp_broker_t *b, FILE *f, size_t max_bytes);

/* Run `hourglass-broker --check-data DIR` on b's (stopped) data directory
 * with b's extra flags (its level table etc.); stdout and stderr into out.
 * Returns the exit status, or -1 when it did not exit normally. */
int bp_check_data(const bp_broker_t *b, char *out, size_t outlen);

/* 1 when the broker's log contains text. */
int bp_log_contains(const bp_broker_t *b, const char *text);

/* Connect a client to the broker (default timeout 10 s). Returns 0 / -1. */
int bp_connect(const bp_broker_t *b, rc_conn_t *c, char *err, size_t errlen);

/* The broker's resident set size in KiB (VmRSS), or -1. */
long bp_rss_kib(const bp_broker_t *b);

/* A describe of a wait status ("exited with status 1", "killed by signal 9"). */
void bp_describe_status(int status, char *buf, size_t len);

/* ---- Hourglass commands, for tests and the bench -------------------------
 * Each returns -1 with the cause in err when the connection failed or the
 * broker answered an error (err then holds the error text, e.g.
 * "ERR group g is bound to topic a, not b"). Options are NULL-terminated
 * C strings. */

/* SEND topic payload [options...]; the id (16 hex digits) into id_out[id_len]. */
int bp_send(rc_conn_t *c, char *id_out, size_t id_len, char *err, size_t errlen, const char *topic, const char *payload,
            ...) __attribute__((sentinel));

/* PULL group topic [options...]. Returns the array reply (free with
 * resp_reply_free; messages via rc_msg_at) or NULL. The read waits for the
 * BLOCK given (BLOCK 0: forever, capped at 10 min) plus 10 s. */
resp_reply_t *bp_pull(rc_conn_t *c, char *err, size_t errlen, const char *group, const char *topic, ...)
    __attribute__((sentinel));

/* A command whose reply is an integer (ACK, NACK, TOUCH, DLQ LEN ...): *out.
 * rc_int rules: a numeric bulk is accepted too. */
int bp_int_cmd(rc_conn_t *c, long long *out, char *err, size_t errlen, const char *arg0, ...) __attribute__((sentinel));

/* A command that must answer +OK. */
int bp_ok_cmd(rc_conn_t *c, char *err, size_t errlen, const char *arg0, ...) __attribute__((sentinel));

/* LEVELS row of one level: its delay, depth and next due time (0 when empty).
 * Returns 0, or -1 (bad reply, no such level). */
int bp_level(rc_conn_t *c, int level, uint64_t *delay_ms, uint64_t *depth, uint64_t *next_due_ms, char *err,
             size_t errlen);

/* A numeric field of one group from GROUP LIST (e.g. "inflight", "dlq",
 * "backlog"). Returns 1 with *out, 0 when the group is not listed, -1 on
 * error. field "topic" is refused (use bp_group_topic). */
int bp_group_field(rc_conn_t *c, const char *group, const char *field, long long *out, char *err, size_t errlen);

/* The topic a group is bound to, from GROUP LIST: 1 found, 0 not listed, -1 error. */
int bp_group_topic(rc_conn_t *c, const char *group, char *topic, size_t topic_len, char *err, size_t errlen);

/* An INFO field ("connected_clients") as text: 0 / -1. */
int bp_info_field(rc_conn_t *c, const char *field, char *buf, size_t len, char *err, size_t errlen);

/* ---- assertions for CUnit tests ------------------------------------------
 * testutil.h's TU_CHECK / TU_REQUIRE under the names the broker tests use:
 * a failure whose text is a printf-formatted explanation, e.g.
 *   BP_CHECK(n == 3, "PULL returned %d messages, want 3", n);
 * the message's arguments evaluated only when the condition is false.
 * BP_REQUIRE ends the test (the suite's teardown still runs). */
#define BP_CHECK(cond, ...)   TU_CHECK(cond, __VA_ARGS__)
#define BP_REQUIRE(cond, ...) TU_REQUIRE(cond, __VA_ARGS__)

#endif
