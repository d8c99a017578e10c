/*
 * tests/integration/test_cli_check.c — hourglass-cli --check-config checks
 * the broker URI it would use, as the daemons' --check-config do: the URI of
 * --uri (or $HOURGLASS_URI, or the file's uri) is checked without
 * connecting, a bad one fails with exit 2 naming the problem, and the
 * printed configuration holds the URI that would be used with its password
 * taken out. The cli runs as a child process; nothing listens anywhere.
 *
 * Suite "check-config":
 *   bad uri     a port out of range, a scheme no transport speaks, --tls-*
 *               with a plain URI, a user without a password: exit 2, the
 *               message names "uri" and the cause
 *   good uri    --uri user:PW@host: exit 0, "uri = hourglass://ops@…" and
 *               the password nowhere in the output
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <CUnit/CUnit.h>

#include "tests/helpers/testutil.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CLI_PATH HG_BUILDDIR "/hourglass-cli"
#define OUT_MAX  16384

static char out[OUT_MAX];

/* hourglass-cli --check-config ARGS... (NULL-terminated), without
 * $HOURGLASS_URI; stdout and stderr into out. Returns the exit status. */
static int check(const char *first, ...)
{
    tu_argv_t argv;
    va_list ap;

    tu_argv_init(&argv);
    tu_argv_add_list(&argv, (const char *const[]){ CLI_PATH, "--check-config", first, NULL });
    va_start(ap, first);
    tu_argv_add_va(&argv, ap);
    va_end(ap);
    unsetenv("HOURGLASS_URI");
    return tu_run_capture_argv(&argv, out, sizeof out);
}

static void expect_refused(const char *uri, const char *extra, const char *want)
{
    int rc = extra != NULL ? check("--uri", uri, extra, "x", NULL) : check("--uri", uri, NULL);
    TU_CHECK(rc == 2 && strstr(out, want) != NULL && strstr(out, "configuration OK") == NULL,
             "--check-config --uri %s: exit %d, want 2 with '%s': %s", uri, rc, want, out);
}

static void test_bad_uri(void)
{
    expect_refused("hourglass://127.0.0.1:99999", NULL, "uri: bad URI: bad port '99999'");
    expect_refused("gopher://127.0.0.1:7379", NULL, "uri: ");
    expect_refused("hourglass://127.0.0.1:7379", "--tls-server-name",
                   "--tls-* given but the URI is neither hourglass+tls:// nor amqps://");
    expect_refused("hourglass://ops@127.0.0.1:7379", NULL, "no password given for user");
    expect_refused("hourglass://ops@127.0.0.1:7379", NULL, "--password-file");
    /* the file's uri is checked too when no --uri is given */
    char dir[256], conf[320];
    TU_REQUIRE(tu_mkdtemp("cli-check", dir, sizeof dir) == 0, "mkdtemp");
    snprintf(conf, sizeof conf, "%s/cli.conf", dir);
    TU_REQUIRE(tu_write_file(conf, "uri = hourglass://127.0.0.1:0\n") == 0, "write %s", conf);
    int rc = check("--config", conf, NULL);
    TU_CHECK(rc == 2 && strstr(out, "uri: bad URI") != NULL, "--config with a bad uri: exit %d: %s", rc, out);
    tu_rmtree(dir);
}

static void test_good_uri(void)
{
    int rc = check("--uri", "hourglass://ops:SECRET-PW@127.0.0.1:7379", NULL);
    TU_CHECK(rc == 0 && strstr(out, "\nuri = hourglass://ops@127.0.0.1:7379\n") != NULL &&
                 strstr(out, "configuration OK") != NULL,
             "--check-config --uri ops:PW@: exit %d: %s", rc, out);
    TU_CHECK(strstr(out, "SECRET") == NULL, "the password is printed: %s", out);
    /* --uri wins over the file's uri, as when a command runs */
    char dir[256], conf[320];
    TU_REQUIRE(tu_mkdtemp("cli-check", dir, sizeof dir) == 0, "mkdtemp");
    snprintf(conf, sizeof conf, "%s/cli.conf", dir);
    TU_REQUIRE(tu_write_file(conf, "uri = hourglass://127.0.0.1:0\n") == 0, "write %s", conf);
    rc = check("--config", conf, "--uri", "hourglass://127.0.0.1:7400", NULL);
    TU_CHECK(rc == 0 && strstr(out, "\nuri = hourglass://127.0.0.1:7400\n") != NULL,
             "--uri over the file's bad uri: exit %d: %s", rc, out);
    tu_rmtree(dir);
}

static const tu_test_t check_tests[] = {
    { "a bad URI fails the check, naming the problem", test_bad_uri },
    { "the URI used is printed without its password", test_good_uri },
    { NULL, NULL },
};
static const tu_suite_t suites[] = {
    { "check-config", check_tests },
};

int main(int argc, char **argv)
{
    return tu_suites_main(argc, argv, suites, sizeof suites / sizeof suites[0], NULL, NULL);
}
