/*
 * tests/helpers/store_fixture.c — the store tests' shared fixture and helpers
 * (see store_fixture.h). Single-threaded, like the store's owner.
 */
#include "tests/helpers/store_fixture.h"

#include <CUnit/CUnit.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <leveldb/c.h>
#include <stdio.h>
#include <stdlib.h>
#include <dirent.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

void check_store_at(store_t *s, int line)
{
    char err[512] = "";
    int rc = store_check(s, err, sizeof err);
    TU_REQUIRE_AT(rc == 0, line, "store_check failed: %s", err);
}

void check_deleting_at(store_t *s, uint64_t groups, uint64_t entries, int line)
{
    uint64_t g = 0, e = 0;
    store_groups_deleting(s, &g, &e);
    TU_CHECK_AT(g == groups && e == entries, line,
                "being deleted: %" PRIu64 " groups, %" PRIu64 " entries; want %" PRIu64 ", %" PRIu64, g, e, groups,
                entries);
}

void drain_deletes_at(store_t *s, int line)
{
    char err[512] = "";
    uint64_t groups = 1, entries = 0;
    for (int i = 0; i < 100000 && groups > 0; i++) {
        int work = 0;
        TU_REQUIRE_AT(store_collect(s, T0, UINT64_MAX, 512, &work, err, sizeof err) == 0, line, "store_collect: %s",
                      err);
        store_groups_deleting(s, &groups, &entries);
    }
    TU_REQUIRE_AT(groups == 0, line, "%" PRIu64 " groups still being deleted (%" PRIu64 " entries)", groups, entries);
    TU_REQUIRE_AT(store_commit(s, err, sizeof err) == 0, line, "commit: %s", err);
}

void check_refusal_at(int rc, const char *err, int line, const char *frag1, const char *frag2)
{
    TU_CHECK_AT(rc == -1, line, "expected a refusal, got rc %d (err \"%s\")", rc, err);
    TU_CHECK_AT(strstr(err, frag1) != NULL, line, "message \"%s\" lacks \"%s\"", err, frag1);
    if (frag2 != NULL)
        TU_CHECK_AT(strstr(err, frag2) != NULL, line, "message \"%s\" lacks \"%s\"", err, frag2);
}

char g_dir[512];  /* this test's temp directory */
char g_data[600]; /* g_dir/data: the default data directory */

store_t *g_open[MAX_OPEN];
struct rlimit g_fsize_saved; /* restored by teardown when g_fsize_set */
int g_fsize_set;

void disk_full_at(rlim_t bytes)
{
    if (!g_fsize_set) { /* lowered again: the limit to give back is still the first one */
        TU_REQUIRE(getrlimit(RLIMIT_FSIZE, &g_fsize_saved) == 0, "getrlimit: %s", strerror(errno));
    }
    struct rlimit lim = g_fsize_saved;
    lim.rlim_cur = bytes;
    signal(SIGXFSZ, SIG_IGN); /* EFBIG instead of a core dump */
    TU_REQUIRE(setrlimit(RLIMIT_FSIZE, &lim) == 0, "setrlimit: %s", strerror(errno));
    g_fsize_set = 1;
}

void disk_room_again(void)
{
    if (g_fsize_set) {
        setrlimit(RLIMIT_FSIZE, &g_fsize_saved);
        g_fsize_set = 0;
    }
    signal(SIGXFSZ, SIG_DFL);
}

void store_fixture_setup(void)
{
    if (tu_mkdtemp("store", g_dir, sizeof g_dir) != 0) {
        fprintf(stderr, "tu_mkdtemp: %s\n", strerror(errno));
        g_dir[0] = '\0';
    }
    snprintf(g_data, sizeof g_data, "%s/data", g_dir);
}

void store_fixture_teardown(void)
{
    if (g_fsize_set) {
        disk_room_again();
    }
    for (int i = 0; i < MAX_OPEN; i++) {
        if (g_open[i] != NULL) {
            store_close(g_open[i], NULL, 0);
            g_open[i] = NULL;
        }
    }
    if (g_dir[0] != '\0')
        tu_rmtree(g_dir);
    g_dir[0] = '\0';
}

void opts_default(store_options_t *o)
{
    store_options_default(o);
    o->path = g_data;
    o->sync = 0;
    o->segment_bytes = TU_SEGMENT_BYTES;
}

store_t *open_at(const store_options_t *o, uint64_t now, int line)
{
    char err[512] = "";
    store_t *s = NULL;
    int rc = store_open(o, now, &s, err, sizeof err);
    TU_REQUIRE_AT(rc == 0 && s != NULL, line, "store_open(%s) failed: %s", o->path, err);
    for (int i = 0; i < MAX_OPEN; i++) {
        if (g_open[i] == NULL) {
            g_open[i] = s;
            return s;
        }
    }
    TU_REQUIRE_AT(0, line, "too many stores open in one test");
    return NULL;
}

store_t *open_default_at(int line)
{
    store_options_t o;
    opts_default(&o);
    return open_at(&o, T0, line);
}

void snapshot_copy_to_at(store_t *s, const char *dir, int line)
{
    char err[512] = "";
    store_snapshot_t *sn = store_snapshot_take(s, err, sizeof err);
    TU_REQUIRE_AT(sn != NULL, line, "store_snapshot_take: %s", err);
    int rc = store_snapshot_copy(sn, dir, NULL, NULL, NULL, err, sizeof err);
    store_snapshot_release(sn);
    TU_REQUIRE_AT(rc == 0, line, "store_snapshot_copy: %s", err);
}

void close_at(store_t **sp, int line)
{
    char err[512] = "";
    for (int i = 0; i < MAX_OPEN; i++)
        if (g_open[i] == *sp)
            g_open[i] = NULL;
    int rc = store_close(*sp, err, sizeof err);
    *sp = NULL;
    TU_REQUIRE_AT(rc == 0, line, "store_close failed: %s", err);
}

void close_broken_at(store_t **sp, const char *says, int line)
{
    TU_CHECK_AT(store_broken(*sp), line, "the store is usable, want it broken (\"%s\")", says);
    if (!store_broken(*sp)) {
        close_at(sp, line);
        return;
    }
    for (int i = 0; i < MAX_OPEN; i++) {
        if (g_open[i] == *sp) {
            g_open[i] = NULL;
        }
    }
    char err[1024] = "";
    int rc = store_close(*sp, err, sizeof err);
    TU_CHECK_AT(rc == -1 && strstr(err, says) != NULL, line, "closing the broken store: rc %d \"%s\" (want \"%s\")", rc,
                err, says);
    *sp = NULL;
}

int send_raw(store_t *s, const char *topic, size_t topic_len, const char *key, size_t key_len, const char *payload,
             size_t payload_len, int level, uint64_t delay_ms, uint64_t now, uint64_t *id, uint64_t *due, char *err,
             size_t errlen)
{
    store_send_req_t r = { .topic = topic,
                           .topic_len = topic_len,
                           .key = key,
                           .key_len = key_len,
                           .payload = payload,
                           .payload_len = payload_len,
                           .level = level,
                           .delay_ms = delay_ms };
    return store_send(s, &r, now, id, due, err, errlen);
}

uint64_t send_at(store_t *s, const char *topic, const char *payload, int level, uint64_t delay, uint64_t now,
                 uint64_t *due, int line)
{
    char err[512] = "";
    uint64_t id = 0, d = 0;
    int rc = send_raw(s, topic, strlen(topic), "k", 1, payload, strlen(payload), level, delay, now, &id, &d, err,
                      sizeof err);
    TU_REQUIRE_AT(rc == 0, line, "store_send(%s, level %d, delay %" PRIu64 ") failed: %s", topic, level, delay, err);
    if (due)
        *due = d;
    return id;
}

int lease_at(store_t *s, const char *group, const char *topic, int count, uint64_t lease_ms, uint64_t now,
             msg_owned_t *out, int line)
{
    char err[512] = "";
    int n = -1;
    int rc = store_lease(s, group, strlen(group), topic, strlen(topic), count, lease_ms, now, out, &n, err, sizeof err);
    TU_REQUIRE_AT(rc == 0, line, "store_lease(%s, %s) failed: %s", group, topic, err);
    return n;
}

void free_msgs(msg_owned_t *m, int n)
{
    for (int i = 0; i < n; i++)
        msg_owned_free(&m[i]);
}

int move_at(store_t *s, uint64_t now, int max, int *ready, int line)
{
    char err[512] = "";
    int moved = -1, r = -1;
    int rc = store_move_due(s, now, max, &moved, &r, err, sizeof err);
    TU_REQUIRE_AT(rc == 0, line, "store_move_due failed: %s", err);
    if (ready)
        *ready = r;
    return moved;
}

void group_create_at(store_t *s, const char *group, const char *topic, int from_first, uint64_t now, int line)
{
    char err[512] = "";
    int rc = store_group_create(s, group, strlen(group), topic, strlen(topic), from_first, -1, now, err, sizeof err);
    TU_REQUIRE_AT(rc == 0, line, "store_group_create(%s, %s) failed: %s", group, topic, err);
}

store_group_info_t group_info_at(store_t *s, const char *group, int line)
{
    store_group_info_t gi;
    memset(&gi, 0xee, sizeof gi);
    int rc = store_group_info(s, group, strlen(group), &gi);
    TU_REQUIRE_AT(rc == 1, line, "group %s should exist (store_group_info returned %d)", group, rc);
    return gi;
}

void check_counts_at(store_t *s, const char *group, uint64_t ready, uint64_t backlog, uint64_t retry_ready,
                     uint64_t retry_delayed, uint64_t inflight, uint64_t dlq, int line)
{
    store_group_info_t gi = group_info_at(s, group, line);
    int ok = gi.ready == ready && gi.backlog == backlog && gi.retry_ready == retry_ready &&
             gi.retry_delayed == retry_delayed && gi.inflight == inflight && gi.dlq == dlq;
    TU_CHECK_AT(ok, line,
                "group %s: ready %" PRIu64 " backlog %" PRIu64 " retry_ready %" PRIu64 " retry_delayed %" PRIu64
                " inflight %" PRIu64 " dlq %" PRIu64 "; want %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64
                " %" PRIu64,
                group, gi.ready, gi.backlog, gi.retry_ready, gi.retry_delayed, gi.inflight, gi.dlq, ready, backlog,
                retry_ready, retry_delayed, inflight, dlq);
}

void fail_at(store_t *s, const char *group, uint64_t id, int to_dlq, int level, uint64_t delay, const char *reason,
             uint64_t now, int want_found, uint64_t *due, int line)
{
    char err[512] = "";
    int found = -1;
    uint64_t d = 12345;
    store_fail_req_t r = {
        .to_dlq = to_dlq, .level = level, .delay_ms = delay, .reason = reason, .reason_len = reason ? strlen(reason) : 0
    };
    int rc = store_fail(s, group, strlen(group), id, &r, now, &found, &d, err, sizeof err);
    TU_REQUIRE_AT(rc == 0, line, "store_fail(%s, %" PRIu64 ") failed: %s", group, id, err);
    TU_CHECK_AT(found == want_found, line, "store_fail(%s, %" PRIu64 "): found %d, want %d", group, id, found,
                want_found);
    if (due)
        *due = d;
}

int ack_at(store_t *s, const char *group, const uint64_t *ids, int n, int line)
{
    char err[512] = "";
    int released = -1;
    int rc = store_ack(s, group, strlen(group), ids, n, &released, err, sizeof err);
    TU_REQUIRE_AT(rc == 0, line, "store_ack failed: %s", err);
    return released;
}

void commit_at(store_t *s, int line)
{
    char err[512] = "";
    int rc = store_commit(s, err, sizeof err);
    TU_REQUIRE_AT(rc == 0, line, "store_commit failed: %s", err);
}

uint64_t level_depth(store_t *s, int level)
{
    store_level_info_t li;
    if (store_level_info(s, level, &li) != 0)
        return UINT64_MAX;
    return li.depth;
}

uint64_t level_head(store_t *s, int level)
{
    store_level_info_t li;
    if (store_level_info(s, level, &li) != 0)
        return UINT64_MAX;
    return li.head_due_ms;
}

int msg_str_is(const msg_str_t *m, const char *s)
{
    return m->len == strlen(s) && memcmp(m->ptr, s, m->len) == 0;
}

int write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (f == NULL)
        return -1;
    fputs(text, f);
    return fclose(f);
}

store_t *open_with_one_lease(uint64_t *id)
{
    store_t *s = OPEN_DEFAULT();
    GROUP_CREATE(s, "g", "t", 1, T0);
    *id = SEND(s, "t", "x", 0, 0, T0, NULL);
    msg_owned_t m[1];
    int n = LEASE_N(s, "g", "t", 1, LEASE, T0, m);
    TU_REQUIRE(n == 1, "leased %d", n);
    free_msgs(m, n);
    return s;
}

leveldb_t *raw_open(int line)
{
    char *dberr = NULL;
    leveldb_options_t *lo = leveldb_options_create();
    leveldb_t *db = leveldb_open(lo, g_data, &dberr);
    leveldb_options_destroy(lo);
    TU_REQUIRE_AT(dberr == NULL && db != NULL, line, "leveldb_open: %s", dberr ? dberr : "");
    return db;
}

uint64_t raw_count_at(char tag, int line)
{
    leveldb_t *db = raw_open(line);
    leveldb_readoptions_t *ro = leveldb_readoptions_create();
    leveldb_iterator_t *it = leveldb_create_iterator(db, ro);
    uint64_t n = 0;
    for (leveldb_iter_seek(it, &tag, 1); leveldb_iter_valid(it); leveldb_iter_next(it)) {
        size_t klen;
        if (leveldb_iter_key(it, &klen)[0] != tag)
            break;
        n++;
    }
    leveldb_iter_destroy(it);
    leveldb_readoptions_destroy(ro);
    leveldb_close(db);
    return n;
}

void raw_put(const char *key, size_t klen, const char *val, size_t vlen, int line)
{
    char *dberr = NULL;
    leveldb_t *db = raw_open(line);
    leveldb_writeoptions_t *wo = leveldb_writeoptions_create();
    if (val != NULL)
        leveldb_put(db, wo, key, klen, val, vlen, &dberr);
    else /* val NULL: delete the key */
        leveldb_delete(db, wo, key, klen, &dberr);
    leveldb_writeoptions_destroy(wo);
    leveldb_close(db);
    TU_REQUIRE_AT(dberr == NULL, line, "leveldb write: %s", dberr ? dberr : "");
}

char *raw_get_at(const char *key, size_t klen, size_t *vlen, int line)
{
    leveldb_t *db = raw_open(line);
    leveldb_readoptions_t *ro = leveldb_readoptions_create();
    char *dberr = NULL;
    *vlen = 0;
    char *v = leveldb_get(db, ro, key, klen, vlen, &dberr);
    leveldb_readoptions_destroy(ro);
    leveldb_close(db);
    TU_REQUIRE_AT(dberr == NULL, line, "leveldb read: %s", dberr ? dberr : "");
    return v;
}

char *raw_replace_at(const char *key, size_t klen, const char *with, size_t wlen, size_t *vlen, int line)
{
    char *good = raw_get_at(key, klen, vlen, line);
    TU_REQUIRE_AT(good != NULL, line, "no value to replace: absent");
    raw_put(key, klen, with, wlen, line);
    return good;
}

char *raw_replace_or_add_at(const char *key, size_t klen, const char *with, size_t wlen, size_t *vlen, int line)
{
    char *old = raw_get_at(key, klen, vlen, line);
    raw_put(key, klen, with, wlen, line);
    return old;
}

void record_flip_at(uint64_t id, uint64_t at, int line)
{
    uint64_t base = id - id % TU_SEGMENT_BYTES;
    char path[800];
    snprintf(path, sizeof path, "%s/clog-%016" PRIx64 ".seg", g_data, base);
    int fd = open(path, O_RDWR);
    TU_REQUIRE(fd >= 0, "line %d: open %s", line, path);
    unsigned char b;
    off_t off = (off_t)(id - base + at);
    TU_REQUIRE(pread(fd, &b, 1, off) == 1, "line %d: read %s", line, path);
    b ^= 0x5a;
    TU_REQUIRE(pwrite(fd, &b, 1, off) == 1, "line %d: write %s", line, path);
    close(fd);
}

uint64_t be64_at(const char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | (unsigned char)p[i];
    return v;
}

void be64_to(char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (char)(v >> (56 - 8 * i));
}

void raw_lease_place(leveldb_t *db, uint64_t id, char yk[64], size_t *klen, char place[18], int line)
{
    leveldb_readoptions_t *ro = leveldb_readoptions_create();
    leveldb_iterator_t *it = leveldb_create_iterator(db, ro);
    char want[9] = "Y";
    be64_to(want + 1, id);
    leveldb_iter_seek(it, want, 9);
    size_t vlen = 0;
    const char *k = leveldb_iter_valid(it) ? leveldb_iter_key(it, klen) : NULL;
    TU_REQUIRE_AT(k != NULL && *klen > 9 + 9 && *klen <= 64 && memcmp(k, want, 9) == 0, line,
                  "no copy index entry of %016llx", (unsigned long long)id);
    memcpy(yk, k, *klen);
    const char *v = leveldb_iter_value(it, &vlen);
    TU_REQUIRE_AT(vlen == 18 && v[0] == 'I', line, "the copy of %016llx is not a lease", (unsigned long long)id);
    memcpy(place, v, 18);
    leveldb_iter_destroy(it);
    leveldb_readoptions_destroy(ro);
}

void raw_write_close(leveldb_t *db, leveldb_writebatch_t *wb, int line)
{
    char *dberr = NULL;
    leveldb_writeoptions_t *wo = leveldb_writeoptions_create();
    leveldb_write(db, wo, wb, &dberr);
    leveldb_writebatch_destroy(wb);
    leveldb_writeoptions_destroy(wo);
    leveldb_close(db);
    TU_REQUIRE_AT(dberr == NULL, line, "leveldb write: %s", dberr ? dberr : "");
}

/* The format marker as it is on disk (a closed data directory). */
uint32_t raw_format(void)
{
    char *dberr = NULL;
    leveldb_t *db = raw_open(__LINE__);
    leveldb_readoptions_t *ro = leveldb_readoptions_create();
    size_t vlen = 0;
    char *v = leveldb_get(db, ro, "Mformat", 7, &vlen, &dberr);
    TU_REQUIRE(dberr == NULL && v != NULL && vlen == 4, "no 4-byte format marker");
    uint32_t version = (uint32_t)(unsigned char)v[0] << 24 | (uint32_t)(unsigned char)v[1] << 16 |
                       (uint32_t)(unsigned char)v[2] << 8 | (unsigned char)v[3];
    leveldb_free(v);
    leveldb_readoptions_destroy(ro);
    leveldb_close(db);
    return version;
}

void raw_downgrade_lease(uint64_t id, int format, int line)
{
    leveldb_t *db = raw_open(line);
    char yk[64], place[18];
    size_t klen;
    raw_lease_place(db, id, yk, &klen, place, line);
    uint64_t deadline = be64_at(place + 2), log_seq = be64_at(place + 10);
    size_t glen = klen - 9 - 9;
    char jk[64] = "J", jv[16];
    memcpy(jk + 1, yk + 9, glen + 1); /* the group and its 0x00 */
    be64_to(jk + 1 + glen + 1, id);
    be64_to(jv, deadline);
    be64_to(jv + 8, log_seq);
    memset(place + 2, 0, 16);
    leveldb_writebatch_t *wb = leveldb_writebatch_create();
    leveldb_writebatch_put(wb, jk, 1 + glen + 1 + 8, jv, format == 1 || log_seq == 0 ? 8 : 16);
    leveldb_writebatch_put(wb, yk, klen, place, 18);
    raw_write_close(db, wb, line);
}

void ack_leased_at(store_t *s, const char *group, msg_owned_t *m, int n, int line)
{
    for (int done = 0; done < n;) {
        uint64_t ids[512];
        int k = n - done < 512 ? n - done : 512;
        for (int i = 0; i < k; i++)
            ids[i] = m[done + i].m.id;
        int released = ack_at(s, group, ids, k, line);
        TU_REQUIRE_AT(released == k, line, "ACK released %d of %d", released, k);
        done += k;
    }
    free_msgs(m, n);
}

int maintain_all(store_t *s, uint64_t now, int max, int line)
{
    char err[512] = "";
    int total = 0, work = 0, calls = 0;
    do {
        int rc = store_maintain(s, now, max, &work, err, sizeof err);
        TU_REQUIRE_AT(rc == 0, line, "store_maintain failed: %s", err);
        total += work;
        TU_REQUIRE_AT(++calls < 100000, line, "store_maintain never finishes");
    } while (work > 0);
    return total;
}

uint64_t retained_of(store_t *s, const char *topic)
{
    store_topic_info_t ti;
    TU_REQUIRE(store_topic_info(s, topic, strlen(topic), &ti) == 1, "topic %s", topic);
    return ti.retained;
}

long long file_bytes(const char *dir, const char *suffix, int largest)
{
    DIR *d = opendir(dir);
    if (d == NULL)
        return -1;
    long long max = 0, sum = 0;
    size_t slen = strlen(suffix);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        char path[1200];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (len < slen || strcmp(e->d_name + len - slen, suffix) != 0 || stat(path, &st) != 0 || !S_ISREG(st.st_mode))
            continue;
        sum += st.st_size;
        if (st.st_size > max)
            max = st.st_size;
    }
    closedir(d);
    return largest ? max : sum;
}

void fill_mixed(store_t *s)
{
    for (int i = 0; i < 40; i++)
        SEND(s, "t", "ready", 0, 0, T0, NULL);
    for (int i = 0; i < 30; i++)
        SEND(s, "t", "later", 1 + i % 5, 0, T0, NULL);
    GROUP_CREATE(s, "g", "t", 1, T0);
    msg_owned_t m[10];
    int n = LEASE_N(s, "g", "t", 10, LEASE, T0, m);
    TU_REQUIRE(n == 10, "leased %d", n);
    uint64_t acked[4] = { m[0].m.id, m[1].m.id, m[2].m.id, m[3].m.id };
    CHECK_EQ_U64((uint64_t)ACK(s, "g", acked, 4), 4);
    FAIL_LEVEL(s, "g", m[4].m.id, 1, "retry", T0, NULL);
    FAIL_DLQ(s, "g", m[5].m.id, "parked", T0);
    free_msgs(m, n);
    COMMIT(s);
}

uint64_t dir_digest(const char *dir)
{
    uint64_t h = 1469598103934665603ULL;
#define DIGEST_BYTES(p, n)                      \
    for (size_t i_ = 0; i_ < (size_t)(n); i_++) \
    h = (h ^ ((const unsigned char *)(p))[i_]) * 1099511628211ULL
    struct stat st;
    if (stat(dir, &st) != 0)
        return 0;
    DIGEST_BYTES(&st.st_mtim, sizeof st.st_mtim);
    struct dirent **names;
    int n = scandir(dir, &names, NULL, alphasort);
    for (int k = 0; k < n; k++) {
        char path[1200];
        snprintf(path, sizeof path, "%s/%s", dir, names[k]->d_name);
        if (strcmp(names[k]->d_name, "..") != 0 && lstat(path, &st) == 0) {
            DIGEST_BYTES(names[k]->d_name, strlen(names[k]->d_name));
            DIGEST_BYTES(&st.st_size, sizeof st.st_size);
            DIGEST_BYTES(&st.st_mode, sizeof st.st_mode);
            DIGEST_BYTES(&st.st_mtim, sizeof st.st_mtim);
            FILE *f = S_ISREG(st.st_mode) ? fopen(path, "rb") : NULL;
            char buf[65536];
            size_t got;
            while (f != NULL && (got = fread(buf, 1, sizeof buf, f)) > 0)
                DIGEST_BYTES(buf, got);
            if (f != NULL)
                fclose(f);
        }
        free(names[k]);
    }
    free(names);
#undef DIGEST_BYTES
    return h;
}

store_t *open_write_late(void)
{
    store_options_t o;
    opts_default(&o);
    o.lease_write_delay_ms = WRITE_DELAY;
    return OPEN(&o);
}

void crash_after_at(crash_work_fn work, int line)
{
    fflush(NULL);
    pid_t pid = fork();
    TU_REQUIRE_AT(pid >= 0, line, "fork: %s", strerror(errno));
    if (pid == 0) {
        store_options_t o;
        opts_default(&o);
        o.lease_write_delay_ms = WRITE_DELAY;
        char err[512] = "";
        store_t *c = NULL;
        if (store_open(&o, T0, &c, err, sizeof err) != 0)
            _exit(2);
        if (work(c, err, sizeof err) != 0 || (!store_broken(c) && store_commit(c, err, sizeof err) != 0)) {
            fprintf(stderr, "crash child: %s\n", err);
            _exit(3);
        }
        kill(getpid(), SIGKILL);
        _exit(4);
    }
    int status = 0;
    TU_REQUIRE_AT(waitpid(pid, &status, 0) == pid, line, "waitpid: %s", strerror(errno));
    TU_REQUIRE_AT(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, line, "the child failed (status %d)", status);
}

uint64_t send_key(store_t *s, const char *topic, const char *key, uint64_t delay, uint64_t now)
{
    char err[512] = "";
    uint64_t id = 0, due = 0;
    int rc = send_raw(s, topic, strlen(topic), key, strlen(key), "p", 1, 0, delay, now, &id, &due, err, sizeof err);
    TU_REQUIRE(rc == 0, "store_send(%s, %s) failed: %s", topic, key, err);
    return id;
}

store_msg_state_t state_of(store_t *s, uint64_t id, const char *group, store_msg_state_t *gstate)
{
    char err[512] = "";
    store_msg_view_t v;
    TU_REQUIRE(store_msg_get(s, id, 0, &v, err, sizeof err) == 0, "store_msg_get: %s", err);
    store_msg_state_t st = v.state;
    *gstate = STORE_MSG_GONE;
    for (int i = 0; i < v.ncopies; i++)
        if (group != NULL && strcmp(v.copies[i].group, group) == 0)
            *gstate = v.copies[i].state;
    store_msg_view_free(&v);
    return st;
}
