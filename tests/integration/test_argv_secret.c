/*
 * tests/integration/test_argv_secret.c — passwords on a command line are
 * hidden from ps (common/argv_secret.h): argv_secret_hide's rules, then the
 * real programs (hourglass-consumer started with --uri user:PW@ and
 * --mysql-password, hourglass-cli blocked on a broker that never answers,
 * hourglass-compensator and hourglass-console blocked reading a --config
 * FIFO), whose /proc/PID/cmdline must show 'x' where the password was, with
 * one warning on stderr. Each program in its own temp dir and free port.
 */
#include "common/argv_secret.h"
#include "tests/helpers/testutil.h"

#include <CUnit/CUnit.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define CONSUMER_BIN HG_BUILDDIR "/hourglass-consumer"
#define CLI_BIN      HG_BUILDDIR "/hourglass-cli"
#define WARNING      "Warning: using a password on the command line may not be safe; use "

/* ---------------------------------------------------------------- the rules */

static void check_uri(const char *in, const char *want, int hidden)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", in);
    int r = argv_secret_hide_uri(buf);
    TU_CHECK(r == hidden && strcmp(buf, want) == 0, "'%s' -> '%s' (%d), want '%s' (%d)", in, buf, r, want, hidden);
}

static void test_uri(void)
{
    check_uri("hourglass://ops:pw@127.0.0.1:7379", "hourglass://ops:xx@127.0.0.1:7379", 1);
    check_uri("hourglass+tls://ops:p:w@host?ca=/x@y", "hourglass+tls://ops:xxx@host?ca=/x@y", 1);
    check_uri("amqps://u:pa@ss@rabbit/vhost", "amqps://u:xxxxx@rabbit/vhost", 1);
    check_uri("user:secret@host", "user:xxxxxx@host", 1);
    check_uri("hourglass://ops@host", "hourglass://ops@host", 0);
    check_uri("hourglass://ops:@host", "hourglass://ops:@host", 0);
    check_uri("hourglass://host:7379", "hourglass://host:7379", 0);
    check_uri("hourglass://host/a:b@c", "hourglass://host/a:b@c", 0);
}

static void test_hide(void)
{
    char a0[] = "prog", a1[] = "--uri", a2[] = "hourglass://u:pw@h", a3[] = "--mysql-password=dbpw", a4[] = "-u",
         a5[] = "x://v:w@h", a6[] = "--mysql-password", a7[] = "pw2", a8[] = "--", a9[] = "--mysql-password",
         a10[] = "payload";
    char *argv[] = { a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, NULL };
    int argc = 11;
    char **copy = argv_secret_copy(argc, argv);
    FILE *warn = tmpfile();
    TU_REQUIRE(warn != NULL, "tmpfile");
    static const argv_secret_opt_t opts[] = { { "--uri", "-u", 1 }, { "--mysql-password", NULL, 0 } };
    int n = argv_secret_hide(argc, argv, opts, 2, "--password-file", warn);
    CU_ASSERT_EQUAL(n, 4);
    CU_ASSERT_STRING_EQUAL(a2, "hourglass://u:xx@h");
    CU_ASSERT_STRING_EQUAL(a3, "--mysql-password=xxxx");
    CU_ASSERT_STRING_EQUAL(a5, "x://v:x@h");
    CU_ASSERT_STRING_EQUAL(a7, "xxx");
    CU_ASSERT_STRING_EQUAL(a10, "payload"); /* after "--": a command's own argument */
    CU_ASSERT_STRING_EQUAL(copy[2], "hourglass://u:pw@h");
    CU_ASSERT_STRING_EQUAL(copy[3], "--mysql-password=dbpw");
    CU_ASSERT_PTR_NULL(copy[argc]);
    char line[200] = "";
    rewind(warn);
    TU_CHECK(fgets(line, sizeof line, warn) != NULL && strcmp(line, WARNING "--password-file\n") == 0, "warning '%s'",
             line);
    CU_ASSERT_PTR_NULL(fgets(line, sizeof line, warn)); /* one line */
    fclose(warn);
    argv_secret_free(argc, copy);
    /* nothing hidden: no warning */
    char b0[] = "prog", b1[] = "--uri", b2[] = "hourglass://h:1";
    char *plain[] = { b0, b1, b2, NULL };
    warn = tmpfile();
    CU_ASSERT_EQUAL(argv_secret_hide(3, plain, opts, 2, "--password-file", warn), 0);
    CU_ASSERT_EQUAL(ftell(warn), 0);
    fclose(warn);
}

/* ---------------------------------------------------------------- the programs */

/* Start argv with stdout and stderr into path; the pid, or -1. */
static pid_t spawn(const char *const *argv, const char *path)
{
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd < 0)
            _exit(127);
        dup2(fd, 1);
        dup2(fd, 2);
        close(fd);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    return pid;
}

typedef struct cmdline_wait {
    pid_t pid;
    char text[4096]; /* the NULs turned to spaces */
} cmdline_wait_t;

/* The process's cmdline shows hidden bytes ("xxxx"): read once it has exec'd the program (the libtool wrapper
 * before it carries the password too). */
static int cmdline_hidden(void *arg)
{
    cmdline_wait_t *w = arg;
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/cmdline", (int)w->pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    size_t n = fread(w->text, 1, sizeof w->text - 1, f);
    fclose(f);
    for (size_t i = 0; i < n; i++)
        if (w->text[i] == '\0')
            w->text[i] = ' ';
    w->text[n] = '\0';
    return strstr(w->text, "xxxx") != NULL;
}

static void stop(pid_t pid)
{
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

static void test_consumer(void)
{
    char dir[256], log[320], uri[128], port[16];
    TU_REQUIRE(tu_mkdtemp("argv-secret", dir, sizeof dir) == 0, "mkdtemp");
    snprintf(log, sizeof log, "%s/consumer.out", dir);
    int p = tu_free_port();
    TU_REQUIRE(p > 0, "no free port");
    /* a broker port where nothing listens, a MariaDB it cannot reach: the consumer keeps trying, and runs */
    snprintf(uri, sizeof uri, "hourglass://ops:SECRET-BROKER-PW@127.0.0.1:%d", tu_free_port());
    snprintf(port, sizeof port, "%d", p);
    const char *argv[] = { CONSUMER_BIN,
                           "--uri",
                           uri,
                           "--mysql-password",
                           "SECRET-DB-PW",
                           "--mysql-socket",
                           "/nonexistent/mysqld.sock",
                           "--mysql-database",
                           "orders",
                           "--metrics-port",
                           port,
                           NULL };
    cmdline_wait_t w = { .pid = spawn(argv, log) };
    TU_REQUIRE(w.pid > 0, "fork");
    int shown = tu_poll_until(cmdline_hidden, &w, 15000, 20) == 0;
    stop(w.pid);
    TU_CHECK(shown && strstr(w.text, "SECRET") == NULL, "hourglass-consumer's cmdline: '%s'", w.text);
    TU_CHECK(strstr(w.text, "hourglass://ops:xxxxxxxxxxxxxxxx@127.0.0.1:") != NULL &&
                 strstr(w.text, " xxxxxxxxxxxx ") != NULL,
             "hourglass-consumer's cmdline: '%s'", w.text);
    TU_CHECK(tu_wait_file_contains(log, WARNING "password-file and mysql-password-file", 5000) == 0, "no warning in %s",
             log);
    tu_rmtree(dir);
}

static void test_cli(void)
{
    char dir[256], log[320], uri[128];
    TU_REQUIRE(tu_mkdtemp("argv-secret", dir, sizeof dir) == 0, "mkdtemp");
    snprintf(log, sizeof log, "%s/cli.out", dir);
    /* a "broker" that accepts and never answers: the cli waits for its PING's reply */
    int ls = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t al = sizeof a;
    TU_REQUIRE(ls >= 0 && bind(ls, (struct sockaddr *)&a, sizeof a) == 0 && listen(ls, 4) == 0 &&
                   getsockname(ls, (struct sockaddr *)&a, &al) == 0,
               "listen");
    snprintf(uri, sizeof uri, "hourglass://ops:SECRET-PW@127.0.0.1:%d", ntohs(a.sin_port));
    const char *argv[] = { CLI_BIN, "--timeout", "60000", "--uri", uri, "ping", NULL };
    cmdline_wait_t w = { .pid = spawn(argv, log) };
    TU_REQUIRE(w.pid > 0, "fork");
    int shown = tu_poll_until(cmdline_hidden, &w, 15000, 20) == 0;
    stop(w.pid);
    close(ls);
    TU_CHECK(shown && strstr(w.text, "SECRET") == NULL &&
                 strstr(w.text, "hourglass://ops:xxxxxxxxx@127.0.0.1:") != NULL,
             "hourglass-cli's cmdline: '%s'", w.text);
    TU_CHECK(tu_wait_file_contains(log, WARNING "--password-file", 5000) == 0, "no warning in %s", log);
    tu_rmtree(dir);
}

/* program (hourglass-compensator, hourglass-console) started with --uri user:PW@ and --mysql-password, and
 * --config a FIFO no one writes: it blocks reading its configuration, alive, after hiding its argv (the first
 * thing its main does) — no MariaDB or broker needed. Its cmdline must show 'x' in place of both passwords and
 * its stderr the one warning naming use_instead. */
static void expect_daemon_hides(const char *program, const char *use_instead)
{
    char dir[256], log[320], fifo[320], bin[512];
    TU_REQUIRE(tu_mkdtemp("argv-secret", dir, sizeof dir) == 0, "mkdtemp");
    snprintf(log, sizeof log, "%s/%s.out", dir, program);
    snprintf(fifo, sizeof fifo, "%s/%s.conf", dir, program);
    snprintf(bin, sizeof bin, HG_BUILDDIR "/%s", program);
    TU_REQUIRE(mkfifo(fifo, 0600) == 0, "mkfifo %s", fifo);
    const char *argv[] = {
        bin,  "--uri", "hourglass://ops:SECRET-BROKER-PW@127.0.0.1:1", "--mysql-password", "SECRET-DB-PW", "--config",
        fifo, NULL
    };
    cmdline_wait_t w = { .pid = spawn(argv, log) };
    TU_REQUIRE(w.pid > 0, "fork");
    int shown = tu_poll_until(cmdline_hidden, &w, 15000, 20) == 0;
    int warned = tu_wait_file_contains(log, WARNING, 5000) == 0;
    stop(w.pid);
    TU_CHECK(shown && strstr(w.text, "SECRET") == NULL &&
                 strstr(w.text, "hourglass://ops:xxxxxxxxxxxxxxxx@127.0.0.1:1 --mysql-password xxxxxxxxxxxx ") != NULL,
             "%s's cmdline: '%s'", program, w.text);
    char want[256];
    snprintf(want, sizeof want, WARNING "%s", use_instead);
    TU_CHECK(warned && tu_wait_file_contains(log, want, 1000) == 0, "no warning '%s' in %s", want, log);
    tu_rmtree(dir);
}

static void test_compensator(void)
{
    expect_daemon_hides("hourglass-compensator", "password-file and mysql-password-file");
}

static void test_console(void)
{
    expect_daemon_hides("hourglass-console", "sampler-password-file and mysql-password-file");
}

static const tu_test_t rule_tests[] = {
    { "a URI's password, and only it", test_uri },
    { "argv: the values of the options, one warning, the copy intact", test_hide },
    { NULL, NULL },
};
static const tu_test_t program_tests[] = {
    { "hourglass-consumer --uri user:PW@ --mysql-password PW", test_consumer },
    { "hourglass-cli --uri hourglass://ops:PW@ (blocked)", test_cli },
    { "hourglass-compensator --uri user:PW@ --mysql-password PW (blocked)", test_compensator },
    { "hourglass-console --uri user:PW@ --mysql-password PW (blocked)", test_console },
    { NULL, NULL },
};
static const tu_suite_t suites[] = {
    { "rules", rule_tests },
    { "programs", program_tests },
};

int main(int argc, char **argv)
{
    return tu_suites_main(argc, argv, suites, sizeof suites / sizeof suites[0], NULL, NULL);
}
