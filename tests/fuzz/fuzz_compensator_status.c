/*
 * tests/fuzz/fuzz_compensator_status.c — libFuzzer target: the console's
 * reader of hourglass-compensator's /metrics and /healthz text
 * (console/compensator_status.c), whatever the process at the configured
 * compensator-metrics URL sends back.
 *
 * The input is the /metrics text, then optionally a NUL byte and the
 * /healthz text. Parsing must stay within the text and the fixed tables
 * (at most COMPENSATOR_LAYERS_MAX layers, COMPENSATOR_ALERTS_MAX alerts,
 * every name NUL-terminated in its field), and the overview's JSON of the
 * result must be written. Any value a sample carries (NaN, infinities,
 * 1e300, negatives) must convert without undefined behaviour
 * (UndefinedBehaviorSanitizer). A failed check calls abort(), which
 * libFuzzer reports as a crash.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#include "console/console.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#include "tests/fuzz/fuzz_check.h"

#define TERMINATED(field) (memchr((field), '\0', sizeof(field)) != NULL)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* an allocation of exactly the two strings, so a read past a NUL is ASan's */
    char *text = malloc(size + 1);
    CHECK(text != NULL);
    memcpy(text, data, size);
    text[size] = '\0';
    size_t mlen = strlen(text);
    const char *healthz = mlen < size ? text + mlen + 1 : NULL;

    compensator_status_t st;
    if (compensator_status_parse(&st, text, healthz) == 0) {
        CHECK(st.ok && st.nlayers >= 1);
    } else {
        CHECK(!st.ok && st.nlayers == 0);
    }
    CHECK(st.nlayers <= COMPENSATOR_LAYERS_MAX && st.nalerts <= COMPENSATOR_ALERTS_MAX);
    for (size_t i = 0; i < st.nlayers; i++) {
        const compensator_layer_t *l = &st.layers[i];
        CHECK(TERMINATED(l->name) && TERMINATED(l->outcome) && TERMINATED(l->error));
        CHECK(l->name[0] != '\0');
    }
    for (size_t i = 0; i < st.nalerts; i++) {
        CHECK(TERMINATED(st.alerts[i].name));
    }
    buf_t out = BUF_INIT;
    json_t j;
    json_init(&j, &out);
    compensator_status_json(&st, "http://127.0.0.1:9102/metrics", &j);
    CHECK(out.len > 0);
    buf_free(&out);
    free(text);
    return 0;
}
