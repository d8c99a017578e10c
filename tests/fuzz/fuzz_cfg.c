/*
 * tests/fuzz/fuzz_cfg.c — libFuzzer target: the config engine's INI reader
 * and flag parser (common/cfg_ini.c, cfg_args.c and cfg.c, with libinih and base/units.c), over a
 * table with one key of each type, a section and origin tracking.
 *
 * The first input byte picks the mode, the rest is the input:
 *   INI file   written to a temp file and read with cfg_load_file. When it is
 *              accepted, the effective values printed as an INI body
 *              (cfg_print_values, on lines the reader takes) must read back
 *              to the same values, every one of them; when it is refused,
 *              the message must name the file.
 *   flags      split at newlines into argv and given to cfg_parse_args
 *              (--config and --help-markdown are left out: the one reads a
 *              file the input names, the other exits). Accepted values must
 *              be within their keys' bounds, and their print must read back
 *              to them, or be refused when it says a value is not printable.
 * Every string the engine allocated is freed (LeakSanitizer). A failed check
 * calls abort(), which libFuzzer reports as a crash.
 */
#include "common/cfg.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ini.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#include "tests/fuzz/fuzz_check.h"

typedef struct fuzz_conf {
    char *name;
    char *password;
    int flag;
    long long count, mem, wait;
    double ratio;
    int mode;
    cfg_origin_t origin;
} fuzz_conf_t;

static const cfg_key_t keys[] = {
    { CFG_KEY("name", CFG_STRING, "hourglass", 0, 0, offsetof(fuzz_conf_t, name), "a string") },
    { CFG_KEY("password", CFG_STRING, NULL, 0, 0, offsetof(fuzz_conf_t, password), "a secret"), .secret = 1 },
    { CFG_KEY("flag", CFG_BOOL, "no", 0, 1, offsetof(fuzz_conf_t, flag), "a bool") },
    { CFG_KEY("count", CFG_INT, "4", 1, 256, offsetof(fuzz_conf_t, count), "an int") },
    { CFG_KEY("mem", CFG_SIZE, "4mb", 1024, 1LL << 30, offsetof(fuzz_conf_t, mem), "a size") },
    { CFG_KEY("wait", CFG_DURATION, "30s", 0, 3600000, offsetof(fuzz_conf_t, wait), "a duration") },
    { CFG_KEY("ratio", CFG_DOUBLE, "0.5", 0, 1, offsetof(fuzz_conf_t, ratio), "a double") },
    { CFG_KEY("mode", CFG_ENUM, "fast", 0, 0, offsetof(fuzz_conf_t, mode), "an enum"), .words = "fast|safe|off" },
};
static const char *const sections[] = { "extra", NULL };
static const char *const switches[] = { "--once", NULL };
static const cfg_table_t table = {
    .program = "fuzz-cfg",
    .keys = keys,
    .count = sizeof keys / sizeof keys[0],
    .sections = sections,
    .switches = switches,
    .positional_config = 0,
    .track_origin = 1,
    .origin_offset = offsetof(fuzz_conf_t, origin),
};

static char ini_path[64];

static void remove_ini(void)
{
    unlink(ini_path);
}

static void write_file(const char *path, const void *bytes, size_t n)
{
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    CHECK(fwrite(bytes, 1, n, f) == n);
    CHECK(fclose(f) == 0);
}

static void check_bounds(const fuzz_conf_t *c)
{
    CHECK(c->flag == 0 || c->flag == 1);
    CHECK(c->count >= 1 && c->count <= 256);
    CHECK(c->mem >= 1024 && c->mem <= 1LL << 30);
    CHECK(c->wait >= 0 && c->wait <= 3600000);
    CHECK(c->ratio >= 0 && c->ratio <= 1);
    CHECK(c->mode >= 0 && c->mode <= 2);
}

/* The values printed as INI (cfg_print_values) must read back to
 * themselves, on lines the reader takes. A value no INI file can hold
 * (cfg_print_setting: a line break, a blank at either end, a ';' after a
 * blank, a run longer than a line without a blank) comes only from a flag,
 * never from a file (the reader strips the blanks, cuts the comments and
 * took the value's parts on lines of its own): its print must be refused
 * when read back, never read as another value. */
static void check_reprint(const fuzz_conf_t *c, int from_file)
{
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    CHECK(out != NULL);
    int unprintable = cfg_print_values(&table, c, out);
    CHECK(fclose(out) == 0);
    if (from_file && unprintable != 0) {
        fprintf(stderr, "fuzz_cfg: a value read from a file printed as not printable:\n%s", text);
        abort();
    }
    for (const char *line = text; unprintable == 0 && line < text + len;) {
        const char *nl = memchr(line, '\n', (size_t)(text + len - line));
        size_t n = nl != NULL ? (size_t)(nl - line) : (size_t)(text + len - line);
        if (n > INI_MAX_LINE - 2) {
            fprintf(stderr, "fuzz_cfg: a printed line of %zu bytes:\n%s", n, text);
            abort();
        }
        line += n + 1;
    }
    write_file(ini_path, text, len);

    fuzz_conf_t again = { 0 };
    char err[1024] = "";
    cfg_init(&table, &again);
    int rc = cfg_load_file(&table, &again, ini_path, err, sizeof err);
    if (unprintable != 0 && rc == 0) {
        fprintf(stderr, "fuzz_cfg: a print with a value not printable read back:\n%s", text);
        abort();
    }
    if (unprintable == 0 && rc != 0) {
        fprintf(stderr, "fuzz_cfg: the printed values do not read back: %s\n%s", err, text);
        abort();
    }
    for (size_t i = 0; rc == 0 && i < table.count; i++) {
        char a[4096], b[4096];
        if (keys[i].secret) {
            continue; /* printed as a comment, "(set, not shown)", never as the value */
        }
        if (keys[i].type == CFG_STRING && (*(char *const *)((const char *)c + keys[i].offset) == NULL) !=
                                              (*(char *const *)((const char *)&again + keys[i].offset) == NULL)) {
            fprintf(stderr, "fuzz_cfg: %s read back %s\n", keys[i].name,
                    *(char *const *)((const char *)c + keys[i].offset) == NULL ? "set, was unset" : "unset, was set");
            abort();
        }
        cfg_value_text(&table, c, i, a, sizeof a);
        cfg_value_text(&table, &again, i, b, sizeof b);
        if (strcmp(a, b) != 0) {
            fprintf(stderr, "fuzz_cfg: %s read back as '%s', was '%s'\n", keys[i].name, b, a);
            abort();
        }
    }
    cfg_free(&table, &again);
    free(text);
}

static void fuzz_ini(const uint8_t *bytes, size_t n)
{
    fuzz_conf_t c = { 0 };
    char err[1024] = "";
    write_file(ini_path, bytes, n);
    cfg_init(&table, &c);
    if (cfg_load_file(&table, &c, ini_path, err, sizeof err) == 0) {
        check_bounds(&c);
        check_reprint(&c, 1);
    } else {
        CHECK(strstr(err, ini_path) != NULL);
    }
    cfg_free(&table, &c);
}

static void fuzz_flags(const uint8_t *bytes, size_t n)
{
    char *text = malloc(n + 1);
    char *argv[64];
    int argc = 0;
    CHECK(text != NULL);
    memcpy(text, bytes, n);
    text[n] = '\0';
    argv[argc++] = "fuzz-cfg";
    for (char *p = text; argc < 63;) {
        char *nl = strchr(p, '\n');
        if (nl != NULL) {
            *nl = '\0';
        }
        if (strcmp(p, "--help-markdown") != 0 && strncmp(p, "--config", 8) != 0 && strcmp(p, "-c") != 0) {
            argv[argc++] = p;
        }
        if (nl == NULL) {
            break;
        }
        p = nl + 1;
    }
    argv[argc] = NULL;

    fuzz_conf_t c = { 0 };
    cfg_args_t args;
    char err[1024] = "";
    cfg_init(&table, &c);
    if (cfg_parse_args(&table, &c, argc, argv, &args, err, sizeof err) == 0) {
        check_bounds(&c);
        CHECK(args.config_path == NULL);
        check_reprint(&c, 0);
    } else {
        CHECK(err[0] != '\0');
    }
    cfg_free(&table, &c);
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (ini_path[0] == '\0') {
        snprintf(ini_path, sizeof ini_path, "/tmp/hg-fuzz-cfg-%ld.conf", (long)getpid());
        atexit(remove_ini);
    }
    if (size < 1) {
        return 0;
    }
    if (data[0] & 1) {
        fuzz_flags(data + 1, size - 1);
    } else {
        fuzz_ini(data + 1, size - 1);
    }
    return 0;
}
