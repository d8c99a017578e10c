/*
 * broker/fairq.h — the fair-share queues of the storage thread: the
 * submitted jobs sorted into one FIFO per connection, the connections with
 * queued jobs in a ring served round-robin (writer_serve.c's
 * writer_fair_serve runs one job of each connection per turn, in each
 * connection's own order; see writer_serve.c's design comment for the
 * listing budget).
 *
 * Contract: a job is in the queues from fairq_push (or fairq_put_back) to
 * fairq_take or fairq_cancel; it is linked through job_t.next/prev
 * (joblist.h), and the queues own it while it is queued. A connection's
 * queue exists while it holds a job: the caller serving queue q calls
 * fairq_advance once it is done with q for the turn, which moves the ring
 * on and frees q when q is empty. ring is the queue
 * served next (NULL: nothing queued); queued counts the jobs in all queues.
 * Storage thread only; no locking.
 */
#ifndef HG_BROKER_FAIRQ_H
#define HG_BROKER_FAIRQ_H

#include "base/map.h"
#include "broker/joblist.h"
#include "broker/writer.h"

#include <stddef.h>
#include <stdint.h>

/* The queued jobs of one connection. */
typedef struct fairq_queue {
    uint64_t conn_id;
    job_list_t jobs;
    struct fairq_queue *ring_next, *ring_prev; /* the ring of connections with queued jobs */
} fairq_queue_t;

typedef struct fairq {
    map_t queues;        /* conn id (8 bytes) -> fairq_queue_t */
    fairq_queue_t *ring; /* the queue served next; NULL: nothing queued */
    size_t queued;       /* jobs in those queues */
} fairq_t;

/* No queues. */
void fairq_init(fairq_t *fq);

/* Free the queues' own memory; the jobs still queued are not freed (empty
 * once the storage thread ran: stopping runs every queued job). */
void fairq_free(fairq_t *fq);

/* Queue j at the tail of its connection's queue (a new connection joins
 * the ring last in the round that starts at ring). */
void fairq_push(fairq_t *fq, job_t *j);

/* The connections with queued jobs (the turns of one round). */
size_t fairq_conns(const fairq_t *fq);

/* Take the head job of q (q must not be empty). */
job_t *fairq_take(fairq_t *fq, fairq_queue_t *q);

/* Put j back at the head of q (it stepped: JOB_AGAIN). */
void fairq_put_back(fairq_t *fq, fairq_queue_t *q, job_t *j);

/* q had its turn: the next turn goes to next (q's ring_next, noted before
 * serving q), and q is freed when it is empty. */
void fairq_advance(fairq_t *fq, fairq_queue_t *q, fairq_queue_t *next);

/* A listing builds a reply of up to reply_estimate bytes (writer.h). */
int fairq_is_listing(const job_t *j);

/* A connection closed: take its queued droppable jobs (those that change
 * nothing when run, and PULL … BLOCKs not run yet) out of the queues, in
 * order, onto dropped (the caller frees them). Its other jobs stay queued. */
void fairq_cancel(fairq_t *fq, uint64_t conn_id, job_list_t *dropped);

#endif
