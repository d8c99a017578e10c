/*
 * broker/parked.h — the parked jobs of the storage thread (PULL … BLOCK
 * waiting for messages), indexed three ways so that no iteration walks
 * them all: by wake topic (the jobs a topic's new ready messages may let
 * run), by connection (what a closed connection leaves), and by deadline
 * (a min-heap: what expires next). Jobs without a wake topic sit in one
 * list of their own ("any"), asked after every iteration.
 *
 * Contract: a job is in the set from parked_add to parked_remove, linked
 * through its parked-private fields (job_t in writer.h: deadline_mono,
 * parked, topic_next/prev, conn_next/prev, heap_pos); the set owns no job.
 * A list returned by parked_of_topic / parked_of_conn is freed when its
 * last job is removed, so a caller walking one takes the next pointer (or
 * notes that the job is the last) before removing. The maps' values are
 * parked_list_t; a caller may iterate them (map_next) and remove the job
 * just reached. Storage thread only; no locking.
 */
#ifndef HG_BROKER_PARKED_H
#define HG_BROKER_PARKED_H

#include "base/map.h"
#include "broker/writer.h"

#include <stddef.h>
#include <stdint.h>

typedef struct parked_list {
    job_t *head, *tail;
} parked_list_t;

typedef struct parked_set {
    map_t topics;      /* wake_topic -> parked_list_t (topic_next/prev) */
    parked_list_t any; /* jobs without a wake_topic (topic_next/prev) */
    map_t conns;       /* conn id (8 bytes) -> parked_list_t (conn_next/prev) */
    job_t **deadlines; /* min-heap by deadline_mono of the jobs that have one (heap_pos) */
    size_t n_deadlines, cap_deadlines;
    size_t count; /* jobs in the set */
} parked_set_t;

/* An empty set. */
void parked_init(parked_set_t *p);

/* Free the set's own memory (lists, heap); the jobs still in it are not
 * freed (the caller expires them first). */
void parked_free(parked_set_t *p);

/* Park j: its deadline is now_mono + j->block_ms (none when block_ms is 0). */
void parked_add(parked_set_t *p, job_t *j, uint64_t now_mono);

/* Take j out of every index (it must be parked). */
void parked_remove(parked_set_t *p, job_t *j);

/* The parked jobs of a wake topic, of a connection; NULL when none. */
parked_list_t *parked_of_topic(parked_set_t *p, const char *topic, size_t len);
parked_list_t *parked_of_conn(parked_set_t *p, uint64_t conn_id);

/* The parked job whose deadline comes first, or NULL when none has one. */
job_t *parked_next_deadline(const parked_set_t *p);

#endif
