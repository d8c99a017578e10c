/*
 * tests/fuzz/fuzz_check.h — CHECK(cond), the property check of every libFuzzer
 * target here: when cond is false it names the file, the line and the
 * condition on stderr and aborts, which libFuzzer reports as a crash and saves
 * the input that caused it (tests/fuzz/run).
 */
#ifndef HG_TESTS_FUZZ_CHECK_H
#define HG_TESTS_FUZZ_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#define CHECK(cond)                                                                          \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            fprintf(stderr, "%s: check failed at line %d: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                                         \
        }                                                                                    \
    } while (0)

#endif
