/*
 * broker/redact.c — paths out of the error replies a non-admin client reads
 * (see redact.h for what counts as a path and why).
 *
 * Invariants: only the text of "-" lines changes; every other byte of a reply
 * is copied as is, bulk strings skipped by their length (a payload that looks
 * like an error line is never touched). Nothing is allocated for a reply
 * without an error line.
 *
 * Thread: any (pure functions; the broker calls them on the event-loop
 * thread, conn_reply.c).
 */
#include "broker/redact.h"

#include <string.h>

/* A character after which a word starts. */
static int starts_after(char c)
{
    return c == ' ' || c == '\t' || c == '\'' || c == '"' || c == '`' || c == '(' || c == '[' || c == '<' || c == '=' ||
           c == ',';
}

/* A character that ends a path's word. */
static int ends_word(char c)
{
    return c == ' ' || c == '\t' || c == '\'' || c == '"' || c == '`';
}

/* Punctuation a path's word may end with that belongs to the sentence. */
static int trailing(char c)
{
    return c == '.' || c == ',' || c == ':' || c == ';' || c == ')' || c == ']' || c == '>';
}

/* Bytes of the longest known path at t[0..len) that is followed by what a
 * path is followed by (0: none). A known path without a '/' ("data") is a
 * word of the sentence too, so it counts only when a '/' follows it. */
static size_t known_at(const char *t, size_t len, const char *const *known)
{
    size_t best = 0;
    for (size_t k = 0; known != NULL && known[k] != NULL; k++) {
        size_t kl = strlen(known[k]);
        if (kl < 2 || kl > len || kl <= best || memcmp(t, known[k], kl) != 0) {
            continue;
        }
        int slash = memchr(known[k], '/', kl) != NULL;
        if ((kl < len && t[kl] == '/') || (slash && (kl == len || ends_word(t[kl]) || trailing(t[kl])))) {
            best = kl;
        }
    }
    return best;
}

/* Bytes of the path that starts at t[0..len) (a word's start), 0: none. */
static size_t path_at(const char *t, size_t len, const char *const *known)
{
    size_t fixed = known_at(t, len, known); /* a known path's bytes: its blanks do not end the word */
    if (fixed == 0) {
        int prefixed = t[0] == '/' || (len >= 2 && memcmp(t, "./", 2) == 0) || (len >= 3 && memcmp(t, "../", 3) == 0) ||
                       (len >= 2 && memcmp(t, "~/", 2) == 0);
        if (!prefixed) {
            return 0;
        }
    }
    size_t end = fixed;
    while (end < len && !ends_word(t[end])) {
        end++;
    }
    while (end > fixed && end > 1 && trailing(t[end - 1])) {
        end--;
    }
    return end >= 2 ? end : 0; /* a lone "/" ("1 / 2") is no path */
}

size_t redact_text(const char *text, size_t len, const char *const *known, buf_t *out)
{
    size_t n = 0, copied = 0, i = 0;
    while (i < len) {
        size_t plen = i == 0 || starts_after(text[i - 1]) ? path_at(text + i, len - i, known) : 0;
        if (plen == 0) {
            i++;
            continue;
        }
        buf_append(out, text + copied, i - copied);
        buf_append_str(out, REDACT_PATH);
        i += plen;
        copied = i;
        n++;
    }
    buf_append(out, text + copied, len - copied);
    return n;
}

/* The length of a bulk header's line "$<n>" (p[0..len) after the type
 * byte): n, or -1 for a null or a malformed one. */
static long long bulk_length(const char *p, size_t len)
{
    if (len == 0 || len > 18) {
        return -1;
    }
    long long v = 0;
    for (size_t i = 0; i < len; i++) {
        if (p[i] < '0' || p[i] > '9') {
            return -1;
        }
        v = v * 10 + (p[i] - '0');
    }
    return v;
}

size_t redact_reply(const char *data, size_t len, const char *const *known, buf_t *out, buf_t *hidden)
{
    size_t n = 0, pos = 0, copied = 0;
    buf_t text = BUF_INIT;
    while (pos < len) {
        const char *cr = memchr(data + pos, '\r', len - pos);
        if (cr == NULL || (size_t)(cr - data) + 1 >= len || cr[1] != '\n') {
            break; /* not our RESP: leave the rest alone */
        }
        size_t eol = (size_t)(cr - data), next = eol + 2;
        char type = data[pos];
        if (type == '-') {
            buf_clear(&text);
            size_t found = redact_text(data + pos + 1, eol - pos - 1, known, &text);
            if (found > 0) {
                buf_append(out, data + copied, pos + 1 - copied);
                buf_append(out, text.data, text.len);
                copied = eol;
                if (hidden != NULL) {
                    if (hidden->len > 0) {
                        buf_append_str(hidden, " | ");
                    }
                    buf_append(hidden, data + pos + 1, eol - pos - 1);
                }
                n += found;
            }
        } else if (type == '$' || type == '=' || type == '!') {
            long long blen = bulk_length(data + pos + 1, eol - pos - 1);
            if (blen >= 0) {
                if ((unsigned long long)blen + 2 > len - next) {
                    break;
                }
                next += (size_t)blen + 2;
            }
        }
        pos = next;
    }
    buf_free(&text);
    if (n > 0) {
        buf_append(out, data + copied, len - copied);
    }
    return n;
}
