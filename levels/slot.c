/*
 * levels/slot.c — a segment's where-slot file (contract in slot.h): the slot
 * codec over a growing fixfile (levels/fixfile.h), which does the positions,
 * the append buffer and the size checks. Integers big-endian through
 * levels/keys.h's helpers, like every integer the store writes.
 */
#include "levels/slot.h"
#include "base/alloc.h"
#include "base/err.h"
#include "levels/fixfile.h"
#include "levels/keys.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct slot_file {
    fixfile_t *f;
};

void slot_file_name(uint64_t base, char *name, size_t len)
{
    snprintf(name, len, "slot-%016" PRIx64 ".w", base);
}

int slot_file_remove(const char *dir, uint64_t base, char *err, size_t errlen)
{
    char name[64], path[PATH_MAX];
    slot_file_name(base, name, sizeof name);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (unlink(path) != 0 && errno != ENOENT) {
        return err_set(err, errlen, "%s: cannot delete it: %s", path, strerror(errno));
    }
    return 0;
}

int slot_file_open(const char *dir, uint64_t base, int create, slot_file_t **out, char *err, size_t errlen)
{
    *out = NULL;
    char name[64], path[PATH_MAX];
    slot_file_name(base, name, sizeof name);
    int n = snprintf(path, sizeof path, "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= sizeof path) {
        return err_set(err, errlen, "%s: directory path too long", name);
    }
    fixfile_t *f;
    int rc = create ? fixfile_create(path, SLOT_BYTES, 0, SLOT_BUFFER_SLOTS, &f, err, errlen)
                    : fixfile_open(path, SLOT_BYTES, 0, 0, SLOT_BUFFER_SLOTS, &f, err, errlen);
    if (rc != 0) {
        return -1;
    }
    slot_file_t *sf = xmalloc(sizeof *sf);
    sf->f = f;
    *out = sf;
    return 0;
}

/* Out of line: inlined into slot_put, gcc 12 -O2 left the eight-byte stores
 * of be64_put unmerged (~80 instructions a slot, callgrind); alone, each field
 * is one load, one byte swap, one store. */
static __attribute__((noinline)) void slot_encode(char *p, const slot_t *s)
{
    be64_put(p, s->id);
    be32_put(p + 8, s->queue);
    be32_put(p + 12, s->flags);
    be64_put(p + 16, s->cq_index);
}

int slot_put(slot_file_t *f, uint64_t ordinal, const slot_t *s, char *err, size_t errlen)
{
    uint64_t count = fixfile_end(f->f);
    if (s->id == 0) {
        return err_set(err, errlen, "%s: slot %" PRIu64 ": id 0 is not a message", fixfile_path(f->f), ordinal);
    }
    if (ordinal > count) {
        return err_set(err, errlen, "%s: slot %" PRIu64 " is past the end (%" PRIu64 " slots; ordinals are dense)",
                       fixfile_path(f->f), ordinal, count);
    }
    char rec[SLOT_BYTES];
    slot_encode(rec, s);
    return ordinal == count ? fixfile_append(f->f, rec, err, errlen) : fixfile_write(f->f, ordinal, rec, err, errlen);
}

int slot_get(slot_file_t *f, uint64_t ordinal, slot_t *out, char *err, size_t errlen)
{
    char rec[SLOT_BYTES];
    if (fixfile_read(f->f, ordinal, 1, rec, err, errlen) != 0) {
        return -1;
    }
    out->id = be64_get(rec);
    out->queue = be32_get(rec + 8);
    out->flags = be32_get(rec + 12);
    out->cq_index = be64_get(rec + 16);
    if (out->id == 0) {
        return err_set(err, errlen, "%s: slot %" PRIu64 " is zero: never written", fixfile_path(f->f), ordinal);
    }
    return 0;
}

/* The largest run slot_read_run reads with one fixfile_read. */
#define SLOT_RUN_MAX 64

int slot_read_run(slot_file_t *f, uint64_t ordinal, size_t n, slot_t *out, char *err, size_t errlen)
{
    char buf[SLOT_RUN_MAX * SLOT_BYTES];
    while (n > 0) {
        size_t run = n < SLOT_RUN_MAX ? n : SLOT_RUN_MAX;
        if (fixfile_read(f->f, ordinal, run, buf, err, errlen) != 0) {
            return -1;
        }
        for (size_t i = 0; i < run; i++) {
            const char *rec = buf + i * SLOT_BYTES;
            out[i].id = be64_get(rec);
            out[i].queue = be32_get(rec + 8);
            out[i].flags = be32_get(rec + 12);
            out[i].cq_index = be64_get(rec + 16);
        }
        out += run;
        ordinal += run;
        n -= run;
    }
    return 0;
}

int slot_flush(slot_file_t *f, char *err, size_t errlen)
{
    return fixfile_flush(f->f, err, errlen);
}

int slot_sync(slot_file_t *f, char *err, size_t errlen)
{
    return fixfile_sync(f->f, err, errlen);
}

int slot_sync_handoff(slot_file_t *f, int all, fixfile_syncset_t *s, char *err, size_t errlen)
{
    return fixfile_sync_handoff(f->f, all, s, err, errlen);
}

int slot_file_close(slot_file_t *f, char *err, size_t errlen)
{
    if (f == NULL) {
        return 0;
    }
    int rc = fixfile_close(f->f, err, errlen);
    free(f);
    return rc;
}

uint64_t slot_count(const slot_file_t *f)
{
    return fixfile_end(f->f);
}
