/*
 * common/broker_keys.h — how a daemon that consumes from a broker
 * (hourglass-consumer, hourglass-compensator) is told where the broker is
 * and who it is there: one set of config-table rows (common/cfg.h) and one
 * reading of the broker password.
 *
 * A program puts `char *uri; TLS_KEYS_FIELDS; char *user, *password_file;`
 * and `char password[PASSWD_FILE_MAX + 1];` in its config struct and
 * BROKER_KEYS_ROWS(its_config_t) in its cfg_key_t table; the keys are
 *   uri            the broker URI (required)
 *   tls-*          common/tls_keys.h's four
 *   user           a broker user instead of the URI's
 *   password-file  the file holding the broker password
 * and broker_keys_read_password reads password-file at validation.
 *
 * Header only, with no library of ours to link but libhgpasswd
 * (passwd_read_file), which every program that includes this header
 * links. Main thread, at start-up and on SIGHUP.
 */
#ifndef HG_COMMON_BROKER_KEYS_H
#define HG_COMMON_BROKER_KEYS_H

#include <stddef.h>
#include <stdio.h>

#include "common/cfg.h"
#include "common/passwd.h"
#include "common/tls_keys.h"

/* The rows, for a table of the program's config_type (with the fields above). */
#define BROKER_KEYS_ROWS(config_type)                                                                              \
    { CFG_KEY("uri", CFG_STRING, "hourglass://127.0.0.1:7379", 0, 0, offsetof(config_type, uri),                   \
              "broker URI, hourglass://[user[:pass]@]host[:port] (user@ alone: the password from password-file), " \
              "hourglass+tls://…, or amqp:// / amqps://… (RabbitMQ)"),                                             \
      .required = 1, .secret = CFG_SECRET_URI },                                                                   \
        TLS_KEYS_ROWS(config_type),                                                                                \
        { CFG_KEY("user", CFG_STRING, NULL, 0, 0, offsetof(config_type, user),                                     \
                  "broker user (instead of the URI's; needs password-file)") },                                    \
    {                                                                                                              \
        CFG_KEY("password-file", CFG_STRING, NULL, 0, 0, offsetof(config_type, password_file),                     \
                "file holding the broker password (e.g. a systemd credential), instead of the URI's"),             \
            .hint = "FILE"                                                                                         \
    }

/* The broker password of password_file (NULL: none) into password[size]
 * (size > PASSWD_FILE_MAX is enough; "" without a file). user (NULL: the
 * URI's) needs a password-file. Returns NULL, or the key at fault with err
 * "password-file: <why the file cannot be read>" or "user '<user>' needs
 * password-file (or put user:password in the uri)". */
static inline const char *broker_keys_read_password(const char *password_file, const char *user, char *password,
                                                    size_t size, char *err, size_t errlen)
{
    password[0] = '\0';
    if (password_file != NULL) {
        char why[400];
        if (passwd_read_file(password_file, password, size, why, sizeof why) != 0) {
            snprintf(err, errlen, "password-file: %s", why);
            return "password-file";
        }
    } else if (user != NULL) {
        snprintf(err, errlen, "user '%s' needs password-file (or put user:password in the uri)", user);
        return "user";
    }
    return NULL;
}

#endif
