/*
 * broker/joblist.h — a FIFO of jobs linked through job_t.next/prev (the
 * links writer.h gives to "whoever holds the job"), with its length: the
 * storage thread's done lists and the fair-share queues (fairq.h). The
 * list owns no job; a job is in one list at a time. No locking.
 */
#ifndef HG_BROKER_JOBLIST_H
#define HG_BROKER_JOBLIST_H

#include "broker/writer.h"

#include <stddef.h>

typedef struct job_list {
    job_t *head, *tail;
    size_t n;
} job_list_t;

static inline void job_list_push_front(job_list_t *l, job_t *j)
{
    j->prev = NULL;
    j->next = l->head;
    if (l->head) {
        l->head->prev = j;
    } else {
        l->tail = j;
    }
    l->head = j;
    l->n++;
}

static inline void job_list_push(job_list_t *l, job_t *j)
{
    j->next = NULL;
    j->prev = l->tail;
    if (l->tail) {
        l->tail->next = j;
    } else {
        l->head = j;
    }
    l->tail = j;
    l->n++;
}

/* The head of l, taken out (l must not be empty). */
static inline job_t *job_list_pop(job_list_t *l)
{
    job_t *j = l->head;
    l->head = j->next;
    if (l->head == NULL) {
        l->tail = NULL;
    }
    l->n--;
    j->next = NULL;
    return j;
}

#endif
