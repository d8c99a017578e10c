/*
 * tests/helpers/broker_test.c — the broker tests' shared fixture and
 * helpers (contract in broker_test.h).
 *
 * The fixture is two globals because CUnit's setup/teardown take no
 * argument; every test program runs one test at a time on the main thread.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "tests/helpers/broker_test.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <CUnit/CUnit.h>

bp_broker_t bt_broker;
rc_conn_t bt_conn;

void bt_setup(void)
{
    memset(&bt_broker, 0, sizeof bt_broker);
    memset(&bt_conn, 0, sizeof bt_conn);
    bt_conn.fd = -1;
}

void bt_teardown(void)
{
    rc_close(&bt_conn);
    BP_CHECK(bp_destroy(&bt_broker) == 0, "the broker did not end cleanly (see above)");
}

void bt_start(const char *const *extra)
{
    bt_start_limited(0, extra);
}

void bt_preload_failsync(char *shimdir, size_t dirlen, char *trigger, size_t triggerlen)
{
    char shim[700], asan[1024];
    struct stat st;
    TU_REQUIRE(tu_mkdtemp("hg-failsync", shimdir, dirlen) == 0, "temp dir");
    snprintf(trigger, triggerlen, "%s/trigger", shimdir);
    snprintf(shim, sizeof shim, "%s/tests/helpers/.libs/failsync.so", HG_BUILDDIR);
    TU_REQUIRE(stat(shim, &st) == 0, "the shim %s is not built", shim);
    setenv("LD_PRELOAD", shim, 1);
    setenv("HG_FAILSYNC_TRIGGER", trigger, 1);
    unsetenv("HG_FAILSYNC_ONLY"); /* any file's sync takes the trigger unless the case says otherwise after this */
    const char *old = getenv("ASAN_OPTIONS"); /* leave to preload a library before ASan's runtime */
    snprintf(asan, sizeof asan, "%s%sverify_asan_link_order=0", old ? old : "", old && old[0] ? ":" : "");
    setenv("ASAN_OPTIONS", asan, 1);
}

void bt_start_limited(long nofile, const char *const *extra)
{
    char e[8192];
    BP_REQUIRE(bp_start_limited(&bt_broker, nofile, extra, e, sizeof e) == 0, "start the broker: %s", e);
    BP_REQUIRE(bp_connect(&bt_broker, &bt_conn, e, sizeof e) == 0, "connect: %s", e);
}

struct blocked_wait {
    const char *want;
    char last[32];
};
static int blocked_is(void *ctx)
{
    struct blocked_wait *w = ctx;
    char e[300];
    return bp_info_field(&bt_conn, "blocked_clients", w->last, sizeof w->last, e, sizeof e) == 0 &&
           strcmp(w->last, w->want) == 0;
}

void bt_wait_blocked(const char *want)
{
    struct blocked_wait w = { want, "" };
    BP_REQUIRE(tu_poll_until(blocked_is, &w, 10000, 5) == 0, "INFO blocked_clients stayed '%s', want %s", w.last, want);
}

struct field_wait {
    const char *group, *field;
    long long want, last;
};
static int field_is(void *ctx)
{
    struct field_wait *w = ctx;
    char e[300];
    return bp_group_field(&bt_conn, w->group, w->field, &w->last, e, sizeof e) == 1 && w->last == w->want;
}

void bt_wait_field(const char *group, const char *field, long long want, int deadline_ms)
{
    struct field_wait w = { group, field, want, -1 };
    BP_REQUIRE(tu_poll_until(field_is, &w, deadline_ms, 20) == 0, "group %s: %s stayed %lld, want %lld within %d ms",
               group, field, w.last, want, deadline_ms);
}

/* The newest write-ahead log of dir into path (its size returned), or -1. */
static long newest_log(const char *dir, char *path, size_t pathlen)
{
    DIR *d = opendir(dir);
    if (d == NULL)
        return -1;
    char best[256] = "";
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        if (n == 10 && strcmp(e->d_name + 6, ".log") == 0 && strcmp(e->d_name, best) > 0)
            snprintf(best, sizeof best, "%s", e->d_name);
    }
    closedir(d);
    struct stat st;
    snprintf(path, pathlen, "%s/%s", dir, best);
    return best[0] != '\0' && stat(path, &st) == 0 ? (long)st.st_size : -1;
}

int bt_log_count(const char *text)
{
    return tu_file_count(bt_broker.log_path, text);
}

void bt_torn_log_end(char *log, size_t loglen)
{
    char e[8192], id[32];
    bt_start(NULL);
    for (int i = 0; i < BT_TORN_WHOLE; i++)
        BP_REQUIRE(bp_send(&bt_conn, id, sizeof id, e, sizeof e, "t", "whole", NULL) == 0, "%s", e);
    BP_REQUIRE(bp_send(&bt_conn, id, sizeof id, e, sizeof e, "t", "the-last-one-torn-by-a-power-cut", NULL) == 0, "%s",
               e);
    rc_close(&bt_conn);
    BP_REQUIRE(bp_kill9(&bt_broker) == 0, "kill -9");
    long size = newest_log(bt_broker.data_dir, log, loglen);
    BP_REQUIRE(size > 40, "no write-ahead log with records in %s", bt_broker.data_dir);
    FILE *f = fopen(log, "r+b");
    BP_REQUIRE(f != NULL && fseek(f, size - 30, SEEK_SET) == 0, "open %s", log);
    for (int i = 0; i < 30; i++)
        fputc(0, f);
    fclose(f);
}

void bt_expect_nothing_ready(const char *group, const char *topic)
{
    char e[1024];
    resp_reply_t *r = bp_pull(&bt_conn, e, sizeof e, group, topic, "COUNT", "10", NULL);
    BP_REQUIRE(r != NULL, "%s", e);
    BP_CHECK(r->count == 0, "PULL %s %s returned %zu messages, want none yet", group, topic, r->count);
    resp_reply_free(r);
}

void bt_pull_one(const char *group, const char *topic, const char *block_ms, const char *lease, resp_reply_t **rep,
                 rc_msg_t *m)
{
    char e[1024];
    resp_reply_t *r = lease != NULL
                          ? bp_pull(&bt_conn, e, sizeof e, group, topic, "BLOCK", block_ms, "LEASE", lease, NULL)
                          : bp_pull(&bt_conn, e, sizeof e, group, topic, "BLOCK", block_ms, NULL);
    BP_REQUIRE(r != NULL, "%s", e);
    BP_REQUIRE(r->count == 1, "PULL %s %s BLOCK %s returned %zu messages, want 1", group, topic, block_ms, r->count);
    BP_REQUIRE(rc_msg_at(r, 0, m, e, sizeof e) == 0, "%s", e);
    *rep = r;
}

int bt_ack_reply(rc_conn_t *c, const char *group, const resp_reply_t *r, long long *released, char *err, size_t errlen)
{
    const char *argv[2 + BT_ACK_MAX];
    char ids[BT_ACK_MAX][sizeof((rc_msg_t *)0)->id];
    int argc = 0;
    *released = 0;
    if (r->count > BT_ACK_MAX) {
        snprintf(err, errlen, "ACK of %zu messages: more than %d", r->count, BT_ACK_MAX);
        return -1;
    }
    argv[argc++] = "ACK";
    argv[argc++] = group;
    for (size_t i = 0; i < r->count; i++) {
        rc_msg_t m;
        if (rc_msg_at(r, i, &m, err, errlen) != 0)
            return -1;
        snprintf(ids[i], sizeof ids[i], "%s", m.id);
        argv[argc++] = ids[i];
    }
    if (argc == 2)
        return 0;
    resp_reply_t *a = rc_cmdv(c, argc, argv, NULL);
    *released = -1;
    if (a == NULL) {
        snprintf(err, errlen, "ACK: %s", c->err);
        return -1;
    }
    int rc = rc_int(a, released);
    if (rc != 0)
        rc_describe(a, err, errlen);
    resp_reply_free(a);
    return rc;
}

static void (*bt_after)(void);

static void bt_teardown_after(void)
{
    bt_teardown();
    if (bt_after != NULL)
        bt_after();
}

int bt_main_after(int argc, char **argv, const char *suite, const tu_test_t *tests, void (*after)(void))
{
    const tu_suite_t suites[] = { { suite, tests } };
    bt_after = after;
    bp_set_failure_counter(CU_get_number_of_failures);
    return tu_suites_main(argc, argv, suites, 1, bt_setup, bt_teardown_after);
}

int bt_main(int argc, char **argv, const char *suite, const tu_test_t *tests)
{
    return bt_main_after(argc, argv, suite, tests, NULL);
}
