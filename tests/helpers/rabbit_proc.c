/*
 * tests/helpers/rabbit_proc.c — private RabbitMQ nodes (contract in
 * rabbit_proc.h).
 *
 * Everything a node reads comes from the environment we give it: HOME (the
 * cookie), RABBITMQ_CONF_ENV_FILE (an empty file, so /etc/rabbitmq's is not
 * read), RABBITMQ_NODENAME, _NODE_PORT, _DIST_PORT, _MNESIA_BASE, _LOG_BASE,
 * _CONFIG_FILE, _ENABLED_PLUGINS_FILE (no plugins), ERL_EPMD_PORT. Runs on
 * the test's main thread.
 */
#include "tests/helpers/rabbit_proc.h"
#include "tests/helpers/testutil.h"

#include <hourglass/hourglass.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

/* A free port below 50000 (rabbitmqctl would add 10000 to a dist port). */
static int low_free_port(void)
{
    for (int i = 0; i < 200; i++) {
        int p = tu_free_port();
        if (p > 1024 && p < 50000)
            return p;
    }
    return tu_free_port();
}

static void set_env(rq_cluster_t *c, const rq_node_t *nd)
{
    char v[700];
    setenv("HOME", c->dir, 1);
    snprintf(v, sizeof(v), "%s/env.conf", c->dir);
    setenv("RABBITMQ_CONF_ENV_FILE", v, 1);
    snprintf(v, sizeof(v), "%d", c->epmd_port);
    setenv("ERL_EPMD_PORT", v, 1);
    snprintf(v, sizeof(v), "%d", c->ctl_port);
    setenv("RABBITMQ_CTL_DIST_PORT_MIN", v, 1);
    snprintf(v, sizeof(v), "%d", c->ctl_port + 20);
    setenv("RABBITMQ_CTL_DIST_PORT_MAX", v, 1);
    setenv("RABBITMQ_USE_LONGNAME", "false", 1);
    if (nd == NULL)
        return;
    setenv("RABBITMQ_NODENAME", nd->name, 1);
    snprintf(v, sizeof(v), "%d", nd->amqp_port);
    setenv("RABBITMQ_NODE_PORT", v, 1);
    snprintf(v, sizeof(v), "%d", nd->dist_port);
    setenv("RABBITMQ_DIST_PORT", v, 1);
    snprintf(v, sizeof(v), "%s/mnesia", nd->dir);
    setenv("RABBITMQ_MNESIA_BASE", v, 1);
    snprintf(v, sizeof(v), "%s/log", nd->dir);
    setenv("RABBITMQ_LOG_BASE", v, 1);
    snprintf(v, sizeof(v), "%s/rabbitmq.conf", nd->dir);
    setenv("RABBITMQ_CONFIG_FILE", v, 1);
    snprintf(v, sizeof(v), "%s/advanced.config", nd->dir);
    setenv("RABBITMQ_ADVANCED_CONFIG_FILE", v, 1);
    snprintf(v, sizeof(v), "%s/enabled_plugins", nd->dir);
    setenv("RABBITMQ_ENABLED_PLUGINS_FILE", v, 1);
    snprintf(v, sizeof(v), "%s/pid", nd->dir);
    setenv("RABBITMQ_PID_FILE", v, 1);
}

static int spawn_node(rq_cluster_t *c, int i, char *err, size_t errlen)
{
    rq_node_t *nd = &c->nodes[i];
    char log[700];
    pid_t pid;

    snprintf(log, sizeof(log), "%s/out.log", nd->dir);
    pid = fork();
    if (pid < 0)
        return fail(err, errlen, "fork: %s", strerror(errno));
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        setsid();
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        fd = open("/dev/null", O_RDONLY);
        if (fd >= 0) {
            dup2(fd, 0);
            close(fd);
        }
        set_env(c, nd);
        if (chdir(nd->dir) != 0)
            _exit(126);
        execl(RQ_SERVER, RQ_SERVER, (char *)NULL);
        _exit(127);
    }
    nd->pid = pid;
    return 0;
}

int rq_wait_ready(rq_cluster_t *c, int i, int deadline_ms, char *err, size_t errlen)
{
    hg_client_opts_t o;
    uint64_t end = tu_now_mono_ms() + (uint64_t)deadline_ms;

    hg_client_opts_init(&o);
    o.reconnect = 0;
    o.connect_timeout_ms = 2000;
    o.read_timeout_ms = 10000;
    while (tu_now_mono_ms() < end) {
        hg_client_t *cl = NULL;
        hg_error_t e;
        int st;
        if (c->nodes[i].pid > 0 && waitpid(c->nodes[i].pid, &st, WNOHANG) == c->nodes[i].pid) {
            c->nodes[i].pid = 0;
            return fail(err, errlen, "RabbitMQ node %s exited during start (see %s/out.log)", c->nodes[i].name,
                        c->nodes[i].dir);
        }
        if (hg_client_open(c->nodes[i].uri, &o, &cl, &e) == HG_OK) {
            hg_reply_t *r = NULL;
            int ok = hg_client_command(cl, 1, (const char *const[]){ "PING" }, NULL, &r) == HG_OK;
            hg_reply_free(r);
            hg_client_close(cl);
            if (ok)
                return 0;
        }
        usleep(500 * 1000);
    }
    return fail(err, errlen, "RabbitMQ node %s did not answer on port %d within %d ms", c->nodes[i].name,
                c->nodes[i].amqp_port, deadline_ms);
}

/* Runs argv (rabbitmqctl and its arguments) against c's environment, its
 * output into out; rabbitmqctl's exit status, or -1. */
static int ctl_run(rq_cluster_t *c, const tu_argv_t *argv, char *out, size_t outlen)
{
    int pipefd[2], status = 0;
    size_t used = 0;
    pid_t pid;

    if (outlen > 0)
        out[0] = '\0';
    if (pipe(pipefd) != 0)
        return -1;
    pid = fork();
    if (pid < 0) {
        close(pipefd[0]);
        close(pipefd[1]);
        return -1;
    }
    if (pid == 0) {
        dup2(pipefd[1], 1);
        dup2(pipefd[1], 2);
        close(pipefd[0]);
        close(pipefd[1]);
        set_env(c, NULL);
        execv(RQ_CTL, (char *const *)argv->word);
        _exit(127);
    }
    close(pipefd[1]);
    for (;;) {
        char buf[4096];
        ssize_t n = read(pipefd[0], buf, sizeof(buf));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        if (used + 1 < outlen) {
            size_t take = (size_t)n < outlen - 1 - used ? (size_t)n : outlen - 1 - used;
            memcpy(out + used, buf, take);
            used += take;
            out[used] = '\0';
        }
    }
    close(pipefd[0]);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* rabbitmqctl failed before it reached the node: "unable to perform an
 * operation" while its own diagnostics find the node up with rabbit
 * running (its distribution connection failed: seen a few times a CI run).
 * The command never ran, so running it again is safe for every command. */
static int ctl_missed_running_node(const char *out)
{
    return strstr(out, "unable to perform an operation on node") != NULL &&
           strstr(out, "'rabbit' application running") != NULL;
}

#define RQ_CTL_TRIES    5    /* runs of a command whose CLI missed a running node */
#define RQ_CTL_RETRY_MS 1000 /* between them */

int rq_ctl(rq_cluster_t *c, int i, char *out, size_t outlen, ...)
{
    tu_argv_t argv;
    va_list ap;

    tu_argv_init(&argv);
    tu_argv_add(&argv, RQ_CTL);
    tu_argv_add(&argv, "-n");
    tu_argv_add(&argv, c->nodes[i].name);
    va_start(ap, outlen);
    tu_argv_add_va(&argv, ap);
    va_end(ap);
    if (outlen > 0)
        out[0] = '\0';
    if (tu_argv_check(&argv) != 0)
        return -1;
    int rc = ctl_run(c, &argv, out, outlen);
    for (int tried = 1; rc != 0 && tried < RQ_CTL_TRIES && ctl_missed_running_node(out); tried++) {
        printf("\n    rabbitmqctl %s on %s missed the running node (try %d of %d); running it again\n", argv.word[3],
               c->nodes[i].name, tried, RQ_CTL_TRIES);
        poll(NULL, 0, RQ_CTL_RETRY_MS);
        rc = ctl_run(c, &argv, out, outlen);
    }
    return rc;
}

/* 1 when node ask's cluster_status lists every node running. */
static int cluster_complete(rq_cluster_t *c, int ask)
{
    char out[16384];
    const char *running, *end;

    if (rq_ctl(c, ask, out, sizeof(out), "cluster_status", "--formatter", "json", NULL) != 0)
        return 0;
    running = strstr(out, "\"running_nodes\":[");
    if (running == NULL)
        return 0;
    end = strchr(running, ']');
    for (int i = 0; i < c->n; i++) {
        const char *hit = strstr(running, c->nodes[i].name);
        if (hit == NULL || (end != NULL && hit > end))
            return 0;
    }
    return 1;
}

static int wait_cluster(rq_cluster_t *c, int ask, char *err, size_t errlen)
{
    uint64_t end = tu_now_mono_ms() + RQ_START_DEADLINE_MS;
    while (tu_now_mono_ms() < end) {
        if (cluster_complete(c, ask))
            return 0;
        sleep(2);
    }
    return fail(err, errlen, "the RabbitMQ cluster did not list all %d nodes running within %d ms", c->n,
                RQ_START_DEADLINE_MS);
}

static int write_node_files(rq_cluster_t *c, int i)
{
    rq_node_t *nd = &c->nodes[i];
    const char *level = getenv("HG_RABBIT_LOG_LEVEL");
    const char *handling = getenv("HG_RABBIT_PARTITION_HANDLING");
    const char *ticktime = getenv("HG_RABBIT_NET_TICKTIME");
    char path[700], text[6144];
    int len;

    len = snprintf(text, sizeof(text),
                   "listeners.tcp.default = 127.0.0.1:%d\n"
                   "loopback_users = none\n"
                   "log.console = false\n"
                   "log.file.level = %s\n"
                   "cluster_partition_handling = %s\n",
                   nd->amqp_port, level != NULL && level[0] != '\0' ? level : "info",
                   handling != NULL && handling[0] != '\0' ? handling : "pause_minority");
    if (c->tls_ca[0] != '\0')
        len += snprintf(text + len, sizeof(text) - (size_t)len,
                        "listeners.ssl.default = 127.0.0.1:%d\n"
                        "ssl_options.cacertfile = %s\n"
                        "ssl_options.certfile = %s\n"
                        "ssl_options.keyfile = %s\n"
                        "ssl_options.verify = verify_peer\n"
                        "ssl_options.fail_if_no_peer_cert = true\n",
                        nd->amqps_port, c->tls_ca, c->tls_cert, c->tls_key);
    if (c->n > 1)
        len += snprintf(text + len, sizeof(text) - (size_t)len,
                        "cluster_formation.peer_discovery_backend = classic_config\n"
                        "cluster_formation.classic_config.nodes.1 = %s\n",
                        c->nodes[0].name);
    snprintf(path, sizeof(path), "%s/rabbitmq.conf", nd->dir);
    if (tu_write_file(path, text) != 0)
        return -1;
    snprintf(path, sizeof(path), "%s/advanced.config", nd->dir);
    if (ticktime != NULL && ticktime[0] != '\0' && strspn(ticktime, "0123456789") != strlen(ticktime)) {
        fprintf(stderr, "rabbit_proc: HG_RABBIT_NET_TICKTIME='%s' is not a number of seconds\n", ticktime);
        return -1;
    }
    snprintf(text, sizeof(text),
             "[{kernel, [{net_ticktime, %s}]},\n"
             " {rabbit, [{dead_letter_worker_publisher_confirm_timeout, " RQ_DLX_CONFIRM_TIMEOUT_MS "}]}].\n",
             ticktime != NULL && ticktime[0] != '\0' ? ticktime : "60");
    if (tu_write_file(path, text) != 0)
        return -1;
    snprintf(path, sizeof(path), "%s/enabled_plugins", nd->dir);
    return tu_write_file(path, "[].\n");
}

int rq_start(rq_cluster_t *c, int n, char *err, size_t errlen)
{
    return rq_start_tls(c, n, NULL, NULL, NULL, err, errlen);
}

int rq_start_tls(rq_cluster_t *c, int n, const char *ca, const char *cert, const char *key, char *err, size_t errlen)
{
    char path[700], cookie[64];
    pid_t epmd;

    memset(c, 0, sizeof(*c));
    if (ca != NULL) {
        snprintf(c->tls_ca, sizeof(c->tls_ca), "%s", ca);
        snprintf(c->tls_cert, sizeof(c->tls_cert), "%s", cert);
        snprintf(c->tls_key, sizeof(c->tls_key), "%s", key);
    }
    if (n < 1 || n > RQ_MAX_NODES)
        return fail(err, errlen, "rq_start: %d nodes (want 1..%d)", n, RQ_MAX_NODES);
    if (tu_mkdtemp("hg-rabbit", c->dir, sizeof(c->dir)) != 0)
        return fail(err, errlen, "cannot make a temp dir: %s", strerror(errno));
    c->n = n;
    snprintf(cookie, sizeof(cookie), "HGTEST%ld%ld", (long)getpid(), (long)time(NULL));
    snprintf(path, sizeof(path), "%s/.erlang.cookie", c->dir);
    if (tu_write_file(path, cookie) != 0 || chmod(path, 0400) != 0)
        return rq_destroy(c, 0), fail(err, errlen, "cannot write the cookie %s", path);
    snprintf(path, sizeof(path), "%s/env.conf", c->dir);
    tu_write_file(path, "");
    c->epmd_port = low_free_port();
    c->ctl_port = low_free_port();
    epmd = fork();
    if (epmd == 0) {
        char port[16];
        int fd = open("/dev/null", O_RDWR);
        setsid();
        if (fd >= 0) {
            dup2(fd, 0);
            dup2(fd, 1);
            dup2(fd, 2);
        }
        snprintf(port, sizeof(port), "%d", c->epmd_port);
        execlp("epmd", "epmd", "-port", port, (char *)NULL);
        execl("/usr/lib/erlang/bin/epmd", "epmd", "-port", port, (char *)NULL);
        _exit(127);
    }
    c->epmd_pid = epmd;
    {
        size_t used = 0;
        used += (size_t)snprintf(c->uri + used, sizeof(c->uri) - used, "amqp://guest:guest@");
        for (int i = 0; i < n; i++) {
            rq_node_t *nd = &c->nodes[i];
            snprintf(nd->name, sizeof(nd->name), "hg%ld_%d@localhost", (long)getpid(), i + 1);
            snprintf(nd->dir, sizeof(nd->dir), "%s/node%d", c->dir, i + 1);
            nd->amqp_port = low_free_port();
            do
                nd->dist_port = low_free_port();
            while (nd->dist_port == nd->amqp_port);
            snprintf(nd->uri, sizeof(nd->uri), "amqp://guest:guest@127.0.0.1:%d/", nd->amqp_port);
            used += (size_t)snprintf(c->uri + used, sizeof(c->uri) - used, "%s127.0.0.1:%d", i > 0 ? "," : "",
                                     nd->amqp_port);
            if (ca != NULL) {
                size_t t = strlen(c->uri_tls);
                do
                    nd->amqps_port = low_free_port();
                while (nd->amqps_port == nd->amqp_port || nd->amqps_port == nd->dist_port);
                snprintf(c->uri_tls + t, sizeof(c->uri_tls) - t, "%s127.0.0.1:%d", i > 0 ? "," : "amqps://guest:guest@",
                         nd->amqps_port);
            }
            if (mkdir(nd->dir, 0755) != 0 || write_node_files(c, i) != 0)
                return rq_destroy(c, 0), fail(err, errlen, "cannot prepare %s", nd->dir);
        }
        snprintf(c->uri + used, sizeof(c->uri) - used, "/");
        if (ca != NULL) {
            size_t t = strlen(c->uri_tls);
            snprintf(c->uri_tls + t, sizeof(c->uri_tls) - t, "/");
        }
    }
    usleep(200 * 1000); /* epmd listening */
    if (spawn_node(c, 0, err, errlen) != 0 || rq_wait_ready(c, 0, RQ_START_DEADLINE_MS, err, errlen) != 0)
        return rq_destroy(c, 1), -1;
    for (int i = 1; i < n; i++)
        if (spawn_node(c, i, err, errlen) != 0)
            return rq_destroy(c, 1), -1;
    for (int i = 1; i < n; i++)
        if (rq_wait_ready(c, i, RQ_START_DEADLINE_MS, err, errlen) != 0)
            return rq_destroy(c, 1), -1;
    if (n > 1 && wait_cluster(c, 0, err, errlen) != 0)
        return rq_destroy(c, 1), -1;
    return 0;
}

static void reap(rq_node_t *nd)
{
    if (nd->pid > 0) {
        kill(-nd->pid, SIGKILL);
        kill(nd->pid, SIGKILL);
        waitpid(nd->pid, NULL, 0);
    }
    nd->pid = 0;
}

#define RQ_GROUP_GONE_MS 5000 /* rq_kill9: how long the killed group's processes may take to go */

/* tu_poll_until's condition: no process of the group *arg is left. */
static int group_gone(void *arg)
{
    return kill(-*(pid_t *)arg, 0) != 0 && errno == ESRCH;
}

int rq_kill9(rq_cluster_t *c, int i)
{
    if (i < 0 || i >= c->n || c->nodes[i].pid <= 0)
        return -1;
    /* reap() forgets the pid (the group's id): keep it for the wait. Until
     * 2026-12-07 the wait asked about group 0 — our own — so it always ran
     * its whole 5 s. */
    pid_t group = c->nodes[i].pid;
    kill(-group, SIGCONT);
    reap(&c->nodes[i]);
    /* beam.smp and its helpers are in the group: wait until they are gone
     * (their listeners closed) before a restart binds the same ports */
    if (tu_poll_until(group_gone, &group, RQ_GROUP_GONE_MS, 20) != 0)
        fprintf(stderr, "rq_kill9: node %d's process group %ld still has processes after %d ms\n", i + 1, (long)group,
                RQ_GROUP_GONE_MS);
    return 0;
}

int rq_signal(rq_cluster_t *c, int i, int sig)
{
    if (i < 0 || i >= c->n || c->nodes[i].pid <= 0)
        return -1;
    return kill(-c->nodes[i].pid, sig);
}

/* The nftables table of node i's partition: one per test process and node. */
static void partition_table(const rq_cluster_t *c, int i, char *name, size_t len)
{
    snprintf(name, len, "hg_rq_%ld_%d", (long)getpid(), i);
}

static int run_nft(const char *script, char *err, size_t errlen)
{
    const char *argv[] = { RQ_NFT, "-f", "-", NULL };
    int pipefd[2], status = 0;
    pid_t pid;
    ssize_t w;

    if (access(RQ_NFT, X_OK) != 0)
        return fail(err, errlen, "%s: %s (install the Debian package nftables)", RQ_NFT, strerror(errno));
    if (pipe(pipefd) != 0)
        return fail(err, errlen, "pipe: %s", strerror(errno));
    pid = fork();
    if (pid == 0) {
        dup2(pipefd[0], 0);
        close(pipefd[0]);
        close(pipefd[1]);
        execv(RQ_NFT, (char *const *)argv);
        _exit(127);
    }
    close(pipefd[0]);
    w = pid > 0 ? write(pipefd[1], script, strlen(script)) : -1;
    close(pipefd[1]);
    if (pid < 0 || w != (ssize_t)strlen(script))
        return fail(err, errlen, "cannot run %s: %s", RQ_NFT, strerror(errno));
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return fail(err, errlen, "%s -f - failed (status %d) on:\n%s", RQ_NFT, status, script);
    return 0;
}

#define CTL_EVAL_DEADLINE_MS 30000 /* rq_partition's evals: how long a node's CLI connection may keep failing */

typedef struct ctl_eval {
    rq_cluster_t *c;
    int node;
    const char *expr;
    char *out;
    size_t outlen;
} ctl_eval_t;

/* tu_poll_until's condition: rabbitmqctl eval ran on the node. */
static int ctl_eval_ok(void *arg)
{
    ctl_eval_t *e = arg;
    return rq_ctl(e->c, e->node, e->out, e->outlen, "eval", e->expr, NULL) == 0;
}

/* The local ports of node i's distribution links to the other nodes that
 * node i made itself (from 127.0.0.1, to their distribution ports): ss
 * names the process of each established socket; a process of node i's
 * process group owns them. Up to max; the count, or -1. */
static int own_link_ports(rq_cluster_t *c, int i, int *ports, int max, char *err, size_t errlen)
{
    const char *argv[] = { RQ_SS, "-Htnp", "state", "established", NULL };
    static char out[1 << 20];
    int n = 0;

    if (tu_run_capture(argv, out, sizeof(out)) != 0)
        return fail(err, errlen, "%s -Htnp: %s", RQ_SS, out);
    for (char *line = strtok(out, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        int local = 0, peer = 0, pid = 0, known = 0;
        char *p = strstr(line, "pid=");
        if (p == NULL || sscanf(line, "%*d %*d 127.0.0.1:%d 127.0.0.1:%d", &local, &peer) != 2)
            continue;
        pid = atoi(p + 4);
        for (int j = 0; j < c->n; j++)
            known |= j != i && peer == c->nodes[j].dist_port;
        if (known && pid > 0 && getpgid(pid) == c->nodes[i].pid && n < max)
            ports[n++] = local;
    }
    return n;
}

int rq_partition(rq_cluster_t *c, int i, int cut_links, char *err, size_t errlen)
{
    char table[64], script[4096], set[160], out[4096], addr[32];
    int ports[16], nports, len;

    if (i < 0 || i >= c->n || c->n < 2)
        return fail(err, errlen, "rq_partition: no node %d to cut from %d others", i + 1, c->n - 1);
    partition_table(c, i, table, sizeof(table));
    snprintf(addr, sizeof(addr), "127.0.0.%d", 2 + i);
    snprintf(set, sizeof(set), "application:set_env(kernel, inet_dist_connect_options, [{ip, {127,0,0,%d}}]).", 2 + i);
    if (rq_ctl(c, i, out, sizeof(out), "eval", set, NULL) != 0)
        return fail(err, errlen, "node %d: %s: %s", i + 1, set, out);
    if ((nports = own_link_ports(c, i, ports, 16, err, errlen)) < 0)
        return -1;
    len = snprintf(script, sizeof(script),
                   "table inet %s {\n"
                   "  chain out {\n"
                   "    type filter hook output priority 0; policy accept;\n"
                   "    tcp dport %d drop\n"
                   "    tcp sport %d drop\n"
                   "    ip saddr %s drop\n"
                   "    ip daddr %s drop\n",
                   table, c->nodes[i].dist_port, c->nodes[i].dist_port, addr, addr);
    for (int k = 0; k < nports; k++)
        len += snprintf(script + len, sizeof(script) - (size_t)len, "    tcp sport %d drop\n    tcp dport %d drop\n",
                        ports[k], ports[k]);
    snprintf(script + len, sizeof(script) - (size_t)len, "  }\n}\n");
    if (run_nft(script, err, errlen) != 0)
        return -1;
    c->nodes[i].cut_off = 1;
    if (!cut_links)
        return 0;
    /* the links up now end at once, as the net tick would end them; every
     * new one is dropped by the table. rabbitmqctl's own connection to a
     * node may fail on a loaded (sanitizer) run ("unable to perform an
     * operation on node"): the eval is idempotent, so it is polled. */
    for (int j = 0; j < c->n; j++) {
        char cut[200];
        if (j == i)
            continue;
        snprintf(cut, sizeof(cut), "erlang:disconnect_node('%s').", c->nodes[i].name);
        ctl_eval_t ev = { c, j, cut, out, sizeof(out) };
        if (tu_poll_until(ctl_eval_ok, &ev, CTL_EVAL_DEADLINE_MS, 500) != 0)
            return fail(err, errlen, "node %d: %s (tried for %d ms): %s", j + 1, cut, CTL_EVAL_DEADLINE_MS, out);
    }
    return 0;
}

int rq_heal(rq_cluster_t *c, int i, char *err, size_t errlen)
{
    char table[64], script[128], out[4096];

    partition_table(c, i, table, sizeof(table));
    snprintf(script, sizeof(script), "delete table inet %s\n", table);
    if (run_nft(script, err, errlen) != 0)
        return -1;
    c->nodes[i].cut_off = 0;
    if (rq_ctl(c, i, out, sizeof(out), "eval", "application:set_env(kernel, inet_dist_connect_options, []).", NULL) !=
        0)
        return fail(err, errlen, "node %d: resetting inet_dist_connect_options: %s", i + 1, out);
    return wait_cluster(c, i == 0 ? 1 : 0, err, errlen);
}

int rq_set_partition_handling(rq_cluster_t *c, const char *mode, char *err, size_t errlen)
{
    char expr[128], out[4096];

    if (strcmp(mode, "ignore") != 0 && strcmp(mode, "autoheal") != 0 && strcmp(mode, "pause_minority") != 0)
        return fail(err, errlen,
                    "rq_set_partition_handling: unknown mode '%s' (want ignore, autoheal or pause_minority)", mode);
    snprintf(expr, sizeof(expr), "application:set_env(rabbit, cluster_partition_handling, %s).", mode);
    for (int j = 0; j < c->n; j++) {
        ctl_eval_t ev = { c, j, expr, out, sizeof(out) };
        if (tu_poll_until(ctl_eval_ok, &ev, CTL_EVAL_DEADLINE_MS, 500) != 0)
            return fail(err, errlen, "node %d: setting cluster_partition_handling to %s: %s", j + 1, mode, out);
    }
    return 0;
}

int rq_heal_restart(rq_cluster_t *c, int i, char *err, size_t errlen)
{
    char table[64], script[128];

    partition_table(c, i, table, sizeof(table));
    snprintf(script, sizeof(script), "delete table inet %s\n", table);
    if (run_nft(script, err, errlen) != 0)
        return -1;
    c->nodes[i].cut_off = 0;
    return rq_restart(c, i, err, errlen);
}

int rq_restart(rq_cluster_t *c, int i, char *err, size_t errlen)
{
    if (c->nodes[i].pid > 0)
        rq_kill9(c, i);
    if (spawn_node(c, i, err, errlen) != 0 || rq_wait_ready(c, i, RQ_START_DEADLINE_MS, err, errlen) != 0)
        return -1;
    return c->n > 1 ? wait_cluster(c, i, err, errlen) : 0;
}

int rq_queue_leader(rq_cluster_t *c, int ask, const char *queue)
{
    char out[16384];
    const char *line;

    if (rq_ctl(c, ask, out, sizeof(out), "list_queues", "-q", "--no-table-headers", "name", "leader", NULL) != 0)
        return -1;
    for (line = out; line != NULL && *line != '\0';) {
        const char *end = strchr(line, '\n');
        size_t qlen = strlen(queue);
        if (strncmp(line, queue, qlen) == 0 && (line[qlen] == '\t' || line[qlen] == ' '))
            for (int i = 0; i < c->n; i++) {
                const char *hit = strstr(line + qlen, c->nodes[i].name);
                if (hit != NULL && (end == NULL || hit < end))
                    return i;
            }
        line = end != NULL ? end + 1 : NULL;
    }
    return -1;
}

/* A node's dead-letter supervisor (whereis(rabbit_fifo_dlx_sup): its pid,
 * or undefined when it does not run) and the queues whose at-least-once
 * dead-letter worker runs under it (one per queue, on its leader; a queue
 * whose leader has none keeps its expired messages). */
#define RQ_DLX_WORKERS_EVAL                                                                              \
    "{whereis(rabbit_fifo_dlx_sup), catch lists:sort([case catch element(2, sys:get_state(P, 2000)) of " \
    "{resource, _, queue, N} -> N; E -> E end || {_, P, _, _} <- supervisor:which_children(rabbit_fifo_dlx_sup)])}."

void rq_print_queue_state(rq_cluster_t *c, int ask, const char *const *queues)
{
    static char out[65536];
    int rc;

    rc = rq_ctl(c, ask, out, sizeof(out), "list_queues", "name", "leader", "members", "online", "messages",
                "messages_ready", "messages_unacknowledged", NULL);
    printf("\n--- queues, asking node %d (rabbitmqctl list_queues: exit %d) ---\n%s", ask + 1, rc, out);
    printf("(a quorum queue's messages - messages_ready - messages_unacknowledged: held by its dead-letter worker)\n");
    for (size_t i = 0; queues != NULL && queues[i] != NULL; i++) { /* rabbitmq-queues quorum_status's call */
        char status[512];
        snprintf(status, sizeof(status), "rabbit_quorum_queue:status(<<\"/\">>, <<\"%s\">>).", queues[i]);
        rc = rq_ctl(c, ask, out, sizeof(out), "eval", status, NULL);
        printf("--- %s, asking node %d (quorum status: exit %d) ---\n%s", queues[i], ask + 1, rc, out);
    }
    for (int i = 0; i < c->n; i++) {
        rc = rq_ctl(c, i, out, sizeof(out), "eval", RQ_DLX_WORKERS_EVAL, NULL);
        printf("--- dead-letter supervisor and workers on node %d ({whereis(rabbit_fifo_dlx_sup), the queues they "
               "serve}; rabbitmqctl eval: exit %d) ---\n%s",
               i + 1, rc, out);
    }
    fflush(stdout);
}

static void print_file(const char *path, size_t tail)
{
    FILE *f = fopen(path, "r");
    char buf[4096];
    long size;
    size_t n;

    if (f == NULL)
        return;
    fseek(f, 0, SEEK_END);
    size = ftell(f);
    if (size > (long)tail)
        fseek(f, size - (long)tail, SEEK_SET);
    else
        fseek(f, 0, SEEK_SET);
    fprintf(stderr, "---- %s (last %zu bytes) ----\n", path, tail);
    while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
        fwrite(buf, 1, n, stderr);
    fclose(f);
}

void rq_destroy(rq_cluster_t *c, int print_logs)
{
    for (int i = 0; i < c->n; i++) {
        char path[800];
        if (c->nodes[i].cut_off) { /* the host's firewall outlives the test otherwise */
            char table[64], script[128], err[512];
            partition_table(c, i, table, sizeof(table));
            snprintf(script, sizeof(script), "delete table inet %s\n", table);
            if (run_nft(script, err, sizeof(err)) != 0)
                fprintf(stderr, "rq_destroy: %s\n", err);
            c->nodes[i].cut_off = 0;
        }
        if (c->nodes[i].pid > 0)
            kill(-c->nodes[i].pid, SIGCONT);
        reap(&c->nodes[i]);
        if (print_logs) {
            snprintf(path, sizeof(path), "%s/out.log", c->nodes[i].dir);
            print_file(path, 4000);
            snprintf(path, sizeof(path), "%s/log/%s.log", c->nodes[i].dir, c->nodes[i].name);
            print_file(path, 6000);
        }
    }
    if (c->epmd_pid > 0) {
        kill(c->epmd_pid, SIGKILL);
        waitpid(c->epmd_pid, NULL, 0);
        c->epmd_pid = 0;
    }
    if (c->dir[0] != '\0') {
        const char *keep = getenv("HG_KEEP_TMP");
        if (keep == NULL || strcmp(keep, "1") != 0)
            tu_rmtree(c->dir);
        c->dir[0] = '\0';
    }
}
