/*
 * broker/diskguard.c — the reserve file and free space (see diskguard.h for
 * why).
 *
 * Thread: the storage thread (and main before it starts).
 */
#include "broker/diskguard.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "base/err.h"

uint64_t diskguard_free_bytes(const char *dir)
{
    struct statvfs v;
    if (statvfs(dir, &v) != 0) {
        return UINT64_MAX;
    }
    return (uint64_t)v.f_bavail * (uint64_t)v.f_frsize;
}

static void ballast_path(const char *dir, char *out, size_t outlen)
{
    snprintf(out, outlen, "%s/%s", dir, DISKGUARD_BALLAST);
}

int diskguard_ballast_create(const char *dir, uint64_t bytes, char *err, size_t errlen)
{
    char path[4096];
    ballast_path(dir, path, sizeof path);
    if (bytes == 0) {
        unlink(path);
        return 0;
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0640);
    if (fd < 0) {
        return err_set(err, errlen, "cannot create the disk reserve %s: %s", path, strerror(errno));
    }
    int rc = posix_fallocate(fd, 0, (off_t)bytes);
    if (rc == 0 && ftruncate(fd, (off_t)bytes) != 0) {
        rc = errno;
    }
    if (rc == 0 && fsync(fd) != 0) {
        rc = errno;
    }
    close(fd);
    if (rc != 0) {
        unlink(path);
        return err_set(err, errlen, "cannot write the %llu-byte disk reserve %s: %s", (unsigned long long)bytes, path,
                       strerror(rc));
    }
    return 0;
}

uint64_t diskguard_ballast_release(const char *dir)
{
    char path[4096];
    struct stat st;
    ballast_path(dir, path, sizeof path);
    if (stat(path, &st) != 0) {
        return 0;
    }
    if (unlink(path) != 0) {
        return 0;
    }
    return (uint64_t)st.st_blocks * 512;
}
