/*
 * broker/fairq.c — the fair-share queues (contract: fairq.h): a map from
 * connection id to that connection's FIFO of jobs (joblist.h), and a
 * circular doubly linked ring through the queues that hold jobs, whose
 * entry point (fq->ring) is the queue served next.
 *
 * Invariants: a queue is in the map iff it is in the ring iff it holds a
 * job, except between fairq_take emptying it and the fairq_advance (or
 * fairq_cancel) that frees it; fq->queued is the sum of the queues'
 * lengths. Storage thread only.
 */
#include "broker/fairq.h"
#include "base/alloc.h"

#include <stdlib.h>

void fairq_init(fairq_t *fq)
{
    map_init(&fq->queues);
    fq->ring = NULL;
    fq->queued = 0;
}

void fairq_free(fairq_t *fq)
{
    map_free(&fq->queues, free);
}

static void ring_insert(fairq_t *fq, fairq_queue_t *q)
{
    if (fq->ring == NULL) {
        q->ring_next = q->ring_prev = q;
        fq->ring = q;
        return;
    }
    q->ring_next = fq->ring; /* last in the round that starts at fq->ring */
    q->ring_prev = fq->ring->ring_prev;
    q->ring_prev->ring_next = q;
    fq->ring->ring_prev = q;
}

/* Take an empty q out of the ring and free it. */
static void fair_queue_drop(fairq_t *fq, fairq_queue_t *q)
{
    if (q->ring_next == q) {
        fq->ring = NULL;
    } else {
        q->ring_prev->ring_next = q->ring_next;
        q->ring_next->ring_prev = q->ring_prev;
        if (fq->ring == q) {
            fq->ring = q->ring_next;
        }
    }
    map_del(&fq->queues, &q->conn_id, sizeof q->conn_id);
    free(q);
}

int fairq_is_listing(const job_t *j)
{
    return j->reply_estimate > 0;
}

/* Its connection closed and nobody will read its reply: it may be dropped
 * unanswered when running it changes nothing, or when it is a PULL … BLOCK
 * not run yet — a blocked client that leaves gets nothing leased, whether
 * its PULL had parked (writer_cancel_parked, writer_wake.c) or was still
 * queued behind other work (the loop counts it blocked from the moment it is
 * submitted). */
static int droppable(const job_t *j)
{
    return (j->reads_only || j->block_set) && j->audit == NULL && j->complete == NULL;
}

void fairq_cancel(fairq_t *fq, uint64_t conn_id, job_list_t *dropped)
{
    fairq_queue_t *q = map_get(&fq->queues, &conn_id, sizeof conn_id);
    if (q == NULL) {
        return;
    }
    job_list_t keep = { 0 };
    while (q->jobs.head != NULL) {
        job_t *j = job_list_pop(&q->jobs);
        if (droppable(j)) {
            fq->queued--;
            job_list_push(dropped, j);
        } else {
            job_list_push(&keep, j);
        }
    }
    q->jobs = keep;
    if (q->jobs.head == NULL) {
        fair_queue_drop(fq, q);
    }
}

void fairq_push(fairq_t *fq, job_t *j)
{
    fairq_queue_t *q = map_get(&fq->queues, &j->conn_id, sizeof j->conn_id);
    if (q == NULL) {
        q = xcalloc(1, sizeof *q);
        q->conn_id = j->conn_id;
        map_put(&fq->queues, &q->conn_id, sizeof q->conn_id, q);
        ring_insert(fq, q);
    }
    job_list_push(&q->jobs, j);
    fq->queued++;
}

size_t fairq_conns(const fairq_t *fq)
{
    return map_count(&fq->queues);
}

job_t *fairq_take(fairq_t *fq, fairq_queue_t *q)
{
    fq->queued--;
    return job_list_pop(&q->jobs);
}

void fairq_put_back(fairq_t *fq, fairq_queue_t *q, job_t *j)
{
    job_list_push_front(&q->jobs, j);
    fq->queued++;
}

void fairq_advance(fairq_t *fq, fairq_queue_t *q, fairq_queue_t *next)
{
    fq->ring = next; /* the next turn goes to the next connection */
    if (q->jobs.head == NULL) {
        fair_queue_drop(fq, q);
    }
}
