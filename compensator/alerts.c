/*
 * compensator/alerts.c — alert state, rate limit, the alert command
 * (contract: alerts.h).
 *
 * State: one entry per (kind, subject) seen, in a small array (the subjects
 * are the configured groups and layers, a bounded set). Times are monotonic.
 * The command is started with posix_spawn (safe in a threaded program, unlike
 * a bare fork) in its own process group, and waited for with a deadline
 * (alert-command-timeout, or the stop's cut: compensator/stop.h).
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "compensator/alerts.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "common/log.h"
#include "compensator/stats.h"
#include "compensator/stop.h"
#include "base/clock.h"

extern char **environ;

#define MAX_ALERTS  64
#define SUBJECT_MAX 96

typedef struct alert_state {
    int kind;
    char subject[SUBJECT_MAX];
    int active;              /* the condition held at the last check */
    int fired;               /* the episode is open: "firing" sent, "resolved" not yet */
    int hold_resolve;        /* the episode began within min-interval of the firing before (flapping) */
    uint64_t last_fired_us;  /* monotonic; 0: never */
    uint64_t clear_since_us; /* an open, held episode's condition stopped holding then; 0: it holds */
} alert_state_t;

struct comp_alerts {
    const comp_config_t *cfg;
    alert_state_t states[MAX_ALERTS];
    size_t count;
};

const char *comp_alert_name(int kind)
{
    static const char *const names[COMP_ALERT_KINDS] = { "overdue-pending", "dlq-depth", "layer-failing" };
    return kind >= 0 && kind < COMP_ALERT_KINDS ? names[kind] : "unknown";
}

comp_alerts_t *comp_alerts_new(const comp_config_t *cfg)
{
    comp_alerts_t *a = xcalloc(1, sizeof *a);
    a->cfg = cfg;
    return a;
}

void comp_alerts_free(comp_alerts_t *a)
{
    free(a);
}

static alert_state_t *find_state(comp_alerts_t *a, int kind, const char *subject)
{
    for (size_t i = 0; i < a->count; i++)
        if (a->states[i].kind == kind && strcmp(a->states[i].subject, subject) == 0)
            return &a->states[i];
    if (a->count == MAX_ALERTS)
        return NULL;
    alert_state_t *s = &a->states[a->count++];
    memset(s, 0, sizeof *s);
    s->kind = kind;
    snprintf(s->subject, sizeof s->subject, "%s", subject);
    return s;
}

static char *env_entry(const char *name, const char *value)
{
    size_t len = strlen(name) + strlen(value) + 2;
    char *e = xmalloc(len);
    snprintf(e, len, "%s=%s", name, value);
    return e;
}

/* Run the command with the alert in its environment; wait for it with the
 * deadline. Returns 0 when it exited with status 0, else -1 (logged). */
static int run_command(comp_alerts_t *a, const char *kind, const char *state, const char *subject, int64_t value,
                       uint64_t threshold, const char *message)
{
    enum {
        OWN = 8
    };
    if (comp_stop_cut()) { /* it would be killed at once (below) */
        log_msg(LOG_LEVEL_ERROR, "alert-command: not run, the stop cut the calls in flight (stop-grace)");
        return -1;
    }
    size_t n_env = 0;
    while (environ != NULL && environ[n_env] != NULL)
        n_env++;
    char **envp = xcalloc(n_env + OWN + 1, sizeof *envp);
    size_t k = 0;
    for (size_t i = 0; i < n_env; i++)
        if (strncmp(environ[i], "HG_ALERT_", 9) != 0)
            envp[k++] = environ[i];
    size_t own_from = k;
    char num[32], thr[32], when[32];
    snprintf(num, sizeof num, "%" PRId64, value);
    snprintf(thr, sizeof thr, "%" PRIu64, threshold);
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    envp[k++] = env_entry("HG_ALERT_NAME", kind);
    envp[k++] = env_entry("HG_ALERT_STATE", state);
    envp[k++] = env_entry("HG_ALERT_SUBJECT", subject);
    envp[k++] = env_entry("HG_ALERT_VALUE", num);
    envp[k++] = env_entry("HG_ALERT_THRESHOLD", thr);
    envp[k++] = env_entry("HG_ALERT_MESSAGE", message);
    envp[k++] = env_entry("HG_ALERT_DATABASE", a->cfg->mysql_database != NULL ? a->cfg->mysql_database : "");
    envp[k++] = env_entry("HG_ALERT_TIME", when);
    envp[k] = NULL;

    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    posix_spawnattr_setpgroup(&attr, 0);
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    posix_spawnattr_setsigmask(&attr, &none); /* the daemon blocks SIGTERM in its threads; the child must not */
    posix_spawnattr_setsigdefault(&attr, &all);
    char *const argv[] = { "sh", "-c", a->cfg->alert_command, NULL };
    pid_t pid;
    int rc = posix_spawn(&pid, "/bin/sh", NULL, &attr, argv, envp);
    posix_spawnattr_destroy(&attr);
    for (size_t i = own_from; i < k; i++)
        free(envp[i]);
    free(envp);
    if (rc != 0) {
        log_msg(LOG_LEVEL_ERROR, "alert-command: cannot start /bin/sh: %s", strerror(rc));
        return -1;
    }

    /* Waited for until alert-command-timeout, or until the stop cuts what
     * is still in flight (stop-grace after SIGTERM): a pager that hangs must
     * not hold the stop for alert-command-timeout (up to an hour). */
    uint64_t deadline = clock_mono_us() + a->cfg->alert_command_timeout_ms * 1000u;
    int status = 0;
    for (;;) {
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid)
            break;
        if (w < 0 && errno != EINTR) {
            log_msg(LOG_LEVEL_ERROR, "alert-command: waitpid: %s", strerror(errno));
            return -1;
        }
        int timed_out = clock_mono_us() >= deadline;
        if (timed_out || comp_stop_cut()) {
            kill(-pid, SIGKILL);
            waitpid(pid, &status, 0);
            if (timed_out)
                log_msg(LOG_LEVEL_ERROR, "alert-command: still running after %llums, killed",
                        a->cfg->alert_command_timeout_ms);
            else
                log_msg(LOG_LEVEL_ERROR, "alert-command: still running when the stop cut the calls in flight "
                                         "(stop-grace), killed");
            return -1;
        }
        struct timespec ts = { 0, 10 * 1000000L };
        nanosleep(&ts, NULL);
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        if (WIFEXITED(status))
            log_msg(LOG_LEVEL_ERROR, "alert-command exited with status %d", WEXITSTATUS(status));
        else
            log_msg(LOG_LEVEL_ERROR, "alert-command killed by signal %d", WIFSIGNALED(status) ? WTERMSIG(status) : 0);
        return -1;
    }
    return 0;
}

static void send_alert(comp_alerts_t *a, alert_state_t *s, const char *state, int64_t value, uint64_t threshold,
                       const char *message)
{
    const char *name = comp_alert_name(s->kind);
    log_msg(LOG_LEVEL_WARN, "ALERT %s %s [%s]: %s", name, state, s->subject, message);
    if (a->cfg->alert_command == NULL || a->cfg->alert_command[0] == '\0')
        return;
    if (run_command(a, name, state, s->subject, value, threshold, message) != 0)
        comp_count(&comp_stats.alert_command_failures, 1);
    comp_progress(); /* a step for /healthz: up to alert-command-timeout */
}

int comp_alert_check_at(comp_alerts_t *a, int kind, const char *subject, int active, int64_t value, uint64_t threshold,
                        const char *message, uint64_t now_us)
{
    alert_state_t *s = find_state(a, kind, subject);
    if (s == NULL) {
        log_msg(LOG_LEVEL_ERROR, "alerts: more than %d distinct alerts; %s [%s] not tracked", MAX_ALERTS,
                comp_alert_name(kind), subject);
        return 0;
    }
    uint64_t min_us = a->cfg->alert_min_interval_ms * 1000u;
    int ran = 0;
    if (active) {
        s->clear_since_us = 0;
        if (!s->fired) {
            /* A new episode: the last word was "resolved" (or nothing), so it
             * is sent at once, however soon after the one before. Coming that
             * soon (within min-interval of the last firing) it is flapping:
             * its "resolved" waits until the condition stays clear that long. */
            s->hold_resolve = s->last_fired_us != 0 && now_us - s->last_fired_us < min_us;
            send_alert(a, s, "firing", value, threshold, message);
            comp_count(&comp_stats.alerts_fired[kind], 1);
            s->last_fired_us = now_us;
            s->fired = 1;
            ran = 1;
        } else if (now_us - s->last_fired_us >= min_us) { /* a reminder of the open episode */
            send_alert(a, s, "firing", value, threshold, message);
            comp_count(&comp_stats.alerts_fired[kind], 1);
            s->last_fired_us = now_us;
            ran = 1;
        } else {
            comp_count(&comp_stats.alerts_suppressed[kind], 1);
        }
    } else if (s->fired) {
        if (s->hold_resolve && s->clear_since_us == 0)
            s->clear_since_us = now_us;
        if (!s->hold_resolve || now_us - s->clear_since_us >= min_us) {
            send_alert(a, s, "resolved", value, threshold, message);
            s->fired = 0;
            s->hold_resolve = 0;
            s->clear_since_us = 0;
            ran = 1;
        }
    }
    if (active != s->active)
        atomic_fetch_add_explicit(&comp_stats.alerts_active[kind], active ? 1 : -1, memory_order_relaxed);
    s->active = active;
    return ran;
}

int comp_alert_check(comp_alerts_t *a, int kind, const char *subject, int active, int64_t value, uint64_t threshold,
                     const char *message)
{
    return comp_alert_check_at(a, kind, subject, active, value, threshold, message, clock_mono_us());
}
