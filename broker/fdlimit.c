/*
 * broker/fdlimit.c — RLIMIT_NOFILE against max-clients and LevelDB's
 * max-open-files (see fdlimit.h for the budget and the order in which
 * settings give way).
 *
 * Thread: the main thread, at start-up, before any other thread exists.
 */
#include "broker/fdlimit.h"

#include <errno.h>
#include <string.h>
#include <sys/resource.h>

#include "base/err.h"
#include "common/log.h"

int fdlimit_plan(long long soft, long long max_clients, long long max_open_files, fdlimit_plan_t *out, char *err,
                 size_t errlen)
{
    out->want_soft = max_clients + max_open_files + FDLIMIT_FIXED_RESERVE;
    out->max_clients = max_clients;
    out->max_open_files = max_open_files;
    if (soft >= out->want_soft) {
        return 0;
    }
    long long room = soft - FDLIMIT_FIXED_RESERVE; /* for clients and the table cache */
    long long min_clients = max_clients < FDLIMIT_MIN_CLIENTS ? max_clients : FDLIMIT_MIN_CLIENTS;
    if (room - max_open_files >= min_clients) {
        out->max_clients = room - max_open_files;
        return 0;
    }
    /* Not even min_clients beside the configured table cache: shrink the cache. */
    long long floor_files = max_open_files < FDLIMIT_MIN_OPEN_FILES ? max_open_files : FDLIMIT_MIN_OPEN_FILES;
    long long files = room - min_clients;
    if (files < floor_files) {
        files = floor_files;
    }
    if (room - files < 1) {
        return err_set(err, errlen,
                       "the open-files limit (ulimit -n) is %lld: too low for even one client beside %lld "
                       "LevelDB files and %d other descriptors",
                       soft, files, FDLIMIT_FIXED_RESERVE);
    }
    out->max_open_files = files;
    out->max_clients = room - files < max_clients ? room - files : max_clients;
    return 0;
}

int fdlimit_apply(long long *max_clients, long long *max_open_files, char *err, size_t errlen)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) {
        return err_set(err, errlen, "getrlimit(RLIMIT_NOFILE): %s", strerror(errno));
    }
    fdlimit_plan_t plan;
    long long want = *max_clients + *max_open_files + FDLIMIT_FIXED_RESERVE;
    long long soft = rl.rlim_cur == RLIM_INFINITY ? want : (long long)rl.rlim_cur;
    if (soft < want) {
        long long hard = rl.rlim_max == RLIM_INFINITY ? want : (long long)rl.rlim_max;
        long long target = want < hard ? want : hard;
        if (target > soft) {
            struct rlimit nl = { (rlim_t)target, rl.rlim_max };
            if (setrlimit(RLIMIT_NOFILE, &nl) == 0) {
                log_info("open-files limit raised from %lld to %lld (max-clients %lld + max-open-files %lld + %d)",
                         soft, target, *max_clients, *max_open_files, FDLIMIT_FIXED_RESERVE);
                soft = target;
            } else {
                log_warn("cannot raise the open-files limit from %lld to %lld: %s", soft, target, strerror(errno));
            }
        }
    }
    if (fdlimit_plan(soft, *max_clients, *max_open_files, &plan, err, errlen) != 0) {
        return -1;
    }
    if (plan.max_open_files != *max_open_files) {
        log_warn("max-open-files lowered from %lld to %lld: the open-files limit (ulimit -n) is %lld and %lld are "
                 "needed; raise it (systemd: LimitNOFILE)",
                 *max_open_files, plan.max_open_files, soft, want);
        *max_open_files = plan.max_open_files;
    }
    if (plan.max_clients != *max_clients) {
        log_warn("max-clients lowered from %lld to %lld: the open-files limit (ulimit -n) is %lld and %lld are "
                 "needed (max-clients + max-open-files %lld + %d); raise it (systemd: LimitNOFILE)",
                 *max_clients, plan.max_clients, soft, want, *max_open_files, FDLIMIT_FIXED_RESERVE);
        *max_clients = plan.max_clients;
    }
    return 0;
}
