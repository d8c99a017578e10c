/*
 * levels/clog_derived.h — reading a batch's derived-writes record (the
 * layout is atop levels/clog_redo.c, which writes it): one operation at a
 * time, bounds-checked, so the redo's apply and the readers' overlay of held
 * writes (levels/clog_overlay.h) decode it one way; a held batch's record
 * is decoded once (derived_decode) for both. Private to levels/.
 */
#ifndef HG_LEVELS_CLOG_DERIVED_H
#define HG_LEVELS_CLOG_DERIVED_H

#include "levels/cq.h"
#include "levels/slot.h"

#include <stddef.h>
#include <stdint.h>

#define DERIVED_MAGIC "HGRD"
#define DERIVED_HEAD  8 /* the magic and the op count */

/* One operation, as derived_next decodes it: tag, then the fields of its tag
 * (one union: an op holds one tag's fields, 48 bytes). */
typedef struct derived_op {
    char tag; /* 'Q' CQ entry, 'H' head move, 'S' where-slot, 'P' LevelDB put, 'D' LevelDB delete */
    union {
        struct {
            uint32_t queue;   /* 'Q', 'H' */
            uint64_t index;   /* 'Q': the entry's index; 'H': the new head */
            cq_entry_t entry; /* 'Q' */
        };
        struct {
            uint64_t base;    /* 'S': the segment's base */
            uint64_t ordinal; /* 'S' */
            slot_t slot;      /* 'S' */
        };
        struct {
            const char *key;     /* 'P', 'D': inside the record */
            const char *val;     /* 'P' ('D': NULL) */
            uint32_t klen, vlen; /* 'P', 'D' (vlen 0) */
        };
    };
} derived_op_t;

/* Check the record's head: its op count, or -1 when p[0..n) does not start
 * with the magic. */
int64_t derived_ops(const char *p, size_t n);

/* Decode the operation at *at (start at DERIVED_HEAD) into *op and move *at
 * past it: 1; 0 when it is unknown or cut by the record's end (*at is where
 * it starts). Only tag and the fields of its tag are set (a 'D' has val NULL
 * and vlen 0); the others keep what they held: read no other. */
int derived_next(const char *p, size_t n, size_t *at, derived_op_t *op);

/* Decode the whole record p[0..n) once into *ops, a new array the caller
 * free()s (NULL when no op decodes): the number of ops, in record order, as
 * derived_next gives them — every op the head counts, or those before the
 * first that does not decode. *whole is 1 when the head, its count and the
 * ops ending exactly at n all check (what levels/clog_redo_files.c's apply
 * of the record checks), else 0. Keys and values point into p. */
size_t derived_decode(const char *p, size_t n, derived_op_t **ops, int *whole);

/* derived_decode into a reused array: *ops holds room for *cap ops (NULL
 * and 0 for none yet). An array with room for the record's ops is used as
 * it is, never freed or moved; one without is free()d and replaced by a new
 * one (its ops not kept, *cap updated), which stays the caller's to free(),
 * also when no op decodes. Returns what derived_decode returns, sets *whole
 * alike. */
size_t derived_decode_into(const char *p, size_t n, derived_op_t **ops, size_t *cap, int *whole);

#endif
