/*
 * tests/helpers/stub_broker.h — a loopback TCP stub that lets
 * hg_client_open succeed without a broker: it accepts every connection and
 * answers whatever a client writes (AUTH, once per connection) with +OK,
 * and says nothing else. For the suites that test what an opened client is
 * (its bounds, its options) rather than what a broker does. hourglass://
 * only (a TLS or AMQP handshake needs the real server).
 *
 * One thread of its own serves every connection (poll); a stub is started
 * and stopped by the test's thread.
 */
#ifndef HG_TESTS_STUB_BROKER_H
#define HG_TESTS_STUB_BROKER_H

#include <pthread.h>
#include <stddef.h>

#define SB_MAX_CONNS 64

typedef struct sb {
    int port;      /* 127.0.0.1:port, once started */
    int listen_fd; /* -1 when stopped */
    int stop[2];   /* a pipe: writing to stop[1] ends the thread */
    int conns[SB_MAX_CONNS];
    size_t nconns;
    pthread_t thread;
} sb_t;

/* Listen on a free loopback port and start serving. 0, or -1 with err. */
int sb_start(sb_t *s, char *err, size_t errlen);

/* Stop the thread and close every socket. A stub never started (listen_fd
 * -1 after a failed sb_start) is fine. */
void sb_stop(sb_t *s);

#endif
