/*
 * common/cfg.h — the config-table engine shared by the daemons.
 *
 * A program describes its keys in one table of cfg_key_t {name, type,
 * default, min, max, offset into its config struct, help}; the engine turns
 * the table into defaults, an INI file reader (libinih), `--key value` /
 * `--key=value` flags, --help text and the effective configuration
 * (--check-config, CONFIG GET). Precedence: defaults < file < flags.
 * Cross-key checks stay in each program (its *_validate).
 *
 * Value syntax by type (values are trimmed of surrounding blanks):
 *   CFG_STRING    as written (char *, owned by the struct; NULL default: unset)
 *   CFG_BOOL      yes/no, true/false, on/off, 1/0 (int 1 / 0)
 *   CFG_INT       decimal digits, no sign (long long; an unsigned long long
 *                 field works too: values are never negative)
 *   CFG_SIZE      bytes, in base/units.h's grammar ("4mb", "64k", "1.5g";
 *                 a bare number is bytes), stored in bytes (long long)
 *   CFG_DURATION  base/units.h's grammar ("500ms", "2.5s", "72h"; "0" alone
 *                 is zero; a unit is required otherwise), stored in ms
 *                 (long long)
 *   CFG_DOUBLE    a decimal number (double)
 *   CFG_ENUM      one of the words "a|b|c" (int: the word's index)
 *   CFG_CUSTOM    the key's hook parses and stores the value
 * Numbers are checked against [min, max] (ms for durations, bytes for sizes).
 *
 * Errors name the key ("workers: '0' out of range 1..256"), the file and
 * line for the INI file ("c.conf:6: unknown key 'x' ..."), or the flag. A
 * key is set at most once in a file (a CFG_CUSTOM key may repeat); a flag
 * given twice takes its last value.
 * Everything runs on the main thread before other threads start, except
 * cfg_reload (SIGHUP), which builds a fresh struct on one thread at a time
 * and copies only the keys marked .reload into the running one.
 */
#ifndef HG_COMMON_CFG_H
#define HG_COMMON_CFG_H

#include <stddef.h>
#include <stdio.h>

typedef enum cfg_type {
    CFG_STRING,
    CFG_BOOL,
    CFG_INT,
    CFG_SIZE,
    CFG_DURATION,
    CFG_DOUBLE,
    CFG_ENUM,
    CFG_CUSTOM
} cfg_type_t;

/* Where a value comes from, in the order they are applied. */
typedef enum cfg_source {
    CFG_SOURCE_DEFAULT,
    CFG_SOURCE_FILE,
    CFG_SOURCE_FLAG
} cfg_source_t;

typedef struct cfg_key cfg_key_t;

/* CFG_CUSTOM: parse value and store it into conf. Other types: check the
 * (trimmed) text before the engine stores it. Returns 0, or -1 with
 * "key: problem" in err. */
typedef int (*cfg_hook_fn)(void *conf, const cfg_key_t *key, const char *value, cfg_source_t source, char *err,
                           size_t errlen);

/* CFG_CUSTOM: print the key's value as cfg_print_values does, one setting
 * per value (a repeatable key: one each, in order), each through
 * cfg_print_setting so that a long value reads back. Returns how many
 * values were not printable (cfg_print_setting's -1s), 0 when none. */
typedef int (*cfg_print_fn)(const void *conf, const cfg_key_t *key, FILE *out);

struct cfg_key {
    const char *name; /* = INI key = --flag (matched case-insensitively) */
    cfg_type_t type;
    const char *def;           /* default as text; NULL: unset (left zero) */
    long long min, max;        /* numeric types, in base units (bytes, ms) */
    size_t offset;             /* of the field in the program's config struct */
    const char *help;          /* one line for --help */
    const char *words;         /* CFG_ENUM: "a|b|c" */
    cfg_hook_fn hook;          /* see cfg_hook_fn; NULL: none */
    cfg_print_fn print;        /* CFG_CUSTOM: see cfg_print_fn; NULL: cfg_print_values leaves the key out */
    const char *hint;          /* --help's value placeholder; NULL: by type */
    const char *shown_default; /* --help's [default] when def does not say it */
    int required;              /* CFG_STRING: cfg_check_required refuses NULL or "" */
    int secret;                /* CFG_SECRET_*: what cfg_print_values keeps out of its print; 0: nothing */
    int reload;                /* 1: cfg_reload applies a new value at run time (SIGHUP); --help and
                                  --help-markdown add "(reloaded on SIGHUP)". Never a CFG_CUSTOM key. */
};

/* cfg_key_t.secret: */
#define CFG_SECRET_VALUE 1 /* a password: printed as "; name = (set, not shown)" */
#define CFG_SECRET_URI   2 /* a URI that may hold user:password@: printed without the password */

/* A table row's usual fields, as designated initializers so a row may add
 * the optional ones after it: {CFG_KEY("lease", CFG_DURATION, "30s", 1,
 * 86400000, offsetof(config_t, lease_ms), "help"), .hint = "TIME"}. */
#define CFG_KEY(name_, type_, def_, min_, max_, offset_, help_) \
    .name = (name_), .type = (type_), .def = (def_), .min = (min_), .max = (max_), .offset = (offset_), .help = (help_)

/* The exit status of every program for a usage or configuration error (a
 * bad flag, key, value or file): the same in all three daemons and the CLI. */
#define CFG_EXIT_CONFIG 2

/* Where each key's value came from, for a program's cross-key errors
 * (cfg_origin_text): a field of the program's config struct that the engine
 * fills when the table names it (cfg_table_t.origin_offset). Plain data: a
 * struct copy copies it, nothing to free. */
#define CFG_ORIGIN_KEYS 160 /* keys a table with origins may have */
typedef struct cfg_origin {
    char file[512];            /* the INI file read over the struct ("" when none) */
    int line[CFG_ORIGIN_KEYS]; /* per key, table order: > 0 the file's line that set it, -1 a flag, 0 its default */
} cfg_origin_t;

typedef struct cfg_table {
    const char *program; /* "hourglass-broker" */
    const cfg_key_t *keys;
    size_t count;
    const char *const *sections; /* INI [sections] accepted besides the top; NULL-terminated */
    const char *const *switches; /* extra valueless flags ("--once"); NULL-terminated or NULL */
    int positional_config;       /* 1: one positional argument is the config file */
    int strings_nonempty;        /* 1: an empty CFG_STRING value is an error */
    int track_origin;            /* 1: origin_offset names a cfg_origin_t field of the config struct */
    size_t origin_offset;
} cfg_table_t;

/* The key named name (case-insensitive), or NULL. */
const cfg_key_t *cfg_find(const cfg_table_t *t, const char *name);

/* Apply every default to conf (which the caller zeroed). A bad default is a
 * bug in the table: it is printed and the process aborts. */
void cfg_init(const cfg_table_t *t, void *conf);

/* Free the CFG_STRING fields of conf and set them to NULL (CFG_CUSTOM
 * fields are the program's to free). */
void cfg_free(const cfg_table_t *t, void *conf);

/* Set one key from text. Returns 0, or -1 with the key named in err
 * ("unknown key 'x'" when there is no such key). */
int cfg_set(const cfg_table_t *t, void *conf, const char *name, const char *value, cfg_source_t source, char *err,
            size_t errlen);

/* Read an INI file over conf. Keys may stand at the top or under the
 * table's sections; a value continues on indented lines (joined with a
 * blank); a line longer than libinih's limit is refused. Returns 0, or -1
 * with err naming the file, the line and the key. */
int cfg_load_file(const cfg_table_t *t, void *conf, const char *path, char *err, size_t errlen);

typedef enum cfg_action {
    CFG_RUN = 0, /* start the program */
    CFG_CHECK,   /* --check-config: validate, report, exit */
    CFG_HELP,    /* -h, --help */
    CFG_VERSION  /* -V, -v, --version */
} cfg_action_t;

typedef struct cfg_args {
    cfg_action_t action;
    const char *config_path; /* -c FILE, --config FILE, --config=FILE (argv's); NULL: none */
    unsigned switches;       /* bit i set: t->switches[i] was given */
} cfg_args_t;

/* Parse argv: the actions and --config first (wherever they stand), then
 * load the file, then apply every --key value / --key=value over it.
 * --help and --version return at once. --help-markdown prints the key
 * table (cfg_print_markdown) to stdout and exits the process (0, or 1 when
 * stdout fails): it is for scripts/gen-config-docs, which builds the
 * configuration reference of docs/operations.md from it. Returns 0 with *out, or -1 with err
 * ("unknown option '--x' (see --help)", "--port needs a value", or the
 * key's own error). The program validates afterwards. */
int cfg_parse_args(const cfg_table_t *t, void *conf, int argc, char **argv, cfg_args_t *out, char *err, size_t errlen);

/* Where key name's value came from, into buf: "FILE:LINE", "--name" (a
 * flag) or "default"; "" when the table tracks no origins (track_origin) or
 * has no such key. Returns buf. */
const char *cfg_origin_text(const cfg_table_t *t, const void *conf, const char *name, char *buf, size_t len);

/* Put where the keys of a cross-key error were set into err (which names
 * them, "a: 5s is below b 10s"): the place of the one set last — a flag
 * after the file, a later line after an earlier one — first, the other's
 * after: "c.conf:14: a: 5s is below b 10s (b: line 12)"; when a flag set
 * it last, both places after: "a: 5s is below b 10s (b: --b; a: c.conf:14)".
 * key_b NULL: one key's error found by the program's validation
 * ("c.conf:3: a: ..."; unchanged for a flag). err is left as it is when the
 * table tracks no origins or the keys were not set (defaults). */
void cfg_origin_prefix(const cfg_table_t *t, const void *conf, const char *key_a, const char *key_b, char *err,
                       size_t errlen);

/* The first key marked required whose value is unset or empty: -1 with
 * "key: required, not set" in err; 0 when there is none. */
int cfg_check_required(const cfg_table_t *t, const void *conf, char *err, size_t errlen);

/* The keys for --help: "  --name HINT   help [default]", one a line. */
void cfg_print_keys(const cfg_table_t *t, FILE *out);

/* The keys as a Markdown table, one row a key in table order:
 * | key | value | default | meaning | — the value is --help's placeholder,
 * the default as text (code) or the shown_default words, "(unset)" when
 * there is none; '|' escaped. */
void cfg_print_markdown(const cfg_table_t *t, FILE *out);

/* The effective value of key i as text into buf[len] ("" for unset strings
 * and CFG_CUSTOM keys); durations and sizes in their largest exact unit. */
void cfg_value_text(const cfg_table_t *t, const void *conf, size_t i, char *buf, size_t len);

/* One setting as INI lines that cfg_load_file reads back to value:
 * "name = value" (right after the '=' when the value begins with ';'), a
 * value longer than a line split at blanks onto indented continuation lines
 * where the reader's join puts the same blank back. A value no INI file can
 * hold (a line break, a blank at either end, a ';' after a blank, a run
 * longer than a line with no blank to split at) is written as a comment
 * naming the problem with the value C-escaped, then the line
 * "name (not printable, see the comment above)", which the reader refuses,
 * so the print never reads back as another value. Returns 0, or -1 for
 * such a value. */
int cfg_print_setting(FILE *out, const char *name, const char *value);

/* Where libinih's inline comment starts in s[0..len): the first ';' after a
 * blank (isspace, libinih's rule), or len when there is none. The reader
 * cuts a continuation line there as libinih cuts a key's own line, and the
 * printer refuses a value holding one: both by this one rule. */
size_t cfg_inline_comment_at(const char *s, size_t len);

/* Every key as settings (cfg_print_setting: an INI body that reads back):
 * a CFG_CUSTOM key through its print function (left out without one). What
 * must read back as not set is a comment line: an unset string (NULL; an
 * empty one prints "name = ", which reads back empty) as
 * "; name = (not set)", a secret key that is set (its value never shown) as
 * "; name = (set, not shown)" — so the print read back lacks the secret
 * rather than holding a wrong one. A CFG_SECRET_URI key holding
 * user:password@ prints the URI with user@ alone ("hourglass://u@host:7379",
 * common/uri_password.h) after the comment "; name: its password is not
 * shown (give it in password-file, or put it back)": read back, the user
 * has no password, which the programs refuse ("no password given for user
 * 'u'") rather than connect as another. Returns how many values were not
 * printable (0 when the print reads back whole). */
int cfg_print_values(const cfg_table_t *t, const void *conf, FILE *out);

/* --check-config's report of a valid configuration, to out, as an INI file
 * that reads back: "# PROGRAM VERSION: effective configuration", then
 * "[section]" when section is not NULL, every key (cfg_print_values), and
 * last the comment "; PROGRAM: configuration OK (FILE)" (without " (FILE)"
 * when config_path is NULL). When values were not printable, says on err
 * "PROGRAM: N values cannot be printed so that they read back; see the
 * comments" (the configuration is still valid: the caller exits 0). Returns
 * that count. */
int cfg_print_check(const cfg_table_t *t, const void *conf, const char *version, const char *section,
                    const char *config_path, FILE *out, FILE *err);

/* ---- SIGHUP: reopen the log file, re-read the configuration -----------------
 * cfg_reload first reopens the log file by its path (log_reopen: logrotate
 * moved it away), then re-reads the configuration:
 * ops->load fills a fresh, zeroed struct of ops->size bytes the way the
 * program's start-up did: its defaults, cfg_parse_args over the argv it was
 * started with (so the same file, and the flags still win over it), its
 * checks; 0, or -1 with err. ops->release frees what load allocated (also
 * after a failed load).
 *
 * cfg_reload calls load, then compares every non-custom key of the fresh
 * struct with running's:
 *   a key marked .reload that differs is copied into running (a string by
 *   swapping the pointers), then ops->apply(running, arg) acts on them (e.g.
 *   log_set_level), then each is logged at info:
 *   "SIGHUP: log-level info -> debug" (while the more verbose of the old
 *   and the new log level is in effect, so the line is never lost);
 *   any other key that differs is left as it is, logged at warn without
 *   its values (it may be a password): "SIGHUP: port changed, but takes
 *   effect only at a restart (keeping the running value)";
 *   no difference: "SIGHUP: configuration re-read, nothing changed".
 * A failed load changes nothing and is logged at error ("SIGHUP:
 * configuration error, keeping the running configuration: <err>").
 * Returns how many keys were applied, or -1 after a failed load. One
 * thread at a time; the program marks .reload only keys whose readers
 * tolerate the copy (in practice: the ones apply acts on, like log-level). */
typedef struct cfg_reload_ops {
    size_t size; /* of the config struct */
    int (*load)(void *conf, void *arg, char *err, size_t errlen);
    void (*release)(void *conf);
    void (*apply)(const void *running, void *arg); /* NULL: none */
    void *arg;
} cfg_reload_ops_t;

int cfg_reload(const cfg_table_t *t, void *running, const cfg_reload_ops_t *ops);

/* 1 when addr, a bind address from a configuration, is loopback: localhost,
 * 127.0.0.0/8 or ::1 (what protected mode, allow-remote and the metrics
 * ports' Host check ask); else 0 (NULL too). */
int cfg_bind_is_loopback(const char *addr);

#endif
