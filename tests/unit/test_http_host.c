/*
 * tests/unit/test_http_host.c — common/http_host.c: which Host headers name
 * a listener (the DNS-rebinding defence of the metrics ports and the
 * console), and the check of a configured list of names.
 */
#include "common/http_host.h"
#include "tests/helpers/testutil.h"

#include <CUnit/CUnit.h>
#include <stdio.h>
#include <string.h>

/* IP literals, localhost and the bind, with or without a port or a trailing dot; no Host (HTTP/1.0). */
static void test_literals_and_localhost(void)
{
    const char *served[] = { "127.0.0.1",        "127.0.0.1:9121",       "10.1.2.3", "localhost",
                             "LOCALHOST.:9121",  "[::1]:9121",           "[::1]",    "::1",
                             "metrics.internal", "Metrics.Internal.:80", NULL };
    for (int i = 0; served[i] != NULL; i++)
        TU_CHECK(http_host_allowed(served[i], "metrics.internal", NULL) == 1, "Host '%s' refused", served[i]);
    CU_ASSERT_EQUAL(http_host_allowed(NULL, "127.0.0.1", NULL), 1);
}

/* Any other name is refused, as are malformed ones: what a rebinding page sends. */
static void test_other_names_refused(void)
{
    const char *refused[] = { "attacker.example",
                              "attacker.example:9121",
                              "127.0.0.1.nip.io",
                              "localhost.example",
                              "[::1",
                              "[::1]x",
                              "[not-v6]",
                              "",
                              ":9121",
                              ".",
                              "127.0.0.1:80@attacker.example",
                              "localhost:9121/metrics",
                              "localhost:abc",
                              "localhost:9121:9121",
                              "[::1]:9121@attacker.example",
                              "[::1]:x",
                              "myhost:1234567",
                              NULL };
    for (int i = 0; refused[i] != NULL; i++)
        TU_CHECK(http_host_allowed(refused[i], "127.0.0.1", "myhost, proxy.example") == 0, "Host '%s' served",
                 refused[i]);
    char longname[400];
    memset(longname, 'a', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    CU_ASSERT_EQUAL(http_host_allowed(longname, "127.0.0.1", longname), 0);
}

/* The allowed list: entries compared whole, without case and trailing dot, blanks around them ignored. */
static void test_allowed_list(void)
{
    const char *list = " myhost ,proxy.example., ,monitoring-01";
    const char *served[] = { "myhost", "MYHOST:9121", "proxy.example", "proxy.example.:443", "monitoring-01", NULL };
    for (int i = 0; served[i] != NULL; i++)
        TU_CHECK(http_host_allowed(served[i], "127.0.0.1", list) == 1, "Host '%s' refused", served[i]);
    const char *refused[] = { "myhost2", "host", "example", "proxy", "monitoring", NULL };
    for (int i = 0; refused[i] != NULL; i++)
        TU_CHECK(http_host_allowed(refused[i], "127.0.0.1", list) == 0, "Host '%s' served", refused[i]);
    CU_ASSERT_EQUAL(http_host_allowed("myhost", "127.0.0.1", ""), 0);
}

/* A configured list: host names only, the bad entry named with the key. */
static void test_hosts_check(void)
{
    char err[300] = "";
    CU_ASSERT_EQUAL(http_hosts_check("metrics-allowed-hosts", NULL, err, sizeof err), 0);
    CU_ASSERT_EQUAL(http_hosts_check("metrics-allowed-hosts", "", err, sizeof err), 0);
    CU_ASSERT_EQUAL(http_hosts_check("metrics-allowed-hosts", "a.example, b_c-1.example.", err, sizeof err), 0);
    const char *bad[] = { "a.example:9121", "a.example, b c", "http://a.example", "a.example,,b", NULL };
    const char *named[] = { "'a.example:9121'", "'b c'", "'http://a.example'", "''", NULL };
    for (int i = 0; bad[i] != NULL; i++) {
        err[0] = '\0';
        CU_ASSERT_EQUAL(http_hosts_check("metrics-allowed-hosts", bad[i], err, sizeof err), -1);
        TU_CHECK(strncmp(err, "metrics-allowed-hosts: ", 23) == 0 && strstr(err, named[i]) != NULL &&
                     strstr(err, "is not a host name") != NULL,
                 "list '%s': %s", bad[i], err);
    }
}

static const tu_test_t host_tests[] = {
    { "IP literals, localhost and bind are served", test_literals_and_localhost },
    { "other names are refused (DNS rebinding)", test_other_names_refused },
    { "the allowed list", test_allowed_list },
    { "a configured list is checked", test_hosts_check },
    { NULL, NULL },
};
static const tu_suite_t suites[] = {
    { "http_host", host_tests },
};

int main(int argc, char **argv)
{
    return tu_suites_main(argc, argv, suites, sizeof suites / sizeof suites[0], NULL, NULL);
}
