#!/usr/bin/env bash
# tests/system/test_samples.sh — what the sample configurations (etc/*.conf) say about defaults is
# what the programs of this build do (each program's --check-config, with and without the key):
#   - etc/hourglass-broker.conf and etc/hourglass-cli.conf say every commented line shows the default:
#     each '#KEY = VALUE' line must give the default, unless it ends in '; example', when KEY must be
#     unset by default;
#   - in every sample, a commented 'KEY = VALUE' line whose comment says '(the default)' must give
#     the default, and one whose comment starts 'unset' must name a key that is unset by default;
#   - every sample passes --check-config as shipped;
#   - the consumer's, compensator's and console's set the MariaDB password the same way.
# A failure names the file, the line and both values. No server is started.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
srcdir=$here/../..
builddir=${HG_BUILDDIR:-$PWD}
fail=0
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test_samples.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT

# The value --check-config prints for key ($2) with program $1's flags "${@:3}" (the key's line
# 'KEY = VALUE'; "" when the program refused the flags, with the refusal on stderr).
effective() {
    local prog=$1 key=$2 out
    shift 2
    out=$("$builddir/$prog" --check-config "$@" 2>&1) || {
        echo "  $prog --check-config $*: $(tail -n 1 <<<"$out")" >&2
        return 1
    }
    grep -m 1 -E "^$key = " <<<"$out" | sed -E "s/^$key = //"
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

check_file etc/hourglass-broker.conf hourglass-broker 1
check_file etc/hourglass-consumer.conf hourglass-consumer 0
check_file etc/hourglass-compensator.conf hourglass-compensator 0
check_file etc/hourglass-console.conf hourglass-console 0
check_file etc/hourglass-cli.conf hourglass-cli 1
if ((fail)); then
    echo "FAIL"
    exit 1
fi
echo "PASS"
