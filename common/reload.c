/*
 * common/reload.c — a daemon's SIGHUP (contract: reload.h).
 *
 * Glue around cfg_reload: its load hands the program's load the argv the
 * program started with, its apply puts the log keys in force through the
 * table's rows (every daemon's only reloadable keys). One thread at a time:
 * the program's SIGHUP thread, or its event loop.
 */
#include "common/reload.h"

#include "common/log.h"
#include "common/log_keys.h"

/* One reload_config call, the arg of cfg_reload's callbacks. */
typedef struct reload_call {
    const cfg_table_t *table;
    const reload_program_t *program;
    int argc;
    char **argv;
} reload_call_t;

static int load(void *conf, void *arg, char *err, size_t errlen)
{
    const reload_call_t *c = arg;
    return c->program->load(conf, c->argc, c->argv, err, errlen);
}

static void apply(const void *running, void *arg)
{
    const reload_call_t *c = arg;
    char err[512];
    if (log_keys_apply_table(c->table, running, err, sizeof err) != 0)
        log_error("SIGHUP: %s (logging where it did)", err);
}

int reload_config(const cfg_table_t *t, void *running, const reload_program_t *p, int argc, char **argv)
{
    reload_call_t c = { t, p, argc, argv };
    const cfg_reload_ops_t ops = { p->size, load, p->release, apply, &c };
    return cfg_reload(t, running, &ops);
}
