/*
 * tests/unit/test_log.c — CUnit suites for common/log.c: the text and JSON
 * record formats (escaping, the length cut), the level filter, the log file
 * (open, a bad path refused with the destination kept, reopen after a
 * logrotate-style rename, back to stderr) and records written by several
 * threads while another reopens the file over and over (every record whole,
 * none lost).
 *
 * The logger is process-wide state: every test starts from stderr, text,
 * info (the setup below) and writes into files of its own temp dir.
 */
#include "common/log.h"
#include "tests/helpers/testutil.h"

#include <CUnit/CUnit.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[512];

static void setup(void)
{
    TU_REQUIRE(tu_mkdtemp("log", dir, sizeof dir) == 0, "mkdtemp");
    log_open_file(NULL, NULL, 0);
    log_set_format(LOG_FORMAT_TEXT);
    log_set_level(LOG_LEVEL_INFO);
}

static void teardown(void)
{
    log_open_file(NULL, NULL, 0);
    tu_rmtree(dir);
}

/* The whole file at dir/name into out[len] (NUL-terminated); its length, or -1. */
static long slurp(const char *name, char *out, size_t len)
{
    char path[700];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    size_t n = fread(out, 1, len - 1, f);
    out[n] = '\0';
    fclose(f);
    return (long)n;
}

static void open_in_dir(const char *name)
{
    char path[700], err[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    TU_REQUIRE(log_open_file(path, err, sizeof err) == 0, "open %s: %s", path, err);
}

static size_t count_lines(const char *s)
{
    size_t n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

/* ---------------------------------------------------------------- formats */

static void test_text(void)
{
    open_in_dir("a.log");
    log_info("listening on %s:%d", "127.0.0.1", 7379);
    log_debug("dropped below the level");
    log_warn("two\nlines\rin one");
    char buf[4096];
    TU_REQUIRE(slurp("a.log", buf, sizeof buf) > 0, "no log file");
    TU_CHECK(count_lines(buf) == 2, "want 2 records:\n%s", buf);
    /* 2026-11-29T18:00:00.123Z [info] listening on 127.0.0.1:7379 */
    TU_CHECK(strlen(buf) > 25 && buf[4] == '-' && buf[10] == 'T' && buf[19] == '.' && buf[23] == 'Z', "time stamp: %s",
             buf);
    TU_CHECK(strstr(buf, "Z [info] listening on 127.0.0.1:7379\n") != NULL, "record: %s", buf);
    TU_CHECK(strstr(buf, "[warn] two lines in one\n") != NULL, "CR/LF not folded: %s", buf);
    CU_ASSERT(strstr(buf, "dropped") == NULL);
}

static void test_json(void)
{
    open_in_dir("j.log");
    log_set_format(LOG_FORMAT_JSON);
    CU_ASSERT_EQUAL(log_get_format(), LOG_FORMAT_JSON);
    log_error("say \"hi\" \\ now\n\tctl\x01 é");
    char buf[4096];
    TU_REQUIRE(slurp("j.log", buf, sizeof buf) > 0, "no log file");
    TU_CHECK(strncmp(buf, "{\"time\":\"", 9) == 0, "begins: %s", buf);
    const char *want = "Z\",\"level\":\"error\",\"msg\":\"say \\\"hi\\\" \\\\ now\\n\\u0009ctl\\u0001 é\"}\n";
    TU_CHECK(strstr(buf, want) != NULL, "record:\n%s\nwant the tail:\n%s", buf, want);
    TU_CHECK(count_lines(buf) == 1, "one line: %s", buf);
}

static void test_cut(void)
{
    open_in_dir("c.log");
    char big[5000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    log_info("%s", big);
    log_set_format(LOG_FORMAT_JSON);
    memset(big, '"', sizeof big - 1); /* every byte doubles when escaped */
    log_info("%s", big);
    static char buf[32768];
    TU_REQUIRE(slurp("c.log", buf, sizeof buf) > 0, "no log file");
    TU_CHECK(count_lines(buf) == 2, "want 2 records, got %zu", count_lines(buf));
    char *second = strchr(buf, '\n') + 1;
    TU_CHECK(second[-2] == '.' && second[-3] == '.' && second[-4] == '.', "text record not cut with ...");
    TU_CHECK(strncmp(second, "{\"time\"", 7) == 0 && strstr(second, "...\"}\n") != NULL,
             "json record not closed after the cut: ...%s", second + strlen(second) - 40);
}

/* ---------------------------------------------------------------- the file */

static void test_bad_path(void)
{
    open_in_dir("keep.log");
    char path[700], err[256] = "";
    snprintf(path, sizeof path, "%s/no/such/dir/x.log", dir);
    CU_ASSERT_EQUAL(log_open_file(path, err, sizeof err), -1);
    TU_CHECK(strstr(err, "log-file: cannot open '") != NULL && strstr(err, "no/such/dir/x.log") != NULL &&
                 strstr(err, "No such file") != NULL,
             "error: %s", err);
    log_info("still here");
    char buf[1024];
    TU_CHECK(slurp("keep.log", buf, sizeof buf) > 0 && strstr(buf, "still here") != NULL,
             "the old destination was not kept");
}

static void test_reopen(void)
{
    open_in_dir("r.log");
    log_info("before rotation");
    char from[700], to[700], err[256];
    snprintf(from, sizeof from, "%s/r.log", dir);
    snprintf(to, sizeof to, "%s/r.log.1", dir);
    TU_REQUIRE(rename(from, to) == 0, "rename");
    log_info("still the old file");
    TU_REQUIRE(log_reopen(err, sizeof err) == 0, "reopen: %s", err);
    log_info("after rotation");
    char old[1024], now[1024];
    TU_REQUIRE(slurp("r.log.1", old, sizeof old) > 0 && slurp("r.log", now, sizeof now) > 0, "files");
    TU_CHECK(strstr(old, "before rotation") && strstr(old, "still the old file") && !strstr(old, "after"),
             "rotated file: %s", old);
    TU_CHECK(strstr(now, "after rotation") && count_lines(now) == 1, "new file: %s", now);

    /* the same path again changes nothing; another path switches; NULL is stderr */
    open_in_dir("r.log");
    open_in_dir("s.log");
    log_info("to s");
    TU_CHECK(slurp("s.log", now, sizeof now) > 0 && strstr(now, "to s"), "switch: %s", now);
    int saved = dup(STDERR_FILENO);
    char cap[700];
    snprintf(cap, sizeof cap, "%s/stderr", dir);
    int fd = open(cap, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    TU_REQUIRE(saved >= 0 && fd >= 0, "capture stderr");
    dup2(fd, STDERR_FILENO);
    TU_REQUIRE(log_open_file(NULL, err, sizeof err) == 0, "back to stderr: %s", err);
    log_info("to stderr");
    CU_ASSERT_EQUAL(log_reopen(err, sizeof err), 0); /* stderr: nothing to reopen */
    dup2(saved, STDERR_FILENO);
    close(saved);
    close(fd);
    TU_CHECK(slurp("stderr", now, sizeof now) > 0 && strstr(now, "to stderr"), "stderr: %s", now);
    TU_CHECK(slurp("s.log", now, sizeof now) > 0 && !strstr(now, "to stderr"), "s.log got the stderr record");
}

/* ---------------------------------------------------------------- threads */

#define WRITERS 4
#define RECORDS 2000

static atomic_int writers_done;

static void *writer(void *arg)
{
    long w = (long)arg;
    for (int i = 0; i < RECORDS; i++)
        log_info("writer %ld record %d end", w, i);
    atomic_fetch_add(&writers_done, 1);
    return NULL;
}

static void test_threads(void)
{
    open_in_dir("t.log");
    log_set_format(LOG_FORMAT_JSON);
    pthread_t th[WRITERS];
    for (long w = 0; w < WRITERS; w++)
        TU_REQUIRE(pthread_create(&th[w], NULL, writer, (void *)w) == 0, "thread");
    char from[700], to[700], err[256];
    snprintf(from, sizeof from, "%s/t.log", dir);
    int rotations = 0;
    atomic_store(&writers_done, 0);
    /* logrotate, again and again, for as long as they write (at least 3 times) */
    for (; rotations < 3 || (atomic_load(&writers_done) < WRITERS && rotations < 2000); rotations++) {
        snprintf(to, sizeof to, "%s/t.log.%d", dir, rotations);
        TU_REQUIRE(rename(from, to) == 0, "rename");
        TU_REQUIRE(log_reopen(err, sizeof err) == 0, "reopen: %s", err);
    }
    for (int w = 0; w < WRITERS; w++)
        pthread_join(th[w], NULL);

    static char buf[1 << 21];
    size_t total = 0;
    for (int r = -1; r < rotations; r++) {
        char name[64];
        if (r < 0)
            snprintf(name, sizeof name, "t.log");
        else
            snprintf(name, sizeof name, "t.log.%d", r);
        long n = slurp(name, buf, sizeof buf);
        TU_REQUIRE(n >= 0, "missing %s", name);
        for (char *line = buf; *line;) { /* every record whole: begins and ends as one object */
            char *nl = strchr(line, '\n');
            TU_REQUIRE(nl != NULL, "%s: a record without its newline: %s", name, line);
            *nl = '\0';
            TU_REQUIRE(strncmp(line, "{\"time\":", 8) == 0 && strstr(line, " end\"}") == nl - 6, "%s: torn record: %s",
                       name, line);
            total++;
            line = nl + 1;
        }
    }
    TU_CHECK(total == (size_t)WRITERS * RECORDS, "%zu records found in %d files, want %d", total, rotations + 1,
             WRITERS * RECORDS);
}

static const tu_test_t format_tests[] = {
    { "text record", test_text },
    { "json record and escapes", test_json },
    { "long messages cut", test_cut },
    { NULL, NULL },
};
static const tu_test_t file_tests[] = {
    { "a bad path keeps the destination", test_bad_path },
    { "reopen after rename, switch, stderr", test_reopen },
    { "writers while it reopens", test_threads },
    { NULL, NULL },
};
static const tu_suite_t suites[] = {
    { "format", format_tests },
    { "file", file_tests },
};

int main(int argc, char **argv)
{
    return tu_suites_main(argc, argv, suites, sizeof suites / sizeof suites[0], setup, teardown);
}
