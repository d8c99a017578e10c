/*
 * common/log.c — one-line UTC log records on stderr or a log file, as text or
 * JSON (contract: log.h).
 *
 * A record is formatted into stack buffers and written with a single
 * write(2), so concurrent records from any threads never mix. Long messages
 * are cut and end with "...". Level and format are atomics: set at start-up
 * and on SIGHUP, read everywhere.
 *
 * The destination is one file descriptor, log_fd. It starts as stderr; the
 * first log_open_file with a path stores a new descriptor there, and from
 * then on that number never changes: a reopen or a switch dup2()s the new
 * file onto it (atomically, as far as a concurrent write is concerned) and
 * closes the temporary. So a writer never writes to a closed or reused
 * descriptor, and no lock is taken on the write path. Opening and reopening
 * take file_lock (they run on the main thread and the SIGHUP thread).
 */
#include "common/log.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/err.h"

static _Atomic int current_level = LOG_LEVEL_INFO;
static _Atomic int current_format = LOG_FORMAT_TEXT;
static _Atomic int log_fd = STDERR_FILENO;

static pthread_mutex_t file_lock = PTHREAD_MUTEX_INITIALIZER;
static char *file_path; /* the open log file; NULL: stderr. Under file_lock. */

static const char *const level_names[] = { "debug", "info", "warn", "error" };

void log_set_level(log_level_t level)
{
    atomic_store(&current_level, (int)level);
}

log_level_t log_get_level(void)
{
    return (log_level_t)atomic_load(&current_level);
}

const char *log_level_name(log_level_t level)
{
    return (level >= LOG_LEVEL_DEBUG && level <= LOG_LEVEL_ERROR) ? level_names[level] : "?";
}

void log_set_format(log_format_t format)
{
    atomic_store(&current_format, (int)format);
}

log_format_t log_get_format(void)
{
    return (log_format_t)atomic_load(&current_format);
}

/* Open path for appending, close-on-exec; the descriptor, or -1 with err. */
static int open_append(const char *path, char *err, size_t errlen)
{
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
    if (fd < 0)
        err_set(err, errlen, "log-file: cannot open '%s': %s", path, strerror(errno));
    return fd;
}

/* Point the log at fd (a fresh descriptor the caller hands over). Under file_lock. */
static void point_at(int fd)
{
    int cur = atomic_load(&log_fd);
    if (cur == STDERR_FILENO) {
        atomic_store(&log_fd, fd); /* the first file: its number becomes the stable one */
        return;
    }
    dup2(fd, cur);
    close(fd);
}

int log_open_file(const char *path, char *err, size_t errlen)
{
    pthread_mutex_lock(&file_lock);
    int rc = 0;
    if (path == NULL || path[0] == '\0') {
        int cur = atomic_load(&log_fd);
        if (cur != STDERR_FILENO)
            dup2(STDERR_FILENO, cur); /* the stable number now writes to stderr */
        free(file_path);
        file_path = NULL;
    } else if (file_path == NULL || strcmp(file_path, path) != 0) {
        int fd = open_append(path, err, errlen);
        if (fd < 0) {
            rc = -1;
        } else {
            point_at(fd);
            free(file_path);
            file_path = strdup(path);
            if (file_path == NULL)
                abort();
        }
    }
    pthread_mutex_unlock(&file_lock);
    return rc;
}

int log_reopen(char *err, size_t errlen)
{
    pthread_mutex_lock(&file_lock);
    int rc = 0;
    if (file_path != NULL) {
        int fd = open_append(file_path, err, errlen);
        if (fd < 0)
            rc = -1;
        else
            point_at(fd);
    }
    pthread_mutex_unlock(&file_lock);
    return rc;
}

/* Copy s into out[cap] as the inside of a JSON string; returns the bytes
 * written (cut, never mid-escape, when out is full). */
static size_t json_escape(const char *s, size_t n, char *out, size_t cap)
{
    static const char hex[] = "0123456789abcdef";
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[7];
        size_t k = 0;
        if (c == '"' || c == '\\') {
            esc[k++] = '\\';
            esc[k++] = (char)c;
        } else if (c == '\n') {
            esc[k++] = '\\';
            esc[k++] = 'n';
        } else if (c < 0x20 || c == 0x7f) {
            memcpy(esc, "\\u00", 4);
            esc[4] = hex[c >> 4];
            esc[5] = hex[c & 15];
            k = 6;
        } else {
            esc[k++] = (char)c;
        }
        if (o + k > cap)
            break;
        memcpy(out + o, esc, k);
        o += k;
    }
    return o;
}

void log_msg(log_level_t level, const char *fmt, ...)
{
    if ((int)level < atomic_load(&current_level)) {
        return;
    }
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    size_t mlen = m < 0 ? 0 : (size_t)m;
    if (mlen >= sizeof msg) {
        mlen = sizeof msg - 1;
        memcpy(msg + mlen - 3, "...", 3);
    }

    char stamp[64];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    snprintf(stamp, sizeof stamp, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
             tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000);

    char line[sizeof msg * 2 + 96];
    size_t len;
    if (atomic_load(&current_format) == LOG_FORMAT_JSON) {
        len = (size_t)snprintf(line, sizeof line, "{\"time\":\"%s\",\"level\":\"%s\",\"msg\":\"", stamp,
                               log_level_name(level));
        len += json_escape(msg, mlen, line + len, sizeof line - len - 3);
        memcpy(line + len, "\"}", 2);
        len += 2;
    } else {
        len = (size_t)snprintf(line, sizeof line, "%s [%s] ", stamp, log_level_name(level));
        for (size_t i = 0; i < mlen; i++) /* a record is always one line */
            line[len + i] = (msg[i] == '\n' || msg[i] == '\r') ? ' ' : msg[i];
        len += mlen;
    }
    line[len++] = '\n';
    ssize_t w = write(atomic_load(&log_fd), line, len);
    (void)w;
}
