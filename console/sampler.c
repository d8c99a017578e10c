/*
 * console/sampler.c — the overview's figures (contract: console.h,
 * "sampler.c"): every sample-interval one INFO from the broker (levels with
 * depth and head lag, groups with their DLQ depth, the send / delivery / ack
 * counters and the lateness quantiles), the broker's lateness histogram
 * (its /metrics, when it has a metrics port) and the pending / overdue order
 * counts (the (status, expire_at) index), kept for `history` (console/history.c:
 * at most HISTORY_POINTS_MAX points, each the average or highest of its
 * samples); and, with compensator-metrics, the compensator's layers and alerts of the
 * last sample (compensator_status.c).
 * Rates are differences between neighbouring samples; a counter that went
 * down (a broker restart) gives no rate for that step.
 *
 * The sampler runs on a thread of its own with connections of its own: a
 * broker connection on `uri`, as sampler-user when one is configured (a
 * broker with users answers nothing without AUTH; the role viewer is
 * enough), and a database handle of its own. sampler-password-file is read
 * again on SIGHUP (sampler_password_refresh) and after the broker refused
 * the sampler's AUTH: another password (logged once, by the password
 * source) closes the broker connection, and the next sample logs in with
 * it, so a corrected or rotated password needs no restart. So a slow broker, compensator
 * or MariaDB holds back the next sample, never a request: the overview is
 * rendered on the event loop from the last published sample, under a mutex
 * held only to copy a sample in and to render (never across a call that
 * waits). While the thread waits on one of them longer than two intervals,
 * the overview says on which, and since when.
 *
 * Threads: take_sample and the thread's own handles on the sampler's
 * thread; sampler_overview_json on the event loop; sampler_start and
 * sampler_free on the main thread.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "console/console.h"
#include "console/history.h"

#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "base/json.h"
#include "common/log.h"
#include "base/clock.h"

#define SAMPLER_MAX_BUCKETS       40
#define BUSY_BROKER_INFO          "the broker (INFO)"
#define BUSY_DB_COUNTS            "the database (order counts)"
#define SAMPLER_HEAD_LAG_ALERT_MS 10000


typedef struct bucket {
    char le[24];
    uint64_t count;
} bucket_t;

struct sampler {
    console_t *c; /* the thread reads only c->cfg's start-up keys (none SIGHUP changes) and c->db_password (locked) */
    passwd_source_t password; /* sampler-password-file (no file: none, no AUTH); its own lock, any thread */
    pthread_t thread;
    int started;
    pthread_mutex_t lock; /* guards what follows "published"; never held across a call that waits */
    pthread_cond_t wake;  /* sampler_free's stop */
    int stopping;

    /* the thread's own */
    hg_client_t *client;
    unsigned long client_generation; /* of password, when client was opened */
    hg_order_db *db;
    unsigned long db_generation;   /* of db's password (console_db_open) */
    char logged_broker_error[256]; /* the broker error last logged ("": none, or it answered since) */
    compensator_status_t compensator_scratch;

    /* published (the lock) */
    history_t history; /* the samples of `history`, at most HISTORY_POINTS_MAX points (console/history.h) */
    char *info;        /* the last INFO text ("" when the broker did not answer) */
    char broker_error[256], db_error[512];
    bucket_t buckets[SAMPLER_MAX_BUCKETS];
    size_t nbuckets;
    compensator_status_t compensator; /* of the last sample */
    const char *busy_on;              /* what the thread waits on now, or NULL between samples */
    uint64_t busy_since_ms;
    /* per dependency (sampler_dep_t): since when its last call failed after its whole timeout; 0: it answers */
    uint64_t silent_since_ms[2];
};

/* How long a call to d may wait: what a request waits for it too. */
static uint64_t dep_timeout_ms(const sampler_t *s, sampler_dep_t d)
{
    const console_config_t *cfg = s->c->cfg;
    return d == SAMPLER_BROKER ? (uint64_t)cfg->broker_timeout_ms : (uint64_t)cfg->mysql_read_timeout_ms;
}

/* The value of "key:" in INFO text (NUL-terminated; NULL: none), or NULL;
 * *len its length (hg_info_value). */
static const char *info_value(const char *info, const char *key, size_t *len)
{
    return info != NULL ? hg_info_value(info, strlen(info), key, len) : NULL;
}

static uint64_t info_u64(const char *info, const char *key)
{
    size_t len;
    const char *v = info_value(info, key, &len);
    return v != NULL ? strtoull(v, NULL, 10) : 0;
}

static double info_double(const char *info, const char *key)
{
    size_t len;
    const char *v = info_value(info, key, &len);
    return v != NULL ? strtod(v, NULL) : 0.0;
}

/* The number after "name=" in a "a=1,b=2" field list line[0..len). */
static long long field_ll(const char *line, size_t len, const char *name)
{
    size_t n = strlen(name);
    for (size_t i = 0; i + n < len; i++)
        if ((i == 0 || line[i - 1] == ',' || line[i - 1] == ':') && strncmp(line + i, name, n) == 0 &&
            line[i + n] == '=')
            return strtoll(line + i + n + 1, NULL, 10);
    return 0;
}

/* "host" of the URI into out (brackets of IPv6 removed). */
static void uri_host(const char *uri, char *out, size_t len)
{
    const char *p = strstr(uri, "://");
    p = p != NULL ? p + 3 : uri;
    const char *at = strchr(p, '@'), *slash = strchr(p, '/');
    if (at != NULL && (slash == NULL || at < slash))
        p = at + 1;
    if (*p == '[') {
        size_t n = strcspn(p + 1, "]");
        snprintf(out, len, "%.*s", (int)n, p + 1);
    } else {
        size_t n = strcspn(p, ":/?");
        snprintf(out, len, "%.*s", (int)n, p);
    }
    if (out[0] == '\0')
        snprintf(out, len, "127.0.0.1");
}

/* GET /metrics from the broker's metrics port (one second at most) into
 * the histogram's buckets; *n 0 when there is none. */
static void fetch_histogram(const char *host, long port, bucket_t *buckets, size_t *n)
{
    metrics_url_t url;
    buf_t b = BUF_INIT;
    char err[256];
    int status = 0;
    *n = 0;
    memset(&url, 0, sizeof url);
    snprintf(url.host, sizeof url.host, "%s", host);
    snprintf(url.port, sizeof url.port, "%u", (unsigned)(port & 0xffff));
    if (metrics_get(&url, "/metrics", 1000, &status, &b, err, sizeof err) != 0 || status != 200) {
        buf_free(&b);
        return;
    }
    const char *text = buf_cstr(&b), *key = "hourglass_delivery_lateness_seconds_bucket{le=\"";
    for (const char *p = text; (p = strstr(p, key)) != NULL && *n < SAMPLER_MAX_BUCKETS;) {
        p += strlen(key);
        size_t len = strcspn(p, "\"");
        bucket_t *bk = &buckets[(*n)++];
        snprintf(bk->le, sizeof bk->le, "%.*s", (int)len, p);
        const char *v = strchr(p, ' ');
        bk->count = v != NULL ? strtoull(v + 1, NULL, 10) : 0;
    }
    buf_free(&b);
}

/* What the sampler's thread waits on now (NULL: nothing), for the overview. */
static void set_busy(sampler_t *s, const char *what)
{
    pthread_mutex_lock(&s->lock);
    s->busy_on = what;
    s->busy_since_ms = clock_wall_ms();
    pthread_mutex_unlock(&s->lock);
}

/* The sampler's broker connection (opened when missing, and again when
 * sampler-password-file holds a newer password); NULL with err. A refused
 * AUTH reads the file again, so the next sample tries what it holds now. */
static hg_client_t *broker_client(sampler_t *s, char *err, size_t errlen)
{
    int has_file = passwd_source_has_file(&s->password);
    if (s->client != NULL && has_file && passwd_source_generation(&s->password) != s->client_generation) {
        hg_client_close(s->client);
        s->client = NULL;
    }
    if (s->client != NULL)
        return s->client;
    const console_config_t *cfg = s->c->cfg;
    hg_client_opts_t opts;
    hg_error_t e;
    char password[PASSWD_FILE_MAX + 1] = "";
    console_client_opts(cfg, &opts);
    if (cfg->sampler_user != NULL) {
        s->client_generation = passwd_source_get(&s->password, password, sizeof password);
        opts.user = cfg->sampler_user;
        opts.password = password;
    }
    hg_err_t rc = hg_client_open(cfg->uri, &opts, &s->client, &e);
    memset(password, 0, sizeof password);
    if (rc != HG_OK) {
        snprintf(err, errlen, "%s", e.message);
        s->client = NULL;
        if (rc == HG_ERR_AUTH && has_file)
            sampler_password_refresh(s); /* corrected or rotated: the next sample logs in with it */
    }
    return s->client;
}

/* The sampler's database handle (opened when missing, and again when
 * mysql-password-file holds a newer password); NULL with err. */
static hg_order_db *order_db(sampler_t *s, char *err, size_t errlen)
{
    if (s->db != NULL && console_db_stale(s->c, s->db_generation)) {
        hg_order_db_close(s->db);
        s->db = NULL;
    }
    if (s->db != NULL)
        return s->db;
    hg_order_error_t e;
    s->db = console_db_open(s->c, &s->db_generation, &e);
    if (s->db == NULL)
        snprintf(err, errlen, "%s", e.message);
    return s->db;
}

/* After a call to d that began at mono_t0 (wall: sample_ms): a failure that
 * took its whole timeout means d is there but does not answer (hung,
 * stopped, a partition), one that came at once (refused) is not silence,
 * and an answer ends it. Published at once, not with the sample: between
 * the call and the publication a request must not see d as answering. */
static void note_silence(sampler_t *s, sampler_dep_t d, int failed, uint64_t mono_t0, uint64_t sample_ms)
{
    uint64_t timeout = dep_timeout_ms(s, d); /* 90 % of it: ms truncated, a timer's slack */
    int silent = failed && clock_mono_ms() - mono_t0 >= timeout - timeout / 10;
    pthread_mutex_lock(&s->lock);
    if (!silent)
        s->silent_since_ms[d] = 0;
    else if (s->silent_since_ms[d] == 0)
        s->silent_since_ms[d] = sample_ms;
    pthread_mutex_unlock(&s->lock);
}

/* Log the broker half of a sample for the operator: a warning naming the
 * broker, the sampler's user and the error when it differs from the last one
 * logged (not one line per sample), an info line when the broker answers
 * again after one. error: "" when INFO was answered. */
static void log_broker_outcome(sampler_t *s, const char *error)
{
    const console_config_t *cfg = s->c->cfg;
    const char *user = cfg->sampler_user != NULL ? cfg->sampler_user : "(none: no AUTH)";
    if (error[0] != '\0' && strcmp(error, s->logged_broker_error) != 0)
        log_warn("sampler: the broker at %s, as user %s, does not answer INFO: %s (the overview has no broker "
                 "figures until it does)",
                 cfg->uri, user, error);
    else if (error[0] == '\0' && s->logged_broker_error[0] != '\0')
        log_info("sampler: the broker at %s answers INFO again, as user %s", cfg->uri, user);
    snprintf(s->logged_broker_error, sizeof s->logged_broker_error, "%s", error);
}

/* One sample, on the sampler's thread: every call to the broker, the
 * compensator and MariaDB is made without the lock, into the thread's own
 * scratch; the lock is held only to publish the result. */
static void take_sample(sampler_t *s)
{
    const console_config_t *cfg = s->c->cfg;
    history_sample_t x;
    char *info = NULL, broker_error[256] = "", db_error[512] = "";
    bucket_t buckets[SAMPLER_MAX_BUCKETS];
    size_t nbuckets = 0;

    memset(&x, 0, sizeof x);
    x.t_ms = clock_wall_ms();
    x.pending = x.overdue = -1;

    set_busy(s, BUSY_BROKER_INFO);
    uint64_t info_t0 = clock_mono_ms();
    hg_client_t *client = broker_client(s, broker_error, sizeof broker_error);
    if (client != NULL) {
        const char *argv[2] = { "INFO", "everything" };
        hg_reply_t *r = NULL;
        hg_err_t e = hg_client_command(client, 1, argv, NULL, &r);
        size_t len;
        const char *text = e == HG_OK ? hg_reply_str(r, &len) : NULL;
        if (text != NULL) {
            info = xstrdup(text);
            x.broker_ok = 1;
            x.sends = info_u64(info, "sends");
            x.deliveries = info_u64(info, "deliveries");
            x.acks = info_u64(info, "acks");
            x.nacks = info_u64(info, "nacks");
            x.dlq_moves = info_u64(info, "dlq_moves");
            x.lateness_p50_ms = info_double(info, "lateness_p50_ms");
            x.lateness_p99_ms = info_double(info, "lateness_p99_ms");
            long long mport = (long long)info_u64(info, "metrics_port");
            char host[256];
            uri_host(cfg->uri, host, sizeof host);
            if (mport > 0) {
                set_busy(s, "the broker's /metrics");
                fetch_histogram(host, (long)mport, buckets, &nbuckets);
            }
        } else {
            snprintf(broker_error, sizeof broker_error, "INFO: %s", hg_client_errmsg(client));
            hg_client_close(s->client);
            s->client = NULL;
        }
        hg_reply_free(r);
    }

    note_silence(s, SAMPLER_BROKER, !x.broker_ok, info_t0, x.t_ms);
    log_broker_outcome(s, broker_error);

    set_busy(s, BUSY_DB_COUNTS);
    uint64_t db_t0 = clock_mono_ms();
    hg_order_db *db = order_db(s, db_error, sizeof db_error);
    uint64_t pending, overdue;
    hg_order_error_t err;
    if (db != NULL) {
        if (hg_order_counts(db, (uint64_t)cfg->overdue_after_ms, &pending, &overdue, &err) == 0) {
            x.pending = (long long)pending;
            x.overdue = (long long)overdue;
        } else {
            snprintf(db_error, sizeof db_error, "%s", err.message);
            if (hg_order_error_is_database(err.code))
                console_db_password_refresh(s->c); /* a rotated password: the next sample opens db with it */
        }
    }

    note_silence(s, SAMPLER_DB, x.pending < 0, db_t0, x.t_ms);

    if (cfg->compensator_metrics != NULL)
        set_busy(s, "the compensator's /metrics");
    compensator_status_read(cfg, &s->compensator_scratch);

    pthread_mutex_lock(&s->lock);
    history_push(&s->history, &x);
    free(s->info);
    s->info = info != NULL ? info : xstrdup("");
    snprintf(s->broker_error, sizeof s->broker_error, "%s", broker_error);
    snprintf(s->db_error, sizeof s->db_error, "%s", db_error);
    if (x.broker_ok) {
        memcpy(s->buckets, buckets, nbuckets * sizeof buckets[0]);
        s->nbuckets = nbuckets;
    }
    s->compensator = s->compensator_scratch;
    s->busy_on = NULL;
    pthread_mutex_unlock(&s->lock);
}

static void *sampler_main(void *arg)
{
    sampler_t *s = arg;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL); /* signals are the event loop's */
    pthread_mutex_lock(&s->lock);
    while (!s->stopping) {
        pthread_mutex_unlock(&s->lock);
        take_sample(s);
        pthread_mutex_lock(&s->lock);
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += s->c->cfg->sample_interval_ms / 1000;
        until.tv_nsec += (s->c->cfg->sample_interval_ms % 1000) * 1000000;
        if (until.tv_nsec >= 1000000000) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000;
        }
        while (!s->stopping && pthread_cond_timedwait(&s->wake, &s->lock, &until) == 0)
            ;
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

sampler_t *sampler_start(console_t *c, char *err, size_t errlen)
{
    sampler_t *s = xcalloc(1, sizeof *s);
    pthread_condattr_t attr;
    s->c = c;
    history_init(&s->history, (size_t)(c->cfg->history_ms / c->cfg->sample_interval_ms) + 1, HISTORY_POINTS_MAX);
    s->info = xstrdup("");
    passwd_source_init(&s->password, c->cfg->sampler_password_file,
                       c->cfg->sampler_password_file != NULL ? c->cfg->sampler_password : NULL);
    pthread_mutex_init(&s->lock, NULL);
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&s->wake, &attr);
    pthread_condattr_destroy(&attr);
    int rc = pthread_create(&s->thread, NULL, sampler_main, s);
    if (rc != 0) {
        snprintf(err, errlen, "cannot start the sampler's thread: %s", strerror(rc));
        sampler_free(s);
        return NULL;
    }
    s->started = 1;
    return s;
}

void sampler_free(sampler_t *s)
{
    if (s == NULL)
        return;
    if (s->started) {
        pthread_mutex_lock(&s->lock);
        s->stopping = 1;
        pthread_cond_signal(&s->wake);
        pthread_mutex_unlock(&s->lock);
        pthread_join(s->thread, NULL); /* after its current call: within that call's timeout */
    }
    hg_client_close(s->client);
    if (s->db != NULL)
        hg_order_db_close(s->db);
    pthread_cond_destroy(&s->wake);
    pthread_mutex_destroy(&s->lock);
    passwd_source_destroy(&s->password);
    history_free(&s->history);
    free(s->info);
    free(s);
}

void sampler_password_refresh(sampler_t *s)
{
    if (s != NULL)
        passwd_source_refresh_logged(&s->password, "sampler-password-file",
                                     "the sampler logs in to the broker with it at its next sample",
                                     "the sampler keeps the password read before");
}

static void alert(json_t *j, const char *severity, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void alert(json_t *j, const char *severity, const char *fmt, ...)
{
    char text[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    json_object_open(j);
    json_kstr(j, "severity", severity);
    json_kstr(j, "text", text);
    json_object_close(j);
}

/* Since when dependency d has not answered (the lock held): its last call
 * failed after its whole timeout, or the one in flight has waited that
 * long; 0 when it answers. */
static uint64_t silent_since(const sampler_t *s, sampler_dep_t d, uint64_t now)
{
    if (s->silent_since_ms[d] != 0)
        return s->silent_since_ms[d];
    const char *busy = d == SAMPLER_BROKER ? BUSY_BROKER_INFO : BUSY_DB_COUNTS;
    if (s->busy_on != NULL && strcmp(s->busy_on, busy) == 0 && now >= s->busy_since_ms + dep_timeout_ms(s, d))
        return s->busy_since_ms;
    return 0;
}

int sampler_silent(sampler_t *s, sampler_dep_t d, uint64_t *for_ms)
{
    uint64_t now = clock_wall_ms();
    pthread_mutex_lock(&s->lock);
    uint64_t since = silent_since(s, d, now);
    pthread_mutex_unlock(&s->lock);
    *for_ms = since != 0 && now > since ? now - since : 0;
    return since != 0;
}

/* "silent_ms": how long d has not answered, null when it answers. */
static void json_silent(json_t *j, const sampler_t *s, sampler_dep_t d, uint64_t now)
{
    uint64_t since = silent_since(s, d, now);
    json_key(j, "silent_ms");
    if (since != 0)
        json_uint(j, now > since ? now - since : 0);
    else
        json_null(j);
}

/* The overview document of what is published (the lock held). */
static void overview_json(const sampler_t *s, buf_t *out)
{
    json_t j;
    const history_sample_t *last = history_last(&s->history);
    const char *info = s->info;
    uint64_t now = clock_wall_ms();
    uint64_t busy_ms = s->busy_on != NULL && now > s->busy_since_ms ? now - s->busy_since_ms : 0;

    json_init(&j, out);
    json_object_open(&j);
    json_kuint(&j, "now_ms", now);
    json_kuint(&j, "interval_ms", (uint64_t)s->c->cfg->sample_interval_ms);
    json_key(&j, "sampler");
    json_object_open(&j);
    json_kstr(&j, "waiting_on", s->busy_on);
    json_kuint(&j, "waiting_ms", busy_ms);
    json_key(&j, "last_sample_ms");
    if (last != NULL)
        json_uint(&j, last->t_ms);
    else
        json_null(&j);
    json_object_close(&j);
    json_key(&j, "broker");
    json_object_open(&j);
    json_kbool(&j, "ok", last != NULL && last->broker_ok);
    json_kstr(&j, "error", s->broker_error[0] ? s->broker_error : NULL);
    json_kstr(&j, "uri", s->c->cfg->uri);
    json_silent(&j, s, SAMPLER_BROKER, now);
    json_object_close(&j);
    json_key(&j, "db");
    json_object_open(&j);
    json_kbool(&j, "ok", s->db_error[0] == '\0');
    json_kstr(&j, "error", s->db_error[0] ? s->db_error : NULL);
    json_kstr(&j, "database", s->c->cfg->mysql_database);
    json_silent(&j, s, SAMPLER_DB, now);
    json_object_close(&j);

    /* levels and groups from the last INFO */
    json_key(&j, "levels");
    json_array_open(&j);
    for (const char *p = info; p != NULL && *p != '\0';) {
        const char *end = strchr(p, '\n');
        size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
        if (strncmp(p, "level", 5) == 0 && p[5] >= '0' && p[5] <= '9') {
            json_object_open(&j);
            json_kint(&j, "level", strtol(p + 5, NULL, 10));
            json_kint(&j, "delay_ms", field_ll(p, len, "delay_ms"));
            json_kint(&j, "depth", field_ll(p, len, "depth"));
            json_kint(&j, "next_due_ms", field_ll(p, len, "next_due_ms"));
            json_kint(&j, "head_lag_ms", field_ll(p, len, "head_lag_ms"));
            json_object_close(&j);
        }
        p = end != NULL ? end + 1 : NULL;
    }
    json_array_close(&j);
    json_key(&j, "groups");
    json_array_open(&j);
    for (const char *p = info; p != NULL && *p != '\0';) {
        const char *end = strchr(p, '\n');
        size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
        const char *colon = memchr(p, ':', len);
        if (strncmp(p, "group_", 6) == 0 && colon != NULL && strncmp(colon + 1, "topic=", 6) == 0) {
            const char *topic = strstr(colon, "topic=");
            size_t tlen = topic != NULL ? strcspn(topic + 6, ",\r\n") : 0;
            json_object_open(&j);
            json_key(&j, "group");
            json_strn(&j, p + 6, (size_t)(colon - p - 6));
            json_key(&j, "topic");
            json_strn(&j, topic != NULL ? topic + 6 : "", tlen);
            json_kint(&j, "ready", field_ll(colon, len - (size_t)(colon - p), "ready"));
            json_kint(&j, "backlog", field_ll(colon, len - (size_t)(colon - p), "backlog"));
            json_kint(&j, "retry",
                      field_ll(colon, len - (size_t)(colon - p), "retry_ready") +
                          field_ll(colon, len - (size_t)(colon - p), "retry_delayed"));
            json_kint(&j, "inflight", field_ll(colon, len - (size_t)(colon - p), "inflight"));
            json_kint(&j, "dlq", field_ll(colon, len - (size_t)(colon - p), "dlq"));
            json_object_close(&j);
        }
        p = end != NULL ? end + 1 : NULL;
    }
    json_array_close(&j);

    json_key(&j, "totals");
    json_object_open(&j);
    json_kuint(&j, "sends", last ? last->sends : 0);
    json_kuint(&j, "deliveries", last ? last->deliveries : 0);
    json_kuint(&j, "acks", last ? last->acks : 0);
    json_kuint(&j, "nacks", last ? last->nacks : 0);
    json_kuint(&j, "dlq_moves", last ? last->dlq_moves : 0);
    json_kuint(&j, "delayed", info_u64(info, "delayed_messages"));
    json_kuint(&j, "dlq", info_u64(info, "dlq"));
    json_object_close(&j);

    /* the broker's online backups (BACKUP): null fields from a broker without them */
    json_key(&j, "backup");
    json_object_open(&j);
    static const char *const backup_fields[] = { "backup_name", "backup_last_status", "backup_last_error" };
    for (size_t i = 0; i < sizeof backup_fields / sizeof backup_fields[0]; i++) {
        size_t len;
        const char *v = info_value(info, backup_fields[i], &len);
        json_key(&j, backup_fields[i] + strlen("backup_"));
        if (v != NULL)
            json_strn(&j, v, len);
        else
            json_null(&j);
    }
    json_kbool(&j, "in_progress", info_u64(info, "backup_in_progress") != 0);
    json_kuint(&j, "last_ok_ms", info_u64(info, "backup_last_ok_ms"));
    json_kuint(&j, "last_duration_ms", info_u64(info, "backup_last_duration_ms"));
    json_object_close(&j);

    json_key(&j, "orders");
    json_object_open(&j);
    json_key(&j, "pending");
    if (last != NULL && last->pending >= 0)
        json_int(&j, last->pending);
    else
        json_null(&j);
    json_key(&j, "overdue");
    if (last != NULL && last->overdue >= 0)
        json_int(&j, last->overdue);
    else
        json_null(&j);
    json_kuint(&j, "overdue_after_ms", (uint64_t)s->c->cfg->overdue_after_ms);
    json_object_close(&j);

    json_key(&j, "lateness");
    json_object_open(&j);
    json_key(&j, "p50_ms");
    json_double(&j, last ? last->lateness_p50_ms : 0);
    json_key(&j, "p99_ms");
    json_double(&j, last ? last->lateness_p99_ms : 0);
    json_key(&j, "histogram");
    json_array_open(&j);
    for (size_t i = 0; i < s->nbuckets; i++) {
        json_object_open(&j);
        json_kstr(&j, "le", s->buckets[i].le);
        json_kuint(&j, "count", s->buckets[i].count);
        json_object_close(&j);
    }
    json_array_close(&j);
    json_object_close(&j);

    json_key(&j, "compensator");
    compensator_status_json(&s->compensator, s->c->cfg->compensator_metrics, &j);

    json_key(&j, "history");
    history_json(&s->history, &j);

    json_key(&j, "alerts");
    json_array_open(&j);
    if (busy_ms > 2 * (uint64_t)s->c->cfg->sample_interval_ms)
        alert(&j, "critical", "the overview's sampler has waited %.1f s on %s: these figures are from %s",
              busy_ms / 1e3, s->busy_on, last != NULL ? "the sample before" : "no sample yet");
    uint64_t since = silent_since(s, SAMPLER_BROKER, now);
    if (since != 0)
        alert(&j, "critical",
              "the broker has not answered for %.1f s: its pages and new logins are refused at once "
              "until it does; the order pages go without it",
              (now > since ? now - since : 0) / 1e3);
    if ((since = silent_since(s, SAMPLER_DB, now)) != 0)
        alert(&j, "critical",
              "the database has not answered for %.1f s: the order pages are refused at once until "
              "it does",
              (now > since ? now - since : 0) / 1e3);
    if (s->broker_error[0])
        alert(&j, "critical", "broker unreachable: %s", s->broker_error);
    if (s->db_error[0])
        alert(&j, "critical", "database unreachable: %s", s->db_error);
    if (last != NULL && last->overdue > 0)
        alert(&j, "warning", "%lld pending order%s past expiry", last->overdue, last->overdue == 1 ? "" : "s");
    const compensator_status_t *cs = &s->compensator;
    if (cs->configured && !cs->ok)
        alert(&j, "critical", "compensator unreachable: %s", cs->error);
    for (size_t i = 0; i < cs->nlayers; i++)
        if (strcmp(cs->layers[i].outcome, "failed") == 0)
            alert(&j, "critical", "compensator layer %s: its last run failed (%lld in a row)%s%s", cs->layers[i].name,
                  cs->layers[i].consecutive_failures, cs->layers[i].error[0] ? ": " : "", cs->layers[i].error);
    for (size_t i = 0; i < cs->nalerts; i++)
        if (cs->alerts[i].active > 0)
            alert(&j, "warning", "compensator alert %s firing (%lld)", cs->alerts[i].name, cs->alerts[i].active);
    for (const char *p = info; p != NULL && *p != '\0';) {
        const char *end = strchr(p, '\n');
        size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
        const char *colon = memchr(p, ':', len);
        if (strncmp(p, "group_", 6) == 0 && colon != NULL && strncmp(colon + 1, "topic=", 6) == 0) {
            long long dlq = field_ll(colon, len - (size_t)(colon - p), "dlq");
            if (dlq > 0)
                alert(&j, "warning", "group %.*s: %lld message%s in the DLQ", (int)(colon - p - 6), p + 6, dlq,
                      dlq == 1 ? "" : "s");
        } else if (strncmp(p, "level", 5) == 0 && p[5] >= '0' && p[5] <= '9') {
            long long lag = field_ll(p, len, "head_lag_ms");
            if (lag > SAMPLER_HEAD_LAG_ALERT_MS)
                alert(&j, "warning", "level %ld: its head is %lld ms late (the scheduler is behind)",
                      strtol(p + 5, NULL, 10), lag);
        }
        p = end != NULL ? end + 1 : NULL;
    }
    json_array_close(&j);
    json_object_close(&j);
}

void sampler_overview_json(sampler_t *s, buf_t *out)
{
    pthread_mutex_lock(&s->lock);
    overview_json(s, out);
    pthread_mutex_unlock(&s->lock);
}
