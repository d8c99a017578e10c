/*
 * console/history.c — the overview's history ring, consolidated to at most
 * HISTORY_POINTS_MAX points (contract: history.h). No thread of its own:
 * the sampler's lock covers every call.
 */
#include "console/history.h"

#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"

void history_init(history_t *h, size_t samples, size_t max_points)
{
    memset(h, 0, sizeof *h);
    if (samples == 0)
        samples = 1;
    if (max_points == 0)
        max_points = 1;
    h->step = (samples + max_points - 1) / max_points;
    h->cap = (samples + h->step - 1) / h->step;
    h->ring = xcalloc(h->cap, sizeof *h->ring);
}

void history_free(history_t *h)
{
    free(h->ring);
    h->ring = NULL;
}

const history_sample_t *history_last(const history_t *h)
{
    return h->count > 0 ? &h->last : NULL;
}

/* The step from prev to x into p: each counter's increase and the time it
 * took, when both samples had the broker's answer and the counter did not
 * go down (a broker restart). */
static void add_step(history_point_t *p, const history_sample_t *prev, const history_sample_t *x)
{
    if (prev == NULL || !prev->broker_ok || !x->broker_ok || x->t_ms <= prev->t_ms)
        return;
    const uint64_t now[HISTORY_RATES] = { x->sends, x->deliveries, x->acks };
    const uint64_t before[HISTORY_RATES] = { prev->sends, prev->deliveries, prev->acks };
    for (int r = 0; r < HISTORY_RATES; r++)
        if (now[r] >= before[r]) {
            p->delta[r] += now[r] - before[r];
            p->step_ms[r] += x->t_ms - prev->t_ms;
        }
}

void history_push(history_t *h, const history_sample_t *x)
{
    const history_sample_t *prev = history_last(h);
    history_point_t *p = h->count > 0 ? &h->ring[h->head] : NULL;
    if (p == NULL || p->samples == h->step) {
        h->head = h->count > 0 ? (h->head + 1) % h->cap : 0;
        if (h->count < h->cap)
            h->count++;
        p = &h->ring[h->head];
        memset(p, 0, sizeof *p);
        p->overdue = -1;
    }
    add_step(p, prev, x);
    p->t_ms = x->t_ms;
    p->samples++;
    if (x->broker_ok) {
        if (!p->lateness_known || x->lateness_p50_ms > p->lateness_p50_ms)
            p->lateness_p50_ms = x->lateness_p50_ms;
        if (!p->lateness_known || x->lateness_p99_ms > p->lateness_p99_ms)
            p->lateness_p99_ms = x->lateness_p99_ms;
        p->lateness_known = 1;
    }
    if (x->overdue > p->overdue)
        p->overdue = x->overdue;
    h->last = *x;
}

static void json_rate(json_t *j, const char *key, const history_point_t *p, int r)
{
    json_key(j, key);
    if (p->step_ms[r] == 0)
        json_null(j);
    else
        json_double(j, (double)p->delta[r] * 1000.0 / (double)p->step_ms[r]);
}

void history_json(const history_t *h, json_t *j)
{
    json_array_open(j);
    for (size_t i = 0; i < h->count; i++) {
        const history_point_t *p = &h->ring[(h->head + 1 + h->cap - h->count + i) % h->cap];
        json_object_open(j);
        json_kuint(j, "t_ms", p->t_ms);
        json_rate(j, "sends_per_s", p, HISTORY_SENDS);
        json_rate(j, "deliveries_per_s", p, HISTORY_DELIVERIES);
        json_rate(j, "acks_per_s", p, HISTORY_ACKS);
        json_key(j, "lateness_p50_ms");
        if (p->lateness_known)
            json_double(j, p->lateness_p50_ms);
        else
            json_null(j);
        json_key(j, "lateness_p99_ms");
        if (p->lateness_known)
            json_double(j, p->lateness_p99_ms);
        else
            json_null(j);
        json_key(j, "overdue");
        if (p->overdue >= 0)
            json_int(j, p->overdue);
        else
            json_null(j);
        json_object_close(j);
    }
    json_array_close(j);
}
