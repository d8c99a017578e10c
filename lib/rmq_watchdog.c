/*
 * lib/rmq_watchdog.c — the watchdog that bounds every librabbitmq call of
 * the RabbitMQ transport, and the guard that applies it to a connection.
 *
 * librabbitmq writes with no deadline of its own (publishes, acks, RPC
 * requests, heartbeats, closes), and its waits (RPC replies, the login)
 * end only at their timeouts, never at the client's stop fd: on a node that
 * stopped reading (SIGSTOPped, a hung host, a memory or disk alarm) a write
 * with more bytes than the socket buffers hold waits for ever, and a stop
 * waits out the read or connect timeout. So while a transport call runs,
 * this watchdog is armed over the connection's socket (the guard, below),
 * and its thread shuts the socket down — shutdown(2), both ways — once the
 * deadline of the current step passes or the stop fd becomes readable.
 * librabbitmq's wait then ends with an error, and the caller, seeing what
 * the watchdog did (rmq_guard_failed), names the step and the reason and
 * drops the connection (a partial frame leaves it unusable).
 *
 * The watchdog never reaches a socket it was not given: it cuts through a
 * duplicate of the descriptor, its own while armed, so the socket stays the
 * one armed even if librabbitmq closes its descriptor meanwhile (it does on
 * some timeouts) and the number is reused by another thread; the cut runs
 * under the lock, only while armed, and disarming closes the duplicate.
 *
 * The common path costs no thread wake. The thread sleeps until the deadline
 * it planned for (and on the stop fd); arming and moving the deadline later
 * only take the lock, unless the thread's plan would miss the new deadline
 * or stop fd — then one byte on a pipe makes it plan again. A publisher that
 * publishes steadily wakes it about once per write timeout; one that was
 * idle longer, once at its next publish.
 *
 * The guard (rmq_guard_*): a transport call enters it (nested calls count
 * a depth), and while it is entered the watchdog is armed over the socket
 * of r's connection — from the TLS handshake of a new one (rmq_tls.c) and
 * its login (a connect timeout) on — with the client's stop fd. Each step
 * (a publish's message, an RPC, an ack, a frame pumped) moves the deadline
 * to the read timeout from then (rmq_guard_step): a long run of steps the
 * node takes steadily is never cut, one step it stops taking is. A wait
 * with a poll of its own (rmq_pump) lifts the deadline for the poll, whose
 * own deadline and stop fd bound it. Leaving the outermost call disarms;
 * a socket cut meanwhile drops the connection.
 *
 * Threads: the owner (the connection's one thread) calls everything but
 * watchdog_main, which runs on the watchdog's own thread, with every signal
 * blocked. What both touch is under lock.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "lib/rmq.h"
#include "lib/client.h"
#include "lib/wire.h"

#include "base/alloc.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

struct rmq_watchdog {
    pthread_mutex_t lock;
    pthread_t thread;
    int wake[2]; /* a byte on wake[1]: plan again (or quit) */
    int quit;

    /* the owner's arming */
    int armed;
    int sock;          /* the duplicate of the armed socket; -1 when not armed */
    uint64_t deadline; /* wire_now_ms; 0: none */
    int stop_fd;       /* -1: none */
    rmq_cut_t cut;     /* what the thread did since the arming */
    int unacked;       /* at a deadline cut: bytes the peer had not acknowledged (-1: unknown) */

    /* the thread's plan: it sleeps until `until` (0: until woken), woken
     * early by `watching` (-1: nothing but the pipe) */
    uint64_t until;
    int watching;
};

/* The stop fd right now: 1 readable (stop), 0 not yet, -1 not to be polled
 * (closed, or a pipe whose writer went away: poll would return at once for
 * ever; the client's waits do not count that as a stop either). */
static int stop_state(int fd)
{
    struct pollfd p = { fd, POLLIN, 0 };

    if (poll(&p, 1, 0) <= 0)
        return 0;
    return (p.revents & POLLIN) ? 1 : -1;
}

/* Under lock, armed: shut the socket down, so every wait of the owner on
 * it ends, and remember why. */
static void cut(rmq_watchdog_t *w, rmq_cut_t why)
{
    int q = 0;

    /* what the peer's host had not acknowledged: > 0, the node reads
     * nothing more; 0, it took every byte and did not answer */
    w->unacked = ioctl(w->sock, SIOCOUTQ, &q) == 0 ? q : -1;
    (void)shutdown(w->sock, SHUT_RDWR);
    w->cut = why;
}

static void *watchdog_main(void *arg)
{
    rmq_watchdog_t *w = arg;

    pthread_mutex_lock(&w->lock);
    while (!w->quit) {
        struct pollfd p[2] = { { w->wake[0], POLLIN, 0 } };
        nfds_t np = 1;
        int live = w->armed && w->cut == RMQ_CUT_NONE, stop = 0, left;
        char drain[64];

        if (live && w->stop_fd >= 0 && (stop = stop_state(w->stop_fd)) < 0)
            w->stop_fd = -1; /* for this arming */
        if (live && w->deadline != 0 && wire_now_ms() >= w->deadline)
            cut(w, RMQ_CUT_DEADLINE);
        else if (live && stop > 0)
            cut(w, RMQ_CUT_STOP);
        live = w->armed && w->cut == RMQ_CUT_NONE;
        /* Disarmed or done: sleep until armed again (the owner wakes us). */
        w->until = live ? w->deadline : 0;
        w->watching = live ? w->stop_fd : -1;
        if (w->watching >= 0)
            p[np++] = (struct pollfd){ w->watching, POLLIN, 0 };
        left = w->until != 0 ? wire_poll_ms(w->until) : -1;
        pthread_mutex_unlock(&w->lock);
        if (poll(p, np, left) > 0 && (p[0].revents & POLLIN))
            while (read(w->wake[0], drain, sizeof(drain)) > 0)
                ;
        pthread_mutex_lock(&w->lock);
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

/* Under lock: wake the thread when its plan misses the armed deadline or
 * stop fd. */
static void replan(rmq_watchdog_t *w)
{
    int late = w->deadline != 0 && (w->until == 0 || w->until > w->deadline);
    int blind = w->stop_fd >= 0 && w->watching != w->stop_fd;

    if (w->cut == RMQ_CUT_NONE && (late || blind)) {
        ssize_t n = write(w->wake[1], "x", 1); /* a full pipe wakes it as well */
        (void)n;
        w->until = w->deadline; /* one byte is enough until it planned again */
        w->watching = w->stop_fd;
    }
}

rmq_watchdog_t *rmq_watchdog_new(void)
{
    rmq_watchdog_t *w = xcalloc(1, sizeof(*w));
    sigset_t all, old;
    int rc;

    w->sock = w->stop_fd = w->watching = -1;
    if (pipe2(w->wake, O_NONBLOCK | O_CLOEXEC) != 0) {
        free(w);
        return NULL;
    }
    pthread_mutex_init(&w->lock, NULL);
    /* the thread inherits a mask that blocks every signal: the program's
     * handlers run on its own threads */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    rc = pthread_create(&w->thread, NULL, watchdog_main, w);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        pthread_mutex_destroy(&w->lock);
        close(w->wake[0]);
        close(w->wake[1]);
        free(w);
        errno = rc;
        return NULL;
    }
    return w;
}

void rmq_watchdog_free(rmq_watchdog_t *w)
{
    ssize_t n;

    if (w == NULL)
        return;
    (void)rmq_watchdog_disarm(w);
    pthread_mutex_lock(&w->lock);
    w->quit = 1;
    pthread_mutex_unlock(&w->lock);
    n = write(w->wake[1], "x", 1);
    (void)n;
    pthread_join(w->thread, NULL);
    pthread_mutex_destroy(&w->lock);
    close(w->wake[0]);
    close(w->wake[1]);
    free(w);
}

int rmq_watchdog_arm(rmq_watchdog_t *w, int fd, uint64_t deadline, int stop_fd)
{
    int sock = fcntl(fd, F_DUPFD_CLOEXEC, 0);

    if (sock < 0)
        return -1;
    pthread_mutex_lock(&w->lock);
    if (w->armed) /* armed again without a disarm: the old duplicate goes */
        close(w->sock);
    w->armed = 1;
    w->sock = sock;
    w->deadline = deadline;
    w->stop_fd = stop_fd;
    w->cut = RMQ_CUT_NONE;
    replan(w);
    pthread_mutex_unlock(&w->lock);
    return 0;
}

void rmq_watchdog_extend(rmq_watchdog_t *w, uint64_t deadline)
{
    pthread_mutex_lock(&w->lock);
    if (w->armed) {
        w->deadline = deadline;
        replan(w);
    }
    pthread_mutex_unlock(&w->lock);
}

rmq_cut_t rmq_watchdog_disarm(rmq_watchdog_t *w)
{
    rmq_cut_t why;

    pthread_mutex_lock(&w->lock);
    why = w->armed ? w->cut : RMQ_CUT_NONE;
    if (w->armed)
        close(w->sock);
    w->armed = 0;
    w->sock = -1;
    w->cut = RMQ_CUT_NONE;
    pthread_mutex_unlock(&w->lock);
    return why;
}

int rmq_watchdog_unacked(rmq_watchdog_t *w)
{
    int n;

    pthread_mutex_lock(&w->lock);
    n = w->armed && w->cut == RMQ_CUT_DEADLINE ? w->unacked : -1;
    pthread_mutex_unlock(&w->lock);
    return n;
}

rmq_cut_t rmq_watchdog_cut(rmq_watchdog_t *w)
{
    rmq_cut_t why;

    pthread_mutex_lock(&w->lock);
    why = w->armed ? w->cut : RMQ_CUT_NONE;
    pthread_mutex_unlock(&w->lock);
    return why;
}

/* ------------------------------------------------------------------------
 * The guard: the watchdog over r's connection while a call runs
 * ------------------------------------------------------------------------ */

/* wire_now_ms() + ms; 0 (none) when ms is 0. */
static uint64_t after_ms(uint32_t ms)
{
    return ms == 0 ? 0 : wire_now_ms() + ms;
}

void rmq_guard_enter(rmq_t *r)
{
    int fd;

    if (r->guard_depth++ > 0 || r->st == NULL || (fd = amqp_get_sockfd(r->st)) < 0)
        return;
    rmq_guard_socket(r, fd, client_opts(r->client)->read_timeout_ms);
}

void rmq_guard_leave(rmq_t *r)
{
    if (r->guard_depth > 0 && --r->guard_depth == 0 && rmq_watchdog_disarm(r->watchdog) != RMQ_CUT_NONE &&
        r->st != NULL)
        rmq_disconnect(r); /* cut as the call ended: the socket is shut */
}

void rmq_guard_socket(rmq_t *r, int fd, uint32_t ms)
{
    r->guard_ms = ms;
    /* no descriptor left for the duplicate: the step runs unguarded, as
     * librabbitmq alone would run it */
    if (r->guard_depth > 0)
        (void)rmq_watchdog_arm(r->watchdog, fd, after_ms(ms), client_stop_fd(r->client));
}

void rmq_guard_within(rmq_t *r, uint32_t ms)
{
    r->guard_ms = ms;
    rmq_watchdog_extend(r->watchdog, after_ms(ms));
}

void rmq_guard_step(rmq_t *r)
{
    rmq_guard_within(r, client_opts(r->client)->read_timeout_ms);
}

rmq_cut_t rmq_guard_cut(rmq_t *r)
{
    return rmq_watchdog_cut(r->watchdog);
}

hg_err_t rmq_guard_failed(rmq_t *r, const char *what)
{
    switch (rmq_guard_cut(r)) {
    case RMQ_CUT_STOP:
        return client_fail(r->client, HG_ERR_STOPPED, "stopped while %s (RabbitMQ at %s)", what, r->address);
    case RMQ_CUT_DEADLINE: {
        int unacked = rmq_watchdog_unacked(r->watchdog);
        if (unacked == 0) /* e.g. the minority side of a partition: it reads, and cannot answer */
            return client_fail(r->client, HG_ERR_TIMEOUT,
                               "%s: RabbitMQ at %s took it (every byte acknowledged) but did not answer within %" PRIu32
                               "ms",
                               what, r->address, r->guard_ms);
        if (unacked > 0)
            return client_fail(r->client, HG_ERR_TIMEOUT,
                               "%s: RabbitMQ at %s did not take it within %" PRIu32
                               "ms (%d bytes not acknowledged: the node reads nothing more)",
                               what, r->address, r->guard_ms, unacked);
        return client_fail(r->client, HG_ERR_TIMEOUT,
                           "%s: RabbitMQ at %s did not take it or answer within %" PRIu32 "ms", what, r->address,
                           r->guard_ms);
    }
    default:
        return HG_OK;
    }
}
