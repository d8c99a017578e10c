#!/usr/bin/env bash
# tests/system/test_systemd_units.sh — the installed systemd units, run by a real systemd.
#
# The build is installed with `make install DESTDIR=$tmp/stage`, and a systemd is booted as PID 1
# of a container (systemd-nspawn, its own network namespace: loopback only) whose root is made of a
# copy of this host's /etc, an empty /var, and this host's /usr with the staged /usr laid over it
# (an overlay; what the stage has outside /usr is copied into the root). Nothing is installed on the
# host but the packages below. In the container, as docs/getting-started.md says: MariaDB, the
# schema and the users (the SQL block of getting-started.md itself), the sample configurations
# with the passwords set, `systemctl enable --now` of the four units. Then, for each unit:
#   - systemd-analyze verify finds nothing, and the unit is active and its log is in the journal;
#   - its MariaDB password, read from its credential, works (the consumer cancels an order made by
#     examples/first-order, the compensator takes its inspection lock, the console shows the order);
#   - it can write its state directory (the broker) and nothing else of the system (a write is tried
#     as its transient user, in its own mount namespace): not /etc, not the configuration, not /var;
#   - systemctl reload makes it re-read its configuration (a changed broker log-level is applied);
#   - systemctl stop ends it within its TimeoutStopSec, exit status 0;
#   - Type=notify: systemctl start hourglass-broker returns only once the port answers PING
#     (its READY=1), systemctl status shows its STATUS=, the other three are active when their
#     systemctl start returns;
#   - a restart keeps the broker's data (a message due in an hour is still there), and BACKUP
#     writes into the backup-dir the broker's unit comment names, in its state directory;
#   - the drop-ins the units' comments show (a broker users-file and the consumer's broker
#     password passed with LoadCredential=, an empty ExecStart= first) start, and the consumer
#     logs in with its credential;
#   - a configuration error (exit 2) fails the unit at once, no restart, the journal naming the key;
#   - a store open longer than TimeoutStartSec= (a drop-in sets 5 s; the new store's first log sync
#     is held 12 s by tests/helpers/failsync.c, preloaded): the broker's EXTEND_TIMEOUT_USEC= keeps
#     the start alive, systemctl status says "recovering the store …" meanwhile, and it starts.
# Needs root, systemd-container and mariadb-server, which it installs when missing
# (scripts/lib/packages.sh). Every wait polls with a deadline. About 40 s.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
srcdir=$(cd "$here/../.." && pwd)
builddir=${HG_BUILDDIR:-$PWD}
for v in HG_PREFIX HG_BINDIR HG_LIBDIR HG_SYSCONFDIR HG_DOCDIR HG_UNITDIR HG_PKGCONFIGDIR; do
    if [[ -z ${!v:-} ]]; then echo "FAIL: $v not set (run through make check)"; exit 1; fi
done
# shellcheck source=scripts/lib/stack.sh
source "$srcdir/scripts/lib/stack.sh"
# shellcheck source=scripts/lib/packages.sh
source "$srcdir/scripts/lib/packages.sh"

((EUID == 0)) || { echo "FAIL: needs root (systemd-nspawn boots a container)"; exit 1; }
hg_install_packages test_systemd_units.sh systemd systemd-container mariadb-server >/dev/null ||
    { echo "FAIL: cannot install systemd, systemd-container and mariadb-server"; exit 1; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/hg-test-systemd-XXXXXX")
root=$tmp/root
stage=$tmp/stage
machine=hg-test-$$
nspawn_pid=""
pid1=""
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
ok() { echo "ok   $*"; }

# inside COMMAND... — run COMMAND in the container (all its namespaces), as root, with a clean environment.
inside() {
    nsenter -t "$pid1" -a -- env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        HOME=/root LANG=C.UTF-8 PKG_CONFIG_PATH="$HG_PKGCONFIGDIR" "$@"
}
container_gone() { ! hg_alive "$nspawn_pid"; }
cleanup() {
    hg_packages_cleanup
    if hg_alive "$nspawn_pid"; then
        [[ -n $pid1 ]] && inside systemctl poweroff --no-block >/dev/null 2>&1
        hg_wait_for 30 "the container to power off" container_gone 2>/dev/null || kill -KILL "$nspawn_pid" 2>/dev/null
        wait "$nspawn_pid" 2>/dev/null
    fi
    if ((failures > 0)); then
        hg_tail "$tmp/boot.log"
        [[ -s $tmp/journal.log ]] && hg_tail "$tmp/journal.log"
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT

# ---------------------------------------------------------------- the stage and the root
if ! env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s -C "$builddir" install DESTDIR="$stage" >"$tmp/install.log" 2>&1; then
    fail "make install DESTDIR=$stage failed"
    cat "$tmp/install.log"
    exit 1
fi
mkdir -p "$root"/{usr,var/lib,var/log,var/cache,var/tmp,tmp,proc,sys,dev,run,root,home,srv,opt,mnt}
for l in bin lib lib64 sbin; do [[ -L /$l ]] && ln -s "$(readlink "/$l")" "$root/$l"; done
cp -a /etc "$root/etc"
# nspawn looks for os-release before it mounts /usr, where /etc/os-release points
rm -f "$root/etc/os-release" && cp /usr/lib/os-release "$root/etc/os-release"
mkdir -p "$stage/usr"
for top in "$stage"/*; do # the stage outside /usr (a sysconfdir of /etc, a prefix in /opt) is copied in
    [[ $top == "$stage/usr" ]] || cp -a "$top" "$root/"
done

# ---------------------------------------------------------------- boot
# basic.target: the host's own services (its /etc says which) are not this test's.
systemd-nspawn --quiet --console=read-only -D "$root" --overlay=/usr:"$stage/usr":/usr --private-network \
    --register=no --keep-unit -M "$machine" -b -- --unit=basic.target </dev/null >"$tmp/boot.log" 2>&1 &
nspawn_pid=$!
find_pid1() { pid1=$(pgrep -P "$nspawn_pid" -x systemd | head -n 1) && [[ -n $pid1 ]]; }
booted() {
    local state
    state=$(inside systemctl is-system-running 2>/dev/null)
    [[ $state == running || $state == degraded ]]
}
boot_start=$SECONDS
if ! hg_wait_for 60 "systemd as the container's PID 1" find_pid1 || ! hg_wait_for 60 "the container's boot" booted; then
    fail "systemd did not boot in the container (systemd-nspawn's output below)"
    exit 1
fi
ok "systemd booted in the container in $((SECONDS - boot_start)) s ($(inside systemctl --version | head -n 1))"

# ---------------------------------------------------------------- docs/getting-started.md, in the container
etc=$HG_SYSCONFDIR/hourglass
# shellcheck disable=SC2016  # the backquotes are Markdown's fence, not a command
sed -n '/^```sql/,/^```/p' "$srcdir/docs/getting-started.md" | sed '1d;$d' >"$root/root/users.sql"
cp "$srcdir/examples/first-order/first_order.c" "$root/root/"
if ! inside sh -ec "
    ldconfig
    mariadb-install-db --user=mysql >/dev/null
    systemctl start mariadb
    mariadb -e 'CREATE DATABASE shop'
    mariadb shop < $HG_DOCDIR/schema.sql
    mariadb shop -e 'INSERT INTO stock (sku_id, received, available) VALUES (1, 1000, 1000)'
    mariadb < /root/users.sql
    cd $etc
    for p in consumer compensator console; do
        sed -i \"s/^mysql-password = change-me\\\$/mysql-password = \$p-secret/\" hourglass-\$p.conf
    done
    sed -i 's/^no-users-role = none/no-users-role = viewer/' hourglass-console.conf
    chmod 600 hourglass-consumer.conf hourglass-compensator.conf hourglass-console.conf
    cd /root && cc first_order.c \$(pkg-config --cflags --libs hourglass libmariadb) -o first-order
" >"$tmp/setup.log" 2>&1; then
    fail "the setup of docs/getting-started.md failed in the container:"
    cat "$tmp/setup.log"
    exit 1
fi
ok "MariaDB, the schema, the users and the passwords set as docs/getting-started.md says"

units=(hourglass-broker hourglass-consumer hourglass-compensator hourglass-console)
bad=$(inside systemd-analyze verify "${units[@]/%/.service}" 2>&1)
if [[ -z $bad ]]; then ok "systemd-analyze verify: nothing to say"; else fail "systemd-analyze verify: $bad"; fi

inside systemctl daemon-reload
inside systemctl enable --now "${units[@]}" >"$tmp/enable.log" 2>&1 || { fail "systemctl enable --now: $(cat "$tmp/enable.log")"; exit 1; }
# logged LINE UNIT — the unit's journal has LINE (a fixed string)
logged() { inside journalctl --no-pager -q -u "$2" | grep -qF -- "$1"; }
started=("listening on 127.0.0.1:7379" "consumer: 4 workers on group order-cancel" "inspection lock" "listening on http://127.0.0.1:7390/")
for i in "${!units[@]}"; do
    if hg_wait_for 30 "${units[i]}'s start line" logged "${started[i]}" "${units[i]}" && [[ $(inside systemctl is-active "${units[i]}") == active ]]; then
        ok "${units[i]}: active, its journal says \"${started[i]}\""
    else
        fail "${units[i]} did not come up: $(inside systemctl status --no-pager "${units[i]}" | tail -n 8)"
    fi
done
((failures == 0)) || exit 1

# ---------------------------------------------------------------- the credentials work
order_cancelled() { grep -q 'cancelled by timeout-message' "$tmp/order.log"; }
inside sh -c 'cd /root && HG_MYSQL_PASSWORD=shop-secret ./first-order --mysql-socket /run/mysqld/mysqld.sock \
    --mysql-user hg_shop --mysql-database shop' >"$tmp/order.log" 2>&1
if order_cancelled; then ok "hourglass-consumer: its credential's MariaDB password cancels an order ($(tail -n 1 "$tmp/order.log"))"
else fail "no order cancelled: $(cat "$tmp/order.log")"; fi
order=$(inside mariadb -N shop -e 'SELECT MAX(id) FROM orders')
view=$(inside sh -c "curl -s -c /root/jar -d 'user=ops&password=' http://127.0.0.1:7390/api/login >/dev/null &&
    curl -s -b /root/jar http://127.0.0.1:7390/api/orders/$order")
if [[ $view == *'"cancel_reason":"timeout-message"'* ]]; then ok "hourglass-console: its credential's MariaDB password shows order $order"
else fail "the console did not show order $order: $view"; fi
ok "hourglass-compensator: its credential's MariaDB password took the inspection lock (above)"

# ---------------------------------------------------------------- what each may write
# can_write PID DIR — a file can be made in DIR by PID's user in PID's mount namespace
can_write() {
    inside sh -c "u=\$(stat -c %u /proc/$1) g=\$(stat -c %g /proc/$1)
        nsenter -t $1 -m -S \$u -G \$g sh -c 'touch \"$2/.hg-write-test\" && rm \"$2/.hg-write-test\"'" 2>/dev/null
}
for u in "${units[@]}"; do
    pid=$(inside systemctl show -p MainPID --value "$u")
    wrote=()
    for d in / /etc "$etc" "$HG_PREFIX" /usr /var /var/lib /root /run /home; do can_write "$pid" "$d" && wrote+=("$d"); done
    if ((${#wrote[@]})); then fail "$u (pid $pid) can write ${wrote[*]}"; else ok "$u: cannot write the system (/, /etc, $etc, /usr, /var, …)"; fi
done
broker_pid=$(inside systemctl show -p MainPID --value hourglass-broker)
if can_write "$broker_pid" /var/lib/hourglass-broker/data; then ok "hourglass-broker: writes its state directory"
else fail "hourglass-broker cannot write /var/lib/hourglass-broker/data"; fi

# ---------------------------------------------------------------- reload, stop, restart
inside sh -c "echo 'log-level = debug' >> $etc/hourglass-broker.conf"
inside systemctl reload "${units[@]}" || fail "systemctl reload ${units[*]} failed"
if hg_wait_for 15 "the broker's SIGHUP line" logged "SIGHUP: log-level info -> debug" hourglass-broker; then
    ok "hourglass-broker: systemctl reload applies a changed log-level"
else fail "hourglass-broker: no 'SIGHUP: log-level info -> debug' after systemctl reload"; fi
for u in hourglass-consumer hourglass-compensator hourglass-console; do
    if hg_wait_for 15 "$u's SIGHUP line" logged "SIGHUP: configuration re-read" "$u"; then ok "$u: systemctl reload re-reads its configuration"
    else fail "$u: no SIGHUP line after systemctl reload"; fi
done

msg=$(inside redis-cli -p 7379 SEND unit-test keep-me DELAY 1h)
for u in "${units[@]}"; do
    grace=$(inside systemctl show -p TimeoutStopUSec --value "$u")
    t0=$SECONDS
    inside systemctl stop "$u"
    took=$((SECONDS - t0))
    status=$(inside systemctl show -p ExecMainStatus --value "$u")
    result=$(inside systemctl show -p Result --value "$u")
    # Result=timeout when the grace passed (then systemd kills it); success when it exited 0 within
    if [[ $status == 0 && $result == success ]]; then ok "$u: systemctl stop took ${took} s (TimeoutStopSec $grace), exit 0"
    else fail "$u: systemctl stop took ${took} s (TimeoutStopSec $grace), exit status $status, result $result"; fi
done
broker_up() { [[ -n $(inside redis-cli -p 7379 PING 2>/dev/null) ]]; } # PONG, or NOAUTH once it has users
# Type=notify: systemctl start returns once the broker said READY=1, which it says once the port
# answers; so PING at once, no wait (under Type=simple this PING could come before the listen).
t0=$(date +%s%N)
inside systemctl start hourglass-broker
took_ms=$((($(date +%s%N) - t0) / 1000000))
if broker_up; then
    ok "hourglass-broker: systemctl start returned in $took_ms ms, once the port answers PING (READY=1)"
else fail "hourglass-broker: systemctl start returned ($took_ms ms) before the port answered PING"; fi
status_text=$(inside systemctl show -p StatusText --value hourglass-broker)
if [[ $status_text == "listening on 127.0.0.1:7379" ]]; then ok "hourglass-broker: systemctl status says \"$status_text\""
else fail "hourglass-broker: StatusText '$status_text', want 'listening on 127.0.0.1:7379'"; fi
inside systemctl start "${units[@]}"
for u in hourglass-consumer hourglass-compensator hourglass-console; do
    if [[ $(inside systemctl show -p Type --value "$u") == notify && $(inside systemctl is-active "$u") == active ]]; then
        ok "$u: Type=notify, active once systemctl start returned (it said READY=1)"
    else fail "$u: Type $(inside systemctl show -p Type --value "$u"), state $(inside systemctl is-active "$u") after systemctl start"; fi
done
hg_wait_for 30 "the broker after its restart" broker_up || fail "the broker did not come back after systemctl start"
if inside hourglass-cli levels | awk '$2 == "1h" && $3 == 1 { found = 1 } END { exit !found }'; then
    ok "hourglass-broker: message $msg (due in 1 h) still there after a stop and a start"
else fail "hourglass-broker lost message $msg across a restart: $(inside hourglass-cli levels)"; fi

# BACKUP where the broker's unit comment says it can write: its state directory.
inside sh -c "echo 'backup-dir = /var/lib/hourglass-broker/backups' >> $etc/hourglass-broker.conf"
inside systemctl restart hourglass-broker
hg_wait_for 30 "the broker after its restart" broker_up
if inside hourglass-cli backup nightly >"$tmp/backup.log" 2>&1 &&
    inside test -d /var/lib/hourglass-broker/backups/nightly; then
    ok "hourglass-broker: BACKUP writes /var/lib/hourglass-broker/backups/nightly (the unit comment's backup-dir)"
else fail "BACKUP into /var/lib/hourglass-broker/backups under the unit: $(cat "$tmp/backup.log")"; fi

# ---------------------------------------------------------------- the drop-ins of the units' comments
inside sh -ec "
    umask 077
    printf 'canceller-pw\n' | hourglass-cli passwd canceller consumer > $etc/users
    printf 'shop-pw\n' | hourglass-cli passwd shop producer >> $etc/users
    printf 'canceller-pw\n' > $etc/canceller.password
    sed -i 's/^;user = canceller\$/user = canceller/' $etc/hourglass-consumer.conf
    mkdir -p /etc/systemd/system/hourglass-broker.service.d /etc/systemd/system/hourglass-consumer.service.d
    printf '%s\n' '[Service]' 'LoadCredential=users:$etc/users' 'ExecStart=' \
        'ExecStart=$HG_BINDIR/hourglass-broker --config $etc/hourglass-broker.conf --dir %S/hourglass-broker/data --users-file %d/users' \
        > /etc/systemd/system/hourglass-broker.service.d/users.conf
    printf '%s\n' '[Service]' 'LoadCredential=broker-password:$etc/canceller.password' 'ExecStart=' \
        'ExecStart=$HG_BINDIR/hourglass-consumer --config %d/hourglass-consumer.conf --password-file %d/broker-password' \
        > /etc/systemd/system/hourglass-consumer.service.d/password.conf
    systemctl daemon-reload
    systemctl restart hourglass-broker hourglass-consumer
" >"$tmp/dropin.log" 2>&1 || fail "the drop-ins: $(cat "$tmp/dropin.log")"
if hg_wait_for 30 "the broker with its users-file credential" logged "users from the users-file (AUTH required)" hourglass-broker; then
    ok "hourglass-broker: the drop-in's users-file credential is read (AUTH required)"
else fail "hourglass-broker did not start with the users-file credential"; fi
hg_wait_for 30 "the broker" broker_up
inside sh -c 'cd /root && HG_MYSQL_PASSWORD=shop-secret ./first-order --uri hourglass://shop:shop-pw@127.0.0.1:7379 \
    --mysql-socket /run/mysqld/mysqld.sock --mysql-user hg_shop --mysql-database shop' >"$tmp/order.log" 2>&1
if order_cancelled; then ok "hourglass-consumer: logs in with the drop-in's password credential and cancels ($(tail -n 1 "$tmp/order.log"))"
else fail "no order cancelled with the consumer's password credential: $(cat "$tmp/order.log")"; fi

# ---------------------------------------------------------------- a configuration error is not retried
# Exit status 2 is a usage or configuration error (docs/operations.md): restarting cannot mend it.
inside sed -i 's/^no-users-role = viewer/no-users-role = bogus/' "$etc/hourglass-console.conf"
inside systemctl restart hourglass-console 2>/dev/null
console_failed() { [[ $(inside systemctl show -p ActiveState --value hourglass-console) == failed ]]; }
hg_wait_for 30 "hourglass-console to fail on its bad configuration" console_failed
restarts=$(inside systemctl show -p NRestarts --value hourglass-console)
status=$(inside systemctl show -p ExecMainStatus --value hourglass-console)
if console_failed && [[ $restarts == 0 && $status == 2 ]] && logged "no-users-role: 'bogus' is not one of" hourglass-console; then
    ok "hourglass-console: a bad configuration fails the unit at once (exit 2, no restart), the journal names the key"
else fail "hourglass-console with a bad configuration: state $(inside systemctl show -p ActiveState --value hourglass-console), exit status $status, $restarts restarts"; fi

# ---------------------------------------------------------------- a store open longer than TimeoutStartSec=
# A new store's open syncs its log: the preloaded shim holds that sync 12 s (its trigger file, which
# it removes, in the state directory: the only place the unit may write), past the drop-in's 5 s.
shim=$builddir/tests/helpers/.libs/failsync.so
if [[ -f $shim ]]; then
    cp "$shim" "$root/srv/failsync.so"
    inside sh -ec "
        systemctl stop hourglass-broker
        rm -rf /var/lib/private/hourglass-broker/data
        touch /var/lib/hourglass-broker/hold-sync
        printf '%s\n' '[Service]' 'TimeoutStartSec=5' 'Environment=LD_PRELOAD=/srv/failsync.so' \
            'Environment=HG_FAILSYNC_TRIGGER=/var/lib/hourglass-broker/hold-sync HG_FAILSYNC_DELAY_MS=12000' \
            > /etc/systemd/system/hourglass-broker.service.d/slow-open.conf
        systemctl daemon-reload
    " >"$tmp/slow.log" 2>&1 || fail "the slow-open drop-in: $(cat "$tmp/slow.log")"
    recovering() { [[ $(inside systemctl show -p StatusText --value hourglass-broker) == "recovering the store "* ]]; }
    t0=$SECONDS
    inside systemctl start --no-block hourglass-broker
    if hg_wait_for 10 "the broker's STATUS= while its store opens" recovering; then
        ok "hourglass-broker: while its store opens, systemctl status says \"$(inside systemctl show -p StatusText --value hourglass-broker)\""
    else fail "hourglass-broker: StatusText '$(inside systemctl show -p StatusText --value hourglass-broker)' while its store opens"; fi
    broker_active() { [[ $(inside systemctl is-active hourglass-broker) == active ]]; }
    hg_wait_for 60 "the broker's slow start" broker_active
    took=$((SECONDS - t0))
    result=$(inside systemctl show -p Result --value hourglass-broker)
    restarts=$(inside systemctl show -p NRestarts --value hourglass-broker) # killed at the timeout: restarted
    if broker_active && ((took >= 12)) && [[ $result == success && $restarts == 0 ]] &&
        ! inside test -e /var/lib/hourglass-broker/hold-sync; then
        ok "hourglass-broker: a store open of 12 s under TimeoutStartSec=5 started (${took} s, EXTEND_TIMEOUT_USEC=, no restart)"
    else fail "hourglass-broker: a store open of 12 s under TimeoutStartSec=5: state $(inside systemctl is-active hourglass-broker), result $result, ${took} s, $restarts restarts"; fi
    inside rm -f /etc/systemd/system/hourglass-broker.service.d/slow-open.conf
    inside systemctl daemon-reload
else fail "$shim is not built (make check builds it)"; fi

# Where each start of the broker went (information, not a check): systemd's "Starting" (before the
# fork: namespaces, credentials, the state directory's owner), the broker's own timeline from main
# to listening, and "Started" (its READY=1).
echo "     the broker's starts (systemd's Starting, the broker's timeline, Started at READY=1):"
inside journalctl --no-pager -q -o short-precise -u hourglass-broker | grep -E 'Starting|started in|Started' |
    sed -e 's/^/     /' -e 's/ - Hourglass delay broker (RESP)//'

if ((failures > 0)); then
    inside journalctl --no-pager -u 'hourglass-*' >"$tmp/journal.log" 2>&1
    echo "$failures check(s) failed"
    exit 1
fi
echo "all checks passed"
