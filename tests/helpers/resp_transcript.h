/*
 * tests/helpers/resp_transcript.h — a text rendering of parsed RESP commands,
 * shared by the RESP unit suite and the libFuzzer target.
 *
 * Header-only (static inline) so the fuzz target still builds from its own
 * source and the proto/ files alone (see tests/fuzz/fuzz_resp.c).
 */
#ifndef HG_TESTS_RESP_TRANSCRIPT_H
#define HG_TESTS_RESP_TRANSCRIPT_H

#include <stdio.h>

#include "proto/request.h"

/* Append a rendering of cmd to t: "<argc><i|m>|<len>:<bytes>|...\n" (i for an
 * inline command, m for a multibulk one). Two command streams are the same
 * when their transcripts are equal bytes. */
static inline void resp_transcript_add(buf_t *t, const resp_command_t *cmd)
{
    char head[48];
    int n = snprintf(head, sizeof head, "%zu%c", cmd->argc, cmd->is_inline ? 'i' : 'm');
    buf_append(t, head, (size_t)n);
    for (size_t i = 0; i < cmd->argc; i++) {
        n = snprintf(head, sizeof head, "|%zu:", cmd->argv[i].len);
        buf_append(t, head, (size_t)n);
        buf_append(t, cmd->argv[i].ptr, cmd->argv[i].len);
    }
    buf_append(t, "\n", 1);
}

#endif
