# shellcheck shell=bash
# scripts/lib/stack.sh — a private Hourglass stack in a directory, for
# scripts/demo and the install test (tests/integration/test_install.sh):
# a MariaDB on a unix socket, the reference schema with a least-privilege
# user per program, hourglass-broker or a private RabbitMQ node,
# hourglass-consumer and hourglass-compensator with their config files.
# Sourced by bash scripts.
#
# Every wait polls with a deadline and fails with the cause (the tail of the
# program's log); nothing sleeps and hopes. Processes are remembered by pid
# in hg_stack_pids and stopped by pid (SIGTERM, a deadline, then SIGKILL) in
# hg_stack_stop, which an EXIT trap should call. A command that leaves
# processes of its own behind when it is interrupted (mariadb-install-db runs
# a bootstrap mariadbd) runs in a process group of its own, remembered in
# hg_stack_groups while it runs: hg_stack_stop stops the whole group and waits
# for it, so nothing writes into a directory the caller is about to remove. The MariaDB is started like
# tests/helpers/testutil.c does: mariadb-install-db and mariadbd with
# --no-defaults (no /etc/mysql setting leaks in), --skip-networking, a socket
# in the directory, the install serialised by an flock in the temp root.
#
# Variables it sets: HG_MYSQL_SOCKET, HG_BROKER_PORT, HG_BROKER_URI,
# hg_mariadb_pid, hg_broker_pid, hg_consumer_pid, hg_compensator_pid, and the
# generated passwords hg_pw_<user>; for RabbitMQ (hg_rabbit_start) the
# HG_RABBIT_* variables listed there; hg_stack_stop sets hg_stack_stopped.

hg_stack_pids=() hg_stack_groups=() hg_stack_stopped=0

hg_log() { printf '%s\n' "$*" >&2; }

# hg_tail FILE — the last lines of a log, indented, for an error message.
hg_tail() {
    if [[ -f $1 ]]; then
        echo "--- last lines of $1:" >&2
        tail -n 25 "$1" | sed 's/^/    /' >&2
    fi
}

# hg_wait_for DEADLINE_S DESCRIPTION COMMAND... — run COMMAND every 0.1 s until
# it succeeds; 1 (and a message) when the deadline passes first.
hg_wait_for() {
    local secs=$1 what=$2
    local deadline=$((SECONDS + secs))
    shift 2
    until "$@"; do
        if ((SECONDS >= deadline)); then
            hg_log "timed out after $secs s waiting for $what"
            return 1
        fi
        sleep 0.1
    done
}

hg_alive() { [[ -n ${1:-} ]] && kill -0 "$1" 2>/dev/null; }

# hg_stop_pid PID [DEADLINE_S] — SIGTERM, wait, SIGKILL after the deadline.
# Returns the exit status when it is our child (0 when unknown).
hg_stop_pid() {
    local pid=$1 deadline=$((SECONDS + ${2:-15}))
    hg_alive "$pid" || { wait "$pid" 2>/dev/null; return $?; }
    kill -TERM "$pid" 2>/dev/null
    while hg_alive "$pid" && ((SECONDS < deadline)); do sleep 0.1; done
    if hg_alive "$pid"; then
        hg_log "pid $pid ignored SIGTERM for ${2:-15} s: killed"
        kill -KILL "$pid" 2>/dev/null
    fi
    wait "$pid" 2>/dev/null
}

# hg_stop_group PGID [DEADLINE_S] — SIGTERM to a whole process group, wait
# until none of it is left, SIGKILL after the deadline.
hg_stop_group() {
    local pgid=$1 deadline=$((SECONDS + ${2:-10}))
    kill -TERM -- "-$pgid" 2>/dev/null || return 0
    while kill -0 -- "-$pgid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.1; done
    if kill -0 -- "-$pgid" 2>/dev/null; then
        hg_log "process group $pgid ignored SIGTERM for ${2:-10} s: killed"
        kill -KILL -- "-$pgid" 2>/dev/null
        for _ in $(seq 50); do kill -0 -- "-$pgid" 2>/dev/null || break; sleep 0.1; done
    fi
    wait "$pgid" 2>/dev/null
    return 0
}

# hg_run_group LOG COMMAND... — run COMMAND in a process group of its own
# (setsid), its output into LOG, and wait for it; the group is in
# hg_stack_groups meanwhile (an interrupt stops it as a whole: hg_stack_stop).
# Returns COMMAND's status.
hg_run_group() {
    local log=$1 pid rc
    shift
    setsid "$@" >"$log" 2>&1 </dev/null &
    pid=$!
    hg_stack_groups+=("$pid")
    wait "$pid"
    rc=$?
    local left=() g
    for g in "${hg_stack_groups[@]}"; do [[ $g == "$pid" ]] || left+=("$g"); done
    hg_stack_groups=("${left[@]}")
    return "$rc"
}

# Stop everything started through this file, newest first, then the
# RabbitMQ node and its epmd, if one was started (hg_rabbit_stop). Prints the
# number of processes it had to stop (0: nothing was running any more).
hg_stack_stop() {
    local i n=0 g
    for g in "${hg_stack_groups[@]}"; do
        hg_stop_group "$g" 10
        n=$((n + 1))
    done
    hg_stack_groups=()
    for ((i = ${#hg_stack_pids[@]} - 1; i >= 0; i--)); do
        hg_alive "${hg_stack_pids[i]}" && n=$((n + 1))
        hg_stop_pid "${hg_stack_pids[i]}" 20 || true
    done
    hg_stack_pids=()
    hg_alive "$hg_rabbit_pid" && n=$((n + 1))
    hg_alive "$hg_rabbit_epmd_pid" && n=$((n + 1))
    hg_rabbit_stop
    # shellcheck disable=SC2034  # for the caller
    hg_stack_stopped=$n
}

hg_forget_pid() {
    local left=() p
    for p in "${hg_stack_pids[@]}"; do [[ $p == "$1" ]] || left+=("$p"); done
    hg_stack_pids=("${left[@]}")
}

# A TCP port on 127.0.0.1 that nothing uses right now: a random one below the
# kernel's ephemeral range (any outgoing connection's local end may take a
# port of that range before our program binds it: the demo lost its
# compensator's metrics port to the consumer's connection that way), checked
# against every socket in /proc/net/tcp{,6} (listening, connected or closing).
hg_free_port() {
    local port hex low=32768
    read -r low _ </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || low=32768
    ((low > 11000)) || low=32768
    for _ in $(seq 200); do
        port=$((10000 + RANDOM % (low - 10000)))
        printf -v hex '%04X' "$port"
        if ! grep -qs "^ *[0-9]*: [0-9A-F]*:$hex " /proc/net/tcp /proc/net/tcp6; then
            echo "$port"
            return 0
        fi
    done
    return 1
}

hg_random_password() { od -An -N12 -tx1 /dev/urandom | tr -d ' \n'; }

# ---------------------------------------------------------------- MariaDB

# hg_sql SQL... — run statements as root on the private server (stdout: the
# rows, tab-separated, no column names).
hg_sql() { mariadb --no-defaults --user=root --socket="$HG_MYSQL_SOCKET" --batch --skip-column-names -e "$*"; }

# hg_mariadb_start DIR — install and start a private MariaDB in DIR; sets
# HG_MYSQL_SOCKET. Returns 1 with the server's log when it cannot.
hg_mariadb_start() {
    local dir=$1 as_root=()
    mkdir -p "$dir/data" "$dir/tmp"
    HG_MYSQL_SOCKET=$dir/mysql.sock
    if ((${#HG_MYSQL_SOCKET} > 100)); then
        hg_log "socket path $HG_MYSQL_SOCKET is too long for a unix socket; use a shorter directory"
        return 1
    fi
    ((EUID == 0)) && as_root=(--user=root)
    local common=(--no-defaults "--datadir=$dir/data" "--tmpdir=$dir/tmp" --skip-name-resolve
                  --innodb-log-file-size=16M --innodb-buffer-pool-size=64M)
    # One install at a time on this machine (parallel bootstraps fail), as the C helper does.
    # Its own process group: interrupted, it leaves a bootstrap mariadbd writing into data/.
    local lock=${TMPDIR:-/tmp}/hg-mariadb-install.lock
    if ! hg_run_group "$dir/install.log" flock "$lock" mariadb-install-db "${common[@]}" \
        --auth-root-authentication-method=normal --skip-test-db "${as_root[@]}"; then
        hg_log "mariadb-install-db failed"
        hg_tail "$dir/install.log"
        return 1
    fi
    mariadbd "${common[@]}" "--socket=$HG_MYSQL_SOCKET" --skip-networking "--pid-file=$dir/mariadbd.pid" \
        "--log-error=$dir/error.log" --character-set-server=utf8mb4 --collation-server=utf8mb4_general_ci \
        "${as_root[@]}" >"$dir/mariadbd.out" 2>&1 </dev/null &
    hg_mariadb_pid=$!
    hg_stack_pids+=("$hg_mariadb_pid")
    if ! hg_wait_for 60 "mariadbd to accept connections on $HG_MYSQL_SOCKET" hg_mariadb_ready \
        || ! hg_alive "$hg_mariadb_pid"; then
        hg_log "mariadbd did not start"
        hg_tail "$dir/error.log"
        return 1
    fi
}

hg_mariadb_ready() {
    hg_alive "$hg_mariadb_pid" || return 0 # dead: stop waiting (hg_mariadb_start reports it)
    hg_sql "SELECT 1" >/dev/null 2>&1
}

# hg_shop_create DATABASE SCHEMA_FILE [EXTRA_SQL_FILE] — the database, the
# reference schema and one least-privilege user per program (host 'localhost':
# connections over the unix socket), each with a random password in
# hg_pw_<user>:
#   hg_consumer, hg_compensator  cancel (claim, stock return, outbox done),
#                                relay and close outbox rows
#   hg_shop                      the order service: create orders, reserve
#                                stock, outbox rows, pay, refunds
#   hg_monitor                   read-only, for progress and reports
hg_shop_create() {
    local db=$1 schema=$2 extra=${3:-}
    hg_sql "CREATE DATABASE $db" || return 1
    mariadb --no-defaults --user=root --socket="$HG_MYSQL_SOCKET" "$db" <"$schema" || return 1
    if [[ -n $extra ]]; then
        mariadb --no-defaults --user=root --socket="$HG_MYSQL_SOCKET" "$db" <"$extra" || return 1
    fi
    hg_pw_hg_consumer=$(hg_random_password)
    hg_pw_hg_compensator=$(hg_random_password)
    hg_pw_hg_shop=$(hg_random_password)
    hg_pw_hg_monitor=$(hg_random_password)
    local refunds_grant=""
    if [[ -n $extra ]]; then
        refunds_grant="GRANT SELECT, INSERT ON $db.order_refunds TO 'hg_shop'@'localhost';"
    fi
    hg_sql "
        CREATE USER 'hg_consumer'@'localhost' IDENTIFIED BY '$hg_pw_hg_consumer';
        GRANT SELECT, UPDATE ON $db.orders TO 'hg_consumer'@'localhost';
        GRANT SELECT ON $db.order_items TO 'hg_consumer'@'localhost';
        GRANT SELECT, UPDATE ON $db.stock TO 'hg_consumer'@'localhost';
        GRANT SELECT, UPDATE ON $db.order_timeout_msg TO 'hg_consumer'@'localhost';
        CREATE USER 'hg_compensator'@'localhost' IDENTIFIED BY '$hg_pw_hg_compensator';
        GRANT SELECT, UPDATE ON $db.orders TO 'hg_compensator'@'localhost';
        GRANT SELECT ON $db.order_items TO 'hg_compensator'@'localhost';
        GRANT SELECT, UPDATE ON $db.stock TO 'hg_compensator'@'localhost';
        GRANT SELECT, UPDATE ON $db.order_timeout_msg TO 'hg_compensator'@'localhost';
        CREATE USER 'hg_shop'@'localhost' IDENTIFIED BY '$hg_pw_hg_shop';
        GRANT SELECT, INSERT, UPDATE ON $db.orders TO 'hg_shop'@'localhost';
        GRANT SELECT, INSERT ON $db.order_items TO 'hg_shop'@'localhost';
        GRANT SELECT, UPDATE ON $db.stock TO 'hg_shop'@'localhost';
        GRANT SELECT, INSERT, UPDATE ON $db.order_timeout_msg TO 'hg_shop'@'localhost';
        $refunds_grant
        CREATE USER 'hg_monitor'@'localhost' IDENTIFIED BY '$hg_pw_hg_monitor';
        GRANT SELECT ON $db.* TO 'hg_monitor'@'localhost';"
}

# hg_stock_check_sql INITIAL — a query of the stock invariant, run once the orders are settled: one
# row, tab-separated — the SKUs, how many break initial = available + reserved + sold, how many
# received another figure than INITIAL, how many whose sold differs from the sum of the paid orders'
# item quantities, and whose reserved differs from the pending orders' (all 0 but the first: exact).
hg_stock_check_sql() {
    echo "SELECT COUNT(*),
    COALESCE(SUM(s.received <> s.available + s.reserved + s.sold),0), COALESCE(SUM(s.received <> $1),0),
    COALESCE(SUM(s.sold <> COALESCE(p.q,0)),0), COALESCE(SUM(s.reserved <> COALESCE(r.q,0)),0)
    FROM stock s
    LEFT JOIN (SELECT i.sku_id, SUM(i.qty) q FROM order_items i JOIN orders o ON o.id=i.order_id
               WHERE o.status='paid' GROUP BY i.sku_id) p ON p.sku_id = s.sku_id
    LEFT JOIN (SELECT i.sku_id, SUM(i.qty) q FROM order_items i JOIN orders o ON o.id=i.order_id
               WHERE o.status='pending' GROUP BY i.sku_id) r ON r.sku_id = s.sku_id"
}

# ---------------------------------------------------------------- the daemons

# hg_broker_start BIN CONF LOG — start hourglass-broker with CONF (its port
# may be 0: any free port); sets HG_BROKER_PORT (read from the start-up line)
# and HG_BROKER_URI, and waits until it answers PING.
hg_broker_start() {
    local bin=$1 conf=$2 log=$3
    "$bin" --config "$conf" >>"$log" 2>&1 </dev/null &
    hg_broker_pid=$!
    hg_stack_pids+=("$hg_broker_pid")
    local before=${HG_BROKER_PORT:-}
    HG_BROKER_PORT=""
    if ! hg_wait_for 30 "hourglass-broker to listen" hg_broker_port_logged "$log"; then
        hg_tail "$log"
        return 1
    fi
    if [[ -n $before && $before != "$HG_BROKER_PORT" ]]; then
        hg_log "hourglass-broker came back on port $HG_BROKER_PORT, not $before"
        return 1
    fi
    # shellcheck disable=SC2034  # for the caller
    HG_BROKER_URI=hourglass://127.0.0.1:$HG_BROKER_PORT
}

# The port of the last "listening on 127.0.0.1:PORT" line of log, once the
# broker answers on it.
hg_broker_port_logged() {
    hg_alive "$hg_broker_pid" || return 1
    local line
    line=$(grep -o 'listening on [0-9.]*:[0-9]*' "$1" 2>/dev/null | tail -n 1)
    [[ -n $line ]] || return 1
    HG_BROKER_PORT=${line##*:}
    (exec 3<>"/dev/tcp/127.0.0.1/$HG_BROKER_PORT") 2>/dev/null
}

# hg_daemon_start BIN CONF LOG VAR — start a daemon (hourglass-consumer,
# hourglass-compensator) with --config CONF, its pid into VAR.
hg_daemon_start() {
    local bin=$1 conf=$2 log=$3 var=$4
    "$bin" --config "$conf" >>"$log" 2>&1 </dev/null &
    local pid=$!
    hg_stack_pids+=("$pid")
    printf -v "$var" '%s' "$pid"
}

# ---------------------------------------------------------------- configurations
# The daemons' configuration files for a private stack (scripts/demo, scripts/soak): the shop's
# database on HG_MYSQL_SOCKET with the users of hg_shop_create, the group order-cancel on the topic
# order-timeout, intervals and graces scaled down for runs of minutes. The file is written anew
# (mode 0600: it holds passwords); a caller may append lines (the demo's --break SQL).

# hg_broker_conf FILE DATA_DIR METRICS_PORT BACKUP_DIR — hourglass-broker on 127.0.0.1, port 0
# (any free port; hg_broker_start reads it; set it in FILE before a restart), fsync always.
hg_broker_conf() {
    cat >"$1" <<EOF
# written by scripts/lib/stack.sh (hg_broker_conf)
[broker]
bind = 127.0.0.1
port = 0
metrics-port = $3
dir = $2
fsync = always
backup-dir = $4
log-level = info
EOF
    chmod 600 "$1"
}

# hg_consumer_conf FILE URI LOGIN LOG_LEVEL — hourglass-consumer (2 workers, lease 5s) as
# hg_consumer; LOGIN: lines for the [broker] section (user, password-file), or empty.
hg_consumer_conf() {
    cat >"$1" <<EOF
# written by scripts/lib/stack.sh (hg_consumer_conf)
[broker]
uri = $2
$3
group = order-cancel
topic = order-timeout
[consumer]
workers = 2
block = 1s
lease = 5s
[retry]
retry-base = 100ms
[mysql]
mysql-socket = $HG_MYSQL_SOCKET
mysql-user = hg_consumer
mysql-password = $hg_pw_hg_consumer
mysql-database = shop
[log]
log-level = $4
EOF
    chmod 600 "$1"
}

# hg_compensator_conf FILE URI LOGIN OVERDUE_GRACE METRICS_PORT — hourglass-compensator as
# hg_compensator: relay every 500ms, overdue cancel every 1s past OVERDUE_GRACE, inspection every
# 2s past 6s (a pending order is cancelled by its expiry + 10 s: 6 s + 2 s + 2 s for the cancel).
hg_compensator_conf() {
    cat >"$1" <<EOF
# written by scripts/lib/stack.sh (hg_compensator_conf): intervals and graces scaled down for short runs
[broker]
uri = $2
$3
topic = order-timeout
dlq-groups = order-cancel
broker-connect-timeout = 500ms
broker-timeout = 2s
[mysql]
mysql-socket = $HG_MYSQL_SOCKET
mysql-user = hg_compensator
mysql-password = $hg_pw_hg_compensator
mysql-database = shop
mysql-lock-wait-timeout = 5s
[relay]
relay-interval = 500ms
relay-batch = 200
relay-backoff-base = 500ms
relay-backoff-cap = 2s
[overdue]
overdue-interval = 1s
overdue-grace = $4
[inspection]
inspect-interval = 2s
inspect-grace = 6s
[monitor]
monitor-interval = 2s
[metrics]
metrics-port = $5
[log]
log-level = info
EOF
    chmod 600 "$1"
}

# hg_console_conf FILE PORT URI SAMPLER_LOGIN STATIC_DIR COMPENSATOR_METRICS_PORT — hourglass-console
# on 127.0.0.1:PORT, read-only for anyone (no-users-role viewer), MariaDB as hg_monitor;
# SAMPLER_LOGIN: lines for the [broker] section (sampler-user, sampler-password-file), or empty.
hg_console_conf() {
    cat >"$1" <<EOF
# written by scripts/lib/stack.sh (hg_console_conf)
[broker]
uri = $3
$4
[http]
bind = 127.0.0.1
port = $2
static-dir = $5
no-users-role = viewer
[mysql]
mysql-socket = $HG_MYSQL_SOCKET
mysql-user = hg_monitor
mysql-password = $hg_pw_hg_monitor
mysql-database = shop
[overview]
sample-interval = 1s
compensator-metrics = http://127.0.0.1:$6/metrics
[log]
log-level = info
EOF
    chmod 600 "$1"
}

# hg_http_get PORT PATH — the body of GET http://127.0.0.1:PORT/PATH (HTTP/1.0,
# bash's /dev/tcp: no curl needed); 1 when nothing answers, and 1 (said on
# stderr) when the whole exchange, connect included, has not ended within
# HG_HTTP_DEADLINE seconds [5] — an endpoint that accepts and never answers
# held a caller for ever (the soak's samples came 13-16 s apart), and a
# connect whose SYN is dropped (a full accept queue) waited out the kernel's
# SYN retransmits, about 127 s. A server that closes before it has the
# request, or with no whole HTTP head, is 1 and said too; SIGPIPE is ignored
# in here, so such a server cannot kill the caller (it did: 141). The body
# runs in a subshell (its traps stay its own). The connect is ended at the
# deadline by hg_http_alarm's SIGUSR1 (trapped, so connect(2) returns EINTR);
# the reply is read by bash's own read with a timeout (NUL bytes dropped).
HG_HTTP_DEADLINE=${HG_HTTP_DEADLINE:-5}
hg_http_get() (
    local port=$1 path=$2 reply="" chunk left t rc deadline alarm me=$BASHPID
    deadline=$((10#${EPOCHREALTIME/[.,]/} + 10#$HG_HTTP_DEADLINE * 1000000))
    trap '' PIPE
    trap ':' USR1
    hg_http_alarm "$me" "$HG_HTTP_DEADLINE" & # (me: $BASHPID here would be expanded in the alarm's own process)
    alarm=$!
    # (the braces keep exec's 2>/dev/null to the connect: on exec itself it was the shell's for good)
    { exec 3<>"/dev/tcp/127.0.0.1/$port"; } 2>/dev/null
    rc=$?
    trap '' USR1
    kill -TERM "$alarm" 2>/dev/null
    wait "$alarm" 2>/dev/null
    if ((rc != 0)); then
        ((10#${EPOCHREALTIME/[.,]/} < deadline)) ||
            hg_log "hg_http_get: 127.0.0.1:$port$path: no connection within $HG_HTTP_DEADLINE s (HG_HTTP_DEADLINE)"
        return 1
    fi
    if ! printf 'GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' "$path" >&3 2>/dev/null; then
        hg_log "hg_http_get: 127.0.0.1:$port$path: the server closed before it took the request"
        return 1
    fi
    rc=142
    while left=$((deadline - 10#${EPOCHREALTIME/[.,]/})) && ((left > 0)); do
        printf -v t '%d.%06d' $((left / 1000000)) $((left % 1000000))
        chunk=""
        IFS= read -r -d '' -t "$t" chunk <&3 2>/dev/null
        rc=$?
        reply+=$chunk
        ((rc == 0)) || break # 0: a NUL byte, read on; 1: the end of the reply (or a reset); >128: the deadline
    done
    exec 3<&-
    if ((rc != 1)); then
        hg_log "hg_http_get: 127.0.0.1:$port$path: no whole reply within $HG_HTTP_DEADLINE s (HG_HTTP_DEADLINE)"
        return 1
    fi
    if [[ $reply != HTTP/* || $reply != *$'\r\n\r\n'* ]]; then
        hg_log "hg_http_get: 127.0.0.1:$port$path: the connection ended with no whole HTTP head (${#reply} bytes came)"
        return 1
    fi
    printf '%s\n' "${reply#*$'\r\n\r\n'}"
)

# hg_http_alarm PID SECONDS — SIGUSR1 to PID after SECONDS (hg_http_get's
# connect deadline); a SIGTERM first ends it and its sleep quietly.
hg_http_alarm() {
    local sleeper=""
    trap '[[ -z $sleeper ]] || kill "$sleeper" 2>/dev/null; exit 0' TERM
    sleep "$2" &
    sleeper=$!
    wait "$sleeper" && kill -USR1 "$1" 2>/dev/null
}

# hg_metric PORT NAME — the value of the sample "NAME VALUE" on /metrics (NAME
# with its labels, exactly as printed); empty when absent.
hg_metric() {
    hg_http_get "$1" /metrics 2>/dev/null | awk -v n="$2" '$1 == n { print $2; exit }'
}

# ---------------------------------------------------------------- RabbitMQ
# A private RabbitMQ node (scripts/demo --rabbitmq), started the way
# tests/helpers/rabbit_proc.c starts one for the C tests (this is its shell
# counterpart; they share nothing): everything the node reads comes from the
# environment given to it (hg_rabbit_env) — HOME (the directory, holding the
# Erlang cookie), RABBITMQ_CONF_ENV_FILE (an empty file: /etc/rabbitmq's is
# not read), RABBITMQ_NODENAME, _NODE_PORT, _DIST_PORT, _MNESIA_BASE,
# _CONFIG_FILE, _ADVANCED_CONFIG_FILE, _ENABLED_PLUGINS_FILE (no plugins),
# _LOGS, ERL_EPMD_PORT (an epmd of our own, on a free port) and the
# rabbitmqctl distribution ports. The system service and the system's epmd
# are never touched. The node runs in a process group of its own (setsid):
# hg_rabbit_kill9 kills the whole group (the start script, beam.smp and its
# helpers), as a crash of the machine's RabbitMQ would.
#
# rabbitmq.conf makes, on the first boot, a vhost and a user of their own
# (default_vhost, default_user with a random password, all permissions on
# that vhost; no guest account), and lowers the dead-letter worker's confirm
# timeout to 10 s as docs/rabbitmq.md ("Known defect") recommends. Queue
# figures (rabbitmqctl list_queues) are refreshed every second, not every
# 5 s (collect_statistics_interval, quorum_tick_interval): hg_rabbit_queues
# is at most about a second old.
#
# Variables it sets: HG_RABBIT_URI (amqp://USER:PASSWORD@127.0.0.1:PORT/VHOST), HG_RABBIT_URI_NO_LOGIN
# (amqp://127.0.0.1:PORT/VHOST) with HG_RABBIT_PASSWORD_FILE (the password, mode 0600),
# HG_RABBIT_PORT (AMQP), HG_RABBIT_DIST_PORT, HG_RABBIT_NODE, HG_RABBIT_VHOST,
# HG_RABBIT_USER, hg_rabbit_pid (the process group
# leader: the rabbitmq-server script), hg_rabbit_epmd_pid.
HG_RABBIT_SERVER=${HG_RABBIT_SERVER:-/usr/lib/rabbitmq/bin/rabbitmq-server}
HG_RABBIT_CTL=${HG_RABBIT_CTL:-/usr/lib/rabbitmq/bin/rabbitmqctl}
HG_RABBIT_START_DEADLINE=${HG_RABBIT_START_DEADLINE:-240} # seconds: a minute is normal on a loaded 2-core machine
hg_rabbit_pid="" hg_rabbit_epmd_pid="" hg_rabbit_env=() hg_rabbit_dir="" hg_rabbit_cli=""

# hg_rabbit_start DIR LOG CLI — a fresh node in DIR (created), its log in
# LOG, "ready" when CLI (hourglass-cli) logs in and PING answers; waits for
# that up to HG_RABBIT_START_DEADLINE. 1 with the node's logs when it cannot.
hg_rabbit_start() {
    local dir=$1 log=$2
    hg_rabbit_cli=$3
    local d f
    for f in "$HG_RABBIT_SERVER" "$HG_RABBIT_CTL"; do
        [[ -x $f ]] || { hg_log "$f not found: install rabbitmq-server"; return 1; }
    done
    for d in epmd /usr/lib/erlang/bin/epmd; do command -v "$d" >/dev/null && break; done
    command -v "$d" >/dev/null || { hg_log "epmd not found: install erlang-base"; return 1; }
    command -v setsid >/dev/null || { hg_log "setsid not found: install util-linux"; return 1; }
    mkdir -p "$dir" || return 1
    hg_rabbit_dir=$(cd "$dir" && pwd)
    dir=$hg_rabbit_dir
    # Four ports nothing uses, all different; rabbitmqctl takes one of ctl_port .. ctl_port + 20.
    local epmd_port ctl_port ok=0 p
    for _ in $(seq 20); do
        if ! { epmd_port=$(hg_free_port) && ctl_port=$(hg_free_port) && HG_RABBIT_PORT=$(hg_free_port) &&
            HG_RABBIT_DIST_PORT=$(hg_free_port); }; then
            break
        fi
        ok=1
        for p in "$HG_RABBIT_PORT" "$HG_RABBIT_DIST_PORT" "$epmd_port"; do
            if ((p >= ctl_port && p <= ctl_port + 20)); then ok=0; fi
        done
        if ((HG_RABBIT_PORT == HG_RABBIT_DIST_PORT || epmd_port == HG_RABBIT_PORT || epmd_port == HG_RABBIT_DIST_PORT)); then
            ok=0
        fi
        if ((ok)); then break; fi
    done
    ((ok)) || { hg_log "no free ports for RabbitMQ"; return 1; }
    HG_RABBIT_NODE=hgdemo$$@localhost HG_RABBIT_VHOST=shop HG_RABBIT_USER=hourglass
    local password
    password=$(hg_random_password)
    HG_RABBIT_URI=amqp://$HG_RABBIT_USER:$password@127.0.0.1:$HG_RABBIT_PORT/$HG_RABBIT_VHOST
    # The same without the login, and the password in a file of its own (0600), for the daemons'
    # user and password-file keys: a production config keeps the secret out of the URI.
    # shellcheck disable=SC2034  # for the caller
    HG_RABBIT_URI_NO_LOGIN=amqp://127.0.0.1:$HG_RABBIT_PORT/$HG_RABBIT_VHOST
    HG_RABBIT_PASSWORD_FILE=$dir/password
    (umask 077 && printf '%s\n' "$password" >"$HG_RABBIT_PASSWORD_FILE") || return 1
    (umask 077 && hg_random_password >"$dir/.erlang.cookie") || return 1
    chmod 400 "$dir/.erlang.cookie"
    : >"$dir/env.conf"
    echo '[].' >"$dir/enabled_plugins"
    cat >"$dir/rabbitmq.conf" <<CONF
# written by scripts/lib/stack.sh (hg_rabbit_start)
listeners.tcp.default = 127.0.0.1:$HG_RABBIT_PORT
log.console = false
log.file.level = info
default_vhost = $HG_RABBIT_VHOST
default_user = $HG_RABBIT_USER
default_pass = $password
default_permissions.configure = .*
default_permissions.read = .*
default_permissions.write = .*
collect_statistics_interval = 1000
CONF
    echo '[{rabbit, [{dead_letter_worker_publisher_confirm_timeout, 10000}, {quorum_tick_interval, 1000}]}].' \
        >"$dir/advanced.config"
    chmod 600 "$dir/rabbitmq.conf"
    hg_rabbit_env=(HOME="$dir" RABBITMQ_CONF_ENV_FILE="$dir/env.conf" ERL_EPMD_PORT="$epmd_port"
        RABBITMQ_CTL_DIST_PORT_MIN="$ctl_port" RABBITMQ_CTL_DIST_PORT_MAX="$((ctl_port + 20))"
        RABBITMQ_USE_LONGNAME=false RABBITMQ_NODENAME="$HG_RABBIT_NODE" RABBITMQ_NODE_PORT="$HG_RABBIT_PORT"
        RABBITMQ_DIST_PORT="$HG_RABBIT_DIST_PORT" RABBITMQ_MNESIA_BASE="$dir/mnesia" RABBITMQ_LOG_BASE="$dir/log"
        RABBITMQ_LOGS="$log" RABBITMQ_CONFIG_FILE="$dir/rabbitmq.conf"
        RABBITMQ_ADVANCED_CONFIG_FILE="$dir/advanced.config" RABBITMQ_ENABLED_PLUGINS_FILE="$dir/enabled_plugins"
        RABBITMQ_PID_FILE="$dir/pid")
    env "${hg_rabbit_env[@]}" "$d" -port "$epmd_port" >"$dir/epmd.log" 2>&1 </dev/null &
    hg_rabbit_epmd_pid=$!
    if ! hg_wait_for 10 "epmd on port $epmd_port" hg_port_open "$epmd_port"; then
        hg_tail "$dir/epmd.log"
        return 1
    fi
    hg_rabbit_spawn && hg_rabbit_wait
}

hg_port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# hg_rabbit_spawn — start the node process (after hg_rabbit_start prepared
# it; again after hg_rabbit_kill9: the same name, ports and data); returns at
# once: hg_rabbit_wait or hg_rabbit_ready tell when it answers.
hg_rabbit_spawn() {
    (cd "$hg_rabbit_dir" && exec env "${hg_rabbit_env[@]}" setsid "$HG_RABBIT_SERVER") \
        >>"$hg_rabbit_dir/out.log" 2>&1 </dev/null &
    hg_rabbit_pid=$!
}

# hg_rabbit_ready — 0 when the node answers an AMQP login and PING (through
# hourglass-cli: its declarations run too); 2 when the node process is gone.
# The cli's last answer is in hg_rabbit_probe.
hg_rabbit_ready() {
    hg_alive "$hg_rabbit_pid" || return 2
    hg_rabbit_probe=$("$hg_rabbit_cli" --uri "$HG_RABBIT_URI" --timeout 3000 ping 2>&1)
}

# hg_rabbit_wait — wait for hg_rabbit_ready; 1 with the node's logs when it
# exits or the deadline passes.
hg_rabbit_wait() {
    local deadline=$((SECONDS + HG_RABBIT_START_DEADLINE)) rc
    while :; do
        hg_rabbit_ready
        rc=$?
        ((rc == 0)) && return 0
        if ((rc == 2)); then
            hg_log "RabbitMQ node $HG_RABBIT_NODE exited during start"
            break
        fi
        if ((SECONDS >= deadline)); then
            hg_log "RabbitMQ node $HG_RABBIT_NODE did not answer on port $HG_RABBIT_PORT within" \
                "$HG_RABBIT_START_DEADLINE s; hourglass-cli ping said: ${hg_rabbit_probe:-nothing}"
            break
        fi
        sleep 0.5
    done
    hg_tail "$hg_rabbit_dir/out.log"
    hg_tail "$(hg_rabbit_log)"
    return 1
}

hg_rabbit_log() {
    local a
    for a in "${hg_rabbit_env[@]}"; do [[ $a == RABBITMQ_LOGS=* ]] && echo "${a#*=}"; done
}

# hg_rabbit_kill9 — SIGKILL to the node's whole process group; returns once
# every process of it is gone (up to 5 s).
hg_rabbit_kill9() {
    hg_alive "$hg_rabbit_pid" || return 1
    kill -KILL -- "-$hg_rabbit_pid" 2>/dev/null
    wait "$hg_rabbit_pid" 2>/dev/null
    local i
    for ((i = 0; i < 100; i++)); do
        kill -0 -- "-$hg_rabbit_pid" 2>/dev/null || break
        sleep 0.05
    done
    hg_rabbit_pid=""
}

# hg_rabbitmqctl ARGS... — rabbitmqctl against the node (each call starts an
# Erlang VM: a second or more here).
hg_rabbitmqctl() { env "${hg_rabbit_env[@]}" "$HG_RABBIT_CTL" -n "$HG_RABBIT_NODE" "$@"; }

# hg_rabbit_queues — the vhost's queues, one a line: name, messages (ready +
# unacknowledged), ready, unacknowledged, tab-separated.
hg_rabbit_queues() {
    hg_rabbitmqctl -q list_queues -p "$HG_RABBIT_VHOST" --no-table-headers \
        name messages messages_ready messages_unacknowledged
}

# hg_rabbit_stop — stop the node (SIGTERM: the start script stops RabbitMQ
# cleanly; SIGKILL to its group after 30 s) and our epmd. Safe to call when
# nothing runs.
hg_rabbit_stop() {
    if hg_alive "$hg_rabbit_pid"; then
        hg_stop_pid "$hg_rabbit_pid" 30 || true
        kill -KILL -- "-$hg_rabbit_pid" 2>/dev/null
    fi
    hg_rabbit_pid=""
    if hg_alive "$hg_rabbit_epmd_pid"; then hg_stop_pid "$hg_rabbit_epmd_pid" 5 || true; fi
    hg_rabbit_epmd_pid=""
}
