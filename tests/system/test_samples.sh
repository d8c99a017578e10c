#!/usr/bin/env bash
# tests/system/test_samples.sh — what the sample configurations (etc/*.conf) say about defaults is
# what the programs of this build do (each program's --check-config, with and without the key):
#   - etc/hourglass-broker.conf and etc/hourglass-cli.conf say every commented line shows the default:
#     each '#KEY = VALUE' line must give the default, unless it ends in '; example', when KEY must be
#     unset by default;
#   - in every sample, a commented 'KEY = VALUE' line whose comment says '(the default)' must give
#     the default, and one whose comment starts 'unset' must name a key that is unset by default;
#   - every sample passes --check-config as shipped;
#   - the consumer's, compensator's and console's set the MariaDB password the same way;
#   - --check-config's output is a configuration file that reads back: for every sample and for
#     configurations with a long value on continuation lines, a password file, unset optional paths
#     and a repeated side-effect-sql, 'PROG --config out.conf --check-config' succeeds and prints the
#     same (a secret is printed as a comment and left out, so the read-back gets it as a flag); a
#     value no INI file holds is said on stderr, exit 0, and its copy is refused.
#   - a broker URI's password is never printed: the URI is printed with user@ alone, the copy reads
#     back the same with the URI given again, and without it the daemons refuse it;
#   - side-effect-sql = none alone reads back as none, and 'none' next to a statement is refused.
# A failure names the file, the line and both values. No server is started.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
srcdir=$here/../..
builddir=${HG_BUILDDIR:-$PWD}
fail=0
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test_samples.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT

# The value --check-config prints for key ($2) with program $1's flags "${@:3}" (the key's line
# 'KEY = VALUE'; "" for an unset key, and when the program refused the flags, with the refusal on
# stderr and status 1).
effective() {
    local prog=$1 key=$2 out
    shift 2
    out=$("$builddir/$prog" --check-config "$@" 2>&1) || {
        echo "  $prog --check-config $*: $(tail -n 1 <<<"$out")" >&2
        return 1
    }
    # an unset key prints as the comment '; KEY = (not set)': no line, ""
    awk -v k="$key = " 'index($0, k) == 1 { print substr($0, length(k) + 1); exit }' <<<"$out"
}

# check_file FILE PROGRAM ALL: the rules above; ALL=1 when every commented key line is a default.
check_file() {
    local file=$1 prog=$2 all=$3 n=0 line key value note base got
    local -a req=()
    [[ $prog == hourglass-broker || $prog == hourglass-cli ]] || req=(--mysql-database shop)
    if ! "$builddir/$prog" --config "$srcdir/$file" --check-config >/dev/null 2>"$tmp/stderr"; then
        echo "FAIL: $file: $prog --check-config refuses it: $(tail -n 1 "$tmp/stderr")"
        fail=1
    fi
    while IFS= read -r line; do
        n=$((n + 1))
        [[ $line =~ ^[#\;][[:space:]]?([a-z][a-z0-9-]*)[[:space:]]=[[:space:]](.*)$ ]] || continue
        key=${BASH_REMATCH[1]}
        value=${BASH_REMATCH[2]}
        note=""
        if [[ $value == *" ; "* ]]; then
            note=${value#* ; }
            value=${value%% ; *}
        fi
        value=$(sed -E 's/[[:space:]]+$//' <<<"$value")
        [[ $value =~ ^(.*[^[:space:]])[[:space:]]+\(the[[:space:]]default\)$ ]] && {
            value=${BASH_REMATCH[1]}
            note="(the default)"
        }
        # only keys of this program ('# mysql-tls = verify' in prose, too, is one)
        base=$(effective "$prog" "$key" "${req[@]}") || { fail=1; continue; }
        grep -q -E "^  --$key " < <("$builddir/$prog" --help) || continue
        if [[ $note == example* || $note == unset* ]]; then
            if [[ -n $base ]]; then
                echo "FAIL: $file:$n: '$key' is shown as unset by default ($note), but its default is '$base'"
                fail=1
            fi
        elif [[ $all == 1 || $note == "(the default)" ]]; then
            got=$(effective "$prog" "$key" "${req[@]}" "--$key" "$value") || { fail=1; continue; }
            if [[ $got != "$base" ]]; then
                echo "FAIL: $file:$n: '$key = $value' is shown as the default, but the default is" \
                    "'${base:-(unset)}' (with it: '$got'); comment it as '; example' or give the default"
                fail=1
            fi
        fi
    done <"$srcdir/$file"
    echo "ok   $file: $n lines checked against $prog"
}

# The MariaDB password is set one way in every sample, the one docs/getting-started.md's sed edits:
# the line 'mysql-password = change-me', with the password-file alternative commented under it.
for p in consumer compensator console; do
    f=etc/hourglass-$p.conf
    if [[ $(grep -c '^mysql-password = change-me$' "$srcdir/$f") != 1 ||
        $(grep -c "^; mysql-password-file = /etc/hourglass/$p-mysql.password\$" "$srcdir/$f") != 1 ]]; then
        echo "FAIL: $f: want one 'mysql-password = change-me' line and one" \
            "'; mysql-password-file = /etc/hourglass/$p-mysql.password' line (docs/getting-started.md edits them)"
        fail=1
    fi
done

# round_trip PROGRAM CONF: PROGRAM --config CONF --check-config > out.conf, then the same with
# --config out.conf (each '; KEY = (set, not shown)' secret given as --KEY, each URI printed after
# '; KEY: its password is not shown' given again as --KEY with CONF's value): both succeed, say
# nothing on stderr about values not printable, print no 'pw-Secret' (the password the tests' URIs
# hold), and print the same lines but the last, the comment '; PROGRAM: configuration OK (FILE)'.
round_trip() {
    local prog=$1 conf=$2 out=$tmp/$1.check.conf again=$tmp/$1.again.conf key
    local -a secrets=()
    if ! "$builddir/$prog" --config "$conf" --check-config >"$out" 2>"$tmp/stderr" ||
        grep -q "cannot be printed" "$tmp/stderr"; then
        echo "FAIL: $prog --config $conf --check-config: $(tail -n 1 "$tmp/stderr")"
        fail=1
        return
    fi
    if [[ $(tail -n 1 "$out") != "; $prog: configuration OK ($conf)" ]]; then
        echo "FAIL: $prog --check-config's last line is not '; $prog: configuration OK ($conf)': $(tail -n 1 "$out")"
        fail=1
    fi
    while read -r key; do
        secrets+=("--$key" "round-trip-secret")
    done < <(sed -n -E 's/^; ([a-z0-9-]+) = \(set, not shown\)$/\1/p' "$out")
    while read -r key; do
        secrets+=("--$key" "$(sed -n -E "s/^$key *= *//p" "$conf")")
    done < <(sed -n -E 's/^; ([a-z0-9-]+): its password is not shown .*/\1/p' "$out")
    if grep -q pw-Secret "$out"; then
        echo "FAIL: $prog --config $conf --check-config prints a password: $(grep pw-Secret "$out")"
        fail=1
    fi
    if ! "$builddir/$prog" --config "$out" --check-config "${secrets[@]}" >"$again" 2>"$tmp/stderr"; then
        echo "FAIL: $prog: the --check-config output of $conf does not read back: $(tail -n 1 "$tmp/stderr")"
        fail=1
        return
    fi
    if ! diff <(sed '$d' "$out") <(sed '$d' "$again") >"$tmp/diff"; then
        echo "FAIL: $prog: the --check-config output of $conf reads back to another configuration:"
        cat "$tmp/diff"
        fail=1
        return
    fi
    echo "ok   $prog: --check-config of $conf reads back the same ($(wc -l <"$out") lines," \
        "$((${#secrets[@]} / 2)) secret(s) given again as flags)"
}

check_file etc/hourglass-broker.conf hourglass-broker 1
check_file etc/hourglass-consumer.conf hourglass-consumer 0
check_file etc/hourglass-compensator.conf hourglass-compensator 0
check_file etc/hourglass-console.conf hourglass-console 0
check_file etc/hourglass-cli.conf hourglass-cli 1
for p in broker consumer compensator console cli; do
    round_trip "hourglass-$p" "$srcdir/etc/hourglass-$p.conf"
done
# A password file (an unset mysql-password printed as 'key = ' read back as empty, which clashed
# with it), a value longer than an INI line given on continuation lines, unset optional paths
# (log-file, tls-*), side-effect-sql repeated.
printf 'round-trip-pw\n' >"$tmp/mysql.password"
chmod 600 "$tmp/mysql.password"
head="UPDATE orders SET status='cancelled', cancelled_at=NOW(6), cancel_reason=:reason WHERE id=?"
tail="AND status='pending' AND cancelled_at IS NULL AND id > 0 AND id < 9223372036854775807 AND status <> 'shipped'"
cat >"$tmp/consumer.conf" <<CONF
mysql-database = shop
mysql-password-file = $tmp/mysql.password
claim-sql = $head
    $tail
side-effect-sql = UPDATE stock SET available = available + 1 WHERE sku_id = ?
side-effect-sql = UPDATE order_timeout_msg SET status='done' WHERE order_id = ?
CONF
printf 'mysql-database = shop\nmysql-password-file = %s\n' "$tmp/mysql.password" >"$tmp/compensator.conf"
cp "$tmp/compensator.conf" "$tmp/cli.conf"
for p in consumer compensator cli; do
    round_trip "hourglass-$p" "$tmp/$p.conf"
done
# the long claim-sql is printed whole: as the flag that gives it on one line prints it
claim() { sed -n '/^claim-sql = /,/^[a-z]/p' "$@" | sed '$d'; }
if ! diff <(claim "$tmp/hourglass-consumer.check.conf") <("$builddir/hourglass-consumer" --check-config \
    --mysql-database shop --claim-sql "$head $tail" 2>/dev/null | claim) >"$tmp/diff"; then
    echo "FAIL: hourglass-consumer --check-config prints the claim-sql of continuation lines otherwise:"
    cat "$tmp/diff"
    fail=1
fi
# A broker URI holding user:password@ (hourglass://, amqp:// with a host list) is printed without
# the password; given again as --uri, the copy reads back the same (round_trip). Read back without
# it, the daemons refuse the copy for want of a password: it never connects as another user, or
# without one. hourglass-cli's file (whose uri no flag sets) prints it the same way, and its copy is
# refused by a command.
printf 'uri = hourglass://hg-consumer:pw-Secret@127.0.0.1:7379\nmysql-database = shop\n' >"$tmp/uri-consumer.conf"
printf 'uri = amqp://hg:pw-Secret@h1:5672,h2/orders\nmysql-database = shop\n' >"$tmp/uri-compensator.conf"
for p in consumer compensator; do
    round_trip "hourglass-$p" "$tmp/uri-$p.conf"
    if "$builddir/hourglass-$p" --config "$tmp/hourglass-$p.check.conf" --check-config >/dev/null 2>"$tmp/stderr" ||
        ! grep -q "^hourglass-$p: uri: no password given for user '[a-z-]*' (named in the URI): set password-file" \
            "$tmp/stderr"; then
        echo "FAIL: hourglass-$p: the copy of a URI without its password is not refused: $(tail -n 1 "$tmp/stderr")"
        fail=1
    else
        echo "ok   hourglass-$p: the copy of a URI without its password is refused: $(<"$tmp/stderr")"
    fi
done
printf 'uri = hourglass://ops:pw-Secret@127.0.0.1:1\n' >"$tmp/uri-cli.conf"
"$builddir/hourglass-cli" --config "$tmp/uri-cli.conf" --check-config >"$tmp/uri-cli.check.conf" 2>"$tmp/stderr"
if grep -q pw-Secret "$tmp/uri-cli.check.conf" || ! grep -qx 'uri = hourglass://ops@127.0.0.1:1' "$tmp/uri-cli.check.conf"; then
    echo "FAIL: hourglass-cli --check-config prints the file's uri otherwise: $(grep uri "$tmp/uri-cli.check.conf")"
    fail=1
elif "$builddir/hourglass-cli" --config "$tmp/uri-cli.check.conf" ping >/dev/null 2>"$tmp/stderr" ||
    ! grep -q "no password given for user 'ops' (named in the URI)" "$tmp/stderr"; then
    echo "FAIL: hourglass-cli: the copy of a URI without its password is not refused: $(tail -n 1 "$tmp/stderr")"
    fail=1
else
    echo "ok   hourglass-cli: the file's uri is printed without its password, the copy refused: $(<"$tmp/stderr")"
fi
# side-effect-sql = none alone is the empty list: printed as 'none', its copy reads back the same.
# 'none' next to a statement (file or flags, either order) is refused naming it: it was skipped, so
# the statements ran although the file said none.
printf 'mysql-database = shop\nside-effect-sql = none\n' >"$tmp/none.conf"
round_trip hourglass-consumer "$tmp/none.conf"
if ! grep -qx 'side-effect-sql = none' "$tmp/hourglass-consumer.check.conf"; then
    echo "FAIL: hourglass-consumer: side-effect-sql = none is printed otherwise: $(grep side-effect "$tmp/hourglass-consumer.check.conf")"
    fail=1
fi
stmt="UPDATE stock SET available = available + 1 WHERE sku_id = ?"
printf 'mysql-database = shop\nside-effect-sql = none\nside-effect-sql = %s\n' "$stmt" >"$tmp/none-and.conf"
printf 'mysql-database = shop\nside-effect-sql = %s\nside-effect-sql = NONE\n' "$stmt" >"$tmp/and-none.conf"
refused="side-effect-sql: 'none' (no side effects) given together with a statement"
for args in "--config $tmp/none-and.conf" "--config $tmp/and-none.conf" "--mysql-database shop --side-effect-sql none --side-effect-sql X"; do
    # shellcheck disable=SC2086 # the words of args are the arguments
    if "$builddir/hourglass-consumer" $args --check-config >/dev/null 2>"$tmp/stderr" ||
        ! grep -qF "$refused" "$tmp/stderr"; then
        echo "FAIL: hourglass-consumer $args: 'none' with a statement is not refused: $(tail -n 1 "$tmp/stderr")"
        fail=1
    else
        echo "ok   hourglass-consumer $args: $(<"$tmp/stderr")"
    fi
done
# A value no INI file holds (only a flag gives one: a ';' after a blank, here in one statement of
# the repeatable side-effect-sql, printed by its own print function): the configuration is valid
# (exit 0), stderr says how many values cannot be printed, and the copy fails on the line instead of
# reading back as another configuration.
odd="UPDATE stock SET note = ' ;' WHERE sku_id = ?"
if ! "$builddir/hourglass-consumer" --check-config --mysql-database shop --side-effect-sql "$odd" \
    >"$tmp/odd.conf" 2>"$tmp/stderr"; then
    echo "FAIL: hourglass-consumer --check-config --side-effect-sql \"$odd\": $(tail -n 1 "$tmp/stderr")"
    fail=1
elif [[ $(<"$tmp/stderr") != "hourglass-consumer: 1 value cannot be printed so that it reads back; see the comments" ]]; then
    echo "FAIL: hourglass-consumer --side-effect-sql \"$odd\": stderr is not the one value not printable: $(<"$tmp/stderr")"
    fail=1
elif "$builddir/hourglass-consumer" --config "$tmp/odd.conf" --check-config >/dev/null 2>"$tmp/stderr" ||
    ! grep -q "odd.conf:[0-9]*: not a 'key = value' line" "$tmp/stderr"; then
    echo "FAIL: hourglass-consumer: a print with a value not printable read back: $(tail -n 1 "$tmp/stderr")"
    fail=1
else
    echo "ok   hourglass-consumer: a side-effect-sql not printable is said on stderr and its copy is refused"
fi

if ((fail)); then
    echo "FAIL"
    exit 1
fi
echo "PASS"
