/*
 * cli/args.h — hourglass-cli's argument parsing per command: options
 * (--name value, --name=value, valueless flags) and positionals; the
 * grammars of numbers and message ids. Durations go through base/units.h.
 * Single-threaded.
 */
#ifndef HG_CLI_ARGS_H
#define HG_CLI_ARGS_H

#include <stdint.h>

#include "cli/cli.h"

/* One option a command accepts; a table of them ends with a NULL name. */
typedef struct cli_opt {
    const char *name; /* "--count" */
    int takes_value;
    const char *value; /* out: the value, or "" for a flag given */
} cli_opt_t;

/* Split argv[1..argc) into options (per specs, NULL-name terminated; specs
 * may be NULL for none) and positionals (at most maxpos, stored in pos[]).
 * "--help" anywhere → the command's help on stdout, exit 0 (returns -1 with
 * *exit_code 0). An unknown option, a repeated one, a missing or unwanted
 * value or too many positionals print a usage error. Returns the number of
 * positionals, or -1 with *exit_code set. */
int cli_parse_args(const command_t *cmd, int argc, char **argv, cli_opt_t *specs, char **pos, int maxpos,
                   int *exit_code);

/* A non-negative decimal integer (digits only). Returns 0 with *out, or -1. */
int cli_parse_u64(const char *s, uint64_t *out);

/* A message id: exactly 16 hex digits, as the broker wants them. Returns 0 with *out, or -1. */
int cli_parse_id(const char *s, uint64_t *out);

#endif
