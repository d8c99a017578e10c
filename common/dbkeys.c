/*
 * common/dbkeys.c — checks of the MariaDB connection keys (contract:
 * dbkeys.h). Main thread, at start-up.
 */
#include "common/dbkeys.h"

#include <stdio.h>

int db_keys_check(const char *socket, char *err, size_t errlen)
{
    if (socket != NULL && socket[0] != '\0' && socket[0] != '/') {
        snprintf(err, errlen, "mysql-socket: '%s' is not an absolute path", socket);
        return -1;
    }
    return 0;
}

unsigned db_keys_seconds(unsigned long long ms)
{
    return (unsigned)((ms + 999) / 1000);
}
