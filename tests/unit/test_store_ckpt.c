/*
 * tests/unit/test_store_ckpt.c — checkpoints on the commit log's own thread
 * (store_options_t.checkpoint_on_thread, levels/clog_redo.h
 * redo_checkpoint_async) against a slow disk: this program defines
 * fdatasync, so every fdatasync made off the test's own thread (the
 * checkpoint's, LevelDB's compactions) can be made to take SLOW_SYNC_MS
 * first. The owner's own syncs (the log's) stay fast, so the commits outrun
 * the checkpoints, as a flood's do.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tests/helpers/store_fixture.h"

#define SLOW_SYNC_MS 40

static pthread_t g_owner;
static atomic_int g_slow;

int fdatasync(int fd)
{
    static int (*real)(int);
    if (real == NULL) {
        real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    }
    if (atomic_load(&g_slow) && !pthread_equal(pthread_self(), g_owner)) {
        struct timespec t = { 0, SLOW_SYNC_MS * 1000000L };
        nanosleep(&t, NULL);
    }
    return real(fd);
}

/* Commits of 200 kB outrun checkpoints whose every file sync takes 40 ms:
 * the owner waits for the running one once half of checkpoint_bytes was
 * applied since it began, so the log an open would redo never passes
 * checkpoint_bytes and the two commits that crossed the halves; the
 * checkpoints did run on the thread, and everything is there after a
 * reopen. */
static void test_owner_waits_for_a_slow_checkpoint(void)
{
    store_options_t o;
    opts_default(&o);
    o.segment_bytes = UINT64_C(4) << 20;
    o.checkpoint_bytes = STORE_CHECKPOINT_MIN_BYTES;
    o.checkpoint_on_thread = 1;
    o.sync = 1; /* each commit synced and applied at once, by this thread */
    store_t *s = OPEN(&o);
    static char big[200000];
    memset(big, 'b', sizeof big);
    const uint64_t bound = o.checkpoint_bytes + 2 * (sizeof big + (UINT64_C(64) << 10));
    uint64_t worst = 0;
    int running = 0;
    char err[512] = "";
    g_owner = pthread_self();
    atomic_store(&g_slow, 1);
    for (int i = 0; i < 60; i++) {
        uint64_t id, due;
        REQUIRE_OK(send_raw(s, "t", 1, NULL, 0, big, sizeof big, 0, 0, T0, &id, &due, err, sizeof err), err);
        COMMIT(s);
        uint64_t since = store_log_since_checkpoint(s);
        worst = since > worst ? since : worst;
        running += store_log_checkpoint_running(s);
    }
    atomic_store(&g_slow, 0);
    printf("\n    60 commits of 200 kB, file syncs off the owner 40 ms each: %d left a checkpoint running; the log "
           "since the last finished checkpoint at most %llu bytes (bound %llu)",
           running, (unsigned long long)worst, (unsigned long long)bound);
    TU_CHECK(running > 0, "no commit left a checkpoint running on the log's thread");
    TU_CHECK(worst <= bound, "the log since the last finished checkpoint reached %llu bytes, over %llu",
             (unsigned long long)worst, (unsigned long long)bound);
    CHECK_STORE(s);
    CLOSE(&s);
    s = OPEN(&o);
    store_topic_info_t ti;
    TU_CHECK(store_topic_info(s, "t", 1, &ti) == 1 && ti.appended == 60, "topic holds %llu",
             (unsigned long long)ti.appended);
    CHECK_STORE(s);
    CLOSE(&s);
}

static const tu_test_t ckpt_tests[] = {
    { "the owner waits for a slow checkpoint on the log's thread: the redo stays within checkpoint_bytes",
      test_owner_waits_for_a_slow_checkpoint },
    { NULL, NULL },
};

static const tu_suite_t suites[] = {
    { "checkpoint", ckpt_tests },
};

int main(int argc, char **argv)
{
    return tu_suites_main(argc, argv, suites, sizeof suites / sizeof suites[0], store_fixture_setup,
                          store_fixture_teardown);
}
