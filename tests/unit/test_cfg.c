/*
 * tests/unit/test_cfg.c — common/cfg.c's SIGHUP reload (cfg_reload) on a
 * small table of its own: what is copied into the running struct (the
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
    char *name;    /* reloadable string */
    long long port; /* not reloadable */
    int log_level; /* reloadable */
} conf_t;

static const cfg_key_t keys[] = {
    {CFG_KEY("name", CFG_STRING, "a", 0, 0, offsetof(conf_t, name), "a name"), .reload = 1},
    {CFG_KEY("port", CFG_INT, "1", 0, 65535, offsetof(conf_t, port), "a port")},
    {CFG_KEY("log-level", CFG_ENUM, "info", 0, 0, offsetof(conf_t, log_level), "log level"), .words = LOG_LEVEL_WORDS,
     .reload = 1},
};
static const cfg_table_t table = {.program = "test_cfg", .keys = keys, .count = 3};

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

static void release(void *c) { cfg_free(&table, c); }

static void apply(const void *c, void *arg)
{
    ((args_t *)arg)->applied++;
    log_set_level((log_level_t)((const conf_t *)c)->log_level);
}

static char dir[512], conf_path[600], log_path[600];

/* cfg_reload with stderr into log_path; the log's text into out. */
static int reload_logged(conf_t *running, args_t *a, char *out, size_t outlen)
{
    const cfg_reload_ops_t ops = {sizeof *running, load, release, apply, a};
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
    char *argv[] = {"test_cfg", "--config", conf_path, NULL};
    args_t a = {3, argv, 0};
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
    TU_CHECK(strstr(log, "[warn] SIGHUP: port changed, but takes effect only at a restart") != NULL
                 && strstr(log, "-> 3") == NULL, "log: %s", log);

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
    TU_CHECK(strstr(log, "[error] SIGHUP: configuration error, keeping the running configuration: ") != NULL
                 && strstr(log, "t.conf:2: log-level: 'loud'") != NULL, "log: %s", log);

    /* The flags still win over the file. */
    char *argv_flag[] = {"test_cfg", "--config", conf_path, "--name", "flag", NULL};
    args_t af = {5, argv_flag, 0};
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

static const tu_test_t reload_tests[] = {
    {"cfg_reload: applied, kept, bad file, flags win, --help", test_reload},
    {NULL, NULL},
};

static const tu_suite_t suites[] = {{"reload", reload_tests}};

int main(int argc, char **argv)
{
    return tu_suites_main(argc, argv, suites, sizeof suites / sizeof suites[0], NULL, NULL);
}
