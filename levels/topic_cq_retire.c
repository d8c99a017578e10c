/*
 * levels/topic_cq_retire.c — a deleted topic's CQ files (design-commitlog.md
 * "A deleted topic's CQ files (s49)"). store_topic_delete retires the topic's
 * queue: a deferred delete (store_deferred.c) due at the first checkpoint
 * whose B lies past the log's end at that moment (the batch holding the
 * delete ends past it), which closes the queue in the redo and deletes its
 * files (at a clean close, after redo_close, whose checkpoint covers every
 * delete). Not before: an open's redo from an older checkpoint replays the
 * writes to the queue with the bounds LevelDB gives it, and after a power cut
 * LevelDB may still hold the topic's record, alive (it is not synced between
 * checkpoints): cq_open then needs every file under the tail. Past that
 * checkpoint no batch the redo replays writes the queue: the topic was
 * empty, and its number is never drawn again (a topic made again with the
 * name draws a new one, with files of its own).
 *
 * The open deletes every file of a topic queue that was drawn (below
 * 'M' "topic-queue-next") and that no topic names: what a crash left between
 * that checkpoint and the delete of the files, and the files of topics
 * deleted by a broker before this was built — after its own redo and its
 * checkpoint at the log's end. A queue number at or past the counter is not
 * touched: a topic made in a batch the crash lost draws it again and finds
 * its first file (cq_make_first_file).
 *
 * Threading: the store's owner thread.
 */
#include "levels/store_internal.h"
#include "base/err.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

void topic_cq_retire(store_t *s, topic_state_t *t)
{
    map_del(&s->topic_queues, (const char *)&t->queue, sizeof t->queue);
    if (s->redo == NULL) {
        return;
    }
    store_deferred_add(s, STORE_DEFERRED_TOPIC_CQ, t->queue, clog_end(redo_log(s->redo)) + 1);
}

/* A topic queue drawn that no topic names. */
static int queue_dead(void *ctx, uint32_t queue, uint64_t first)
{
    (void)first; /* every file of the queue */
    store_t *s = ctx;
    return queue >= STORE_TOPIC_QUEUE_FIRST && queue < s->topic_queue_next && topic_cq_topic(s, queue) == NULL;
}

int topic_cq_sweep_dead(store_t *s, char *err, size_t errlen)
{
    if (s->redo == NULL || s->topic_queue_next <= STORE_TOPIC_QUEUE_FIRST) {
        return 0;
    }
    uint64_t removed = 0;
    if (redo_queues_remove(s->redo, queue_dead, s, &removed, err, errlen) != 0) {
        return err_prefix(err, errlen, "deleting the CQ files of deleted topics in %s", s->path);
    }
    if (removed > 0) {
        size_t n = strlen(s->open_note);
        snprintf(s->open_note + n, sizeof s->open_note - n, "%sdeleted %" PRIu64 " CQ file%s of deleted topics",
                 n > 0 ? "; " : "", removed, removed == 1 ? "" : "s");
    }
    return 0;
}
