/*
 * tests/unit/test_reload.c — common/reload.c, the SIGHUP every daemon runs,
 * on a small program of its own (a config table with the log keys, a
 * non-reloadable name and port, a check that the port is even): a good file
 * puts the log keys in force and logs each change, a log file that cannot be
 * opened is logged and changes nothing of the logger, a bad file (or one the
 * program's check refuses) is refused with the running configuration kept,
 * the flags still win over the file, and a file that did not change says
 * so. Every fresh struct the program loads is released. Also
 * common/log_keys.h's log_keys_apply_table, which the reload applies with.
 *
 * The logger is process-wide state: each test starts from stderr, text,
 * info, and logs into a file of its own temp dir (the log-file key).
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CUnit/CUnit.h>

#include "base/err.h"
#include "common/cfg.h"
#include "common/log.h"
#include "common/log_keys.h"
#include "common/reload.h"
#include "tests/helpers/testutil.h"

typedef struct conf {
    char *name;     /* not reloadable */
    long long port; /* not reloadable; the program's check: even */
    LOG_KEYS_FIELDS;
} conf_t;

static const cfg_key_t keys[] = {
    { CFG_KEY("name", CFG_STRING, "a", 0, 0, offsetof(conf_t, name), "a name") },
    { CFG_KEY("port", CFG_INT, "2", 0, 65535, offsetof(conf_t, port), "a port") },
    LOG_KEYS_ROWS(conf_t),
};
static const cfg_table_t table = { .program = "test_reload", .keys = keys, .count = sizeof keys / sizeof keys[0] };

static int loads, releases; /* calls of the program's load and release */

/* The program's start-up parse: defaults, file and flags, its check. */
static int program_load(void *c, int argc, char **argv, char *err, size_t errlen)
{
    loads++;
    cfg_args_t out;
    cfg_init(&table, c);
    if (cfg_parse_args(&table, c, argc, argv, &out, err, errlen) != 0)
        return -1;
    const conf_t *conf = c;
    if (conf->port % 2 != 0)
        return err_set(err, errlen, "port: %lld is odd", conf->port);
    return 0;
}

static void program_release(void *c)
{
    releases++;
    cfg_free(&table, c);
}

static const reload_program_t program = { sizeof(conf_t), program_load, program_release };

static char dir[512], conf_path[600], log_path[600];
static char *argv_file[] = { "test_reload", "--config", conf_path, NULL };

static void setup(void)
{
    TU_REQUIRE(tu_mkdtemp("reload", dir, sizeof dir) == 0, "mkdtemp");
    snprintf(conf_path, sizeof conf_path, "%s/t.conf", dir);
    snprintf(log_path, sizeof log_path, "%s/a.log", dir);
    log_open_file(NULL, NULL, 0);
    log_set_format(LOG_FORMAT_TEXT);
    log_set_level(LOG_LEVEL_INFO);
    loads = releases = 0;
}

static void teardown(void)
{
    log_open_file(NULL, NULL, 0);
    log_set_format(LOG_FORMAT_TEXT);
    log_set_level(LOG_LEVEL_INFO);
    tu_rmtree(dir);
}

/* Write the config file: the log file a.log, then body. */
static void write_conf(const char *body)
{
    char text[2048];
    snprintf(text, sizeof text, "log-file = %s\n%s", log_path, body);
    TU_REQUIRE(tu_write_file(conf_path, text) == 0, "write %s", conf_path);
}

/* Start the way a daemon does: load running from argv, put its log keys in force. */
static void start(conf_t *running, int argc, char **argv)
{
    char err[512];
    memset(running, 0, sizeof *running);
    TU_REQUIRE(program_load(running, argc, argv, err, sizeof err) == 0, "start-up: %s", err);
    TU_REQUIRE(log_keys_apply(running, err, sizeof err) == 0, "start-up: %s", err);
}

/* The whole file at path into out[outlen], NUL-terminated. */
static void slurp(const char *path, char *out, size_t outlen)
{
    FILE *f = fopen(path, "r");
    TU_REQUIRE(f != NULL, "open %s", path);
    size_t n = fread(out, 1, outlen - 1, f);
    out[n] = '\0';
    fclose(f);
}

/* Empty the log file, reload, and read what the reload logged there into out. */
static int reload_logged(conf_t *running, int argc, char **argv, char *out, size_t outlen)
{
    TU_REQUIRE(tu_write_file(log_path, "") == 0, "truncate %s", log_path);
    int rc = reload_config(&table, running, &program, argc, argv);
    slurp(log_path, out, outlen);
    return rc;
}

static void test_good_file(void)
{
    conf_t running;
    char log[4096], want[2048];
    write_conf("log-level = info\n");
    start(&running, 3, argv_file);

    /* log-level and log-format applied and logged (in the new format); name kept. */
    write_conf("name = b\nlog-level = debug\nlog-format = json\n");
    TU_CHECK(reload_logged(&running, 3, argv_file, log, sizeof log) == 2, "two log keys changed; log: %s", log);
    TU_CHECK(running.log_level == LOG_LEVEL_DEBUG && running.log_format == LOG_FORMAT_JSON,
             "running: level %d format %d", running.log_level, running.log_format);
    TU_CHECK(log_get_level() == LOG_LEVEL_DEBUG && log_get_format() == LOG_FORMAT_JSON, "logger: level %d format %d",
             log_get_level(), log_get_format());
    TU_CHECK(strcmp(running.name, "a") == 0, "name %s: not reloadable", running.name);
    TU_CHECK(strstr(log, "\"level\":\"info\",\"msg\":\"SIGHUP: log-level info -> debug\"") != NULL, "log: %s", log);
    TU_CHECK(strstr(log, "\"msg\":\"SIGHUP: log-format text -> json\"") != NULL, "log: %s", log);
    /* The warning comes before the keys are applied: still in text. */
    TU_CHECK(
        strstr(log, "[warn] SIGHUP: name changed, but takes effect only at a restart (keeping the running value)") !=
            NULL,
        "log: %s", log);

    /* log-file applied: the lines after it go to the new file. */
    char other[700];
    snprintf(other, sizeof other, "%s/b.log", dir);
    char body[2048];
    snprintf(body, sizeof body, "log-file = %s\n", other);
    TU_REQUIRE(tu_write_file(conf_path, body) == 0, "write");
    TU_CHECK(reload_logged(&running, 3, argv_file, log, sizeof log) == 3, "log-file, level, format changed");
    TU_CHECK(strcmp(running.log_file, other) == 0, "running log-file %s", running.log_file);
    TU_CHECK(log_get_level() == LOG_LEVEL_INFO && log_get_format() == LOG_FORMAT_TEXT, "logger: level %d format %d",
             log_get_level(), log_get_format());
    snprintf(want, sizeof want, "[info] SIGHUP: log-file %s -> %s", log_path, other);
    slurp(other, log, sizeof log);
    TU_CHECK(strstr(log, want) != NULL, "%s: %s", other, log);
    TU_CHECK(loads == releases + 1, "loads %d, releases %d", loads, releases);
    program_release(&running);
}

static void test_log_file_refused(void)
{
    conf_t running;
    char log[4096], want[2048], body[2048], bad[700];
    write_conf("log-level = info\n");
    start(&running, 3, argv_file);

    /* The file first: one that cannot be opened leaves the destination, level and format as they were. */
    snprintf(bad, sizeof bad, "%s/no/such/dir.log", dir);
    snprintf(body, sizeof body, "log-file = %s\nlog-level = debug\n", bad);
    TU_REQUIRE(tu_write_file(conf_path, body) == 0, "write");
    TU_CHECK(reload_logged(&running, 3, argv_file, log, sizeof log) == 2, "log-file and log-level copied; log: %s",
             log);
    TU_CHECK(log_get_level() == LOG_LEVEL_INFO, "level %d: applied without its file", log_get_level());
    snprintf(want, sizeof want, "[error] SIGHUP: log-file: cannot open '%s': ", bad);
    TU_CHECK(strstr(log, want) != NULL && strstr(log, " (logging where it did)\n") != NULL, "log: %s", log);
    snprintf(want, sizeof want, "[info] SIGHUP: log-file %s -> %s", log_path, bad);
    TU_CHECK(strstr(log, want) != NULL, "log: %s", log);
    program_release(&running);
}

static void test_bad_file(void)
{
    conf_t running;
    char log[4096];
    write_conf("name = b\nlog-level = warn\n");
    start(&running, 3, argv_file);

    /* A value the engine refuses. */
    write_conf("name = c\nlog-level = loud\n");
    TU_CHECK(reload_logged(&running, 3, argv_file, log, sizeof log) == -1, "a bad file must fail");
    TU_CHECK(strcmp(running.name, "b") == 0 && running.log_level == LOG_LEVEL_WARN && log_get_level() == LOG_LEVEL_WARN,
             "a bad file changed the running configuration: name %s level %d", running.name, running.log_level);
    TU_CHECK(strstr(log, "[error] SIGHUP: configuration error, keeping the running configuration: ") != NULL &&
                 strstr(log, "t.conf:3: log-level: 'loud'") != NULL,
             "log: %s", log);

    /* A file the program's own check refuses. */
    write_conf("name = b\nport = 3\nlog-level = error\n");
    TU_CHECK(reload_logged(&running, 3, argv_file, log, sizeof log) == -1, "the program's check must fail it");
    TU_CHECK(running.port == 2 && running.log_level == LOG_LEVEL_WARN && log_get_level() == LOG_LEVEL_WARN,
             "a refused file changed the running configuration: port %lld level %d", running.port, running.log_level);
    TU_CHECK(strstr(log, "[error] SIGHUP: configuration error, keeping the running configuration: port: 3 is odd") !=
                 NULL,
             "log: %s", log);
    TU_CHECK(loads == releases + 1, "a failed load not released: loads %d, releases %d", loads, releases);
    program_release(&running);
}

static void test_flags_win(void)
{
    conf_t running;
    char log[4096];
    char *argv_flag[] = { "test_reload", "--config", conf_path, "--log-level", "info", "--name", "flag", NULL };
    write_conf("name = b\nlog-level = debug\n");
    start(&running, 7, argv_flag);
    TU_REQUIRE(running.log_level == LOG_LEVEL_INFO && strcmp(running.name, "flag") == 0, "start-up: the flags lost");

    /* The file changes the keys the flags set: the flags still win, nothing changes. */
    write_conf("name = c\nlog-level = error\n");
    TU_CHECK(reload_logged(&running, 7, argv_flag, log, sizeof log) == 0, "the flags' values must stay");
    TU_CHECK(strcmp(running.name, "flag") == 0 && running.log_level == LOG_LEVEL_INFO &&
                 log_get_level() == LOG_LEVEL_INFO,
             "name %s, level %d", running.name, running.log_level);
    TU_CHECK(strstr(log, "SIGHUP: configuration re-read, nothing changed") != NULL, "log: %s", log);

    /* A key no flag sets still follows the file. */
    write_conf("name = c\nlog-level = error\nlog-format = json\n");
    TU_CHECK(reload_logged(&running, 7, argv_flag, log, sizeof log) == 1, "log-format from the file; log: %s", log);
    TU_CHECK(log_get_format() == LOG_FORMAT_JSON && log_get_level() == LOG_LEVEL_INFO, "format %d, level %d",
             log_get_format(), log_get_level());
    TU_CHECK(strstr(log, "\"msg\":\"SIGHUP: log-format text -> json\"") != NULL && strstr(log, "log-level") == NULL,
             "log: %s", log);
    program_release(&running);
}

static void test_nothing_changed(void)
{
    conf_t running;
    char log[4096];
    write_conf("name = b\nlog-level = info\n");
    start(&running, 3, argv_file);

    /* The same file: nothing copied, nothing applied (the level set by hand stays), said once. */
    log_set_level(LOG_LEVEL_DEBUG);
    TU_CHECK(reload_logged(&running, 3, argv_file, log, sizeof log) == 0, "nothing to apply");
    TU_CHECK(log_get_level() == LOG_LEVEL_DEBUG, "level %d: applied for nothing", log_get_level());
    TU_CHECK(strstr(log, "[info] SIGHUP: configuration re-read, nothing changed\n") != NULL &&
                 strstr(log, "->") == NULL,
             "log: %s", log);
    TU_CHECK(loads == releases + 1, "loads %d, releases %d", loads, releases);
    program_release(&running);
}

/* log_keys_apply_table on a table without the log keys' rows: an error, the logger as it was. */
static void test_no_log_keys(void)
{
    static const cfg_key_t bare_keys[] = {
        { CFG_KEY("name", CFG_STRING, "a", 0, 0, offsetof(conf_t, name), "a name"), .reload = 1 },
    };
    static const cfg_table_t bare = { .program = "test_reload", .keys = bare_keys, .count = 1 };
    conf_t conf = { .log_level = LOG_LEVEL_ERROR };
    char err[256] = "";
    TU_CHECK(log_keys_apply_table(&bare, &conf, err, sizeof err) == -1 &&
                 strcmp(err, "no log-level, log-file and log-format rows in the config table") == 0,
             "err: %s", err);
    TU_CHECK(log_get_level() == LOG_LEVEL_INFO, "level %d", log_get_level());
}

static const tu_test_t reload_tests[] = {
    { "a good file: the log keys applied and logged", test_good_file },
    { "a log file that cannot be opened: logged, the logger kept", test_log_file_refused },
    { "a bad file, a refused file: the running configuration kept", test_bad_file },
    { "the flags still win over the file", test_flags_win },
    { "nothing changed", test_nothing_changed },
    { "a table without the log keys", test_no_log_keys },
    { NULL, NULL },
};

static const tu_suite_t suites[] = { { "reload", reload_tests } };

int main(int argc, char **argv)
{
    return tu_suites_main(argc, argv, suites, sizeof suites / sizeof suites[0], setup, teardown);
}
