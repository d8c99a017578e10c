/*
 * levels/clog_finisher.h — one call at a time on a thread of its own: the
 * commit log's checkpoint finish (levels/clog_redo.h redo_checkpoint_async),
 * whose fdatasyncs of every CQ and slot file written since the last
 * checkpoint would otherwise hold the store's owner thread.
 *
 * States: IDLE → RUNNING (the owner started the call) → DONE (the call
 * returned; its rc and error line wait) → IDLE (the owner took them). Only
 * the owner starts and takes; only the thread moves RUNNING → DONE.
 *
 * Threads: every function but the call itself and its done hook
 * (clog_finisher_on_done) is the owner's. Errors: one
 * line in err[errlen].
 */
#ifndef HG_LEVELS_CLOG_FINISHER_H
#define HG_LEVELS_CLOG_FINISHER_H

#include <stddef.h>

typedef struct clog_finisher clog_finisher_t;

/* The call the thread makes: 0, or -1 with err. */
typedef int (*clog_finisher_fn)(void *arg, char *err, size_t errlen);

enum clog_finisher_state {
    CLOG_FINISHER_IDLE,
    CLOG_FINISHER_RUNNING,
    CLOG_FINISHER_DONE
};

/* Start the thread, idle, for fn(arg). NULL with err when the thread cannot
 * be made. */
clog_finisher_t *clog_finisher_new(clog_finisher_fn fn, void *arg, char *err, size_t errlen);

/* What the thread calls after each call, once its outcome waits (DONE) —
 * without the finisher's lock, so done may take its own owner's lock, but
 * must not call into f: it only tells the owner to take the outcome
 * (clog_finisher_take). NULL: nothing is called. Owner thread; takes effect
 * from the next call's end. */
typedef void (*clog_finisher_done_fn)(void *arg);
void clog_finisher_on_done(clog_finisher_t *f, clog_finisher_done_fn done, void *arg);

/* IDLE → RUNNING: the thread makes the call once. -1 unless idle. */
int clog_finisher_start(clog_finisher_t *f);

enum clog_finisher_state clog_finisher_state(clog_finisher_t *f);

/* The call's outcome, once: *had = 1 and its rc (0, or -1 with its err) when
 * it is done — with wait, after waiting while it runs; *had = 0 and 0 when
 * idle, or running and not wait. DONE → IDLE. */
int clog_finisher_take(clog_finisher_t *f, int wait, int *had, char *err, size_t errlen);

/* Wait for a running call (its outcome dropped), stop and join the thread,
 * free f. NULL is a no-op. */
void clog_finisher_free(clog_finisher_t *f);

#endif
