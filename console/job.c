/*
 * console/job.c — the broker commands that may run for minutes, off the
 * event loop (contract: console.h, "job.c"; the documents: docs/console.md).
 *
 * DLQ REQUEUE|DROP … ALL and TOPIC DEL … PURGE are answered by the broker
 * after their last step: seconds for a DLQ of a million, more for a bigger
 * one. Run on the session's connection, they held the console's one event
 * loop thread that long, and every page of every operator waited. A job
 * runs such a command instead:
 *
 *   - on a connection of its own, a clone of the session's
 *     (hg_client_clone: the same user, so the broker checks the same roles;
 *     the console holds no password), which connects on the job's thread;
 *   - on a thread of its own, which owns that connection and nothing else
 *     the loop touches, so the loop goes on serving meanwhile;
 *   - the POST that starts it answers 202 with the job at once, and the
 *     page polls GET /api/jobs/{id} until it has ended. So no reverse
 *     proxy's timeout cuts a long one short, and an operator who closes
 *     the tab finds it again under GET /api/jobs.
 *
 * The table holds JOBS_KEPT jobs, JOBS_RUNNING_MAX of them running (one
 * more is refused 429); a new job replaces the oldest ended one. Its fields
 * are the loop's, but for what the thread writes once at the end (state,
 * outcome), under the table's mutex; the loop joins an ended thread when
 * it next looks at the table.
 *
 * Shutdown: jobs_stop makes the stop pipe readable; every job's connection
 * has it as its stop fd (hg_client_set_stop_fd), so a job waiting on the
 * broker ends at once, and is joined. The logins' threads (login.c) are
 * started by jobs_thread_start too (every signal blocked), but stopped by
 * pipes of their own (logins_free). The broker itself finishes a step
 * job whose client left, and audits it; the job's own log line says so.
 *
 * Threads: the event loop's, and one per running job.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "console/console.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/json.h"
#include "common/log.h"
#include "base/clock.h"

#define JOBS_KEPT        32
#define JOBS_RUNNING_MAX 4

typedef enum job_state {
    JOB_RUNNING,
    JOB_DONE,
    JOB_FAILED,
    JOB_STOPPED
} job_state_t;

typedef struct job {
    unsigned id; /* 0: a free slot */
    job_spec_t spec;
    struct console_jobs *table;
    char user[CONSOLE_USER_MAX];
    char peer[64];
    uint64_t started_ms, ended_ms; /* wall clock, for people */
    uint64_t started_mono;         /* for the duration logged */
    hg_client_t *client;           /* the thread's until it ends */
    pthread_t thread;
    int joined;
    /* written by the thread once, at the end, under the table's mutex */
    job_state_t state;
    int status; /* 200 done; else the HTTP status of the failure */
    long long result;
    char error[512];
} job_t;

struct console_jobs {
    pthread_mutex_t lock;
    int stop_pipe[2]; /* readable = every job's and login's wait ends (shutdown) */
    int stopped;      /* the stop pipe was written */
    unsigned next_id;
    job_t jobs[JOBS_KEPT];
};

static const char *state_name(job_state_t s)
{
    switch (s) {
    case JOB_RUNNING:
        return "running";
    case JOB_DONE:
        return "done";
    case JOB_FAILED:
        return "failed";
    case JOB_STOPPED:
        return "stopped";
    }
    return "?";
}

console_jobs_t *jobs_new(char *err, size_t errlen)
{
    console_jobs_t *t = xcalloc(1, sizeof *t);
    if (pipe2(t->stop_pipe, O_CLOEXEC) != 0) {
        snprintf(err, errlen, "jobs: pipe: %s", strerror(errno));
        free(t);
        return NULL;
    }
    pthread_mutex_init(&t->lock, NULL);
    return t;
}

/* Join the threads of the jobs that have ended (every job's, with all set:
 * the caller has made them end); returns how many are still running.
 * Loop thread. */
static size_t reap(console_jobs_t *t, int all)
{
    size_t running = 0;
    for (size_t i = 0; i < JOBS_KEPT; i++) {
        job_t *j = &t->jobs[i];
        if (j->id == 0 || j->joined)
            continue;
        pthread_mutex_lock(&t->lock);
        int ended = j->state != JOB_RUNNING;
        pthread_mutex_unlock(&t->lock);
        if (ended || all) {
            pthread_join(j->thread, NULL);
            j->joined = 1;
        } else {
            running++;
        }
    }
    return running;
}

void jobs_stop(console_jobs_t *t)
{
    if (t == NULL)
        return;
    size_t running = reap(t, 0);
    if (running > 0)
        log_info("stopping: %zu console job%s still waiting on the broker: stopped", running, running == 1 ? "" : "s");
    if (!t->stopped && write(t->stop_pipe[1], "x", 1) != 1) /* the logins' waits end too (login.c) */
        log_error("jobs: cannot write the stop pipe: %s", strerror(errno));
    t->stopped = 1;
    reap(t, 1);
}

int jobs_stop_fd(const console_jobs_t *t)
{
    return t->stop_pipe[0];
}

int jobs_thread_start(pthread_t *thread, void *(*fn)(void *), void *arg)
{
    sigset_t all, was;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &was); /* the thread inherits the mask: signals are the event loop's */
    int rc = pthread_create(thread, NULL, fn, arg);
    pthread_sigmask(SIG_SETMASK, &was, NULL);
    return rc;
}

void jobs_free(console_jobs_t *t)
{
    if (t == NULL)
        return;
    jobs_stop(t);
    close(t->stop_pipe[0]);
    close(t->stop_pipe[1]);
    pthread_mutex_destroy(&t->lock);
    free(t);
}

/* ------------------------------------------------------------------ the thread */

static void *job_main(void *arg)
{
    job_t *j = arg;
    const char *argv[JOB_ARGS_MAX];
    for (int i = 0; i < j->spec.argc; i++)
        argv[i] = j->spec.argv[i];
    hg_client_set_read_timeout(j->client, j->spec.wait_ms);
    hg_reply_t *reply = NULL;
    hg_err_t e = hg_client_command(j->client, j->spec.argc, argv, NULL, &reply);
    job_state_t state = JOB_DONE;
    int status = 200;
    long long result = 0;
    char error[512] = "";
    if (e == HG_OK && hg_reply_type(reply) != HG_REPLY_INTEGER) {
        state = JOB_FAILED;
        status = 502;
        snprintf(error, sizeof error, "broker: not an integer reply to %s", j->spec.argv[0]);
    } else if (e == HG_OK) {
        result = hg_reply_integer(reply);
        if (result == 0 && j->spec.zero_error[0] != '\0') {
            state = JOB_FAILED;
            status = 404;
            snprintf(error, sizeof error, "%s", j->spec.zero_error);
        }
    } else if (e == HG_ERR_STOPPED) {
        state = JOB_STOPPED;
        status = 503;
        snprintf(error, sizeof error,
                 "the console stopped while it waited on the broker; a command the broker had runs to its end "
                 "there (the broker's audit log has the outcome)");
    } else {
        const char *msg = hg_client_errmsg(j->client);
        state = JOB_FAILED;
        status = strncmp(msg, "NOPERM", 6) == 0 ? 403 : (e == HG_ERR_SERVER ? 400 : 502);
        snprintf(error, sizeof error, "broker: %s", msg);
    }
    hg_reply_free(reply);
    hg_client_close(j->client);
    uint64_t ended = clock_wall_ms();
    unsigned long long took = (unsigned long long)(clock_mono_ms() - j->started_mono);
    if (state == JOB_DONE)
        log_info("audit: user=%s from=%s %s %s=%lld (job %u, %llu ms)", j->user, j->peer, j->spec.audit,
                 j->spec.result_key, result, j->id, took);
    else
        log_info("audit: user=%s from=%s %s %s: %s (job %u, %llu ms)", j->user, j->peer, j->spec.audit,
                 state_name(state), error, j->id, took);

    console_jobs_t *t = j->table;
    pthread_mutex_lock(&t->lock);
    j->client = NULL;
    j->result = result;
    j->status = status;
    snprintf(j->error, sizeof j->error, "%s", error);
    j->ended_ms = ended;
    j->state = state;
    pthread_mutex_unlock(&t->lock);
    return NULL;
}

/* ------------------------------------------------------------------ the loop's side */

/* A slot for a new job: a free one, else the oldest ended (joined) one;
 * NULL when JOBS_RUNNING_MAX are running. */
static job_t *slot(console_jobs_t *t)
{
    job_t *free_slot = NULL, *oldest = NULL;
    size_t running = 0;
    for (size_t i = 0; i < JOBS_KEPT; i++) {
        job_t *j = &t->jobs[i];
        if (j->id == 0) {
            free_slot = free_slot != NULL ? free_slot : j;
        } else if (!j->joined) {
            running++;
        } else if (oldest == NULL || j->id < oldest->id) {
            oldest = j;
        }
    }
    if (running >= JOBS_RUNNING_MAX)
        return NULL;
    return free_slot != NULL ? free_slot : oldest;
}

/* j as JSON (the table's mutex held). */
static void job_json(json_t *js, const job_t *j)
{
    json_object_open(js);
    json_kuint(js, "id", j->id);
    json_kstr(js, "what", j->spec.what);
    json_kstr(js, "user", j->user);
    json_kstr(js, "state", state_name(j->state));
    json_kuint(js, "started_ms", j->started_ms);
    json_key(js, "ended_ms");
    if (j->state == JOB_RUNNING)
        json_null(js);
    else
        json_uint(js, j->ended_ms);
    json_key(js, "result");
    if (j->state == JOB_DONE) {
        json_object_open(js);
        json_kstr(js, j->spec.target_key, j->spec.target);
        json_kint(js, j->spec.result_key, j->result);
        json_object_close(js);
    } else {
        json_null(js);
    }
    if (j->state != JOB_RUNNING && j->state != JOB_DONE) {
        json_kint(js, "status", j->status);
        json_kstr(js, "error", j->error);
    }
    json_object_close(js);
}

/* {"job": j} with status. */
static void reply_job(request_t *r, int status, const job_t *j)
{
    buf_t b = BUF_INIT;
    json_t js;
    json_init(&js, &b);
    json_object_open(&js);
    json_key(&js, "job");
    pthread_mutex_lock(&r->c->jobs->lock);
    job_json(&js, j);
    pthread_mutex_unlock(&r->c->jobs->lock);
    json_object_close(&js);
    http_json(r, status, &b);
    buf_free(&b);
}

void job_start(request_t *r, const job_spec_t *spec)
{
    console_jobs_t *t = r->c->jobs;
    hg_error_t err;
    reap(t, 0);
    job_t *j = slot(t);
    if (j == NULL) {
        console_audit(r, "refused %s: %d console jobs are running", spec->audit, JOBS_RUNNING_MAX);
        http_error(r, 429, "%d jobs are running already: start this one when one of them has ended (GET /api/jobs)",
                   JOBS_RUNNING_MAX);
        return;
    }
    hg_client_t *client = NULL;
    if (hg_client_clone(r->s->client, &client, &err) != HG_OK) {
        http_error(r, 502, "broker: no connection for the job: %s", err.message);
        return;
    }
    memset(j, 0, sizeof *j);
    j->spec = *spec;
    j->table = t;
    snprintf(j->user, sizeof j->user, "%s", r->s->user);
    console_peer(r, j->peer, sizeof j->peer);
    j->client = client;
    j->id = ++t->next_id;
    j->started_ms = clock_wall_ms();
    j->started_mono = clock_mono_ms();
    j->state = JOB_RUNNING;
    hg_client_set_stop_fd(client, t->stop_pipe[0]);
    int rc = jobs_thread_start(&j->thread, job_main, j);
    if (rc != 0) {
        hg_client_close(client);
        memset(j, 0, sizeof *j);
        http_error(r, 503, "no thread for the job: %s", strerror(rc));
        return;
    }
    console_audit(r, "%s: started (job %u)", j->spec.audit, j->id);
    reply_job(r, 202, j);
}

int job_spec_init(job_spec_t *spec, const char *target_key, const char *target, const char *result_key,
                  uint32_t wait_ms, int argc, const char *const *argv)
{
    memset(spec, 0, sizeof *spec);
    if (argc > JOB_ARGS_MAX || strlen(target) >= sizeof spec->target)
        return -1;
    for (int i = 0; i < argc; i++)
        if (strlen(argv[i]) >= sizeof spec->argv[i])
            return -1; /* never a command on a cut name */
    spec->target_key = target_key;
    snprintf(spec->target, sizeof spec->target, "%s", target);
    spec->result_key = result_key;
    spec->wait_ms = wait_ms;
    spec->argc = argc;
    for (int i = 0; i < argc; i++)
        snprintf(spec->argv[i], sizeof spec->argv[i], "%s", argv[i]);
    return 0;
}

/* GET /api/jobs: every job kept, the newest first; GET /api/jobs/{id}: one. */
int api_jobs(request_t *r)
{
    if (r->nparts < 1 || strcmp(r->parts[0], "jobs") != 0 || r->is_post || r->nparts > 2)
        return 0;
    console_jobs_t *t = r->c->jobs;
    reap(t, 0);
    if (r->nparts == 2) {
        char *end = NULL;
        unsigned long id = strtoul(r->parts[1], &end, 10);
        for (size_t i = 0; end != r->parts[1] && *end == '\0' && id > 0 && i < JOBS_KEPT; i++)
            if (t->jobs[i].id == id) {
                reply_job(r, 200, &t->jobs[i]);
                return 1;
            }
        http_error(r, 404, "no job '%.40s' (the console keeps the last %d)", r->parts[1], JOBS_KEPT);
        return 1;
    }
    const job_t *order[JOBS_KEPT];
    size_t n = 0;
    for (size_t i = 0; i < JOBS_KEPT; i++)
        if (t->jobs[i].id != 0)
            order[n++] = &t->jobs[i];
    for (size_t i = 1; i < n; i++) /* newest first: a handful, insertion sort */
        for (size_t k = i; k > 0 && order[k]->id > order[k - 1]->id; k--) {
            const job_t *x = order[k];
            order[k] = order[k - 1];
            order[k - 1] = x;
        }
    buf_t b = BUF_INIT;
    json_t js;
    json_init(&js, &b);
    json_object_open(&js);
    json_key(&js, "jobs");
    json_array_open(&js);
    pthread_mutex_lock(&t->lock);
    for (size_t i = 0; i < n; i++)
        job_json(&js, order[i]);
    pthread_mutex_unlock(&t->lock);
    json_array_close(&js);
    json_object_close(&js);
    http_json(r, 200, &b);
    buf_free(&b);
    return 1;
}
