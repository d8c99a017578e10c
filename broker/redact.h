/*
 * broker/redact.h — file-system paths taken out of the error replies a
 * non-admin client reads (DESIGN.md §9, docs/security.md).
 *
 * Paths are the admin's (CONFIG GET, where every path is, is admin-only; INFO
 * shows dir and backup_last_error to the admin only). A storage failure's
 * error reply ("ERR storage failure: fdatasync of /var/lib/hourglass/000123.log
 * failed: ...") would still tell a producer, consumer or viewer where the data
 * lives, so conn_reply.c passes every reply to such a client through
 * redact_reply: each path inside an error ("-" line) becomes REDACT_PATH, the
 * error code and the rest of the sentence stay. Nothing else of a reply is
 * touched (payloads, simple strings, numbers). The broker's log keeps the
 * whole text (conn_reply.c logs what it hid). /healthz, which answers anyone,
 * passes its reason through redact_text (server_http.c).
 *
 * What counts as a path, in an error's text: a word that starts at the
 * beginning of the text or after a blank, a quote, '(', '[', '<', '=' or ','
 * and is
 *  - absolute ("/..."), or relative with a leading "./", "../" or "~/", or
 *  - one of the known paths (the broker's configured dir and backup-dir, even
 *    relative or with blanks in them) followed by '/' or the end of the word;
 * it runs to the next blank or quote (past a known path's own blanks), less
 * trailing punctuation (". , : ; ) ] >"), so "IO error: /d/LOCK: busy" keeps
 * its ": busy". A word with a '/' inside ("docs/operations.md", "1/2") is not
 * a path: the sentence keeps its references to the documentation. A
 * client's own argument that looks like a path (a topic named "/orders") is
 * hidden too when an error repeats it: the client knows what it sent, and
 * telling it from a path of the broker's would need every message's layout.
 *
 * Pure functions, any thread; the reply is the broker's own RESP (a RESP3
 * blob error, which it never sends, is passed through untouched).
 */
#ifndef HG_BROKER_REDACT_H
#define HG_BROKER_REDACT_H

#include <stddef.h>

#include "base/buf.h"

/* What a hidden path reads as. */
#define REDACT_PATH "(path hidden: admin only)"

/* Append text[0..len) to out with every path (see above) replaced by
 * REDACT_PATH. known: the known paths, NULL-terminated (NULL: none; NULL or
 * one-character entries are skipped). Returns how many paths were replaced. */
size_t redact_text(const char *text, size_t len, const char *const *known, buf_t *out);

/* Scan a RESP reply data[0..len) (one reply or several; aggregates of any
 * depth) for error lines holding a path. 0 when there is none: out and
 * hidden untouched. Else the number of paths replaced, out holds the whole
 * reply with them replaced (what the client is sent), and hidden (when not
 * NULL) gets the original text of each error line that held one, separated
 * by " | " (what the log shows). Bytes after a malformed element are copied
 * unscanned. */
size_t redact_reply(const char *data, size_t len, const char *const *known, buf_t *out, buf_t *hidden);

#endif
