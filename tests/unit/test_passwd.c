/*
 * tests/unit/test_passwd.c — CUnit suites for common/passwd.c (the password
 * hash format) and broker/users.c (the users file).
 *
 * passwd: a hash made by passwd_hash verifies its password and no other, for
 * scrypt and PBKDF2; two hashes of one password differ (fresh salt); a known
 * PBKDF2-SHA256 vector (RFC 7914's test vector for PBKDF2-HMAC-SHA256,
 * "passwd"/"salt", 1 iteration, is below our bounds, so the vector is
 * computed here with OpenSSL's one-shot PKCS5_PBKDF2_HMAC instead); malformed
 * texts and out-of-bounds parameters are refused with a message naming the
 * part; the password file reader.
 * users: good files (comments, blank lines, CRLF, several roles, a disabled
 * user) parse; each bad line is refused with "FILE:LINE: problem".
 */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CUnit/CUnit.h>
#include <openssl/evp.h>

#include "broker/users.h"
#include "common/log.h"
#include "common/passwd.h"
#include "tests/helpers/testutil.h"

static void hex(const unsigned char *b, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", b[i]);
}

static void test_roundtrip(void)
{
    for (int kind = 0; kind < 2; kind++) {
        passwd_params_t p;
        char h1[PASSWD_HASH_MAX], h2[PASSWD_HASH_MAX], err[256] = "";
        passwd_params_default(&p, kind == 0 ? PASSWD_SCRYPT : PASSWD_PBKDF2_SHA256);
        p.log2_n = 10;
        p.iterations = 1000;
        TU_REQUIRE(passwd_hash("s3cret pass", 11, &p, h1, sizeof h1, err, sizeof err) == 0, "hash: %s", err);
        TU_REQUIRE(passwd_hash("s3cret pass", 11, &p, h2, sizeof h2, err, sizeof err) == 0, "hash: %s", err);
        TU_CHECK(strncmp(h1, kind == 0 ? "$scrypt$ln=10,r=8,p=1$" : "$pbkdf2-sha256$i=1000$", 15) == 0, "format: %s",
                 h1);
        TU_CHECK(strcmp(h1, h2) != 0, "two hashes of one password are equal (no fresh salt): %s", h1);
        TU_CHECK(passwd_check(h1, err, sizeof err) == 0, "check: %s", err);
        TU_CHECK(passwd_verify(h1, "s3cret pass", 11, err, sizeof err) == 1, "the password does not verify: %s", h1);
        TU_CHECK(passwd_verify(h1, "s3cret pasS", 11, err, sizeof err) == 0, "another password verifies");
        TU_CHECK(passwd_verify(h1, "s3cret pas", 10, err, sizeof err) == 0, "a prefix verifies");
        TU_CHECK(passwd_verify(h1, "", 0, err, sizeof err) == 0, "the empty password verifies");
    }
    passwd_params_t p;
    char h[PASSWD_HASH_MAX], err[256] = "";
    passwd_params_default(&p, PASSWD_SCRYPT);
    TU_CHECK(passwd_hash("", 0, &p, h, sizeof h, err, sizeof err) == -1 && strstr(err, "empty password"),
             "an empty password was hashed: %s", err);
    TU_CHECK(p.log2_n == 15 && p.r == 8 && p.p == 1, "scrypt defaults ln=%u r=%u p=%u", p.log2_n, p.r, p.p);
    /* PASSWD_MAX bytes are hashed; one more is refused (the broker's AUTH would never check it). */
    static char big[PASSWD_MAX + 2];
    memset(big, 'x', PASSWD_MAX + 1);
    p.log2_n = 10;
    TU_CHECK(passwd_hash(big, PASSWD_MAX, &p, h, sizeof h, err, sizeof err) == 0, "%d bytes: %s", PASSWD_MAX, err);
    TU_CHECK(passwd_hash(big, PASSWD_MAX + 1, &p, h, sizeof h, err, sizeof err) == -1 &&
                 strstr(err, "the password is 1025 bytes, longer than 1024") != NULL,
             "a password of %d bytes: %s", PASSWD_MAX + 1, err);
}

/* A PBKDF2 text made by hand from OpenSSL's independent one-shot function verifies. */
static void test_known_pbkdf2(void)
{
    const unsigned char salt[16] = "0123456789abcdef";
    unsigned char key[32];
    char salt_hex[33], key_hex[65], text[PASSWD_HASH_MAX], err[256] = "";
    TU_REQUIRE(PKCS5_PBKDF2_HMAC("password", 8, salt, 16, 4096, EVP_sha256(), 32, key) == 1, "PKCS5_PBKDF2_HMAC");
    hex(salt, 16, salt_hex);
    hex(key, 32, key_hex);
    snprintf(text, sizeof text, "$pbkdf2-sha256$i=4096$%s$%s", salt_hex, key_hex);
    TU_CHECK(passwd_verify(text, "password", 8, err, sizeof err) == 1, "%s does not verify: %s", text, err);
    TU_CHECK(passwd_verify(text, "Password", 8, err, sizeof err) == 0, "a wrong password verifies");
}

static void bad_hash(const char *text, const char *want, int line)
{
    char err[256] = "";
    int rc = passwd_check(text, err, sizeof err);
    TU_CHECK_AT(rc == -1, line, "'%s' accepted, want an error with '%s'", text, want);
    TU_CHECK_AT(strstr(err, want) != NULL, line, "'%s': message '%s' lacks '%s'", text, err, want);
    TU_CHECK_AT(passwd_verify(text, "x", 1, err, sizeof err) == -1, line, "'%s' verified", text);
}
#define BAD_HASH(text, want) bad_hash(text, want, __LINE__)

static void test_bad_hashes(void)
{
    const char *S = "00112233445566778899aabbccddeeff";
    const char *K = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
    char t[400];
    BAD_HASH("", "unknown hash format");
    BAD_HASH("secret", "unknown hash format");
    BAD_HASH("$2y$10$abcdefghijklmnopqrstuv", "unknown hash format");
    snprintf(t, sizeof t, "$scrypt$ln=9,r=8,p=1$%s$%s", S, K);
    BAD_HASH(t, "ln=9 out of range 10..20");
    snprintf(t, sizeof t, "$scrypt$ln=21,r=8,p=1$%s$%s", S, K);
    BAD_HASH(t, "ln=21 out of range");
    snprintf(t, sizeof t, "$scrypt$ln=20,r=8,p=2$%s$%s", S, K);
    BAD_HASH(t, "MiB, more than 256 MiB");
    snprintf(t, sizeof t, "$scrypt$ln=15,r=0,p=1$%s$%s", S, K);
    BAD_HASH(t, "r=0 out of range");
    snprintf(t, sizeof t, "$scrypt$ln=15,p=1,r=8$%s$%s", S, K);
    BAD_HASH(t, "expected parameter 'r='");
    snprintf(t, sizeof t, "$scrypt$ln=1500000000000,r=8,p=1$%s$%s", S, K);
    BAD_HASH(t, "not a number of at most 9 digits");
    snprintf(t, sizeof t, "$pbkdf2-sha256$i=999$%s$%s", S, K);
    BAD_HASH(t, "i=999 out of range 1000..10000000");
    snprintf(t, sizeof t, "$pbkdf2-sha256$i=1000$0011$%s", K);
    BAD_HASH(t, "the salt has 4 hex digits");
    snprintf(t, sizeof t, "$pbkdf2-sha256$i=1000$%s$00112233", S);
    BAD_HASH(t, "the hash has 8 hex digits");
    snprintf(t, sizeof t, "$pbkdf2-sha256$i=1000$%s$%.63sZ", S, K);
    BAD_HASH(t, "the hash is not lower-case hex");
    snprintf(t, sizeof t, "$pbkdf2-sha256$i=1000$%s", S);
    BAD_HASH(t, "missing '$' before the hash");
}

static void test_password_file(void)
{
    char dir[512], path[600], pw[PASSWD_FILE_MAX + 1], err[512] = "";
    TU_REQUIRE(tu_mkdtemp("hg-pwfile", dir, sizeof dir) == 0, "temp dir");
    snprintf(path, sizeof path, "%s/pw", dir);
    TU_REQUIRE(tu_write_file(path, "p@ss word:x\r\n") == 0, "write");
    TU_CHECK(passwd_read_file(path, pw, sizeof pw, err, sizeof err) == 0 && strcmp(pw, "p@ss word:x") == 0,
             "read '%s': %s", pw, err);
    TU_REQUIRE(tu_write_file(path, "two\nlines\n") == 0, "write");
    TU_CHECK(passwd_read_file(path, pw, sizeof pw, err, sizeof err) == 0 && strcmp(pw, "two\nlines") == 0,
             "only one trailing newline is removed: '%s'", pw);
    TU_REQUIRE(tu_write_file(path, "\n") == 0, "write");
    TU_CHECK(passwd_read_file(path, pw, sizeof pw, err, sizeof err) == -1 && strstr(err, "is empty"), "empty: %s", err);
    snprintf(path, sizeof path, "%s/missing", dir);
    TU_CHECK(passwd_read_file(path, pw, sizeof pw, err, sizeof err) == -1 && strstr(err, "No such file"), "missing: %s",
             err);
    /* an empty name (--password-file= on a command line, to override the file's) is said as such: it read
     * "cannot read the password file : No such file or directory" */
    TU_CHECK(passwd_read_file("", pw, sizeof pw, err, sizeof err) == -1 &&
                 strstr(err, "no file named (an empty value") != NULL,
             "empty name: %s", err);
    tu_rmtree(dir);
}

/* passwd_file_exposed: a file its group or others can read or write is
 * named with its mode and the fix; a private one is not. */
static void test_file_exposed(void)
{
    char dir[512], path[600], why[700] = "";
    TU_REQUIRE(tu_mkdtemp("hg-pwexposed", dir, sizeof dir) == 0, "temp dir");
    snprintf(path, sizeof path, "%s/pw", dir);
    TU_REQUIRE(tu_write_file(path, "secret\n") == 0 && chmod(path, 0600) == 0, "write");
    TU_CHECK(passwd_file_exposed(path, why, sizeof why) == 0, "mode 0600 reported: %s", why);
    TU_REQUIRE(chmod(path, 0644) == 0, "chmod");
    TU_CHECK(passwd_file_exposed(path, why, sizeof why) == 1 && strstr(why, "readable by every user") &&
                 strstr(why, "0644") && strstr(why, "chmod 600") && strstr(why, path),
             "mode 0644: %s", why);
    TU_REQUIRE(chmod(path, 0620) == 0, "chmod");
    TU_CHECK(passwd_file_exposed(path, why, sizeof why) == 1 && strstr(why, "writable by its group"), "mode 0620: %s",
             why);
    tu_rmtree(dir);
}

/* passwd_source_t: a changed file advances the generation; one that cannot
 * be read keeps the last good password and is reported once per error. */
static void test_source(void)
{
    char dir[512], path[600], pw[PASSWD_FILE_MAX + 1], err[PASSWD_FILE_MAX + 200];
    int report = -1;
    TU_REQUIRE(tu_mkdtemp("hg-pwsource", dir, sizeof dir) == 0, "temp dir");
    snprintf(path, sizeof path, "%s/pw", dir);
    TU_REQUIRE(tu_write_file(path, "one\n") == 0, "write");
    passwd_source_t s;
    passwd_source_init(&s, path, "one");
    CU_ASSERT_EQUAL(passwd_source_get(&s, pw, sizeof pw), 1);
    CU_ASSERT_STRING_EQUAL(pw, "one");
    CU_ASSERT_EQUAL(passwd_source_refresh(&s, &report, err, sizeof err), 0);
    TU_REQUIRE(tu_write_file(path, "two\n") == 0, "write");
    CU_ASSERT_EQUAL(passwd_source_refresh(&s, &report, err, sizeof err), 1);
    CU_ASSERT_EQUAL(passwd_source_get(&s, pw, sizeof pw), 2);
    CU_ASSERT_STRING_EQUAL(pw, "two");
    TU_REQUIRE(unlink(path) == 0, "unlink");
    CU_ASSERT_EQUAL(passwd_source_refresh(&s, &report, err, sizeof err), -1);
    TU_CHECK(report == 1 && strstr(err, "No such file"), "first failure: report %d, %s", report, err);
    CU_ASSERT_EQUAL(passwd_source_refresh(&s, &report, err, sizeof err), -1);
    CU_ASSERT_EQUAL(report, 0); /* the same error: once */
    TU_REQUIRE(tu_write_file(path, "\n") == 0, "write");
    CU_ASSERT_EQUAL(passwd_source_refresh(&s, &report, err, sizeof err), -1);
    TU_CHECK(report == 1 && strstr(err, "is empty"), "another error: report %d, %s", report, err);
    CU_ASSERT_EQUAL(passwd_source_get(&s, pw, sizeof pw), 2);
    CU_ASSERT_STRING_EQUAL(pw, "two"); /* the last good one */
    TU_REQUIRE(tu_write_file(path, "two\n") == 0, "write");
    CU_ASSERT_EQUAL(passwd_source_refresh(&s, &report, err, sizeof err), 0);
    TU_REQUIRE(unlink(path) == 0, "unlink");
    CU_ASSERT_EQUAL(passwd_source_refresh(&s, &report, err, sizeof err), -1);
    CU_ASSERT_EQUAL(report, 1); /* after a good read, the error is new again */
    passwd_source_destroy(&s);

    passwd_source_t none;
    passwd_source_init(&none, NULL, NULL);
    CU_ASSERT_EQUAL(passwd_source_refresh(&none, &report, err, sizeof err), 0);
    CU_ASSERT_EQUAL(passwd_source_get(&none, pw, sizeof pw), 0);
    passwd_source_destroy(&none);
    tu_rmtree(dir);
}

/* Count the lines of the file at path that contain text (-1: unreadable). */
static int lines_with(const char *path, const char *text)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof line, f) != NULL)
        n += strstr(line, text) != NULL;
    fclose(f);
    return n;
}

/* passwd_source_refresh_logged: the lines the consumer, the compensator and
 * the console log — a new password at info, a read error at warn once per
 * error — and nothing without a file (nor for a zeroed source). */
static void test_source_logged(void)
{
    char dir[512], path[600], log[600], want[900], err[300];
    TU_REQUIRE(tu_mkdtemp("hg-pwlogged", dir, sizeof dir) == 0, "temp dir");
    snprintf(path, sizeof path, "%s/pw", dir);
    snprintf(log, sizeof log, "%s/log", dir);
    TU_REQUIRE(tu_write_file(path, "one\n") == 0, "write");
    TU_REQUIRE(log_open_file(log, err, sizeof err) == 0, "%s", err);
    passwd_source_t s;
    passwd_source_init(&s, path, "one");
    CU_ASSERT_TRUE(passwd_source_has_file(&s));
    CU_ASSERT_EQUAL(passwd_source_refresh_logged(&s, "mysql-password-file", "CHANGED", "KEPT"), 0);
    TU_REQUIRE(tu_write_file(path, "two\n") == 0, "write");
    CU_ASSERT_EQUAL(passwd_source_refresh_logged(&s, "mysql-password-file", "CHANGED", "KEPT"), 1);
    TU_REQUIRE(unlink(path) == 0, "unlink");
    CU_ASSERT_EQUAL(passwd_source_refresh_logged(&s, "mysql-password-file", "CHANGED", "KEPT"), -1);
    CU_ASSERT_EQUAL(passwd_source_refresh_logged(&s, "mysql-password-file", "CHANGED", "KEPT"), -1);
    passwd_source_destroy(&s);

    passwd_source_t none, zeroed;
    memset(&zeroed, 0, sizeof zeroed);
    passwd_source_init(&none, NULL, NULL);
    CU_ASSERT_FALSE(passwd_source_has_file(&none));
    CU_ASSERT_FALSE(passwd_source_has_file(&zeroed));
    CU_ASSERT_EQUAL(passwd_source_refresh_logged(&none, "mysql-password-file", "CHANGED", "KEPT"), 0);
    CU_ASSERT_EQUAL(passwd_source_refresh_logged(&zeroed, "mysql-password-file", "CHANGED", "KEPT"), 0);
    passwd_source_destroy(&none);
    TU_REQUIRE(log_open_file(NULL, err, sizeof err) == 0, "%s", err);

    snprintf(want, sizeof want, "[info] mysql-password-file %s holds another password: CHANGED", path);
    TU_CHECK(lines_with(log, want) == 1, "want one line '%s'", want);
    snprintf(want, sizeof want, "[warn] mysql-password-file: cannot read the password file %s: No such file", path);
    TU_CHECK(lines_with(log, want) == 1, "want one line '%s' (once per error)", want);
    TU_CHECK(lines_with(log, "; KEPT") == 1, "want the kept note once");
    TU_CHECK(lines_with(log, "mysql-password-file") == 2, "want two lines in all");
    tu_rmtree(dir);
}

static const tu_test_t passwd_tests[] = {
    { "hash and verify (scrypt, PBKDF2)", test_roundtrip },
    { "a PBKDF2 vector from OpenSSL's PKCS5_PBKDF2_HMAC", test_known_pbkdf2 },
    { "malformed hashes and parameters", test_bad_hashes },
    { "password files", test_password_file },
    { "a password file others can read or write is named", test_file_exposed },
    { "a re-read password file: generation, last good password, errors reported once", test_source },
    { "a re-read password file, logged: a new password at info, an error at warn once", test_source_logged },
    { NULL, NULL },
};

/* ---- users ------------------------------------------------------------------ */

#define HASH                                                  \
    "$scrypt$ln=15,r=8,p=1$00112233445566778899aabbccddeeff$" \
    "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"

static void test_users_good(void)
{
    const char *text = "# users\n"
                       "\n"
                       "shop producer " HASH "\r\n"
                       "   canceller\tconsumer,viewer\t" HASH "   \n"
                       "ops admin " HASH "\n"
                       "old-app@x.y_z producer,consumer !" HASH; /* no final newline */
    users_t *u = NULL;
    char err[256] = "", roles[USERS_ROLES_TEXT];
    TU_REQUIRE(users_parse(text, strlen(text), "users", &u, err, sizeof err) == 0, "parse: %s", err);
    TU_CHECK(users_count(u) == 4, "%zu users, want 4", users_count(u));
    const users_entry_t *e = users_find(u, "canceller", 9);
    TU_REQUIRE(e != NULL, "canceller not found");
    TU_CHECK(e->roles == (ROLE_CONSUMER | ROLE_VIEWER), "canceller roles %s",
             users_roles_text(e->roles, roles, sizeof roles));
    TU_CHECK(strcmp(e->hash, HASH) == 0 && !e->disabled, "canceller hash '%s'", e->hash);
    e = users_find(u, "old-app@x.y_z", 13);
    TU_REQUIRE(e != NULL, "old-app not found");
    TU_CHECK(e->disabled && strcmp(e->hash, HASH) == 0, "old-app disabled %d hash '%s'", e->disabled, e->hash);
    TU_CHECK(users_find(u, "shop", 4)->roles == ROLE_PRODUCER, "shop roles");
    TU_CHECK(users_find(u, "sho", 3) == NULL, "a prefix matched");
    TU_CHECK(strcmp(users_roles_text(ROLE_ALL, roles, sizeof roles), "producer,consumer,admin,viewer") == 0, "%s",
             roles);
    TU_CHECK(strcmp(users_roles_text(0, roles, sizeof roles), "none") == 0, "%s", roles);
    users_free(u);
    TU_CHECK(users_parse("", 0, "empty", &u, err, sizeof err) == 0 && users_count(u) == 0, "an empty file: %s", err);
    users_free(u);
}

static void bad_users(const char *text, const char *want, int line)
{
    users_t *u = NULL;
    char err[400] = "";
    int rc = users_parse(text, strlen(text), "etc/users", &u, err, sizeof err);
    TU_CHECK_AT(rc == -1 && u == NULL, line, "accepted, want '%s'", want);
    TU_CHECK_AT(strstr(err, want) != NULL, line, "message '%s' lacks '%s'", err, want);
    users_free(u);
}
#define BAD_USERS(text, want) bad_users(text, want, __LINE__)

static void test_users_bad(void)
{
    BAD_USERS("shop producer\n", "etc/users:1: want three fields: name roles hash");
    BAD_USERS("# c\n\nshop\n", "etc/users:3: want three fields");
    BAD_USERS("shop producer " HASH " extra\n", "etc/users:1: unexpected fourth field 'extra'");
    BAD_USERS("ok producer " HASH "\nsh/op producer " HASH "\n",
              "etc/users:2: user name 'sh/op' has a character other than A-Z a-z 0-9 . _ @ -: '/'");
    BAD_USERS("\xef\xbb\xbfshop producer " HASH "\n", "etc/users:1: user name has a character other than A-Z a-z "
                                                      "0-9 . _ @ -: byte 0xEF at column 1 (a UTF-8 byte order mark");
    BAD_USERS("ok producer " HASH "\n  sh\x1b[2Jop producer " HASH "\n", "etc/users:2: user name has a character "
                                                                         "other than A-Z a-z 0-9 . _ @ -: byte 0x1B at "
                                                                         "column 5");
    BAD_USERS("a/b\x1b producer " HASH "\n", "etc/users:1: user name has a character other than A-Z a-z 0-9 . _ @ -: "
                                             "byte 0x2F at column 2");
    BAD_USERS("shop boss " HASH "\n", "etc/users:1: user 'shop': unknown role 'boss'");
    BAD_USERS("shop producer, " HASH "\n", "etc/users:1: user 'shop': empty role after ','");
    BAD_USERS("shop ,producer " HASH "\n", "unknown role ''");
    BAD_USERS("shop producer $scrypt$x\n", "etc/users:1: user 'shop': bad scrypt parameters");
    BAD_USERS("shop producer plaintext\n", "etc/users:1: user 'shop': unknown hash format");
    /* A long password pasted where the hash goes is refused by its length, without being shown. */
    static char pasted[2200];
    memcpy(pasted, "# c\nops admin ", 14);
    memset(pasted + 14, 'p', 2000);
    memcpy(pasted + 2014, "\n", 2);
    BAD_USERS(pasted, "etc/users:2: user 'ops': hash longer than 319 bytes");
    BAD_USERS("shop producer " HASH "\nshop consumer " HASH "\n", "etc/users:2: user 'shop' is listed twice");
    char longname[200];
    memset(longname, 'a', 65);
    snprintf(longname + 65, sizeof longname - 65, " admin %s\n", HASH);
    BAD_USERS(longname, "etc/users:1: user name longer than 64 bytes");
    char nul[] = "shop producer x\n";
    nul[4] = '\0';
    users_t *u = NULL;
    char err[300] = "";
    TU_CHECK(users_parse(nul, sizeof nul - 1, "f", &u, err, sizeof err) == -1 && strstr(err, "f:1: NUL byte"),
             "a NUL byte: %s", err);
    TU_CHECK(users_load("/nonexistent/users", &u, err, sizeof err) == -1 &&
                 strstr(err, "cannot read /nonexistent/users: No such file"),
             "missing file: %s", err);
    TU_CHECK(users_load("/", &u, err, sizeof err) == -1 && strstr(err, "cannot read /: Is a directory"),
             "a directory: %s", err);
}

static const tu_test_t users_tests[] = {
    { "good users files", test_users_good },
    { "bad lines named FILE:LINE", test_users_bad },
    { NULL, NULL },
};

static const tu_suite_t suites[] = {
    { "passwd", passwd_tests },
    { "users", users_tests },
};

int main(int argc, char **argv)
{
    return tu_suites_main(argc, argv, suites, sizeof suites / sizeof suites[0], NULL, NULL);
}
