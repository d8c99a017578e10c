/*
 * base/err.h — the error convention's one helper.
 *
 * Convention (CONTRIBUTING.md, "Errors"): a function that can fail returns
 * 0 / -1 (or an enum) and, on failure, writes one line naming the problem
 * into a caller-supplied err[errlen]. The message has no trailing newline and
 * no "error:" prefix; the caller adds context when it passes the message on
 * ("configuration: port: '99999' out of range 0..65535"). err may be NULL
 * when errlen is 0 (the caller does not want the text).
 *
 * Pure; thread-safe.
 */
#ifndef HG_BASE_ERR_H
#define HG_BASE_ERR_H

#include <stdarg.h>
#include <stddef.h>

/* printf into err[errlen] when the caller gave a buffer (cut to fit, always
 * NUL-terminated). Returns -1, so a failure path can be one statement:
 *     return err_set(err, errlen, "no group '%s'", name); */
int err_set(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int err_vset(char *err, size_t errlen, const char *fmt, va_list ap) __attribute__((format(printf, 3, 0)));

/* Prefix what err already holds: "what: <old message>". Returns -1. */
int err_prefix(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
