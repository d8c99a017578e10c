/*
 * levels/store_failure.c — what a storage failure is (a full disk or not) and
 * how its text names a long data directory (store.h, "Storage failures").
 *
 * Why here: a full disk must be told from other write failures where the
 * failure's whole evidence is at hand — LevelDB's error string as it comes
 * back, an errno as the system call set it — not later from a message that
 * a fixed buffer may have cut. LevelDB's "IO error: <dir>/000005.log: No
 * space left on device" names the directory before its cause, and a
 * directory may be 4 KiB long: a 512-byte message holding it once or twice
 * loses the cause. So the store classifies when it receives the error and
 * keeps the answer as a fact (store_last_failure_full), and every text it
 * builds from such an error shows a long directory shortened (its head and
 * tail), so the cause survives any buffer and an operator still reads it.
 *
 * The shortened form starts as the path does ('/' for an absolute one) and
 * holds no blank or quote, so broker/redact.h still sees one path word and
 * hides all of it from a client that may not read paths.
 *
 * Pure functions, any thread.
 */
#include "levels/store.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* The errnos that mean no room: the disk's, a file size limit's, a quota's. */
static const int full_errnos[] = { ENOSPC, EFBIG, EDQUOT };
#define N_FULL_ERRNOS (sizeof full_errnos / sizeof full_errnos[0])

int store_failure_errno_full(int e)
{
    for (size_t i = 0; i < N_FULL_ERRNOS; i++) {
        if (e == full_errnos[i]) {
            return 1;
        }
    }
    return 0;
}

int store_failure_text_full(const char *text)
{
    for (size_t i = 0; text != NULL && i < N_FULL_ERRNOS; i++) {
        if (strstr(text, strerror(full_errnos[i])) != NULL) {
            return 1;
        }
    }
    return 0;
}

/* A character that would end a path word for broker/redact.c, or split it. */
static char word_safe(char c)
{
    return c == ' ' || c == '\t' || c == '"' || c == '\'' ? '_' : c;
}

const char *store_path_shown(const char *path, char *buf, size_t len)
{
    size_t n = strlen(path);
    if (len == 0) {
        return "";
    }
    if (n <= STORE_PATH_SHOWN_MAX) {
        snprintf(buf, len, "%s", path);
        return buf;
    }
    enum {
        PART = (STORE_PATH_SHOWN_MAX - 3) / 2 /* bytes of the head, and of the tail, around "..." */
    };
    snprintf(buf, len, "%.*s...%s", (int)PART, path, path + n - PART);
    for (char *c = buf; *c != '\0'; c++) {
        *c = word_safe(*c);
    }
    return buf;
}

/* n bytes of src after out's *o bytes, as many as out[outlen] holds with its
 * terminator: 1 when all went in. */
static int put(char *out, size_t outlen, size_t *o, const char *src, size_t n)
{
    size_t room = outlen - 1 - *o, take = n < room ? n : room;
    memcpy(out + *o, src, take);
    *o += take;
    return take == n;
}

void store_failure_text(const char *text, const char *path, char *out, size_t outlen)
{
    if (outlen == 0) {
        return;
    }
    size_t plen = path != NULL ? strlen(path) : 0;
    if (plen <= STORE_PATH_SHOWN_MAX) {
        snprintf(out, outlen, "%s", text);
        return;
    }
    char shown[STORE_PATH_SHOWN_MAX + 1];
    store_path_shown(path, shown, sizeof shown);
    size_t o = 0;
    for (const char *p = text;;) {
        const char *at = strstr(p, path);
        if (at == NULL) {
            put(out, outlen, &o, p, strlen(p));
            break;
        }
        if (!put(out, outlen, &o, p, (size_t)(at - p)) || !put(out, outlen, &o, shown, strlen(shown))) {
            break;
        }
        p = at + plen;
    }
    out[o] = '\0';
}
