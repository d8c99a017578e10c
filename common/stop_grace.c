/*
 * common/stop_grace.c — cut what is still in use a grace after a stop
 * (contract: stop_grace.h).
 *
 * One thread sleeps on a pipe. stop_grace_request writes 's': the first
 * starts the grace, a later one cuts at once; stop_grace_finish writes 'q'.
 * When the grace runs out before 'q', every registered handle is cut, a
 * byte is written to the cut pipe (readable from then on: the broker
 * clients given its read end as their stop fd end their waits) and
 * stop_grace_cut answers 1 from then on.
 *
 * Invariants: the table of handles is written (watch, unwatch) and walked by
 * the cutter under `lock`, so a cut never runs on a handle withdrawn before
 * (its owner may free it once unwatch returns); a handle registered after
 * the cut is cut by the registering thread under the same lock, so none
 * escapes. The cutter holds `lock` only across the cut functions, which shut
 * sockets down and never wait on a server.
 * stop_grace_handle_signals is the daemons' one sigaction of SIGINT and
 * SIGTERM, whose handler calls stop_grace_request.
 * Threads: the stop thread's own; stop_grace_request from a signal handler on
 * any thread; watch / unwatch / cut from any thread; start, finish and
 * handle_signals on main.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "common/stop_grace.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
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

typedef struct watched {
    void (*cut)(void *handle);
    void *handle;
} watched_t;

struct stop_grace {
    stop_grace_opts_t opts;
    int pipe_fd[2]; /* 's' from stop_grace_request, 'q' from stop_grace_finish */
    int cut_fd[2];  /* one byte written at the cut, never read: stop_grace_cut_fd */
    pthread_t thread;
    pthread_mutex_t lock; /* guards watched, count, cap */
    watched_t *watched;
    size_t count, cap;
    atomic_int cut; /* 1 once the handles were cut */
};

/* Cut every registered handle. The stop thread. */
static void cut_all(stop_grace_t *s, const char *why)
{
    pthread_mutex_lock(&s->lock);
    atomic_store(&s->cut, 1);
    ssize_t w = write(s->cut_fd[1], "c", 1); /* the broker clients' waits end (an empty pipe takes it) */
    (void)w;
    size_t n = s->count;
    for (size_t i = 0; i < n; i++)
        s->watched[i].cut(s->watched[i].handle);
    pthread_mutex_unlock(&s->lock);
    log_msg(LOG_LEVEL_WARN, "stop: %s: %zu %s cut; %s", why, n, s->opts.handles, s->opts.after_cut);
}

static void *stop_main(void *arg)
{
    stop_grace_t *s = arg;
    char grace[32];
    units_format_duration(s->opts.grace_ms, grace, sizeof grace);
    int stopping = 0;
    uint64_t deadline = 0; /* monotonic ms: when the grace runs out */
    for (;;) {
        int timeout = -1;
        if (stopping && !atomic_load(&s->cut)) {
            uint64_t now = clock_mono_ms();
            uint64_t left = now >= deadline ? 0 : deadline - now;
            timeout = left > INT_MAX ? INT_MAX : (int)left;
        }
        struct pollfd p = { .fd = s->pipe_fd[0], .events = POLLIN };
        int rc = poll(&p, 1, timeout);
        if (rc < 0 && errno == EINTR) /* the signal that wrote to the pipe may land on this thread */
            continue;
        if (rc < 0)
            return NULL; /* cannot happen with one valid descriptor */
        if (rc == 0) {
            char why[96];
            snprintf(why, sizeof why, "still busy after stop-grace (%s)", grace);
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
                deadline = clock_mono_ms() + s->opts.grace_ms;
                log_msg(LOG_LEVEL_INFO, "stop: %s (stop-grace %s)", s->opts.finishing, grace);
            } else if (!atomic_load(&s->cut)) {
                cut_all(s, "a second signal");
            }
        }
    }
}

stop_grace_t *stop_grace_start(const stop_grace_opts_t *opts, char *err, size_t errlen)
{
    stop_grace_t *s = xcalloc(1, sizeof *s);
    s->opts = *opts;
    pthread_mutex_init(&s->lock, NULL);
    if (pipe2(s->pipe_fd, O_CLOEXEC | O_NONBLOCK) != 0) {
        err_set(err, errlen, "stop: pipe: %s", strerror(errno));
        goto fail;
    }
    if (pipe2(s->cut_fd, O_CLOEXEC | O_NONBLOCK) != 0) {
        err_set(err, errlen, "stop: pipe: %s", strerror(errno));
        goto fail_pipe;
    }
    int rc = pthread_create(&s->thread, NULL, stop_main, s);
    if (rc != 0) {
        err_set(err, errlen, "stop: cannot start its thread: %s", strerror(rc));
        close(s->cut_fd[0]);
        close(s->cut_fd[1]);
        goto fail_pipe;
    }
    return s;
fail_pipe:
    close(s->pipe_fd[0]);
    close(s->pipe_fd[1]);
fail:
    pthread_mutex_destroy(&s->lock);
    free(s);
    return NULL;
}

void stop_grace_request(stop_grace_t *s)
{
    /* Async-signal-safe: write(2) on a non-blocking pipe (a full one, which
     * 64 kB of stop requests would take, only drops the byte). */
    ssize_t n = write(s->pipe_fd[1], "s", 1);
    (void)n;
}

void stop_grace_watch(stop_grace_t *s, void (*cut)(void *handle), void *handle)
{
    pthread_mutex_lock(&s->lock);
    if (s->count == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 8;
        s->watched = xrealloc(s->watched, s->cap * sizeof *s->watched);
    }
    s->watched[s->count++] = (watched_t){ cut, handle };
    if (atomic_load(&s->cut))
        cut(handle);
    pthread_mutex_unlock(&s->lock);
}

void stop_grace_unwatch(stop_grace_t *s, const void *handle)
{
    pthread_mutex_lock(&s->lock);
    for (size_t i = 0; i < s->count; i++)
        if (s->watched[i].handle == handle) {
            s->watched[i] = s->watched[--s->count];
            break;
        }
    pthread_mutex_unlock(&s->lock);
}

int stop_grace_cut(stop_grace_t *s)
{
    return atomic_load(&s->cut);
}

int stop_grace_cut_fd(const stop_grace_t *s)
{
    return s->cut_fd[0];
}

void stop_grace_handle_signals(void (*handler)(int))
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

void stop_grace_finish(stop_grace_t *s)
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
    close(s->cut_fd[0]);
    close(s->cut_fd[1]);
    pthread_mutex_destroy(&s->lock);
    free(s->watched);
    free(s);
}
