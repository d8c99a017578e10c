/*
 * tests/helpers/greeting_stub.h — a fake MariaDB server that greets and
 * listens: it accepts one connection (on 127.0.0.1 or on a unix socket),
 * sends a MariaDB 10.11 initial handshake packet (protocol 10, the
 * mysql_native_password scramble) whose capabilities lack CLIENT_SSL — a
 * server run with --skip-ssl, as a client sees it — and records every byte
 * the client sends after it. The exact proof that a client refused a
 * server without TLS before sending its login (the login packet carries the
 * user name and the password's scramble).
 *
 * One thread of its own serves the connection; the test's thread starts
 * the stub, connects through the code under test, and collects the record
 * with gs_finish. The stub closes the connection as soon as the client
 * sent anything (so a client that went on waits for no answer), or when
 * the client closed it.
 */
#ifndef HG_TESTS_GREETING_STUB_H
#define HG_TESTS_GREETING_STUB_H

#include <pthread.h>
#include <stddef.h>

#define GS_RECORD_MAX 4096

typedef struct gs {
    int port;      /* 127.0.0.1:port when started with path NULL, else 0 */
    int listen_fd; /* -1 once finished */
    int accepted;  /* 1 once a client connected */
    unsigned char record[GS_RECORD_MAX];
    size_t recorded; /* bytes the client sent after the greeting */
    pthread_t thread;
} gs_t;

/* Listen on a kernel-chosen port of 127.0.0.1 (path NULL) or on the unix
 * socket path (which must not exist) and start the serving thread. 0, or
 * -1 with err. */
int gs_start(gs_t *s, const char *path, char *err, size_t errlen);

/* Wait for the thread: it ends when the client closed the connection or
 * sent something, or 20 s after the start with no client. Then s->accepted
 * and s->recorded / s->record say what happened. */
void gs_finish(gs_t *s);

/* 1 when the record holds the bytes of text (a user name in a login). */
int gs_recorded_contains(const gs_t *s, const char *text);

#endif
