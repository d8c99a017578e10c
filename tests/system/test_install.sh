#!/usr/bin/env bash
# tests/system/test_install.sh — make install gives a user everything, and it works from there.
#
#  1. `make install DESTDIR=$tmp/stage` of this build; every file a user needs is there: the four
#     programs, the library, both headers, hourglass.pc, the sample configurations (hourglass-cli's
#     too, which hourglass-cli(1) shows; the ones with
#     a MariaDB password mode 600) and alert rules, the three systemd units (ExecStart= and
#     Documentation= name installed files), the man pages, schema.sql and the docs.
#  2. A C program (examples/first-order/first_order.c) is built with
#     `pkg-config --cflags --libs hourglass libmariadb` (it calls Connector/C itself) against
#     the staged install only (hourglass.pc
#     relocated into the stage; no source-tree path on the command line) and run with
#     LD_LIBRARY_PATH on the staged library: it creates an order with its timeout on a private
#     MariaDB (the staged schema.sql, a least-privilege user) and sees it cancelled by the staged
#     hourglass-consumer through the staged hourglass-broker, both started from the staged sample
#     configurations.
# The installation directories come from make (AM_TESTS_ENVIRONMENT in tests/system.am).
# Every wait polls with a deadline (scripts/lib/stack.sh). About 10 s.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
srcdir=$(cd "$here/../.." && pwd)
builddir=${HG_BUILDDIR:-$PWD}
for v in HG_PREFIX HG_BINDIR HG_LIBDIR HG_INCLUDEDIR HG_PKGCONFIGDIR HG_SYSCONFDIR HG_DOCDIR HG_MANDIR HG_UNITDIR; do
    if [[ -z ${!v:-} ]]; then echo "FAIL: $v not set (run through make check)"; exit 1; fi
done
# shellcheck source=scripts/lib/stack.sh
source "$srcdir/scripts/lib/stack.sh"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/hg-test-install-XXXXXX")
failures=0
cleanup() {
    hg_stack_stop
    if ((failures > 0)); then
        for f in "$tmp"/*.log; do [[ -s $f ]] && hg_tail "$f"; done
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
ok() { echo "ok   $*"; }
stage=$tmp/stage

# ---------------------------------------------------------------- 1. the files
# A make of its own (not the jobserver of the make check that runs this test).
if ! env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s -C "$builddir" install DESTDIR="$stage" >"$tmp/install.log" 2>&1; then
    fail "make install DESTDIR=$stage failed"
    cat "$tmp/install.log"
    exit 1
fi
ok "make install DESTDIR=$stage"
expect=(
    "$HG_BINDIR/hourglass-broker" "$HG_BINDIR/hourglass-consumer" "$HG_BINDIR/hourglass-compensator"
    "$HG_BINDIR/hourglass-cli"
    "$HG_LIBDIR/libhourglass.so" "$HG_LIBDIR/libhourglass.so.2"
    "$HG_INCLUDEDIR/hourglass/hourglass.h" "$HG_INCLUDEDIR/hourglass/order.h" "$HG_PKGCONFIGDIR/hourglass.pc"
    "$HG_INCLUDEDIR/hourglass/order_view.h" "${HG_DATADIR:-$HG_PREFIX/share}/bash-completion/completions/hourglass-cli"
    "$HG_BINDIR/hourglass-console" "$HG_SYSCONFDIR/hourglass/hourglass-console.conf"
    "$HG_MANDIR/man8/hourglass-console.8" "$HG_DOCDIR/console.md"
    "${HG_DATADIR:-$HG_PREFIX/share}/hourglass/console/index.html"
    "${HG_DATADIR:-$HG_PREFIX/share}/hourglass/console/app.js"
    "$HG_SYSCONFDIR/hourglass/hourglass-broker.conf" "$HG_SYSCONFDIR/hourglass/hourglass-consumer.conf"
    "$HG_SYSCONFDIR/hourglass/hourglass-compensator.conf" "$HG_SYSCONFDIR/hourglass/hourglass-alerts.yml"
    "$HG_SYSCONFDIR/hourglass/hourglass-cli.conf"
    "$HG_UNITDIR/hourglass-broker.service" "$HG_UNITDIR/hourglass-consumer.service"
    "$HG_UNITDIR/hourglass-compensator.service" "$HG_UNITDIR/hourglass-console.service"
    "$HG_MANDIR/man8/hourglass-broker.8" "$HG_MANDIR/man8/hourglass-consumer.8"
    "$HG_MANDIR/man8/hourglass-compensator.8" "$HG_MANDIR/man1/hourglass-cli.1" "$HG_MANDIR/man3/libhourglass.3"
    "$HG_DOCDIR/schema.sql" "$HG_DOCDIR/README.md" "$HG_DOCDIR/DESIGN.md" "$HG_DOCDIR/getting-started.md"
    "$HG_DOCDIR/architecture.md" "$HG_DOCDIR/architecture.svg" "$HG_DOCDIR/protocol.md"
    "$HG_DOCDIR/operations.md" "$HG_DOCDIR/order-service.md" "$HG_DOCDIR/broker.md"
    "$HG_DOCDIR/order-cancel.md" "$HG_DOCDIR/compensator.md" "$HG_DOCDIR/libhourglass.md" "$HG_DOCDIR/metrics.md"
)
for f in "${expect[@]}"; do
    [[ -f $stage$f ]] || fail "not installed: $f"
done
ok "${#expect[@]} files installed:"
(cd "$stage" && find . -type f | sort | sed 's/^\./    /')
for f in hourglass-consumer.conf hourglass-compensator.conf hourglass-console.conf; do
    mode=$(stat -c %a "$stage$HG_SYSCONFDIR/hourglass/$f")
    [[ $mode == 600 ]] || fail "$f installed with mode $mode, want 600 (it holds a password)"
done
cmp -s "$stage$HG_DOCDIR/schema.sql" "$srcdir/sql/schema.sql" || fail "the installed schema.sql is not sql/schema.sql"

# The units name installed files, and are hardened.
for unit in hourglass-broker hourglass-consumer hourglass-compensator hourglass-console; do
    u=$stage$HG_UNITDIR/$unit.service
    exec_bin=$(sed -n 's/^ExecStart=\([^ ]*\).*/\1/p' "$u")
    [[ $exec_bin == "$HG_BINDIR/$unit" && -x $stage$exec_bin ]] || fail "$unit.service: ExecStart=$exec_bin is not the installed program"
    read -r -a docs < <(sed -n 's/^Documentation=//p' "$u" | tr '\n' ' ')
    for doc in "${docs[@]}"; do
        case $doc in
            file://*) [[ -f $stage${doc#file://} ]] || fail "$unit.service: Documentation=$doc is not installed" ;;
            man:*) page=${doc#man:}; sect=${page##*(}; sect=${sect%)}
                   [[ -f $stage$HG_MANDIR/man$sect/${page%%(*}.$sect ]] || fail "$unit.service: Documentation=$doc has no page" ;;
            *) fail "$unit.service: Documentation=$doc is neither file:// nor man:" ;;
        esac
    done
    # ExecReload: docs/operations.md sends SIGHUP with `systemctl reload`, which a unit without it refuses.
    # shellcheck disable=SC2016  # $MAINPID is systemd's, literal in the unit
    for key in DynamicUser=yes ProtectSystem=strict NoNewPrivileges=yes 'ExecReload=/bin/kill -HUP $MAINPID'; do
        grep -qx "$key" "$u" || fail "$unit.service lacks $key"
    done
    grep -qE '@[a-zA-Z_]+@' "$u" && fail "$unit.service still has an @placeholder@"
done
grep -qx 'StateDirectory=hourglass-broker' "$stage$HG_UNITDIR/hourglass-broker.service" ||
    fail "hourglass-broker.service lacks StateDirectory="
if command -v systemd-analyze >/dev/null; then
    # Parse errors only: the stage has no sysinit.target and man cannot look pages up in it.
    bad=$(systemd-analyze verify --root="$stage" "$stage$HG_UNITDIR"/hourglass-*.service 2>&1 |
          grep -Ei 'unknown (key|section|lvalue)|failed to parse|invalid|ignoring' || true)
    if [[ -z $bad ]]; then ok "systemd-analyze verify: the units parse"; else fail "systemd-analyze verify: $bad"; fi
fi
((failures == 0)) && ok "units: ExecStart= and Documentation= installed, hardened"

# ---------------------------------------------------------------- 2. a program built against the install
mkdir -p "$tmp/pkgconfig"
# hourglass.pc relocated into the stage (a DESTDIR install is not at its prefix yet); the
# libraries it requires (libmariadb) are found where the system has them.
sed "s|^prefix=.*|prefix=$stage$HG_PREFIX|" "$stage$HG_PKGCONFIGDIR/hourglass.pc" >"$tmp/pkgconfig/hourglass.pc"
# first_order.c calls Connector/C itself (mysql_query on hg_order_db_mysql's connection), so it
# names libmariadb beside hourglass (hourglass.pc has it in Requires.private only).
flags=$(PKG_CONFIG_PATH=$tmp/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH} pkg-config --cflags --libs hourglass libmariadb) ||
    { fail "pkg-config --cflags --libs hourglass libmariadb"; exit 1; }
[[ $flags == *"-I$stage$HG_INCLUDEDIR"* && $flags == *"-L$stage$HG_LIBDIR"* && $flags == *-lhourglass* ]] ||
    fail "pkg-config flags do not point into the stage: $flags"
for word in $flags; do # every -I / -L is the stage's or the system's, never the source or build tree
    dir=${word#-[IL]}
    [[ $word == -[IL]* && $dir != "$stage"* ]] || continue
    [[ $dir != "$srcdir"* && $dir != "$builddir"* ]] || fail "pkg-config flags name the source or build tree: $word"
done
# shellcheck disable=SC2086 # the flags are words
# A sanitizer build's library needs the sanitizer runtime in the program too
# (HG_SAN_FLAGS is empty in a plain build).
# shellcheck disable=SC2086  # both are word lists
if ! cc -std=gnu11 -Wall -Werror ${HG_SAN_FLAGS:-} "$srcdir/examples/first-order/first_order.c" $flags -o "$tmp/first-order" \
    >"$tmp/cc.log" 2>&1; then
    cat "$tmp/cc.log"
    fail "cc first_order.c \$(pkg-config --cflags --libs hourglass libmariadb)"
    exit 1
fi
ok "cc first_order.c $flags"
export LD_LIBRARY_PATH=$stage$HG_LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
lib=$(ldd "$tmp/first-order" | awk '/libhourglass/ { print $3 }')
[[ $lib == "$stage$HG_LIBDIR/"* ]] || fail "first-order loads libhourglass from '$lib', not the stage"
lib=$(ldd "$stage$HG_BINDIR/hourglass-consumer" | awk '/libhourglass/ { print $3 }')
[[ $lib == "$stage$HG_LIBDIR/"* ]] || fail "the staged hourglass-consumer loads libhourglass from '$lib'"

# The private stack, from the staged programs, schema and sample configurations.
hg_mariadb_start "$tmp/db" || { fail "MariaDB did not start"; exit 1; }
hg_shop_create shop "$stage$HG_DOCDIR/schema.sql" || { fail "database, schema, users"; exit 1; }
hg_sql "INSERT INTO shop.stock (sku_id, received, available) VALUES (1, 10, 10)" || { fail "stock"; exit 1; }
{ cat "$stage$HG_SYSCONFDIR/hourglass/hourglass-broker.conf"; printf 'port = 0\ndir = %s\n' "$tmp/broker-data"; } \
    >"$tmp/broker.conf"
hg_broker_start "$stage$HG_BINDIR/hourglass-broker" "$tmp/broker.conf" "$tmp/broker.log" ||
    { fail "the staged broker did not start"; exit 1; }
# The sample with the keys set below taken out: a key set twice in a file is refused. Its
# metrics-port (9108) is off here: another consumer on this host may hold it.
{ grep -vE '^(uri|mysql-socket|mysql-password|block|log-level|metrics-port) *=' \
      "$stage$HG_SYSCONFDIR/hourglass/hourglass-consumer.conf"
  printf 'uri = %s\nmysql-socket = %s\nmysql-password = %s\nblock = 500ms\nlog-level = info\nmetrics-port = 0\n' \
      "$HG_BROKER_URI" "$HG_MYSQL_SOCKET" "$hg_pw_hg_consumer"; } >"$tmp/consumer.conf"
hg_daemon_start "$stage$HG_BINDIR/hourglass-consumer" "$tmp/consumer.conf" "$tmp/consumer.log" hg_consumer_pid
out=$(HG_MYSQL_PASSWORD=$hg_pw_hg_shop "$tmp/first-order" --uri "$HG_BROKER_URI" --mysql-socket "$HG_MYSQL_SOCKET" \
      --mysql-user hg_shop --mysql-database shop --timeout-ms 2000 --wait 30 --order-id 42 2>&1)
status=$?
while IFS= read -r line; do echo "    $line"; done <<<"$out"
((status == 0)) || fail "first-order exited $status"
grep -q '^order 42 cancelled by timeout-message ' <<<"$out" || fail "order 42 was not cancelled by its timeout message"
row=$(hg_sql "SELECT status, cancel_reason, cancelled_at >= expire_at FROM shop.orders WHERE id = 42")
[[ $row == $'cancelled\ttimeout-message\t1' ]] || fail "order 42 in the database: '$row'"
row=$(hg_sql "SELECT available, reserved, sold FROM shop.stock WHERE sku_id = 1")
[[ $row == $'10\t0\t0' ]] || fail "stock of SKU 1 after the cancel: '$row', want 10 0 0"
row=$(hg_sql "SELECT status FROM shop.order_timeout_msg WHERE order_id = 42")
[[ $row == 'done' ]] || fail "outbox row of order 42: '$row', want done"
# shellcheck disable=SC2154  # hg_consumer_pid: set by hg_daemon_start (its last argument names it)
hg_stop_pid "$hg_consumer_pid" 20 || fail "the staged hourglass-consumer did not stop cleanly"
hg_forget_pid "$hg_consumer_pid"

if ((failures > 0)); then
    echo "FAIL: $failures check(s) failed"
    exit 1
fi
echo "PASS"
