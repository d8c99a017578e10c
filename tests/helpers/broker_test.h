/*
 * tests/helpers/broker_test.h — the fixture and helpers the broker's CUnit
 * integration tests share (test_broker_*.c), on top of broker_proc and
 * resp_client.
 *
 * The fixture is one broker (bt_broker) and one client connection to it
 * (bt_conn) per test: bt_setup / bt_teardown are the suite's setup and
 * teardown (bt_main installs them), bt_start starts the broker and connects.
 * The helpers assert with BP_CHECK / BP_REQUIRE (a failed BP_REQUIRE ends the
 * test; teardown still stops the broker and removes its dir), so they run on
 * the main thread only, except bt_ack_reply, which only reports.
 *
 * Waiting is always a poll with a deadline (tu_poll_until) or a blocking
 * PULL, never a sleep.
 */
#ifndef HG_TESTS_BROKER_TEST_H
#define HG_TESTS_BROKER_TEST_H

#include <stddef.h>

#include "tests/helpers/broker_proc.h"
#include "tests/helpers/resp_client.h"
#include "tests/helpers/testutil.h"

/* The broker of the running test and a client connected to it by bt_start. */
extern bp_broker_t bt_broker;
extern rc_conn_t bt_conn;

/* Suite setup: zero the fixture (bt_conn closed). */
void bt_setup(void);

/* Suite teardown: close bt_conn and destroy the broker; a broker that did
 * not end cleanly (bp_destroy) is a failed check. */
void bt_teardown(void);

/* Start the broker with extra flags (NULL-terminated, may be NULL) and
 * connect bt_conn; requires both. */
void bt_start(const char *const *extra);

/* bt_start with RLIMIT_NOFILE nofile for the broker (bp_start_limited). */
void bt_start_limited(long nofile, const char *const *extra);

/* Preload the fsync shim (tests/helpers/failsync.c) into the broker started
 * next: its next sync of the write-ahead log after the file trigger exists
 * fails (or, with HG_FAILSYNC_DELAY_MS set, waits that long). The trigger's
 * path, in a new temp dir shimdir[dirlen], into trigger[triggerlen]. The
 * caller unsets LD_PRELOAD once the broker started. Requires the shim. */
void bt_preload_failsync(char *shimdir, size_t dirlen, char *trigger, size_t triggerlen);

/* Poll INFO until blocked_clients is want (the broker holds that many PULL
 * BLOCKs); requires it within 10 s. */
void bt_wait_blocked(const char *want);

/* Poll GROUP LIST until group's numeric field equals want; requires it
 * within deadline_ms. */
void bt_wait_field(const char *group, const char *field, long long want, int deadline_ms);

/* A power cut in the middle of the last write, as the tests make one:
 * bt_start, BT_TORN_WHOLE SENDs to topic "t" and one more, kill -9, then
 * the last 30 bytes of the newest write-ahead log zeroed (its last record
 * keeps its header and loses the rest of its body). The log's path into
 * log. Requires every step. */
#define BT_TORN_WHOLE 20
/* every SEND of bt_torn_log_end: the one whose LevelDB record the cut loses is in the commit log, which the
 * next open redoes (docs/design-commitlog.md §3) */
#define BT_TORN_SENT (BT_TORN_WHOLE + 1)
void bt_torn_log_end(char *log, size_t loglen);

/* How many times text occurs in bt_broker's log (tu_file_count). */
int bt_log_count(const char *text);

/* An immediate PULL (COUNT 10, no BLOCK) of group/topic returns nothing. */
void bt_expect_nothing_ready(const char *group, const char *topic);

/* PULL exactly one message (BLOCK block_ms, LEASE lease unless NULL);
 * requires one. *m points into *rep, which the caller frees. */
void bt_pull_one(const char *group, const char *topic, const char *block_ms, const char *lease, resp_reply_t **rep,
                 rc_msg_t *m);

/* ACK group id... for every message of the PULL reply r on c; *released is the reply's count. Returns 0, or -1 with
 * the cause in err (a message that does not decode, a failed connection, a
 * reply that is not an integer, more than BT_ACK_MAX messages). Safe on
 * any thread: it asserts nothing. Sends nothing when r holds no message
 * (*released 0). */
#define BT_ACK_MAX 1000
int bt_ack_reply(rc_conn_t *c, const char *group, const resp_reply_t *r, long long *released, char *err, size_t errlen);

/* The main() of a broker test: one suite named suite with tests (ending
 * with {NULL, NULL}), each run between bt_setup and bt_teardown; the
 * broker's log is printed for a test that failed. argv[1] may name the
 * suite. Returns the exit code (tu_cunit_main). */
int bt_main(int argc, char **argv, const char *suite, const tu_test_t *tests);

/* bt_main with after() run after each test's bt_teardown (what the suite's
 * tests leave beside the broker: a users file's directory, say), so that a
 * test that fails half-way leaves nothing behind either. */
int bt_main_after(int argc, char **argv, const char *suite, const tu_test_t *tests, void (*after)(void));

#endif
