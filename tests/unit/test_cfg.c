/*
 * tests/unit/test_cfg.c — common/cfg*.c, the config-table engine behind all
 * three daemons: suite "engine" (every value type in the one grammar, errors
 * naming the key and the file line, defaults < file < flags, continuation
 * lines, sections, actions, --help); suite "reload" — the SIGHUP reload
 * (cfg_reload) on a small table of its own: what is copied into the running struct (the
 * .reload keys, strings by swapping), what is kept (every other key, and
 * everything after a bad file), that the flags still win over the file, and
 * the log lines (stderr captured into a file around each reload).
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <CUnit/CUnit.h>

#include "common/cfg.h"
#include "common/log.h"
#include "tests/helpers/testutil.h"

typedef struct conf {
    char *name;     /* reloadable string */
    long long port; /* not reloadable */
    int log_level;  /* reloadable */
} conf_t;

static const cfg_key_t keys[] = {
    { CFG_KEY("name", CFG_STRING, "a", 0, 0, offsetof(conf_t, name), "a name"), .reload = 1 },
    { CFG_KEY("port", CFG_INT, "1", 0, 65535, offsetof(conf_t, port), "a port") },
    { CFG_KEY("log-level", CFG_ENUM, "info", 0, 0, offsetof(conf_t, log_level), "log level"), .words = LOG_LEVEL_WORDS,
      .reload = 1 },
};
static const cfg_table_t table = { .program = "test_cfg", .keys = keys, .count = 3 };

typedef struct args {
    int argc;
    char **argv;
    int applied; /* calls of apply */
} args_t;

static int load(void *c, void *arg, char *err, size_t errlen)
{
    args_t *a = arg;
    cfg_args_t out;
    cfg_init(&table, c);
    return cfg_parse_args(&table, c, a->argc, a->argv, &out, err, errlen);
}

static void release(void *c)
{
    cfg_free(&table, c);
}

static void apply(const void *c, void *arg)
{
    ((args_t *)arg)->applied++;
    log_set_level((log_level_t)((const conf_t *)c)->log_level);
}

static char dir[512], conf_path[600], log_path[600];

/* cfg_reload with stderr into log_path; the log's text into out. */
static int reload_logged(conf_t *running, args_t *a, char *out, size_t outlen)
{
    const cfg_reload_ops_t ops = { sizeof *running, load, release, apply, a };
    fflush(stderr);
    int saved = dup(2);
    FILE *f = fopen(log_path, "w+");
    TU_REQUIRE(f != NULL && saved >= 0, "open %s", log_path);
    dup2(fileno(f), 2);
    int rc = cfg_reload(&table, running, &ops);
    dup2(saved, 2);
    close(saved);
    rewind(f);
    size_t n = fread(out, 1, outlen - 1, f);
    out[n] = '\0';
    fclose(f);
    return rc;
}

static void test_reload(void)
{
    TU_REQUIRE(tu_mkdtemp("cfg", dir, sizeof dir) == 0, "mkdtemp");
    snprintf(conf_path, sizeof conf_path, "%s/t.conf", dir);
    snprintf(log_path, sizeof log_path, "%s/log", dir);
    TU_REQUIRE(tu_write_file(conf_path, "name = b\nport = 2\nlog-level = info\n") == 0, "write");
    char *argv[] = { "test_cfg", "--config", conf_path, NULL };
    args_t a = { 3, argv, 0 };
    conf_t running;
    memset(&running, 0, sizeof running);
    char err[512], log[4096];
    TU_REQUIRE(load(&running, &a, err, sizeof err) == 0, "%s", err);
    log_set_level((log_level_t)running.log_level);

    /* Nothing changed. */
    TU_CHECK(reload_logged(&running, &a, log, sizeof log) == 0, "unchanged file: applied keys");
    TU_CHECK(strstr(log, "SIGHUP: configuration re-read, nothing changed") != NULL, "log: %s", log);
    TU_CHECK(a.applied == 0, "apply called %d times for nothing", a.applied);

    /* name and log-level applied (debug: logged after the level went down), port kept. */
    TU_REQUIRE(tu_write_file(conf_path, "name = c\nport = 3\nlog-level = debug\n") == 0, "write");
    TU_CHECK(reload_logged(&running, &a, log, sizeof log) == 2, "two reloadable keys changed");
    TU_CHECK(strcmp(running.name, "c") == 0 && running.log_level == LOG_LEVEL_DEBUG && running.port == 2,
             "running: name %s level %d port %lld", running.name, running.log_level, running.port);
    TU_CHECK(a.applied == 1 && log_get_level() == LOG_LEVEL_DEBUG, "apply %d, level %d", a.applied, log_get_level());
    TU_CHECK(strstr(log, "[info] SIGHUP: name b -> c") != NULL, "log: %s", log);
    TU_CHECK(strstr(log, "[info] SIGHUP: log-level info -> debug") != NULL, "log: %s", log);
    TU_CHECK(strstr(log, "[warn] SIGHUP: port changed, but takes effect only at a restart") != NULL &&
                 strstr(log, "-> 3") == NULL,
             "log: %s", log);

    /* debug -> error: the line is still written (at the more verbose level), then error applies. */
    TU_REQUIRE(tu_write_file(conf_path, "name = c\nport = 2\nlog-level = error\n") == 0, "write");
    TU_CHECK(reload_logged(&running, &a, log, sizeof log) == 1, "one key changed");
    TU_CHECK(strstr(log, "SIGHUP: log-level debug -> error") != NULL, "log: %s", log);
    TU_CHECK(log_get_level() == LOG_LEVEL_ERROR, "level %d after the reload", log_get_level());
    log_set_level(LOG_LEVEL_INFO);
    running.log_level = LOG_LEVEL_INFO;

    /* A bad file: nothing changes, the error names the line and the key. */
    TU_REQUIRE(tu_write_file(conf_path, "name = d\nlog-level = loud\n") == 0, "write");
    int before = a.applied;
    TU_CHECK(reload_logged(&running, &a, log, sizeof log) == -1, "a bad file must fail");
    TU_CHECK(strcmp(running.name, "c") == 0 && running.log_level == LOG_LEVEL_INFO && a.applied == before,
             "a bad file changed the running configuration");
    TU_CHECK(strstr(log, "[error] SIGHUP: configuration error, keeping the running configuration: ") != NULL &&
                 strstr(log, "t.conf:2: log-level: 'loud'") != NULL,
             "log: %s", log);

    /* The flags still win over the file. */
    char *argv_flag[] = { "test_cfg", "--config", conf_path, "--name", "flag", NULL };
    args_t af = { 5, argv_flag, 0 };
    TU_REQUIRE(tu_write_file(conf_path, "name = e\nport = 2\n") == 0, "write");
    free(running.name);
    running.name = strdup("flag");
    TU_CHECK(reload_logged(&running, &af, log, sizeof log) == 0, "the flag's name must stay");
    TU_CHECK(strcmp(running.name, "flag") == 0 && strstr(log, "nothing changed") != NULL, "name %s, log: %s",
             running.name, log);

    /* --help marks the reloadable keys. */
    FILE *h = fopen(log_path, "w+");
    TU_REQUIRE(h != NULL, "open");
    cfg_print_keys(&table, h);
    rewind(h);
    size_t n = fread(log, 1, sizeof log - 1, h);
    log[n] = '\0';
    fclose(h);
    TU_CHECK(strstr(log, "a name (reloaded on SIGHUP)") != NULL && strstr(log, "a port (reloaded") == NULL,
             "--help: %s", log);

    cfg_free(&table, &running);
    tu_rmtree(dir);
}

/* ---------------------------------------------------------------- the engine */

typedef struct econf {
    char *host;
    int verbose;
    long long workers;
    long long buffer;
    long long lease_ms;
    double ratio;
    int mode;
    char *dsn;
} econf_t;

static const cfg_key_t ekeys[] = {
    { CFG_KEY("host", CFG_STRING, "127.0.0.1", 0, 0, offsetof(econf_t, host), "where") },
    { CFG_KEY("verbose", CFG_BOOL, "no", 0, 1, offsetof(econf_t, verbose), "talk") },
    { CFG_KEY("workers", CFG_INT, "4", 1, 256, offsetof(econf_t, workers), "threads") },
    { CFG_KEY("buffer", CFG_SIZE, "4mb", 1024, 1LL << 30, offsetof(econf_t, buffer), "bytes") },
    { CFG_KEY("lease", CFG_DURATION, "30s", 1, 86400000, offsetof(econf_t, lease_ms), "lease") },
    { CFG_KEY("ratio", CFG_DOUBLE, "0.5", 0, 1, offsetof(econf_t, ratio), "share") },
    { CFG_KEY("mode", CFG_ENUM, "fast", 0, 0, offsetof(econf_t, mode), "how"), .words = "fast|safe|off" },
    { CFG_KEY("dsn", CFG_STRING, NULL, 0, 0, offsetof(econf_t, dsn), "database"), .required = 1 },
};
static const char *const esections[] = { "broker", NULL };
static const cfg_table_t etable = { .program = "test_cfg", .keys = ekeys, .count = 8, .sections = esections };

static void expect_set_error(econf_t *c, const char *key, const char *value, const char *frag, int line)
{
    char err[256] = "";
    int rc = cfg_set(&etable, c, key, value, CFG_SOURCE_FLAG, err, sizeof err);
    TU_CHECK_AT(rc == -1 && strstr(err, frag) != NULL, line, "%s=%s: rc %d, \"%s\" lacks \"%s\"", key, value, rc, err,
                frag);
}
#define EXPECT_SET_ERROR(c, k, v, frag) expect_set_error((c), (k), (v), (frag), __LINE__)

static void test_engine_types(void)
{
    econf_t c = { 0 };
    char err[256] = "";
    cfg_init(&etable, &c);
    CU_ASSERT_STRING_EQUAL(c.host, "127.0.0.1");
    CU_ASSERT_EQUAL(c.workers, 4);
    CU_ASSERT_EQUAL(c.buffer, 4 << 20);
    CU_ASSERT_EQUAL(c.lease_ms, 30000);
    CU_ASSERT_DOUBLE_EQUAL(c.ratio, 0.5, 1e-12);
    CU_ASSERT_EQUAL(c.mode, 0);
    CU_ASSERT_PTR_NULL(c.dsn);
    /* every type, in the one grammar of base/units.h for sizes and durations */
    CU_ASSERT_EQUAL(cfg_set(&etable, &c, "VERBOSE", " on ", CFG_SOURCE_FLAG, err, sizeof err), 0);
    CU_ASSERT_EQUAL(c.verbose, 1);
    CU_ASSERT_EQUAL(cfg_set(&etable, &c, "lease", "2.5s", CFG_SOURCE_FLAG, err, sizeof err), 0);
    CU_ASSERT_EQUAL(c.lease_ms, 2500);
    CU_ASSERT_EQUAL(cfg_set(&etable, &c, "buffer", "1.5k", CFG_SOURCE_FLAG, err, sizeof err), 0);
    CU_ASSERT_EQUAL(c.buffer, 1536);
    CU_ASSERT_EQUAL(cfg_set(&etable, &c, "mode", "SAFE", CFG_SOURCE_FLAG, err, sizeof err), 0);
    CU_ASSERT_EQUAL(c.mode, 1);
    CU_ASSERT_EQUAL(cfg_set(&etable, &c, "ratio", "0.25", CFG_SOURCE_FLAG, err, sizeof err), 0);
    CU_ASSERT_DOUBLE_EQUAL(c.ratio, 0.25, 1e-12);
    /* errors name the key and the value */
    EXPECT_SET_ERROR(&c, "workers", "0", "workers: '0' out of range 1..256");
    EXPECT_SET_ERROR(&c, "workers", "-3", "workers: '-3' is not a whole number");
    EXPECT_SET_ERROR(&c, "lease", "30", "lease: '30' is not a duration: missing unit");
    EXPECT_SET_ERROR(&c, "lease", "0.5ms", "not a whole number of milliseconds");
    EXPECT_SET_ERROR(&c, "lease", "2d", "lease: '2d' out of range 1ms..1d");
    EXPECT_SET_ERROR(&c, "buffer", "4q", "buffer: '4q' is not a size");
    EXPECT_SET_ERROR(&c, "verbose", "maybe", "verbose: 'maybe' is not yes or no");
    EXPECT_SET_ERROR(&c, "mode", "slow", "mode: 'slow' is not one of fast|safe|off");
    EXPECT_SET_ERROR(&c, "ratio", "2", "ratio: '2' out of range 0..1");
    EXPECT_SET_ERROR(&c, "nope", "1", "unknown key 'nope'");
    /* a failed set keeps the old value */
    CU_ASSERT_EQUAL(c.workers, 4);
    CU_ASSERT_EQUAL(c.lease_ms, 2500);
    /* the required string */
    CU_ASSERT_EQUAL(cfg_check_required(&etable, &c, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "dsn: required, not set"));
    cfg_free(&etable, &c);
    CU_ASSERT_PTR_NULL(c.host);
}

static void test_engine_text(void)
{
    econf_t c = { 0 };
    char v[64];
    cfg_init(&etable, &c);
    cfg_value_text(&etable, &c, 3, v, sizeof v);
    CU_ASSERT_STRING_EQUAL(v, "4mb");
    cfg_value_text(&etable, &c, 4, v, sizeof v);
    CU_ASSERT_STRING_EQUAL(v, "30s");
    cfg_value_text(&etable, &c, 6, v, sizeof v);
    CU_ASSERT_STRING_EQUAL(v, "fast");
    cfg_value_text(&etable, &c, 1, v, sizeof v);
    CU_ASSERT_STRING_EQUAL(v, "no");
    /* --help lists every key with its default */
    char edir[512], path[700];
    TU_REQUIRE(tu_mkdtemp("cfg-engine", edir, sizeof edir) == 0, "mkdtemp");
    snprintf(path, sizeof path, "%s/help.txt", edir);
    FILE *f = fopen(path, "w+");
    TU_REQUIRE(f != NULL, "open %s", path);
    cfg_print_keys(&etable, f);
    rewind(f);
    char text[4096];
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = '\0';
    fclose(f);
    for (size_t i = 0; i < etable.count; i++)
        TU_CHECK(strstr(text, ekeys[i].name) != NULL, "--help lacks %s:\n%s", ekeys[i].name, text);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "30s"));
    cfg_free(&etable, &c);
    tu_rmtree(edir);
}

static void test_engine_file_and_flags(void)
{
    char edir[512], path[700], err[300] = "";
    TU_REQUIRE(tu_mkdtemp("cfg-engine", edir, sizeof edir) == 0, "mkdtemp");
    snprintf(path, sizeof path, "%s/engine.conf", edir);
    TU_REQUIRE(tu_write_file(path, "# a comment\nworkers = 8\ndsn = first part ; a comment\n  second part ; "
                                   "another\n[broker]\nlease = 1m\n") == 0,
               "write %s", path);
    econf_t c = { 0 };
    cfg_init(&etable, &c);
    cfg_args_t args;
    char *argv[] = { "test_cfg", "--workers", "16", "--config", path, "--lease=90s", NULL };
    TU_REQUIRE(cfg_parse_args(&etable, &c, 6, argv, &args, err, sizeof err) == 0, "parse: %s", err);
    /* defaults < file < flags, wherever --config stands */
    CU_ASSERT_EQUAL(c.workers, 16);
    CU_ASSERT_EQUAL(c.lease_ms, 90000);
    /* indented lines continue a value; an inline comment ends each line's part (the continuation's too: a
     * value holding " ;" could not be printed back by --check-config, fuzz_cfg) */
    CU_ASSERT_STRING_EQUAL(c.dsn, "first part second part");
    CU_ASSERT_EQUAL(args.action, CFG_RUN);
    CU_ASSERT_EQUAL(cfg_check_required(&etable, &c, err, sizeof err), 0);
    cfg_free(&etable, &c);

    /* errors: the file and line, unknown options, a missing value, actions */
    TU_REQUIRE(tu_write_file(path, "workers = 8\n\nbogus = 1\n") == 0, "write %s", path);
    cfg_init(&etable, &c);
    char *argv2[] = { "test_cfg", "--config", path, NULL };
    CU_ASSERT_EQUAL(cfg_parse_args(&etable, &c, 3, argv2, &args, err, sizeof err), -1);
    TU_CHECK(strstr(err, "engine.conf:3:") != NULL && strstr(err, "bogus") != NULL, "file error: %s", err);
    cfg_free(&etable, &c);
    TU_REQUIRE(tu_write_file(path, "[nowhere]\nworkers = 8\n") == 0, "write %s", path);
    cfg_init(&etable, &c);
    CU_ASSERT_EQUAL(cfg_parse_args(&etable, &c, 3, argv2, &args, err, sizeof err), -1);
    TU_CHECK(strstr(err, "unknown section [nowhere]") != NULL, "section error: %s", err);
    cfg_free(&etable, &c);
    /* a key set twice in the file (in another section, in other case): which one the reader meant is a guess */
    TU_REQUIRE(tu_write_file(path, "workers = 8\nlease = 1m\n[broker]\nWorkers = 9\n") == 0, "write %s", path);
    cfg_init(&etable, &c);
    CU_ASSERT_EQUAL(cfg_parse_args(&etable, &c, 3, argv2, &args, err, sizeof err), -1);
    TU_CHECK(strstr(err, "engine.conf:4: workers is set again (first at line 1)") != NULL, "twice: %s", err);
    cfg_free(&etable, &c);
    cfg_init(&etable, &c);
    char *argv3[] = { "test_cfg", "--wrokers", "3", NULL };
    CU_ASSERT_EQUAL(cfg_parse_args(&etable, &c, 3, argv3, &args, err, sizeof err), -1);
    TU_CHECK(strstr(err, "unknown option '--wrokers'") != NULL, "flag error: %s", err);
    char *argv4[] = { "test_cfg", "--workers", NULL };
    CU_ASSERT_EQUAL(cfg_parse_args(&etable, &c, 2, argv4, &args, err, sizeof err), -1);
    TU_CHECK(strstr(err, "--workers needs a value") != NULL, "value error: %s", err);
    char *argv5[] = { "test_cfg", "--workers", "3", "--help", NULL };
    CU_ASSERT_EQUAL(cfg_parse_args(&etable, &c, 4, argv5, &args, err, sizeof err), 0);
    CU_ASSERT_EQUAL(args.action, CFG_HELP);
    char *argv6[] = { "test_cfg", "--check-config", NULL };
    CU_ASSERT_EQUAL(cfg_parse_args(&etable, &c, 2, argv6, &args, err, sizeof err), 0);
    CU_ASSERT_EQUAL(args.action, CFG_CHECK);
    cfg_free(&etable, &c);
    tu_rmtree(edir);
}

/* A line with a value but no key name ("= 8") is an error naming the line, not a line read and dropped; found
 * by tests/fuzz/fuzz_cfg, which also saw the value leak when another key followed. */
static void test_engine_empty_key_name(void)
{
    static const char *const files[] = { "= 8\n", "workers = 8\n= 9\n", "= 8\nworkers = 9\n", "[broker]\n : 8\n" };
    char edir[512], path[700], err[300] = "";
    TU_REQUIRE(tu_mkdtemp("cfg-engine", edir, sizeof edir) == 0, "mkdtemp");
    snprintf(path, sizeof path, "%s/engine.conf", edir);
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        TU_REQUIRE(tu_write_file(path, files[i]) == 0, "write %s", path);
        econf_t c = { 0 };
        cfg_init(&etable, &c);
        err[0] = '\0';
        int rc = cfg_load_file(&etable, &c, path, err, sizeof err);
        TU_CHECK(rc == -1 && strstr(err, "engine.conf:") != NULL && strstr(err, "no key name") != NULL,
                 "file \"%s\": rc %d, error \"%s\"", files[i], rc, err);
        cfg_free(&etable, &c);
    }
    tu_rmtree(edir);
}

/* A NUL byte in the file is an error naming the line, not the end of the line: "dsn =\0x" read as an empty dsn
 * without a word (found by tests/fuzz/fuzz_cfg). */
static void test_engine_nul_byte(void)
{
    static const char text[] = "workers = 8\ndsn = shop\0 more\n";
    char edir[512], path[700], err[300] = "";
    TU_REQUIRE(tu_mkdtemp("cfg-engine", edir, sizeof edir) == 0, "mkdtemp");
    snprintf(path, sizeof path, "%s/engine.conf", edir);
    FILE *f = fopen(path, "wb");
    TU_REQUIRE(f != NULL && fwrite(text, 1, sizeof text - 1, f) == sizeof text - 1 && fclose(f) == 0, "write %s", path);
    econf_t c = { 0 };
    cfg_init(&etable, &c);
    int rc = cfg_load_file(&etable, &c, path, err, sizeof err);
    TU_CHECK(rc == -1 && strstr(err, "engine.conf:2: a NUL byte in the line") != NULL, "rc %d, error \"%s\"", rc, err);
    cfg_free(&etable, &c);
    tu_rmtree(edir);
}

/* The printed values (--check-config) read back as a file give the same values, a string that begins with ';'
 * too: "dsn = ;x" would be a comment to libinih (found by tests/fuzz/fuzz_cfg: "name=;" read back as ""). */
static void test_engine_print_reads_back(void)
{
    char edir[512], path[700], err[300] = "";
    TU_REQUIRE(tu_mkdtemp("cfg-engine", edir, sizeof edir) == 0, "mkdtemp");
    snprintf(path, sizeof path, "%s/engine.conf", edir);
    TU_REQUIRE(tu_write_file(path, "dsn=;x\n") == 0, "write %s", path);
    econf_t c = { 0 }, again = { 0 };
    cfg_init(&etable, &c);
    TU_REQUIRE(cfg_load_file(&etable, &c, path, err, sizeof err) == 0, "load: %s", err);
    TU_REQUIRE(c.dsn != NULL && strcmp(c.dsn, ";x") == 0, "the value as written: %s", c.dsn ? c.dsn : "(null)");
    FILE *f = fopen(path, "w");
    TU_REQUIRE(f != NULL, "open %s", path);
    cfg_print_values(&etable, &c, f);
    TU_REQUIRE(fclose(f) == 0, "close %s", path);
    cfg_init(&etable, &again);
    TU_REQUIRE(cfg_load_file(&etable, &again, path, err, sizeof err) == 0, "load the printed values: %s", err);
    TU_CHECK(again.dsn != NULL && strcmp(again.dsn, ";x") == 0, "read back: %s", again.dsn ? again.dsn : "(null)");
    cfg_free(&etable, &c);
    cfg_free(&etable, &again);
    tu_rmtree(edir);
}

/* cfg_print_values of c into path; its return (how many values it could not print). Every line of the print
 * fits an INI line (the reader refuses longer ones). */
static int print_to_file(const econf_t *c, const char *path)
{
    FILE *f = fopen(path, "w");
    TU_REQUIRE(f != NULL, "open %s", path);
    int unprintable = cfg_print_values(&etable, c, f);
    TU_REQUIRE(fclose(f) == 0, "close %s", path);
    char line[4096];
    f = fopen(path, "r");
    TU_REQUIRE(f != NULL, "open %s", path);
    while (fgets(line, sizeof line, f) != NULL)
        TU_CHECK(strlen(line) <= 199 || unprintable > 0, "a printed line of %zu bytes: %.60s…", strlen(line), line);
    fclose(f);
    return unprintable;
}

/* The file text read gives dsn = want; printed (--check-config) and read back, the same. */
static void check_dsn_reads_back(const char *dir_path, const char *text, const char *want, int line)
{
    char path[700], err[300] = "";
    snprintf(path, sizeof path, "%s/engine.conf", dir_path);
    TU_REQUIRE(tu_write_file(path, text) == 0, "write %s", path);
    econf_t c = { 0 }, again = { 0 };
    cfg_init(&etable, &c);
    TU_REQUIRE(cfg_load_file(&etable, &c, path, err, sizeof err) == 0, "line %d: load: %s", line, err);
    TU_CHECK_AT(c.dsn != NULL && strcmp(c.dsn, want) == 0, line, "read: '%s'", c.dsn ? c.dsn : "(null)");
    TU_CHECK_AT(print_to_file(&c, path) == 0, line, "printed as not printable");
    cfg_init(&etable, &again);
    TU_CHECK_AT(cfg_load_file(&etable, &again, path, err, sizeof err) == 0, line, "the print: %s", err);
    TU_CHECK_AT(again.dsn != NULL && strcmp(again.dsn, want) == 0, line, "read back: '%s'",
                again.dsn ? again.dsn : "(null)");
    cfg_free(&etable, &c);
    cfg_free(&etable, &again);
}
#define CHECK_DSN_READS_BACK(dir, text, want) check_dsn_reads_back((dir), (text), (want), __LINE__)

/* A value longer than an INI line, joined from continuation lines, is printed on continuation lines that join
 * back to it: split only at a blank the join puts back (never before a ';' or a '#', which would start a comment
 * line), in the tight form "key=value" when only that fits. */
static void test_engine_print_long_values(void)
{
    char edir[512], text[2048], want[2048];
    TU_REQUIRE(tu_mkdtemp("cfg-engine", edir, sizeof edir) == 0, "mkdtemp");

    /* 500 bytes and more from six continuation lines, with ';' and '#' inside the words */
    snprintf(text, sizeof text, "dsn = ");
    want[0] = '\0';
    for (int l = 0; l < 7; l++) {
        for (int w = 0; w < 12; w++) {
            char word[16];
            snprintf(word, sizeof word, "%c%02d;x#", 'a' + l, w);
            strcat(text, word);
            strcat(want, word);
            if (w < 11) {
                strcat(text, " ");
                strcat(want, " ");
            }
        }
        strcat(text, l < 6 ? " ; a comment\n  " : "\n");
        if (l < 6)
            strcat(want, " ");
    }
    TU_REQUIRE(strlen(want) >= 500, "%zu bytes", strlen(want));
    CHECK_DSN_READS_BACK(edir, text, want);

    /* the last blank that fits the key line stands before a '#': the split must come earlier */
    char a[101], b[51], c[81];
    memset(a, 'A', 100), a[100] = '\0';
    memset(b, 'B', 50), b[50] = '\0';
    memset(c, 'C', 80), c[80] = '\0';
    snprintf(text, sizeof text, "dsn = %s\n  %s #%s\n", a, b, c);
    snprintf(want, sizeof want, "%s %s #%s", a, b, c);
    CHECK_DSN_READS_BACK(edir, text, want);
    /* a long value beginning with ';', with "k;v" inside */
    snprintf(text, sizeof text, "dsn=;%s\n  k;v %s #%s\n", a, b, c);
    snprintf(want, sizeof want, ";%s k;v %s #%s", a, b, c);
    CHECK_DSN_READS_BACK(edir, text, want);

    /* an empty value (an unset string prints as one: hourglass-consumer's log-file was printed as not
     * printable) */
    CHECK_DSN_READS_BACK(edir, "dsn =\n", "");
    /* a run without blanks that fits only "dsn=" (194 bytes: the line's 198) */
    char run[195];
    memset(run, 'r', 194), run[194] = '\0';
    snprintf(text, sizeof text, "dsn=%s\n", run);
    CHECK_DSN_READS_BACK(edir, text, run);
    /* a value that starts on the continuation line, with a 196-byte run there (the line's 198): printed "dsn="
     * with the value from the next line on (found by fuzz_cfg: printed as not printable) */
    char run196[197];
    memset(run196, 'r', 196), run196[196] = '\0';
    snprintf(text, sizeof text, "dsn =\n  %s\n  and more\n", run196);
    snprintf(want, sizeof want, "%s and more", run196);
    CHECK_DSN_READS_BACK(edir, text, want);
    tu_rmtree(edir);
}

/* A value no INI file can hold (only a flag gives one) is printed as a comment naming the problem, with the value
 * C-escaped, and a line the reader refuses: the print never reads back as another value. */
static void test_engine_print_unprintable(void)
{
    char edir[512], path[700], err[300] = "", run[501];
    memset(run, 'r', 500), run[500] = '\0';
    const struct {
        const char *value, *why;
    } cases[] = {
        { run, "no blank to split it at" },
        { "a ;b", "a ';' after a blank starts a comment" },
        { "\vx", "begins or ends with a blank" },
        { "one\ntwo", "line break" },
    };
    TU_REQUIRE(tu_mkdtemp("cfg-engine", edir, sizeof edir) == 0, "mkdtemp");
    snprintf(path, sizeof path, "%s/engine.conf", edir);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        econf_t c = { 0 }, again = { 0 };
        cfg_init(&etable, &c);
        TU_REQUIRE(cfg_set(&etable, &c, "dsn", cases[i].value, CFG_SOURCE_FLAG, err, sizeof err) == 0, "set: %s", err);
        TU_CHECK(print_to_file(&c, path) == 1, "case %zu: not reported as not printable", i);
        char printed[4096] = "";
        FILE *f = fopen(path, "r");
        TU_REQUIRE(f != NULL, "open %s", path);
        printed[fread(printed, 1, sizeof printed - 1, f)] = '\0';
        fclose(f);
        TU_CHECK(strstr(printed, "; dsn: not printable so that it reads back") != NULL &&
                     strstr(printed, cases[i].why) != NULL && strstr(printed, "\ndsn (not printable") != NULL,
                 "case %zu: printed\n%s", i, printed);
        cfg_init(&etable, &again);
        err[0] = '\0';
        TU_CHECK(cfg_load_file(&etable, &again, path, err, sizeof err) == -1 &&
                     strstr(err, "not a 'key = value' line") != NULL,
                 "case %zu: the print read back (%s)", i, err);
        cfg_free(&etable, &c);
        cfg_free(&etable, &again);
    }
    tu_rmtree(edir);
}

/* What --check-config must print so that it reads back as not set: a table of an optional path, a password
 * and a repeatable CFG_CUSTOM key (its print function's count of values not printable adds to the total). */
typedef struct absent_conf {
    char *path;     /* optional: NULL unset */
    char *password; /* secret */
    char *items[4]; /* repeatable, printed through cfg_print_setting */
    size_t item_count;
} absent_conf_t;

static int set_item(void *conf, const cfg_key_t *k, const char *value, cfg_source_t source, char *err, size_t errlen)
{
    (void)k, (void)source, (void)err, (void)errlen;
    absent_conf_t *c = conf;
    if (c->item_count < 4)
        c->items[c->item_count++] = strdup(value);
    return 0;
}

static int print_items(const void *conf, const cfg_key_t *k, FILE *out)
{
    const absent_conf_t *c = conf;
    int unprintable = 0;
    for (size_t i = 0; i < c->item_count; i++)
        unprintable += cfg_print_setting(out, k->name, c->items[i]) != 0;
    return unprintable;
}

static const cfg_key_t absent_keys[] = {
    { CFG_KEY("path", CFG_STRING, NULL, 0, 0, offsetof(absent_conf_t, path), "optional file") },
    { CFG_KEY("password", CFG_STRING, NULL, 0, 0, offsetof(absent_conf_t, password), "secret"), .secret = 1 },
    { CFG_KEY("item", CFG_CUSTOM, NULL, 0, 0, 0, "repeatable"), .hook = set_item, .print = print_items },
};
static const cfg_table_t absent_table = { .program = "test_cfg", .keys = absent_keys, .count = 3 };

static void absent_free(absent_conf_t *c)
{
    cfg_free(&absent_table, c);
    for (size_t i = 0; i < c->item_count; i++)
        free(c->items[i]);
    memset(c, 0, sizeof *c); /* ready for cfg_init again */
}

/* The file at path into text[len], NUL-terminated. */
static void read_text(const char *path, char *text, size_t len)
{
    FILE *f = fopen(path, "r");
    TU_REQUIRE(f != NULL, "open %s", path);
    text[fread(text, 1, len - 1, f)] = '\0';
    fclose(f);
}

/* cfg_print_check of c into dir/name's file, stderr into dir/name.err; the print's text into text. Returns
 * cfg_print_check's count. */
static int check_print(const absent_conf_t *c, const char *dir_path, const char *name, char *text, size_t len,
                       char *errtext, size_t errlen)
{
    char path[700], epath[720];
    snprintf(path, sizeof path, "%s/%s", dir_path, name);
    snprintf(epath, sizeof epath, "%s/%s.err", dir_path, name);
    FILE *out = fopen(path, "w"), *err = fopen(epath, "w");
    TU_REQUIRE(out != NULL && err != NULL, "open %s", path);
    int unprintable = cfg_print_check(&absent_table, c, "9.9", NULL, "in.conf", out, err);
    TU_REQUIRE(fclose(out) == 0 && fclose(err) == 0, "close %s", path);
    read_text(path, text, len);
    read_text(epath, errtext, errlen);
    return unprintable;
}

/* An unset string prints as the comment "; key = (not set)" and reads back unset (it printed "key = ", read back
 * empty: hourglass-consumer's mysql-password-file then clashed with mysql-password); an empty one as "key = ",
 * read back empty; a secret as "; key = (set, not shown)", so the copy reads back without it (its "(set)" read
 * back as the password); the OK line is a comment, so the whole output reads back; values not printable (a
 * repeatable key's too) are counted and said on stderr. */
static void test_engine_print_absent(void)
{
    char adir[512], path[700], err[300] = "", text[4096], errtext[1024];
    TU_REQUIRE(tu_mkdtemp("cfg-absent", adir, sizeof adir) == 0, "mkdtemp");
    absent_conf_t c = { 0 }, again = { 0 };
    cfg_init(&absent_table, &c);
    TU_REQUIRE(cfg_set(&absent_table, &c, "password", "pw-Secret", CFG_SOURCE_FLAG, err, sizeof err) == 0, "%s", err);
    TU_REQUIRE(cfg_set(&absent_table, &c, "item", "a b", CFG_SOURCE_FLAG, err, sizeof err) == 0, "%s", err);
    TU_REQUIRE(cfg_set(&absent_table, &c, "item", "c", CFG_SOURCE_FLAG, err, sizeof err) == 0, "%s", err);
    TU_CHECK(check_print(&c, adir, "out.conf", text, sizeof text, errtext, sizeof errtext) == 0, "counted unprintable");
    TU_CHECK(strcmp(text, "# test_cfg 9.9: effective configuration\n"
                          "; path = (not set)\n"
                          "; password = (set, not shown)\n"
                          "item = a b\n"
                          "item = c\n"
                          "; test_cfg: configuration OK (in.conf)\n") == 0 &&
                 errtext[0] == '\0',
             "printed:\n%s\nstderr: %s", text, errtext);
    snprintf(path, sizeof path, "%s/out.conf", adir);
    cfg_init(&absent_table, &again);
    TU_CHECK(cfg_load_file(&absent_table, &again, path, err, sizeof err) == 0, "read back: %s", err);
    TU_CHECK(again.path == NULL && again.password == NULL && again.item_count == 2 &&
                 strcmp(again.items[0], "a b") == 0 && strcmp(again.items[1], "c") == 0,
             "read back: path %s, password %s, %zu items", again.path ? again.path : "(null)",
             again.password ? again.password : "(null)", again.item_count);
    absent_free(&again);

    /* an empty string stays empty; a repeatable key's value not printable is counted and said */
    TU_REQUIRE(cfg_set(&absent_table, &c, "path", "", CFG_SOURCE_FLAG, err, sizeof err) == 0, "%s", err);
    TU_REQUIRE(cfg_set(&absent_table, &c, "item", "x ;y", CFG_SOURCE_FLAG, err, sizeof err) == 0, "%s", err);
    TU_CHECK(check_print(&c, adir, "bad.conf", text, sizeof text, errtext, sizeof errtext) == 1, "count not 1");
    TU_CHECK(strstr(text, "\npath = \n") != NULL && strstr(text, "\n; item: not printable") != NULL &&
                 strcmp(errtext, "test_cfg: 1 value cannot be printed so that it reads back; see the comments\n") == 0,
             "printed:\n%s\nstderr: %s", text, errtext);
    free(c.items[--c.item_count]); /* the unprintable one off again */
    TU_CHECK(check_print(&c, adir, "empty.conf", text, sizeof text, errtext, sizeof errtext) == 0, "count not 0");
    snprintf(path, sizeof path, "%s/empty.conf", adir);
    cfg_init(&absent_table, &again);
    TU_CHECK(cfg_load_file(&absent_table, &again, path, err, sizeof err) == 0, "read back: %s", err);
    TU_CHECK(again.path != NULL && again.path[0] == '\0', "an empty path read back as %s",
             again.path ? again.path : "unset");
    absent_free(&again);
    absent_free(&c);
    tu_rmtree(adir);
}

/* A URI key (CFG_SECRET_URI) prints without the password of its user:password@, after a comment saying so;
 * the print read back holds user@ alone, which the programs refuse for want of a password (it printed the
 * password in clear: hourglass-consumer --uri 'hourglass://u:pw-Secret@host:7379' --check-config). A URI
 * without a password prints as it is, with no comment. */
typedef struct uri_conf {
    char *uri;
} uri_conf_t;

static const cfg_key_t uri_keys[] = {
    { CFG_KEY("uri", CFG_STRING, NULL, 0, 0, offsetof(uri_conf_t, uri), "broker"), .secret = CFG_SECRET_URI },
};
static const cfg_table_t uri_table = { .program = "test_cfg", .keys = uri_keys, .count = 1 };

static void test_engine_print_uri_password(void)
{
    static const struct {
        const char *uri, *printed; /* printed: NULL when the URI prints as it is, with no comment */
    } cases[] = {
        { "hourglass://u:pw-Secret@host:7379", "hourglass://u@host:7379" },
        { "hourglass+tls://ops:pw-Secret@[::1]:7379/?ca=/etc/a:b.pem",
          "hourglass+tls://ops@[::1]:7379/?ca=/etc/a:b.pem" },
        { "amqps://u%40x:pw-Secret%3A@h1:5671,h2/vhost?heartbeat=10", "amqps://u%40x@h1:5671,h2/vhost?heartbeat=10" },
        { "amqp://u:pw-Secret#@host", "amqp://u@host" },
        { "amqp://u:pw:Secret@host", "amqp://u@host" },
        { "hourglass://u@host:7379", NULL },
        { "hourglass://host:7379/?x=a:b@c", NULL },
        { "amqp://guest:@host", NULL },
        { "hourglass://:pw-Secret@host", "hourglass://@host" },
    };
    char udir[512], path[700], err[300] = "", text[4096], want[1024];
    TU_REQUIRE(tu_mkdtemp("cfg-uri", udir, sizeof udir) == 0, "mkdtemp");
    snprintf(path, sizeof path, "%s/uri.conf", udir);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uri_conf_t c = { 0 }, again = { 0 };
        cfg_init(&uri_table, &c);
        TU_REQUIRE(cfg_set(&uri_table, &c, "uri", cases[i].uri, CFG_SOURCE_FLAG, err, sizeof err) == 0, "%s", err);
        FILE *out = fopen(path, "w");
        TU_REQUIRE(out != NULL, "open %s", path);
        TU_CHECK(cfg_print_values(&uri_table, &c, out) == 0, "%s: counted unprintable", cases[i].uri);
        TU_REQUIRE(fclose(out) == 0, "close %s", path);
        read_text(path, text, sizeof text);
        if (cases[i].printed != NULL)
            snprintf(want, sizeof want,
                     "; uri: its password is not shown (give it in password-file, or put it back)\nuri = %s\n",
                     cases[i].printed);
        else
            snprintf(want, sizeof want, "uri = %s\n", cases[i].uri);
        TU_CHECK(strcmp(text, want) == 0 && strstr(text, "Secret") == NULL, "%s printed:\n%swant:\n%s", cases[i].uri,
                 text, want);
        cfg_init(&uri_table, &again);
        TU_CHECK(cfg_load_file(&uri_table, &again, path, err, sizeof err) == 0, "read back: %s", err);
        const char *back = cases[i].printed != NULL ? cases[i].printed : cases[i].uri;
        TU_CHECK(again.uri != NULL && strcmp(again.uri, back) == 0, "%s read back as %s", cases[i].uri,
                 again.uri ? again.uri : "(null)");
        cfg_free(&uri_table, &again);
        cfg_free(&uri_table, &c);
    }
    tu_rmtree(udir);
}

/* Where each key was set (cfg_origin_t), for a program's cross-key errors. */
typedef struct oconf {
    long long workers, lease_ms;
    cfg_origin_t origin;
} oconf_t;

static const cfg_key_t okeys[] = {
    { CFG_KEY("workers", CFG_INT, "4", 1, 256, offsetof(oconf_t, workers), "threads") },
    { CFG_KEY("lease", CFG_DURATION, "30s", 1, 86400000, offsetof(oconf_t, lease_ms), "lease") },
};
static const cfg_table_t otable = {
    .program = "test_cfg", .keys = okeys, .count = 2, .track_origin = 1, .origin_offset = offsetof(oconf_t, origin)
};

static void test_engine_origin(void)
{
    char odir[512], path[700], err[600] = "", where[700];
    TU_REQUIRE(tu_mkdtemp("cfg-origin", odir, sizeof odir) == 0, "mkdtemp");
    snprintf(path, sizeof path, "%s/o.conf", odir);
    TU_REQUIRE(tu_write_file(path, "# comment\nlease = 1m\n\nworkers = 8\n") == 0, "write %s", path);
    oconf_t c;
    memset(&c, 0, sizeof c);
    cfg_init(&otable, &c);
    CU_ASSERT_STRING_EQUAL(cfg_origin_text(&otable, &c, "workers", where, sizeof where), "default");
    cfg_args_t args;
    char *argv[] = { "test_cfg", "--config", path, NULL };
    TU_REQUIRE(cfg_parse_args(&otable, &c, 3, argv, &args, err, sizeof err) == 0, "parse: %s", err);
    TU_CHECK(strstr(cfg_origin_text(&otable, &c, "workers", where, sizeof where), "o.conf:4") != NULL, "%s", where);
    snprintf(err, sizeof err, "workers: 8 is too many for lease 1m");
    cfg_origin_prefix(&otable, &c, "workers", "lease", err, sizeof err);
    TU_CHECK(strstr(err, "o.conf:4: workers: 8 is too many for lease 1m (lease: line 2)") != NULL, "%s", err);
    snprintf(err, sizeof err, "workers: bad");
    cfg_origin_prefix(&otable, &c, "lease", "workers", err, sizeof err); /* the later one first, whichever is named */
    TU_CHECK(strstr(err, "o.conf:4: workers: bad (lease: line 2)") != NULL, "%s", err);

    memset(&c, 0, sizeof c);
    cfg_init(&otable, &c);
    char *argv2[] = { "test_cfg", "--config", path, "--lease", "2m", NULL };
    TU_REQUIRE(cfg_parse_args(&otable, &c, 5, argv2, &args, err, sizeof err) == 0, "parse: %s", err);
    CU_ASSERT_STRING_EQUAL(cfg_origin_text(&otable, &c, "lease", where, sizeof where), "--lease");
    snprintf(err, sizeof err, "lease: 2m is too short");
    cfg_origin_prefix(&otable, &c, "lease", "workers", err, sizeof err);
    TU_CHECK(strncmp(err, "lease: 2m is too short (lease: --lease; workers: /", 50) == 0 &&
                 strstr(err, "o.conf:4)") != NULL,
             "%s", err);
    snprintf(err, sizeof err, "lease: 2m alone");
    cfg_origin_prefix(&otable, &c, "lease", NULL, err, sizeof err); /* a flag's own error: unchanged */
    CU_ASSERT_STRING_EQUAL(err, "lease: 2m alone");

    memset(&c, 0, sizeof c);
    cfg_init(&otable, &c);
    snprintf(err, sizeof err, "workers: defaults disagree");
    cfg_origin_prefix(&otable, &c, "workers", "lease", err, sizeof err); /* neither set: unchanged */
    CU_ASSERT_STRING_EQUAL(err, "workers: defaults disagree");
    /* a table without origins says nothing */
    econf_t e = { 0 };
    cfg_init(&etable, &e);
    CU_ASSERT_STRING_EQUAL(cfg_origin_text(&etable, &e, "workers", where, sizeof where), "");
    cfg_free(&etable, &e);
    tu_rmtree(odir);
}

/* cfg_bind_is_loopback: what protected mode, allow-remote and the metrics
 * ports' Host check take for loopback. */
static void test_bind_is_loopback(void)
{
    const char *yes[] = { "localhost", "LocalHost", "127.0.0.1", "127.255.0.9", "::1" };
    const char *no[] = { "0.0.0.0", "::", "10.0.0.1", "128.0.0.1", "::ffff:127.0.0.1", "localhost.example", "", "1" };
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++)
        TU_CHECK(cfg_bind_is_loopback(yes[i]) == 1, "'%s' is loopback", yes[i]);
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++)
        TU_CHECK(cfg_bind_is_loopback(no[i]) == 0, "'%s' is not loopback", no[i]);
    CU_ASSERT_EQUAL(cfg_bind_is_loopback(NULL), 0);
}

static const tu_test_t engine_tests[] = {
    { "types, grammar, errors, required", test_engine_types },
    { "value text and --help", test_engine_text },
    { "file, flags, precedence, errors, actions", test_engine_file_and_flags },
    { "a value without a key name in the file", test_engine_empty_key_name },
    { "a NUL byte in the file is an error naming the line", test_engine_nul_byte },
    { "the printed values read back, a value beginning with ';' too", test_engine_print_reads_back },
    { "long values printed on continuation lines read back", test_engine_print_long_values },
    { "a value no INI file holds is printed so that reading it back fails", test_engine_print_unprintable },
    { "unset strings and secrets print as comments and read back unset; the OK line is a comment",
      test_engine_print_absent },
    { "a URI prints without its password and reads back as user@ alone", test_engine_print_uri_password },
    { "origins: file and line, flag, default; cross-key error text", test_engine_origin },
    { "cfg_bind_is_loopback: localhost, 127/8, ::1 only", test_bind_is_loopback },
    { NULL, NULL },
};

static const tu_test_t reload_tests[] = {
    { "cfg_reload: applied, kept, bad file, flags win, --help", test_reload },
    { NULL, NULL },
};

static const tu_suite_t suites[] = { { "engine", engine_tests }, { "reload", reload_tests } };

int main(int argc, char **argv)
{
    return tu_suites_main(argc, argv, suites, sizeof suites / sizeof suites[0], NULL, NULL);
}
