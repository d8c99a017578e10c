/*
 * consumer/stop.c — hourglass-consumer's bounded stop (contract: stop.h).
 *
 * One thread sleeps on a pipe. A signal handler writes 's' (stop_request):
 * the first starts the grace, a later one cuts at once; stop_finish writes
 * 'q'. When the grace runs out before 'q', every published handle is cut
 * (hg_order_db_interrupt) and stop_cut answers 1 from then on.
 *
 * Invariants: slots are written (stop_adopt) and read by the cutter under
 * `lock`, and freed only by stop_finish after the thread is joined, so
 * hg_order_db_interrupt never meets a freed handle; a handle adopted after
 * the cut is cut by its worker under the same lock, so none escapes. The
 * cutter only shuts sockets down (hg_order_db_interrupt's lock and
 * shutdown(2)): it never waits on MariaDB, nor holds `lock` across anything
 * slower.
 * Threads: the stop thread's own; stop_request from a signal handler on any
 * thread; stop_adopt / stop_handle / stop_cut on workers; start and finish
 * on main.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "consumer/stop.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/units.h"
#include "common/log.h"

struct stop {
    size_t workers;
    uint64_t grace_ms;
    int pipe_fd[2]; /* 's' from stop_request, 'q' from stop_finish */
    pthread_t thread;
    pthread_mutex_t lock; /* guards dbs[] */
    hg_order_db **dbs;    /* worker i's handle, NULL until adopted */
    atomic_int cut;       /* 1 once the handles were cut */
};

/* Cut every published handle. The stop thread. */
static void cut_all(stop_t *s, const char *why)
{
    size_t n = 0;
    pthread_mutex_lock(&s->lock);
    atomic_store(&s->cut, 1);
    for (size_t i = 0; i < s->workers; i++)
        if (s->dbs[i] != NULL) {
            hg_order_db_interrupt(s->dbs[i]);
            n++;
        }
    pthread_mutex_unlock(&s->lock);
    log_msg(LOG_LEVEL_WARN,
            "stop: %s: %zu MariaDB connections cut; a cancel still in flight is rolled back and its message NACKed "
            "(it comes back)",
            why, n);
}

static void *stop_main(void *arg)
{
    stop_t *s = arg;
    char grace[32];
    units_format_duration(s->grace_ms, grace, sizeof grace);
    int stopping = 0;
    uint64_t deadline = 0; /* monotonic ms: when the grace runs out */
    for (;;) {
        int timeout = -1;
        if (stopping && !atomic_load(&s->cut)) {
            uint64_t now = clock_mono_ms();
            timeout = now >= deadline ? 0 : (int)(deadline - now); /* stop-grace is at most an hour */
        }
        struct pollfd p = { .fd = s->pipe_fd[0], .events = POLLIN };
        int rc = poll(&p, 1, timeout);
        if (rc < 0 && errno == EINTR) /* the signal that wrote to the pipe may land on this thread */
            continue;
        if (rc < 0)
            return NULL; /* cannot happen with one valid descriptor */
        if (rc == 0) {
            char why[96];
            snprintf(why, sizeof why, "workers still busy after stop-grace (%s)", grace);
            cut_all(s, why);
            continue;
        }
        char bytes[64];
        ssize_t n = read(s->pipe_fd[0], bytes, sizeof bytes);
        for (ssize_t i = 0; i < n; i++) {
            if (bytes[i] == 'q')
                return NULL;
            if (!stopping) {
                stopping = 1;
                deadline = clock_mono_ms() + s->grace_ms;
                log_msg(LOG_LEVEL_INFO, "stop: finishing the messages in hand (stop-grace %s)", grace);
            } else if (!atomic_load(&s->cut)) {
                cut_all(s, "a second signal");
            }
        }
    }
}

stop_t *stop_start(size_t workers, uint64_t grace_ms, char *err, size_t errlen)
{
    stop_t *s = xcalloc(1, sizeof *s);
    s->workers = workers;
    s->grace_ms = grace_ms;
    s->dbs = xcalloc(workers, sizeof *s->dbs);
    pthread_mutex_init(&s->lock, NULL);
    if (pipe2(s->pipe_fd, O_CLOEXEC | O_NONBLOCK) != 0) {
        err_set(err, errlen, "stop: pipe: %s", strerror(errno));
        goto fail;
    }
    int rc = pthread_create(&s->thread, NULL, stop_main, s);
    if (rc != 0) {
        err_set(err, errlen, "stop: cannot start its thread: %s", strerror(rc));
        close(s->pipe_fd[0]);
        close(s->pipe_fd[1]);
        goto fail;
    }
    return s;
fail:
    pthread_mutex_destroy(&s->lock);
    free(s->dbs);
    free(s);
    return NULL;
}

void stop_request(stop_t *s)
{
    /* Async-signal-safe: write(2) on a non-blocking pipe (a full one, which
     * 64 kB of stop requests would take, only drops the byte). */
    ssize_t n = write(s->pipe_fd[1], "s", 1);
    (void)n;
}

hg_order_db *stop_handle(stop_t *s, size_t worker)
{
    /* Only this worker writes its slot, so its own read needs no lock. */
    return s->dbs[worker];
}

int stop_cut(stop_t *s)
{
    return atomic_load(&s->cut);
}

void stop_adopt(stop_t *s, size_t worker, hg_order_db *db)
{
    pthread_mutex_lock(&s->lock);
    s->dbs[worker] = db;
    if (atomic_load(&s->cut))
        hg_order_db_interrupt(db);
    pthread_mutex_unlock(&s->lock);
}

void stop_finish(stop_t *s)
{
    if (s == NULL)
        return;
    /* Blocking is fine here; the pipe is non-blocking for the signal
     * handler's sake, and 'q' fits unless 64 kB of requests are unread. */
    while (write(s->pipe_fd[1], "q", 1) < 0 && (errno == EINTR || errno == EAGAIN)) {
        struct pollfd p = { .fd = s->pipe_fd[1], .events = POLLOUT };
        poll(&p, 1, 100);
    }
    pthread_join(s->thread, NULL);
    close(s->pipe_fd[0]);
    close(s->pipe_fd[1]);
    for (size_t i = 0; i < s->workers; i++)
        hg_order_db_close(s->dbs[i]);
    pthread_mutex_destroy(&s->lock);
    free(s->dbs);
    free(s);
}
