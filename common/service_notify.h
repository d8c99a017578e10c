/*
 * common/service_notify.h — tell systemd where a daemon stands (Type=notify):
 * READY=1 once it serves, RELOADING=1 / READY=1 around a SIGHUP,
 * STOPPING=1 when its stop starts, STATUS=<one line> for systemctl status.
 *
 * Without libsystemd: one datagram of the state, as given, to the AF_UNIX
 * socket named by $NOTIFY_SOCKET (a path, or an abstract name when it
 * starts with '@'). Nothing is sent, and nothing is an error, when
 * NOTIFY_SOCKET is unset or empty: a daemon started by hand, by a test or
 * by a Type=simple unit calls this all the same.
 *
 * Threads: any (a socket of its own per call; it reads the environment,
 * which nothing of ours changes once the daemon runs). Not
 * async-signal-safe (vsnprintf): call it from the loop or a thread, not a
 * signal handler.
 */
#ifndef HG_COMMON_SERVICE_NOTIFY_H
#define HG_COMMON_SERVICE_NOTIFY_H

#include <stddef.h>

/* Send the state formatted from fmt ("READY=1\nSTATUS=listening on ...":
 * newline-separated assignments) to $NOTIFY_SOCKET. 0 when sent or when
 * NOTIFY_SOCKET is unset or empty; -1 with err naming what failed (a
 * NOTIFY_SOCKET that is neither an absolute path nor '@'name, or too long
 * for a socket address; a state too long for a datagram of ours; the
 * socket or the send). */
int service_notify(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* service_notify, its failure logged as a warning (the daemon goes on:
 * systemd then times the start out, which the journal explains). */
void service_notify_or_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
