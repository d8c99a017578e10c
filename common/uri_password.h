/*
 * common/uri_password.h — where the password of a broker URI's
 * user:password@ stands, for whatever must not show it: argv as ps sees it
 * (common/argv_secret.c) and --check-config's print (common/cfg_print.c).
 *
 * The URI is text only here (it may not have been checked yet): its
 * userinfo is what stands before the last '@' ahead of the first '/' or '?'
 * after "://" (the whole text when there is no "://"), and its password is
 * what follows the first ':' of that userinfo. This covers hourglass://,
 * hourglass+tls://, amqp:// and amqps:// (one userinfo ahead of amqp's host
 * list); on a text no parser accepts it errs towards hiding more. Pure, no
 * allocation; thread-safe.
 */
#ifndef HG_COMMON_URI_PASSWORD_H
#define HG_COMMON_URI_PASSWORD_H

#include <stddef.h>

/* 1 with the password's bytes at uri[*start .. *start + *len) (*len > 0);
 * 0 when uri has no user:password@ (none, user@ alone, or an empty password
 * "user:@"). The one answer to "does the URI give a password" (also
 * hourglass-cli's, whether --user needs --password-file), as libhourglass
 * parses it (lib/uri.c): "user:@" gives none (the parser refuses an empty
 * password), ":pw@" gives one (the parser refuses the empty user name). */
int uri_password_span(const char *uri, size_t *start, size_t *len);

/* uri without its password and the ':' before it ("amqp://u:pw@h1,h2/v"
 * becomes "amqp://u@h1,h2/v") into buf[len]. Returns 1 when a password was
 * taken out, 0 when there was none (buf holds uri as it is), -1 when buf is
 * too small (buf holds "", never a part of the password). */
int uri_password_strip(const char *uri, char *buf, size_t len);

#endif
