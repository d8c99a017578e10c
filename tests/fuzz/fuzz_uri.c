/*
 * tests/fuzz/fuzz_uri.c — libFuzzer target: the broker URI parser
 * (lib/uri.c), which reads what an application or an operator's flag says.
 *
 * The input is the URI text (up to its first NUL). It is refused with a
 * message, *out left zeroed and the password never in the message (the
 * message must not change when the password's letters and digits do); or it is
 * accepted with a port in 1..65535, a non-empty host, has_auth only with
 * has_user, and then the host and port, written back out with uri_address,
 * must parse again to the same host and port. A failed check calls abort(),
 * which libFuzzer reports as a crash.
 */
#include "lib/uri.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#include "tests/fuzz/fuzz_check.h"

#define DEFAULT_PORT 7379

/* The password's raw text in a URI the way the parser finds it (the
 * authority's first '@', the first ':' before it), or NULL. */
static const char *password_in(const char *text, size_t *len)
{
    const char *sep = strstr(text, "://");
    if (sep == NULL) {
        return NULL;
    }
    const char *auth = sep + 3, *auth_end = auth + strcspn(auth, "/?#");
    const char *at = memchr(auth, '@', (size_t)(auth_end - auth));
    const char *colon = at ? memchr(auth, ':', (size_t)(at - auth)) : NULL;
    if (colon == NULL) {
        return NULL;
    }
    *len = (size_t)(at - colon - 1);
    return colon + 1;
}

/* c replaced by another character of its class, so the parser takes the same path: '0' stays (a "%00" stays
 * refused), 1-9, a-f, A-F, g-z and G-Z each rotate among themselves; any other byte stays. */
static char other_of_class(char c)
{
    static const char *const classes[] = { "123456789", "abcdef", "ABCDEF", "ghijklmnopqrstuvwxyz",
                                           "GHIJKLMNOPQRSTUVWXYZ" };
    for (size_t i = 0; i < sizeof classes / sizeof classes[0]; i++) {
        const char *at = c != '\0' ? strchr(classes[i], c) : NULL;
        if (at != NULL) {
            return at[1] != '\0' ? at[1] : classes[i][0];
        }
    }
    return c;
}

/* The message of a refused URI must not depend on its password's letters and
 * digits (it never shows the password, nor a piece of it): the same URI with
 * them changed must be refused in the same words. */
static void check_refused(const char *text, const uri_t *u, const char *err)
{
    static const uri_t zero;
    size_t plen = 0;
    const char *pw = password_in(text, &plen);
    CHECK(memcmp(u, &zero, sizeof zero) == 0);
    CHECK(err[0] != '\0');
    if (pw != NULL && plen > 0) {
        char *other = strdup(text), again_err[512] = "";
        uri_t again;
        CHECK(other != NULL);
        for (size_t i = 0; i < plen; i++) {
            other[pw - text + i] = other_of_class(pw[i]);
        }
        CHECK(uri_parse(other, DEFAULT_PORT, &again, again_err, sizeof again_err) != 0);
        if (strcmp(err, again_err) != 0) {
            fprintf(stderr, "fuzz_uri: the message shows the password:\n  %s\n  %s\n", err, again_err);
            abort();
        }
        free(other);
    }
}

static void check_accepted(const uri_t *u)
{
    char addr[URI_HOST_MAX + 16], again_text[URI_HOST_MAX + 64], err[512] = "";
    uri_t again;
    CHECK(u->port >= 1 && u->port <= 65535);
    CHECK(u->host[0] != '\0' && memchr(u->host, '\0', sizeof u->host) != NULL);
    CHECK(!u->has_auth || u->has_user);
    CHECK(u->tls || (u->tls_ca[0] == '\0' && u->tls_cert[0] == '\0' && u->tls_key[0] == '\0' && u->tls_sni[0] == '\0'));
    snprintf(again_text, sizeof again_text, "hourglass://%s", uri_address(addr, sizeof addr, u->host, u->port));
    if (uri_parse(again_text, DEFAULT_PORT, &again, err, sizeof err) != 0) {
        fprintf(stderr, "fuzz_uri: '%s' does not parse again: %s\n", again_text, err);
        abort();
    }
    CHECK(strcmp(again.host, u->host) == 0 && again.port == u->port);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* an allocation of exactly the string, so a read past its NUL is ASan's */
    char *text = malloc(size + 1);
    uri_t u;
    char err[512] = "";

    CHECK(text != NULL);
    memcpy(text, data, size);
    text[size] = '\0';
    if (uri_parse(text, DEFAULT_PORT, &u, err, sizeof err) != 0) {
        check_refused(text, &u, err);
    } else {
        check_accepted(&u);
    }
    free(text);
    return 0;
}
