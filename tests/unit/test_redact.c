/*
 * tests/unit/test_redact.c — CUnit suite for broker/redact.c, the paths taken
 * out of the error replies a non-admin client reads: absolute and ./ ../ ~/
 * paths and the known (configured) ones, relative or with blanks, become
 * "(path hidden: admin only)" with the error code and the sentence kept
 * (its punctuation, "docs/operations.md", "1 / 2"); in a reply, only the "-"
 * lines change, at any depth (EXEC's array), never a bulk payload that looks
 * like an error; a reply without a path is left alone; random replies
 * (lying bulk lengths, stray CRs) are read in bounds and leave no path.
 * Before, a storage failure's reply went to every client with its paths.
 */
#include "broker/redact.h"
#include "tests/helpers/testutil.h"

#include <CUnit/CUnit.h>
#include <stdio.h>
#include <string.h>

#define H REDACT_PATH

/* redact_text of in with known; checks the text and the count. */
static void text_is(const char *in, const char *const *known, const char *want, size_t want_n, int line)
{
    buf_t out = BUF_INIT;
    size_t n = redact_text(in, strlen(in), known, &out);
    TU_CHECK_AT(n == want_n && strcmp(buf_cstr(&out), want) == 0, line,
                "redact_text(\"%s\") = %zu \"%s\", want %zu \"%s\"", in, n, buf_cstr(&out), want_n, want);
    buf_free(&out);
}
#define TEXT_IS(in, known, want, n) text_is(in, known, want, n, __LINE__)

static void test_text(void)
{
    TEXT_IS("ERR storage failure: fdatasync of /var/lib/hg/000123.log failed: Input/output error", NULL,
            "ERR storage failure: fdatasync of " H " failed: Input/output error", 1);
    TEXT_IS("ERR storage failure: IO error: /d/LOCK: Resource temporarily unavailable", NULL,
            "ERR storage failure: IO error: " H ": Resource temporarily unavailable", 1);
    TEXT_IS("ERR cannot write ./hourglass-data/000007.ldb, ../x and ~/y.", NULL,
            "ERR cannot write " H ", " H " and " H ".", 3);
    TEXT_IS("ERR disk full: writes are refused until space returns on /srv/data", NULL,
            "ERR disk full: writes are refused until space returns on " H, 1);
    TEXT_IS("ERR backup failed ('/b/x' exists) [/c] <(/e)> dir=/f", NULL,
            "ERR backup failed ('" H "' exists) [" H "] <(" H ")> dir=" H, 4);
    /* Not paths: a reference to the docs, a fraction, a lone slash, a word with '/' inside. */
    TEXT_IS("ERR damaged: restore it from a backup (docs/operations.md, \"A damaged data directory\") 1/2 a / b", NULL,
            "ERR damaged: restore it from a backup (docs/operations.md, \"A damaged data directory\") 1/2 a / b", 0);
    TEXT_IS("ERR no group 'g'", NULL, "ERR no group 'g'", 0);
    TEXT_IS("", NULL, "", 0);
}

static void test_known(void)
{
    const char *rel[] = { "data", NULL };
    /* A known path without '/' is a word of the sentence too: only followed by '/'. */
    TEXT_IS("ERR data directory data/000001.log is damaged: data", rel, "ERR data directory " H " is damaged: data", 1);
    const char *sub[] = { "var/hg", NULL };
    TEXT_IS("ERR cannot open var/hg: busy; var/hg/LOCK too", sub, "ERR cannot open " H ": busy; " H " too", 2);
    const char *blank[] = { "/tmp/my data", NULL };
    TEXT_IS("ERR fdatasync of /tmp/my data/000123.log failed", blank, "ERR fdatasync of " H " failed", 1);
    const char *skip[] = { "x", NULL }; /* one character: skipped */
    TEXT_IS("ERR x/y", skip, "ERR x/y", 0);
}

static void reply_is(const char *in, size_t inlen, const char *want, size_t want_len, const char *want_hidden,
                     size_t want_n, int line)
{
    buf_t out = BUF_INIT, hidden = BUF_INIT;
    size_t n = redact_reply(in, inlen, NULL, &out, &hidden);
    TU_CHECK_AT(n == want_n, line, "redact_reply: %zu paths, want %zu", n, want_n);
    if (want_n == 0) {
        TU_CHECK_AT(out.len == 0 && hidden.len == 0, line, "no path, yet out %zu bytes, hidden %zu", out.len,
                    hidden.len);
    } else {
        TU_CHECK_AT(out.len == want_len && memcmp(out.data, want, want_len) == 0, line, "reply '%.*s', want '%s'",
                    (int)out.len, out.data ? out.data : "", want);
        TU_CHECK_AT(strcmp(buf_cstr(&hidden), want_hidden) == 0, line, "hidden '%s', want '%s'", buf_cstr(&hidden),
                    want_hidden);
    }
    buf_free(&out);
    buf_free(&hidden);
}
#define REPLY_IS(in, want, hidden, n) reply_is(in, sizeof in - 1, want, sizeof want - 1, hidden, n, __LINE__)

static void test_reply(void)
{
    REPLY_IS("-ERR cannot write /d/1.log: No space left on device\r\n",
             "-ERR cannot write " H ": No space left on device\r\n",
             "ERR cannot write /d/1.log: No space left on device", 1);
    /* EXEC: an array with an id, an error with a path, a nested array with another. */
    REPLY_IS("*3\r\n$16\r\n0000000000000001\r\n-ERR storage failure: /d/9.log failed\r\n*2\r\n:1\r\n-ERR x /e\r\n",
             "*3\r\n$16\r\n0000000000000001\r\n-ERR storage failure: " H " failed\r\n*2\r\n:1\r\n-ERR x " H "\r\n",
             "ERR storage failure: /d/9.log failed | ERR x /e", 2);
    /* A payload that looks like an error line is data: never touched. */
    REPLY_IS("*2\r\n$9\r\n-ERR /p/q\r\n$-1\r\n", "", "", 0);
    REPLY_IS("+OK /not/an/error\r\n", "", "", 0);
    REPLY_IS("-ERR no group 'g'\r\n", "", "", 0);
    /* A bulk that claims more bytes than there are: the rest is not scanned. */
    REPLY_IS("$100\r\n-ERR /x\r\n", "", "", 0);
    REPLY_IS("", "", "", 0);
}

/* Random replies made of the pieces that matter (error starts, bulk headers that may lie, CRLF, slashes, blanks,
 * quotes): no read past the end (the sanitizer build and valgrind see it), out only when a path was found, and
 * what is sent has no path left. */
static void test_random(void)
{
    static const char *const pieces[] = { "-ERR ",  "-",      "/",  "a", " ", "\r\n", "$3\r\n", "$-1\r\n", "$40\r\n",
                                          "*2\r\n", ":1\r\n", "./", "'", "(", "x:",   "\r",     "..",      "~" };
    const size_t npieces = sizeof pieces / sizeof pieces[0];
    unsigned seed = 12345;
    int found = 0;
    for (int round = 0; round < 20000; round++) {
        char in[128];
        size_t len = 0;
        seed = seed * 1103515245u + 12345u;
        for (unsigned k = (seed >> 16) % 16; k > 0; k--) {
            seed = seed * 1103515245u + 12345u;
            const char *p = pieces[(seed >> 16) % npieces];
            memcpy(in + len, p, strlen(p)); /* 15 pieces of at most 7 bytes fit */
            len += strlen(p);
        }
        buf_t out = BUF_INIT, again = BUF_INIT;
        size_t n = redact_reply(in, len, NULL, &out, NULL);
        if (n == 0) {
            TU_CHECK(out.len == 0, "round %d: no path, yet %zu bytes out", round, out.len);
        } else {
            size_t m = redact_reply(out.data, out.len, NULL, &again, NULL);
            TU_CHECK(m == 0, "round %d: %zu paths left after hiding %zu in '%.*s'", round, m, n, (int)len, in);
        }
        found += n > 0;
        buf_free(&out);
        buf_free(&again);
    }
    TU_CHECK(found > 200, "only %d of 20000 random replies had a path to hide", found);
    printf("\n    %d of 20000 random replies had a path hidden\n", found);
}

static const tu_test_t redact_tests[] = {
    { "paths in an error's text; the sentence kept", test_text },
    { "the known paths: relative, with blanks", test_known },
    { "only error lines of a reply, at any depth", test_reply },
    { "random replies: in bounds, nothing left to hide", test_random },
    { NULL, NULL },
};

static const tu_suite_t suites[] = {
    { "redact", redact_tests },
};

int main(int argc, char **argv)
{
    return tu_suites_main(argc, argv, suites, sizeof suites / sizeof suites[0], NULL, NULL);
}
