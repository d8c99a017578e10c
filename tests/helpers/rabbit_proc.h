/*
 * tests/helpers/rabbit_proc.h — private RabbitMQ nodes for a test.
 *
 * rq_start makes a fresh temp dir (hg-rabbit-XXXXXX) holding one cookie
 * (DIR/.erlang.cookie, used as $HOME by the nodes and by rabbitmqctl), an
 * epmd of our own on a free port (ERL_EPMD_PORT; the system's epmd and any
 * system RabbitMQ service are never touched), and per node DIR/nodeN with its
 * rabbitmq.conf, advanced.config, mnesia and logs (RABBITMQ_MNESIA_BASE,
 * _LOG_BASE, _CONFIG_FILE, _ADVANCED_CONFIG_FILE), a free AMQP port and a free distribution port, and a node
 * name of its own (hgPID_N@localhost). Node 1 starts first; with n > 1 the
 * others start together once it answers, joining it by classic-config peer
 * discovery, and rq_start waits until cluster_status lists all n running.
 * A node is "ready" when an AMQP login through libhourglass answers PING.
 *
 * RabbitMQ nodes are slow to start on a loaded machine (a minute each is
 * normal here): start one cluster per test program and share it; every wait
 * polls with a generous deadline (RQ_START_DEADLINE_MS).
 *
 * Each node runs in its own process group (setsid): rq_kill9 and
 * rq_signal act on the whole group (the start script, beam.smp and its
 * helpers). rq_destroy kills everything, prints the logs when asked and
 * removes the dir. $HG_KEEP_TMP=1 keeps it. $HG_RABBIT_LOG_LEVEL (debug, info,
 * …) sets the nodes' log.file.level (info without it);
 * $HG_RABBIT_PARTITION_HANDLING their cluster_partition_handling
 * (pause_minority without it); $HG_RABBIT_NET_TICKTIME (seconds) Erlang's
 * net_ticktime in their advanced.config (60, Erlang's and RabbitMQ's
 * default, without it): the nodes see a cut link after 0.75..1.25 times it
 * (docs/rabbitmq.md "Faults").
 *
 * Errors: 0 / -1 with the cause in err[errlen].
 */
#ifndef HG_TESTS_RABBIT_PROC_H
#define HG_TESTS_RABBIT_PROC_H

#include <stddef.h>
#include <sys/types.h>

#define RQ_MAX_NODES         3
#define RQ_START_DEADLINE_MS 300000 /* one node (or the others together) to first PONG */
/* advanced.config of every node: a dead-letter worker resends what its
 * targets did not confirm after this long (RabbitMQ's default is minutes;
 * docs/rabbitmq.md, "Known defect", recommends lowering it) */
#define RQ_DLX_CONFIRM_TIMEOUT_MS "10000"
#define RQ_SERVER                 "/usr/lib/rabbitmq/bin/rabbitmq-server"
#define RQ_CTL                    "/usr/lib/rabbitmq/bin/rabbitmqctl"
#define RQ_NFT                    "/usr/sbin/nft"
#define RQ_SS                     "/bin/ss"

typedef struct rq_node {
    char name[64];  /* hgPID_N@localhost */
    char dir[600];  /* DIR/nodeN */
    int amqp_port;  /* on 127.0.0.1 */
    int dist_port;  /* Erlang distribution */
    pid_t pid;      /* process group leader; 0 when not running */
    char uri[128];  /* amqp://guest:guest@127.0.0.1:PORT/ (this node only) */
    int amqps_port; /* the TLS listener (rq_start_tls); 0 without */
    int cut_off;    /* rq_partition's nftables table is loaded (rq_heal, rq_destroy delete it) */
} rq_node_t;

typedef struct rq_cluster {
    char dir[512];
    int epmd_port;
    pid_t epmd_pid;
    int ctl_port; /* RABBITMQ_CTL_DIST_PORT_MIN for rabbitmqctl */
    int n;
    rq_node_t nodes[RQ_MAX_NODES];
    char uri[512]; /* every node: amqp://guest:guest@127.0.0.1:P1,127.0.0.1:P2,.../ */
    /* rq_start_tls: the server's files, and every node's TLS listener as
     * amqps://guest:guest@127.0.0.1:S1,.../ (no query: the test adds its
     * ?ca=&cert=&key=); "" without TLS */
    char tls_ca[600], tls_cert[600], tls_key[600];
    char uri_tls[512];
} rq_cluster_t;

/* Start n (1..RQ_MAX_NODES) nodes as one cluster. Returns 0 once every node
 * answers and (n > 1) the cluster lists them all running; -1 otherwise
 * (nothing left running, dir removed). */
int rq_start(rq_cluster_t *c, int n, char *err, size_t errlen);

/* rq_start, and every node also listens for amqps:// on a free port of
 * 127.0.0.1 with the server certificate cert/key, and demands a client
 * certificate that chains to ca (ssl_options.verify = verify_peer,
 * fail_if_no_peer_cert = true): a client without one is refused in the
 * handshake. */
int rq_start_tls(rq_cluster_t *c, int n, const char *ca, const char *cert, const char *key, char *err, size_t errlen);

/* kill -9 node i's process group (the node crashes: no clean shutdown). */
int rq_kill9(rq_cluster_t *c, int i);

/* Start node i again on its dir, ports and name (after rq_kill9) and wait
 * until it answers and is running in the cluster again. Returns 0 / -1. */
int rq_restart(rq_cluster_t *c, int i, char *err, size_t errlen);

/* Send sig (SIGSTOP, SIGCONT) to node i's process group. */
int rq_signal(rq_cluster_t *c, int i, int sig);

/* Cut node i off from the others (a network partition) while its AMQP
 * listener stays reachable: an nftables table of this process drops every
 * packet to or from node i's distribution port, and node i's own
 * distribution connects are made from 127.0.0.(2+i) (kernel
 * inet_dist_connect_options, set by rabbitmqctl eval), which the table
 * drops too, as it drops the links node i made before (their ports, from
 * ss). The links up stall: the nodes see each other down at the net tick
 * (45..75 s with RabbitMQ's default net_ticktime 60 s), as after a real cut;
 * with cut_links the other nodes drop their links at once
 * (erlang:disconnect_node) instead. Neither side can link again. Needs root,
 * /usr/sbin/nft (Debian package nftables) and /bin/ss (iproute2).
 * rabbitmqctl can no longer reach node i meanwhile. 0 / -1. */
int rq_partition(rq_cluster_t *c, int i, int cut_links, char *err, size_t errlen);

/* End rq_partition: delete the table, let node i connect from 127.0.0.1
 * again, and wait until the cluster lists every node running. 0 / -1. */
int rq_heal(rq_cluster_t *c, int i, char *err, size_t errlen);

/* End rq_partition on nodes whose partition handling is ignore, as an
 * operator does: delete the table, then restart node i (kill -9, start on
 * its dir) so that it joins the others again. rq_heal alone waits in vain
 * there: the two sides' Mnesia stay apart after the links are back, and
 * the cluster never lists every node running. 0 / -1. */
int rq_heal_restart(rq_cluster_t *c, int i, char *err, size_t errlen);

/* Set cluster_partition_handling (ignore, autoheal, pause_minority) on
 * every node while they run (rabbitmqctl eval of application:set_env; the
 * node monitor reads it when it sees a partition, so the next cut follows
 * it): one cluster serves tests of several modes. 0 / -1. */
int rq_set_partition_handling(rq_cluster_t *c, const char *mode, char *err, size_t errlen);

/* Run rabbitmqctl against node i with the cluster's cookie and epmd:
 * args a NULL-terminated list after "-n NODE". Output (stdout+stderr) into
 * out[outlen]. Returns the exit status, or -1 when it could not run (more
 * than TU_ARGV_MAX words in all: not run, said on stderr). */
int rq_ctl(rq_cluster_t *c, int i, char *out, size_t outlen, ...) __attribute__((sentinel));

/* The node (index) that leads quorum queue `queue`, asking node `ask`;
 * -1 when unknown. */
int rq_queue_leader(rq_cluster_t *c, int ask, const char *queue);

/* Print what RabbitMQ holds, asking node `ask` (a test's failure path: a
 * stalled case shows where its messages wait): every queue's leader,
 * members, online members and message counts (list_queues), then the Raft
 * state of each quorum queue named in the NULL-terminated `queues`
 * (rabbit_quorum_queue:status, as rabbitmq-queues quorum_status: each
 * member's role, commit and applied index), then each node's dead-letter
 * supervisor (whereis(rabbit_fifo_dlx_sup): a pid, or undefined) and the
 * queues its dead-letter workers serve. A rabbitmqctl that fails prints its
 * error instead. */
void rq_print_queue_state(rq_cluster_t *c, int ask, const char *const *queues);

/* Wait until node i answers an AMQP PING (deadline_ms). 0 / -1. */
int rq_wait_ready(rq_cluster_t *c, int i, int deadline_ms, char *err, size_t errlen);

/* Kill every node and the epmd, delete rq_partition's tables still
 * loaded, print the nodes' logs when print_logs, remove the dir (unless
 * $HG_KEEP_TMP=1). */
void rq_destroy(rq_cluster_t *c, int print_logs);

#endif
