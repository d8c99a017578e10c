/*
 * tests/unit/test_uri.c — CUnit suite for lib/uri.c.
 *
 * Good URIs (names, IPv4, bracketed IPv6, default port, credentials with
 * percent-escapes, case-insensitive scheme, a trailing slash) parse to the
 * expected fields; bad ones are refused with a message that names the bad
 * part (and never contains the password). hourglass+tls:// parameters (ca,
 * cert, key, sni) are decoded; bad ones are refused by name.
 */
#include "lib/uri.h"
#include "tests/helpers/testutil.h"

#include <CUnit/CUnit.h>
#include <stdio.h>
#include <string.h>

/* Parse text and compare every field. user NULL means no credentials. */
static void good(const char *text, int tls, const char *host, int port, const char *user, const char *password,
                 int line)
{
    char err[256] = "";
    uri_t u;
    int rc = uri_parse(text, 7379, &u, err, sizeof(err));

    TU_CHECK_AT(rc == 0, line, "'%s' refused: %s", text, err);
    if (rc != 0)
        return;
    TU_CHECK_AT(u.tls == tls, line, "'%s': tls %d, want %d", text, u.tls, tls);
    TU_CHECK_AT(strcmp(u.host, host) == 0, line, "'%s': host '%s', want '%s'", text, u.host, host);
    TU_CHECK_AT(u.port == port, line, "'%s': port %d, want %d", text, u.port, port);
    TU_CHECK_AT(u.has_auth == (user != NULL), line, "'%s': has_auth %d", text, u.has_auth);
    if (user != NULL) {
        TU_CHECK_AT(strcmp(u.user, user) == 0, line, "'%s': user '%s', want '%s'", text, u.user, user);
        TU_CHECK_AT(strcmp(u.password, password) == 0, line, "'%s': password '%s', want '%s'", text, u.password,
                    password);
    }
}

/* Parse text, expect a refusal whose message contains want. */
static void bad(const char *text, const char *want, int line)
{
    char err[256] = "";
    uri_t u;
    int rc = uri_parse(text, 7379, &u, err, sizeof(err));

    TU_CHECK_AT(rc == -1, line, "'%s' accepted (host '%s' port %d), want an error with '%s'", text ? text : "(NULL)",
                u.host, u.port, want);
    TU_CHECK_AT(strstr(err, want) != NULL, line, "'%s': message '%s' lacks '%s'", text ? text : "(NULL)", err, want);
    TU_CHECK_AT(u.host[0] == '\0' && u.port == 0, line, "'%s': *out not zeroed on failure", text ? text : "(NULL)");
}

#define GOOD(text, tls, host, port, user, pass) good(text, tls, host, port, user, pass, __LINE__)
#define BAD(text, want)                         bad(text, want, __LINE__)

static void test_good(void)
{
    GOOD("hourglass://localhost", 0, "localhost", 7379, NULL, NULL);
    GOOD("hourglass://127.0.0.1:6000", 0, "127.0.0.1", 6000, NULL, NULL);
    GOOD("hourglass://broker.example.org:1/", 0, "broker.example.org", 1, NULL, NULL);
    GOOD("hourglass://b-1_x:65535", 0, "b-1_x", 65535, NULL, NULL);
    GOOD("HOURGLASS://Host", 0, "Host", 7379, NULL, NULL);
    GOOD("hourglass://[::1]", 0, "::1", 7379, NULL, NULL);
    GOOD("hourglass://[::1]:7000/", 0, "::1", 7000, NULL, NULL);
    GOOD("hourglass://[2001:db8::7]:80", 0, "2001:db8::7", 80, NULL, NULL);
    GOOD("hourglass+tls://h:443", 1, "h", 443, NULL, NULL);
    GOOD("hourglass://alice:secret@h:7000", 0, "h", 7000, "alice", "secret");
    GOOD("hourglass://alice:s:e:c@h", 0, "h", 7379, "alice", "s:e:c");
    GOOD("hourglass://al%69ce:p%40ss%2Fw%3Ad@h", 0, "h", 7379, "alice", "p@ss/w:d");
    GOOD("hourglass://a%3Ab:x@[::1]:9", 0, "::1", 9, "a:b", "x");
    GOOD("hourglass://u:!$&'()*+,;=-._~@h", 0, "h", 7379, "u", "!$&'()*+,;=-._~");
    GOOD("hourglass://00:01@h:007", 0, "h", 7, "00", "01");
}

/* user@ without ":pass": parsed, the user kept, no password (the client
 * takes opts.password or refuses, tests/unit/test_client.c). */
static void test_user_only(void)
{
    char err[256] = "";
    uri_t u;

    TU_CHECK(uri_parse("hourglass://bob@h:7000", 7379, &u, err, sizeof(err)) == 0, "refused: %s", err);
    TU_CHECK(u.has_user == 1 && u.has_auth == 0 && strcmp(u.user, "bob") == 0 && u.password[0] == '\0' &&
                 strcmp(u.host, "h") == 0 && u.port == 7000,
             "has_user %d has_auth %d user '%s' host '%s' port %d", u.has_user, u.has_auth, u.user, u.host, u.port);
    TU_CHECK(uri_parse("hourglass://b%40b@h", 7379, &u, err, sizeof(err)) == 0 && strcmp(u.user, "b@b") == 0,
             "escaped user: '%s' (%s)", u.user, err);
    TU_CHECK(uri_parse("hourglass://bob:pw@h", 7379, &u, err, sizeof(err)) == 0 && u.has_user == 1 && u.has_auth == 1,
             "user:pass@ sets both");
    TU_CHECK(uri_parse("hourglass://h", 7379, &u, err, sizeof(err)) == 0 && u.has_user == 0 && u.has_auth == 0,
             "no userinfo sets neither");
}

static void test_bad_scheme(void)
{
    BAD(NULL, "empty URI");
    BAD("", "empty URI");
    BAD("localhost:7379", "missing scheme");
    BAD("redis://localhost", "unsupported scheme 'redis'");
    /* Every scheme hg_client_open takes is named: amqp:// and amqps:// are dispatched before uri_parse. */
    BAD("rabbit://h", "unsupported scheme 'rabbit' (want hourglass://, hourglass+tls://, amqp:// or amqps://)");
    BAD("localhost:7379", "missing scheme (want hourglass://host[:port], hourglass+tls://…, amqp://… or amqps://…)");
    BAD("hourglass:/localhost", "missing scheme");
    BAD("http://h", "unsupported scheme 'http'");
    BAD("hourglass+ssl://h", "unsupported scheme 'hourglass+ssl'");
    BAD("://h", "unsupported scheme ''");
}

static void test_bad_host(void)
{
    BAD("hourglass://", "missing host");
    BAD("hourglass:///", "missing host");
    BAD("hourglass://:7379", "missing host");
    BAD("hourglass://u:p@", "missing host");
    BAD("hourglass://u:p@:1", "missing host");
    BAD("hourglass://[]:1", "missing host");
    BAD("hourglass://ho st", "invalid character ' ' in host");
    BAD("hourglass://h*st", "invalid character '*' in host");
    BAD("hourglass://::1", "more than one ':'");
    BAD("hourglass://[::1", "'[' without ']'");
    BAD("hourglass://[::g]", "bad IPv6 address '::g'");
    BAD("hourglass://[::1]x", "unexpected 'x' after ']'");
}

static void test_bad_port(void)
{
    /* a number out of range says so, naming it */
    BAD("hourglass://h:0", "bad port '0': out of range (want 1..65535)");
    BAD("hourglass://h:65536", "bad port '65536': out of range (want 1..65535)");
    BAD("hourglass://h:99999", "bad port '99999': out of range (want 1..65535)");
    BAD("hourglass://h:99999999", "bad port '99999999': out of range");
    BAD("hourglass://h:123456789012345678901234567890", "bad port '12345678901234567890': out of range");
    BAD("hourglass://h:", "empty port");
    BAD("hourglass://h:abc", "bad port 'abc': not a number (want 1..65535)");
    BAD("hourglass://h:-1", "bad port '-1'");
    BAD("hourglass://h:+80", "bad port '+80'");
    BAD("hourglass://h: 80", "bad port ' 80'");
    BAD("hourglass://[::1]:", "empty port");
    BAD("hourglass://[::1]:70000", "bad port '70000': out of range");
}

/* uri_parse_port alone (amqp:// checks its ports with it) and uri_address
 * (how a host and port are shown in messages: an IPv6 address in brackets). */
static void test_port_and_address(void)
{
    char err[200], buf[100];
    int port = 0;

    TU_CHECK(uri_parse_port("5672", 4, &port, err, sizeof err) == 0 && port == 5672, "5672: port %d", port);
    TU_CHECK(uri_parse_port("65535", 5, &port, err, sizeof err) == 0 && port == 65535, "65535: port %d", port);
    TU_CHECK(uri_parse_port("99999", 5, &port, err, sizeof err) == -1 &&
                 strcmp(err, "bad port '99999': out of range (want 1..65535)") == 0,
             "99999: '%s'", err);
    TU_CHECK(uri_parse_port("0", 1, &port, err, sizeof err) == -1 && strstr(err, "'0': out of range") != NULL,
             "0: '%s'", err);
    TU_CHECK(uri_parse_port("5x", 2, &port, err, sizeof err) == -1 && strstr(err, "'5x': not a number") != NULL,
             "5x: '%s'", err);
    TU_CHECK(uri_parse_port("", 0, &port, err, sizeof err) == -1 && strstr(err, "empty port") != NULL, "'': '%s'", err);
    TU_CHECK(strcmp(uri_address(buf, sizeof buf, "::1", 5672), "[::1]:5672") == 0, "::1 shown as '%s'", buf);
    TU_CHECK(strcmp(uri_address(buf, sizeof buf, "fe80::1%eth0", 7379), "[fe80::1%eth0]:7379") == 0,
             "fe80::1%%eth0 shown as '%s'", buf);
    TU_CHECK(strcmp(uri_address(buf, sizeof buf, "10.0.0.1", 5672), "10.0.0.1:5672") == 0, "10.0.0.1 shown as '%s'",
             buf);
    TU_CHECK(strcmp(uri_address(buf, sizeof buf, "rabbit.example", 5671), "rabbit.example:5671") == 0,
             "a name shown as '%s'", buf);
}

static void test_bad_userinfo(void)
{
    char err[256] = "";
    uri_t u;

    BAD("hourglass://:pass@h", "empty user name");
    BAD("hourglass://@h", "empty user name");
    BAD("hourglass://bob:@h", "empty password for user 'bob'");
    BAD("hourglass://bob:p@ss@h", "more than one '@'");
    BAD("hourglass://b%zzb:x@h", "bad percent-escape '%zz' in the user name");
    BAD("hourglass://b%4:x@h", "bad percent-escape");
    BAD("hourglass://bob:x%2@h", "bad percent-escape in the password");
    BAD("hourglass://bob:x%00y@h", "%00 (a NUL byte) in the password");
    BAD("hourglass://b\"b:x@h", "invalid character '\"' in the user name");

    /* The password never appears in a message. */
    CU_ASSERT_EQUAL(uri_parse("hourglass://bob:top\"secret@h", 1, &u, err, sizeof(err)), -1);
    CU_ASSERT_PTR_NULL(strstr(err, "top"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "password"));
    /* Nor one byte of it: "0x22" would say the password holds a '"'. */
    CU_ASSERT_PTR_NULL(strstr(err, "0x22"));
    CU_ASSERT_PTR_NULL(strstr(err, "'\"'"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "an invalid character in the password (percent-encode"));
    CU_ASSERT_EQUAL(uri_parse("hourglass://bob:topsecret%zz@h", 1, &u, err, sizeof(err)), -1);
    CU_ASSERT_PTR_NULL(strstr(err, "topsecret"));
}

static void test_bad_rest(void)
{
    BAD("hourglass://h/db", "unexpected path '/db'");
    BAD("hourglass://h:1//", "unexpected path '//'");
    BAD("hourglass://h?timeout=5", "unexpected query '?timeout=5'");
    BAD("hourglass://h#x", "unexpected fragment '#x'");
    BAD("hourglass://h/?x", "unexpected path '/?x'");
}

static void test_lengths(void)
{
    char text[1024], err[256] = "";
    uri_t u;

    /* a 252-byte host name is fine, 254 is not */
    snprintf(text, sizeof(text), "hourglass://%0252d", 0);
    CU_ASSERT_EQUAL(uri_parse(text, 7379, &u, err, sizeof(err)), 0);
    snprintf(text, sizeof(text), "hourglass://%0254d", 0);
    CU_ASSERT_EQUAL(uri_parse(text, 7379, &u, err, sizeof(err)), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "host name is longer"));
    /* a user name of 300 bytes does not fit */
    snprintf(text, sizeof(text), "hourglass://%0300d:x@h", 0);
    CU_ASSERT_EQUAL(uri_parse(text, 7379, &u, err, sizeof(err)), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "the user name is longer than 255 bytes"));
    /* err may be NULL */
    CU_ASSERT_EQUAL(uri_parse("bad", 7379, &u, NULL, 0), -1);
    /* the default port applies only without a port */
    CU_ASSERT_EQUAL(uri_parse("hourglass://h", 1234, &u, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(u.port, 1234);
}

/* hourglass+tls:// parameters: decoded into their fields; unknown, repeated,
 * empty or on a plaintext URI refused by name. */
static void test_tls_params(void)
{
    char err[256] = "";
    uri_t u;

    CU_ASSERT_EQUAL_FATAL(uri_parse("hourglass+tls://h:7380?ca=/etc/hg/ca.pem&cert=/c%20d.pem&key=k.pem&sni=b.example",
                                    7379, &u, err, sizeof(err)),
                          0);
    CU_ASSERT_STRING_EQUAL(u.host, "h");
    CU_ASSERT_EQUAL(u.port, 7380);
    CU_ASSERT_STRING_EQUAL(u.tls_ca, "/etc/hg/ca.pem");
    CU_ASSERT_STRING_EQUAL(u.tls_cert, "/c d.pem");
    CU_ASSERT_STRING_EQUAL(u.tls_key, "k.pem");
    CU_ASSERT_STRING_EQUAL(u.tls_sni, "b.example");
    CU_ASSERT_EQUAL_FATAL(uri_parse("hourglass+tls://u:p@[::1]/?ca=a%26b", 7379, &u, err, sizeof(err)), 0);
    CU_ASSERT_STRING_EQUAL(u.tls_ca, "a&b");
    CU_ASSERT_STRING_EQUAL(u.password, "p");
    CU_ASSERT_STRING_EQUAL(u.tls_cert, "");
    GOOD("hourglass+tls://h?sni=x", 1, "h", 7379, NULL, NULL);
    BAD("hourglass+tls://h?verify=no", "unknown URI parameter 'verify' (want ca, cert, key or sni)");
    BAD("hourglass+tls://h?ca=a&ca=b", "URI parameter 'ca' given twice");
    BAD("hourglass+tls://h?ca=", "empty value for URI parameter 'ca'");
    BAD("hourglass+tls://h?ca", "URI parameter 'ca' has no value");
    BAD("hourglass+tls://h?", "empty query after '?'");
    BAD("hourglass+tls://h?ca=x&", "empty URI parameter after the last '&'");
    BAD("hourglass+tls://h?ca=x%00y", "bad percent-escape in URI parameter 'ca'");
    BAD("hourglass+tls://h?ca=a b", "invalid character 0x20 in URI parameter 'ca'");
    BAD("hourglass://h?ca=x", "only hourglass+tls:// takes parameters");
}

static const tu_test_t uri_tests[] = {
    { "hourglass+tls:// parameters", test_tls_params },
    { "good URIs", test_good },
    { "a user without a password", test_user_only },
    { "bad scheme", test_bad_scheme },
    { "bad host", test_bad_host },
    { "bad port", test_bad_port },
    { "uri_parse_port and uri_address (shared with amqp://)", test_port_and_address },
    { "bad user and password", test_bad_userinfo },
    { "path, query, fragment", test_bad_rest },
    { "lengths", test_lengths },
    { NULL, NULL },
};

static const tu_suite_t suites[] = {
    { "uri", uri_tests },
};

int main(int argc, char **argv)
{
    return tu_suites_main(argc, argv, suites, sizeof suites / sizeof suites[0], NULL, NULL);
}
