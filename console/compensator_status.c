/*
 * console/compensator_status.c — what the overview shows of
 * hourglass-compensator (contract: console.h, "compensator_status.c"): each
 * enabled layer's last run (when it ended, how long it took, its outcome,
 * failures in a row, the error of a failed run) and the alerts whose
 * condition holds, read from the compensator's own endpoints at
 * compensator-metrics (its /metrics; /healthz beside it for the errors,
 * only when a layer's last run failed).
 *
 * The series read (docs/compensator.md): layer_enabled{layer},
 * last_run_timestamp_seconds{layer}, last_run_duration_seconds{layer},
 * last_run_outcome{layer,outcome} (1 on the last outcome's series),
 * consecutive_failures{layer}, alerts_active{alert}. /healthz lists one
 * "layer: error" line per layer whose last run failed.
 *
 * Threads: whichever thread samples; no shared state.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "console/console.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"

#define COMPENSATOR_PREFIX     "hourglass_compensator_"
#define COMPENSATOR_TIMEOUT_MS 1000

/* The value of label name in labels ("{a=\"x\",b=\"y\"}") into out; 0 / -1. */
static int label(const char *labels, const char *name, char *out, size_t outlen)
{
    size_t n = strlen(name);
    for (const char *p = labels; (p = strstr(p, name)) != NULL; p += n) {
        if ((p == labels || p[-1] == '{' || p[-1] == ',') && p[n] == '=' && p[n + 1] == '"') {
            const char *v = p + n + 2;
            size_t len = strcspn(v, "\"");
            snprintf(out, outlen, "%.*s", (int)len, v);
            return 0;
        }
    }
    return -1;
}

/* When line[0..len) is a sample of metric (the name after the prefix):
 * its labels (or "") and value; 1, else 0. */
static int sample_of(const char *line, size_t len, const char *metric, char *labels, size_t labels_len, double *value)
{
    size_t plen = strlen(COMPENSATOR_PREFIX), mlen = strlen(metric);
    if (len < plen + mlen + 2 || strncmp(line, COMPENSATOR_PREFIX, plen) != 0 ||
        strncmp(line + plen, metric, mlen) != 0)
        return 0;
    const char *p = line + plen + mlen, *end = line + len;
    labels[0] = '\0';
    if (*p == '{') {
        const char *close = memchr(p, '}', (size_t)(end - p));
        if (close == NULL)
            return 0;
        snprintf(labels, labels_len, "%.*s", (int)(close - p + 1), p);
        p = close + 1;
    }
    if (*p != ' ')
        return 0;
    *value = strtod(p + 1, NULL);
    return 1;
}

/* A sample's value as a count or a time in ms: NaN and values below 0 are 0,
 * values past the type's range its largest (a double converted out of range
 * is undefined behaviour, and the text is whatever the URL answers). */
static long long count_of(double v)
{
    if (!(v > 0))
        return 0;
    return v >= 9.2e18 ? LLONG_MAX : (long long)v;
}

static uint64_t ms_of_seconds(double seconds)
{
    if (!(seconds > 0))
        return 0;
    return seconds >= 1.8e16 ? UINT64_MAX : (uint64_t)(seconds * 1000.0);
}

static compensator_layer_t *layer_named(compensator_status_t *st, const char *name)
{
    for (size_t i = 0; i < st->nlayers; i++)
        if (strcmp(st->layers[i].name, name) == 0)
            return &st->layers[i];
    return NULL;
}

/* The layers and alerts of one /metrics text. */
static void parse_metrics(compensator_status_t *st, const char *text)
{
    char labels[256], name[COMPENSATOR_NAME_MAX], outcome[COMPENSATOR_NAME_MAX];
    double v;
    for (const char *p = text; p != NULL && *p != '\0';) {
        const char *nl = strchr(p, '\n');
        size_t len = nl != NULL ? (size_t)(nl - p) : strlen(p);
        compensator_layer_t *l;
        if (sample_of(p, len, "layer_enabled", labels, sizeof labels, &v) && v == 1 &&
            label(labels, "layer", name, sizeof name) == 0 && name[0] != '\0' && st->nlayers < COMPENSATOR_LAYERS_MAX &&
            layer_named(st, name) == NULL) {
            l = &st->layers[st->nlayers++];
            memset(l, 0, sizeof *l);
            snprintf(l->name, sizeof l->name, "%s", name);
        } else if (sample_of(p, len, "last_run_timestamp_seconds", labels, sizeof labels, &v) &&
                   label(labels, "layer", name, sizeof name) == 0 && (l = layer_named(st, name)) != NULL) {
            l->last_run_ms = ms_of_seconds(v);
        } else if (sample_of(p, len, "last_run_duration_seconds", labels, sizeof labels, &v) &&
                   label(labels, "layer", name, sizeof name) == 0 && (l = layer_named(st, name)) != NULL) {
            l->duration_ms = v * 1000.0;
        } else if (sample_of(p, len, "last_run_outcome", labels, sizeof labels, &v) && v == 1 &&
                   label(labels, "layer", name, sizeof name) == 0 &&
                   label(labels, "outcome", outcome, sizeof outcome) == 0 && (l = layer_named(st, name)) != NULL) {
            snprintf(l->outcome, sizeof l->outcome, "%s", outcome);
        } else if (sample_of(p, len, "consecutive_failures", labels, sizeof labels, &v) &&
                   label(labels, "layer", name, sizeof name) == 0 && (l = layer_named(st, name)) != NULL) {
            l->consecutive_failures = count_of(v);
        } else if (sample_of(p, len, "alerts_active", labels, sizeof labels, &v) &&
                   label(labels, "alert", name, sizeof name) == 0 && st->nalerts < COMPENSATOR_ALERTS_MAX) {
            snprintf(st->alerts[st->nalerts].name, sizeof st->alerts[st->nalerts].name, "%s", name);
            st->alerts[st->nalerts++].active = count_of(v);
        }
        p = nl != NULL ? nl + 1 : NULL;
    }
}

/* The "layer: error" lines of /healthz into the failed layers. */
static void parse_health(compensator_status_t *st, const char *text)
{
    for (const char *p = text; p != NULL && *p != '\0';) {
        const char *nl = strchr(p, '\n');
        size_t len = nl != NULL ? (size_t)(nl - p) : strlen(p);
        const char *colon = memchr(p, ':', len);
        if (colon != NULL && (size_t)(colon - p) < COMPENSATOR_NAME_MAX) {
            char name[COMPENSATOR_NAME_MAX];
            snprintf(name, sizeof name, "%.*s", (int)(colon - p), p);
            compensator_layer_t *l = layer_named(st, name);
            if (l != NULL) {
                const char *e = colon + 1 + (colon[1] == ' ');
                snprintf(l->error, sizeof l->error, "%.*s", (int)(len - (size_t)(e - p)), e);
            }
        }
        p = nl != NULL ? nl + 1 : NULL;
    }
}

int compensator_status_parse(compensator_status_t *st, const char *metrics, const char *healthz)
{
    memset(st, 0, sizeof *st);
    st->configured = 1;
    parse_metrics(st, metrics);
    if (st->nlayers == 0)
        return -1;
    st->ok = 1;
    if (healthz != NULL)
        parse_health(st, healthz);
    return 0;
}

void compensator_status_read(const console_config_t *cfg, compensator_status_t *st)
{
    metrics_url_t url;
    buf_t body = BUF_INIT;
    int status = 0;

    memset(st, 0, sizeof *st);
    if (cfg->compensator_metrics == NULL)
        return;
    st->configured = 1;
    if (metrics_url_parse(cfg->compensator_metrics, &url, st->error, sizeof st->error) != 0 ||
        metrics_get(&url, url.path, COMPENSATOR_TIMEOUT_MS, &status, &body, st->error, sizeof st->error) != 0)
        goto out;
    if (status != 200) {
        snprintf(st->error, sizeof st->error, "%s answered HTTP %d", cfg->compensator_metrics, status);
        goto out;
    }
    if (compensator_status_parse(st, buf_cstr(&body), NULL) != 0) {
        snprintf(st->error, sizeof st->error, "%s names no enabled compensator layer: is it hourglass-compensator's?",
                 cfg->compensator_metrics);
        goto out;
    }
    for (size_t i = 0; i < st->nlayers; i++)
        if (strcmp(st->layers[i].outcome, "failed") == 0) {
            /* /healthz answers 503 with the errors when a layer failed */
            if (metrics_get(&url, "/healthz", COMPENSATOR_TIMEOUT_MS, &status, &body, st->error, sizeof st->error) == 0)
                parse_health(st, buf_cstr(&body));
            st->error[0] = '\0';
            break;
        }
out:
    buf_free(&body);
}

void compensator_status_json(const compensator_status_t *st, const char *url, json_t *j)
{
    json_object_open(j);
    json_kbool(j, "configured", st->configured);
    json_kbool(j, "ok", st->ok);
    json_kstr(j, "error", st->error[0] ? st->error : NULL);
    json_kstr(j, "url", url);
    json_key(j, "layers");
    json_array_open(j);
    for (size_t i = 0; i < st->nlayers; i++) {
        const compensator_layer_t *l = &st->layers[i];
        json_object_open(j);
        json_kstr(j, "layer", l->name);
        json_key(j, "last_run_ms");
        if (l->last_run_ms > 0)
            json_uint(j, l->last_run_ms);
        else
            json_null(j);
        json_key(j, "duration_ms");
        json_double(j, l->duration_ms);
        json_kstr(j, "outcome", l->outcome[0] ? l->outcome : NULL);
        json_kint(j, "consecutive_failures", l->consecutive_failures);
        json_kstr(j, "error", l->error[0] ? l->error : NULL);
        json_object_close(j);
    }
    json_array_close(j);
    json_key(j, "alerts");
    json_array_open(j);
    for (size_t i = 0; i < st->nalerts; i++) {
        json_object_open(j);
        json_kstr(j, "alert", st->alerts[i].name);
        json_kint(j, "active", st->alerts[i].active);
        json_object_close(j);
    }
    json_array_close(j);
    json_object_close(j);
}
