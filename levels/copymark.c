/*
 * levels/copymark.c — STORE_COPY_WHOLE, the file that marks a whole copy
 * BACKUP made (store.h, "Online copies"): written as the copy's last file
 * (store_snapshot_copy, snapshot.c), and checked by store_check_dir (every
 * byte) and store_open (sizes) through store_copy_verify.
 *
 * It lists every other file of the copy with its size and CRC-32C, so a
 * copy cut on a record boundary, or without a file LevelDB does not list
 * (a log), is found: LevelDB's own files cannot say so. The checksum is
 * computed after the copy's database is closed, reading its files back
 * from the page cache they were just written through; CRC-32C with the
 * SSE4.2 instruction where the CPU has it (x86-64), else eight tables of
 * 256 (slicing by 8).
 *
 * The text (store.h, STORE_COPY_WHOLE_VERSION): a version line, '#' lines
 * for people, one "file NAME SIZE CRC32C" line per file (sorted by name;
 * the CRC-32C of all its bytes, 8 hex digits), and "end FILES BYTES",
 * which a marker cut short lacks. A marker of version 1 (its first line
 * MARK_V1_START, no list) is what copies made before the list hold: it is
 * accepted, with nothing to check but the log end.
 *
 * Threading: any thread; the CRC tables are made once (pthread_once).
 */
#include "levels/store_internal.h"
#include "base/alloc.h"
#include "base/buf.h"
#include "base/err.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MARK_FIRST_LINE "hourglass-broker BACKUP-WHOLE "                 /* then the version */
#define MARK_V1_START   "A whole copy made by hourglass-broker's BACKUP" /* the list-less marker's first line */
#define MARK_MAX_BYTES  ((long)16 << 20)
#define MARK_NAME_MAX   255
#define CRC_READ_BUFFER ((size_t)1 << 20)

static uint32_t crc_tables[8][256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_tables_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) {
            c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1u)));
        }
        crc_tables[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++) {
        for (int t = 1; t < 8; t++) {
            crc_tables[t][i] = (crc_tables[t - 1][i] >> 8) ^ crc_tables[0][crc_tables[t - 1][i] & 0xff];
        }
    }
}

/* c: the running CRC, not inverted (start with 0xffffffff, invert at the end). */
static uint32_t crc_soft(uint32_t c, const unsigned char *p, size_t n)
{
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        w ^= c; /* little-endian: the only byte order this slicing is written for */
        c = crc_tables[7][w & 0xff] ^ crc_tables[6][(w >> 8) & 0xff] ^ crc_tables[5][(w >> 16) & 0xff] ^
            crc_tables[4][(w >> 24) & 0xff] ^ crc_tables[3][(w >> 32) & 0xff] ^ crc_tables[2][(w >> 40) & 0xff] ^
            crc_tables[1][(w >> 48) & 0xff] ^ crc_tables[0][w >> 56];
        p += 8;
        n -= 8;
    }
    while (n-- > 0) {
        c = crc_tables[0][(c ^ *p++) & 0xff] ^ (c >> 8);
    }
    return c;
}

#if defined(__x86_64__) && defined(__GNUC__)
static inline uint64_t word_at(const unsigned char *p)
{
    uint64_t w;
    memcpy(&w, p, sizeof w);
    return w;
}

/* Four words a turn, then the last word or fewer bytes by one 4-, 2- and
 * 1-byte step each: the records a read checks are a few hundred bytes, and
 * a byte-at-a-time tail and one loop test per word were a third of it. */
__attribute__((target("sse4.2"))) static uint32_t crc_sse42(uint32_t c, const unsigned char *p, size_t n)
{
    uint64_t c64 = c;
    for (const unsigned char *end = p + (n & ~(size_t)31); p < end; p += 32) {
        c64 = __builtin_ia32_crc32di(c64, word_at(p));
        c64 = __builtin_ia32_crc32di(c64, word_at(p + 8));
        c64 = __builtin_ia32_crc32di(c64, word_at(p + 16));
        c64 = __builtin_ia32_crc32di(c64, word_at(p + 24));
    }
    for (const unsigned char *end = p + (n & 24); p < end; p += 8) {
        c64 = __builtin_ia32_crc32di(c64, word_at(p));
    }
    c = (uint32_t)c64;
    if (n & 4) {
        uint32_t v;
        memcpy(&v, p, 4);
        c = __builtin_ia32_crc32si(c, v);
        p += 4;
    }
    if (n & 2) {
        uint16_t v;
        memcpy(&v, p, 2);
        c = __builtin_ia32_crc32hi(c, v);
        p += 2;
    }
    if (n & 1) {
        c = __builtin_ia32_crc32qi(c, *p);
    }
    return c;
}
#endif

/* The tables are made (once) only where they are used: not on the SSE4.2
 * path, which every record check takes. */
static uint32_t crc_update(uint32_t c, const unsigned char *p, size_t n)
{
#if defined(__x86_64__) && defined(__GNUC__)
    if (__builtin_cpu_supports("sse4.2")) {
        return crc_sse42(c, p, n);
    }
#endif
    pthread_once(&crc_once, crc_tables_init);
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
    while (n-- > 0) {
        c = crc_tables[0][(c ^ *p++) & 0xff] ^ (c >> 8);
    }
    return c;
#else
    return crc_soft(c, p, n);
#endif
}

uint32_t store_crc32c(const void *p, size_t n)
{
    return ~crc_update(0xffffffffu, p, n);
}

/* The CRC-32C of the file at path, and the bytes read, into *crc / *size:
 * 0, or -1 with err naming it. */
static int file_crc(const char *path, uint32_t *crc, uint64_t *size, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return err_set(err, errlen, "cannot read %s: %s", path, strerror(errno));
    }
    unsigned char *buf = xmalloc(CRC_READ_BUFFER);
    uint32_t c = 0xffffffffu;
    uint64_t total = 0;
    int rc = 0;
    for (;;) {
        ssize_t k = read(fd, buf, CRC_READ_BUFFER);
        if (k < 0 && errno == EINTR) {
            continue;
        }
        if (k < 0) {
            rc = err_set(err, errlen, "cannot read %s: %s", path, strerror(errno));
            break;
        }
        if (k == 0) {
            break;
        }
        c = crc_update(c, buf, (size_t)k);
        total += (uint64_t)k;
    }
    free(buf);
    close(fd);
    *crc = ~c;
    *size = total;
    return rc;
}

typedef struct mark_file {
    char name[MARK_NAME_MAX + 1];
    uint64_t size;
    uint32_t crc;
} mark_file_t;

static int mark_file_cmp(const void *a, const void *b)
{
    return strcmp(((const mark_file_t *)a)->name, ((const mark_file_t *)b)->name);
}

/* Every file of dir but STORE_COPY_WHOLE, sorted, with sizes and CRC-32Cs
 * (read now): *files (the caller frees), *n. 0, or -1 with err. */
static int list_copy(const char *dir, mark_file_t **files, size_t *n, char *err, size_t errlen)
{
    *files = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (d == NULL) {
        return err_set(err, errlen, "cannot list %s: %s", dir, strerror(errno));
    }
    size_t cap = 0;
    int rc = 0;
    struct dirent *e;
    while (rc == 0 && (e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0 || strcmp(e->d_name, STORE_COPY_WHOLE) == 0) {
            continue;
        }
        if (strlen(e->d_name) > MARK_NAME_MAX || strpbrk(e->d_name, " \t\r\n") != NULL) {
            rc = err_set(err, errlen, "%s/%s: a name the copy's list cannot hold", dir, e->d_name);
            break;
        }
        if (*n == cap) {
            cap = cap == 0 ? 16 : cap * 2;
            *files = xrealloc(*files, cap * sizeof **files);
        }
        mark_file_t *f = &(*files)[*n];
        memset(f, 0, sizeof *f);
        snprintf(f->name, sizeof f->name, "%s", e->d_name);
        char path[PATH_MAX + MARK_NAME_MAX + 2];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        rc = file_crc(path, &f->crc, &f->size, err, errlen);
        (*n)++;
    }
    closedir(d);
    if (rc == 0 && *n > 1) {
        qsort(*files, *n, sizeof **files, mark_file_cmp);
    }
    return rc;
}

/* Write all of text[len] to fd: 0, or -1 with err naming path. */
static int write_all(int fd, const char *text, size_t len, const char *path, char *err, size_t errlen)
{
    for (size_t done = 0; done < len;) {
        ssize_t w = write(fd, text + done, len - done);
        if (w < 0 && errno == EINTR) {
            continue;
        }
        if (w < 0) {
            return err_set(err, errlen, "cannot write %s: %s", path, strerror(errno));
        }
        done += (size_t)w;
    }
    return 0;
}

int copy_mark_write(const char *dir, char *err, size_t errlen)
{
    char path[PATH_MAX];
    if ((size_t)snprintf(path, sizeof path, "%s/" STORE_COPY_WHOLE, dir) >= sizeof path) {
        return err_set(err, errlen, "%s: the path is too long", dir);
    }
    mark_file_t *files = NULL;
    size_t n = 0;
    if (list_copy(dir, &files, &n, err, errlen) != 0) {
        free(files);
        return -1;
    }
    buf_t b;
    buf_init(&b);
    buf_printf(
        &b,
        MARK_FIRST_LINE
        "%d\n"
        "# A whole copy made by hourglass-broker's BACKUP: every file below was written and fsynced, with\n"
        "# this size and CRC-32C (Castagnoli), before the copy was named; nothing is ever added to it.\n"
        "# hourglass-broker --check-data checks every line (a file missing, shorter, longer, changed, or\n"
        "# not listed is damage); a broker started here checks the sizes and refuses a damaged copy, and\n"
        "# otherwise removes this file (the directory is then live). See docs/operations.md, \"Backup and restore\".\n"
        "# file NAME SIZE CRC32C\n",
        STORE_COPY_WHOLE_VERSION);
    uint64_t bytes = 0;
    for (size_t i = 0; i < n; i++) {
        buf_printf(&b, "file %s %llu %08x\n", files[i].name, (unsigned long long)files[i].size, files[i].crc);
        bytes += files[i].size;
    }
    buf_printf(&b, "end %zu %llu\n", n, (unsigned long long)bytes);
    free(files);
    int rc = 0;
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0640);
    if (fd < 0) {
        rc = err_set(err, errlen, "cannot create %s: %s", path, strerror(errno));
    } else {
        rc = write_all(fd, b.data, b.len, path, err, errlen);
        if (rc == 0 && fsync(fd) != 0) {
            rc = err_set(err, errlen, "cannot fsync %s: %s", path, strerror(errno));
        }
        if (close(fd) != 0 && rc == 0) {
            rc = err_set(err, errlen, "cannot write %s: %s", path, strerror(errno));
        }
    }
    buf_free(&b);
    return rc;
}

/* A damage verify found: the first goes into err, the rest are counted. */
typedef struct verify_state {
    const char *dir;
    unsigned problems;
    char *err;
    size_t errlen;
} verify_state_t;

__attribute__((format(printf, 2, 3))) static void damage(verify_state_t *v, const char *fmt, ...)
{
    if (v->problems++ > 0) {
        return;
    }
    char what[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    err_set(v->err, v->errlen,
            "data directory %s is damaged: it is a whole copy made by BACKUP, and its " STORE_COPY_WHOLE " file %s",
            v->dir, what);
}

/* Parse the marker's text into *files / *n (the caller frees *files):
 * 0 a list, 1 a marker without one (written before the list was), or
 * STORE_OPEN_DAMAGED (garbled, in v), or -1 (a newer version, in err). */
static int mark_parse(char *text, verify_state_t *v, mark_file_t **files, size_t *n)
{
    *files = NULL;
    *n = 0;
    if (strncmp(text, MARK_V1_START, strlen(MARK_V1_START)) == 0) {
        return 1;
    }
    char *save = NULL;
    char *line = strtok_r(text, "\n", &save);
    int version = 0, used = 0;
    if (line == NULL || sscanf(line, MARK_FIRST_LINE "%d%n", &version, &used) != 1 || line[used] != '\0' ||
        version < 1) {
        damage(v, "is garbled: its first line is \"%.80s\", not \"" MARK_FIRST_LINE "%d\"", line != NULL ? line : "",
               STORE_COPY_WHOLE_VERSION);
        return STORE_OPEN_DAMAGED;
    }
    if (version > STORE_COPY_WHOLE_VERSION) {
        return err_set(v->err, v->errlen,
                       "%s/" STORE_COPY_WHOLE " has version %d, written by a newer build; this build reads version %d",
                       v->dir, version, STORE_COPY_WHOLE_VERSION);
    }
    size_t cap = 0, lineno = 1;
    unsigned long long end_files = 0, end_bytes = 0, bytes = 0;
    int ended = 0;
    while ((line = strtok_r(NULL, "\n", &save)) != NULL) {
        lineno++;
        if (line[0] == '#') {
            continue;
        }
        char name[MARK_NAME_MAX + 1], size[24], crc[10];
        used = 0;
        if (!ended && sscanf(line, "file %255s %20[0-9] %8[0-9a-f]%n", name, size, crc, &used) == 3 &&
            line[used] == '\0' && strlen(crc) == 8) {
            if (*n == cap) {
                cap = cap == 0 ? 16 : cap * 2;
                *files = xrealloc(*files, cap * sizeof **files);
            }
            mark_file_t *f = &(*files)[(*n)++];
            memset(f, 0, sizeof *f);
            snprintf(f->name, sizeof f->name, "%s", name);
            f->size = strtoull(size, NULL, 10);
            f->crc = (uint32_t)strtoul(crc, NULL, 16);
            bytes += f->size;
            continue;
        }
        used = 0;
        if (!ended && sscanf(line, "end %llu %llu%n", &end_files, &end_bytes, &used) == 2 && line[used] == '\0') {
            ended = 1;
            continue;
        }
        damage(v, "is garbled: line %zu is \"%.80s\"", lineno, line);
        return STORE_OPEN_DAMAGED;
    }
    if (!ended) {
        damage(v, "is cut short: it has no \"end\" line (%zu files listed)", *n);
        return STORE_OPEN_DAMAGED;
    }
    if (end_files != *n || end_bytes != bytes) {
        damage(v, "is garbled: its \"end\" line counts %llu files of %llu bytes, its lines %zu of %llu", end_files,
               end_bytes, *n, bytes);
        return STORE_OPEN_DAMAGED;
    }
    return 0;
}

/* Read the marker at path into a new string (*text): 0, or -1 with err. */
static int mark_read(const char *path, char **text, char *err, size_t errlen)
{
    *text = NULL;
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        return err_set(err, errlen, "cannot read %s: %s", path, strerror(errno));
    }
    buf_t b;
    buf_init(&b);
    char chunk[8192];
    size_t k;
    while ((k = fread(chunk, 1, sizeof chunk, f)) > 0 && b.len <= (size_t)MARK_MAX_BYTES) {
        buf_append(&b, chunk, k);
    }
    int failed = ferror(f);
    fclose(f);
    if (failed) {
        buf_free(&b);
        return err_set(err, errlen, "cannot read %s", path);
    }
    buf_append(&b, "", 1);
    *text = b.data; /* buf_t hands its bytes over */
    return 0;
}

int store_copy_verify(const char *dir, int checksums, store_copy_mark_t *m, char *err, size_t errlen)
{
    memset(m, 0, sizeof *m);
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/" STORE_COPY_WHOLE, dir);
    struct stat st;
    if (lstat(path, &st) != 0) {
        if (errno == ENOENT) {
            return 0;
        }
        return err_set(err, errlen, "cannot read %s: %s", path, strerror(errno));
    }
    m->marked = 1;
    verify_state_t v = { dir, 0, err, errlen };
    if (!S_ISREG(st.st_mode) || st.st_size > MARK_MAX_BYTES) {
        damage(&v, "is garbled: %s", !S_ISREG(st.st_mode) ? "not a regular file" : "larger than 16 MiB");
        return STORE_OPEN_DAMAGED;
    }
    char *text = NULL;
    if (mark_read(path, &text, err, errlen) != 0) {
        return -1;
    }
    if (strlen(text) != (size_t)st.st_size) {
        free(text);
        damage(&v, "is garbled: it holds a NUL byte");
        return STORE_OPEN_DAMAGED;
    }
    mark_file_t *files = NULL;
    size_t n = 0;
    int rc = mark_parse(text, &v, &files, &n);
    free(text);
    if (rc != 0) {
        free(files);
        return rc == 1 ? 0 : rc; /* 1: no list, nothing more to check here */
    }
    if (n > 1) { /* written sorted; one sorted by hand or not at all is still a list */
        qsort(files, n, sizeof *files, mark_file_cmp);
    }
    m->listed = 1;
    m->files = (unsigned)n;
    m->checksums = checksums;
    for (size_t i = 0; i < n; i++) {
        mark_file_t *f = &files[i];
        char fpath[PATH_MAX + MARK_NAME_MAX + 2];
        snprintf(fpath, sizeof fpath, "%s/%s", dir, f->name);
        m->bytes += f->size;
        if (lstat(fpath, &st) != 0) {
            if (errno != ENOENT) {
                free(files);
                return err_set(err, errlen, "cannot read %s: %s", fpath, strerror(errno));
            }
            damage(&v, "lists %s with %llu bytes, but it is missing", f->name, (unsigned long long)f->size);
            continue;
        }
        if (!S_ISREG(st.st_mode)) {
            damage(&v, "lists %s as a file of %llu bytes, but it is not a regular file", f->name,
                   (unsigned long long)f->size);
        } else if ((uint64_t)st.st_size != f->size) {
            damage(&v, "lists %s with %llu bytes, but it has %llu: %s by %llu bytes", f->name,
                   (unsigned long long)f->size, (unsigned long long)st.st_size,
                   (uint64_t)st.st_size < f->size ? "truncated" : "longer",
                   (unsigned long long)((uint64_t)st.st_size < f->size ? f->size - (uint64_t)st.st_size
                                                                       : (uint64_t)st.st_size - f->size));
        }
    }
    DIR *d = opendir(dir);
    if (d == NULL) {
        free(files);
        return err_set(err, errlen, "cannot list %s: %s", dir, strerror(errno));
    }
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0 || strcmp(e->d_name, STORE_COPY_WHOLE) == 0) {
            continue;
        }
        mark_file_t key;
        snprintf(key.name, sizeof key.name, "%s", e->d_name);
        if (strlen(e->d_name) > MARK_NAME_MAX || bsearch(&key, files, n, sizeof *files, mark_file_cmp) == NULL) {
            damage(&v,
                   "does not list %s, which the copy holds (nothing is added to a whole copy: it was opened or "
                   "changed after it was made)",
                   e->d_name);
        }
    }
    closedir(d);
    for (size_t i = 0; checksums && v.problems == 0 && i < n; i++) {
        mark_file_t *f = &files[i];
        char fpath[PATH_MAX + MARK_NAME_MAX + 2];
        snprintf(fpath, sizeof fpath, "%s/%s", dir, f->name);
        uint32_t crc;
        uint64_t size;
        if (file_crc(fpath, &crc, &size, err, errlen) != 0) {
            free(files);
            return -1;
        }
        if (crc != f->crc || size != f->size) {
            damage(&v,
                   "lists %s with %llu bytes of CRC-32C %08x, but its %llu bytes have CRC-32C %08x: changed after "
                   "the copy was made",
                   f->name, (unsigned long long)f->size, f->crc, (unsigned long long)size, crc);
        }
    }
    free(files);
    if (v.problems > 1 && err != NULL) {
        size_t len = strlen(err);
        snprintf(err + len, errlen - len, " (and %u more problems with the list)", v.problems - 1);
    }
    return v.problems > 0 ? STORE_OPEN_DAMAGED : 0;
}
