#!/usr/bin/env bash
# tests/system/test_demo_packages.sh — scripts/demo asks for the packages it needs, not the test suite's.
# scripts/lib/packages.sh is sourced with dpkg-query, apt-get and sudo replaced by stubs in a temp dir
# (nothing is installed, no policy-rc.d written): every package counts as installed but the ones only the
# tests want (chromium, clang, valgrind, prometheus, …). Passes when hg_demo_packages is a part of
# hg_packages without them, hg_install_packages with that list finds nothing missing and runs no apt-get,
# scripts/demo passes that list (and rabbitmq-server with --rabbitmq), and hg_install_packages without a
# list still wants every one of hg_packages (scripts/test).
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
srcdir=$(cd "$here/../.." && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/hg-test-demo-packages-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

test_only=(chromium chromium-driver python3-selenium clang libclang-rt-dev clang-format valgrind prometheus
    redis-server shellcheck strace nftables tmux python3-redis)
mkdir -p "$tmp/bin"
printf '%s\n' "${test_only[@]}" >"$tmp/missing"
cat >"$tmp/bin/dpkg-query" <<STUB
#!/bin/sh
# dpkg-query -W -f=FORMAT PACKAGE: installed unless listed in missing
eval "p=\\\${\$#}"
grep -qx "\$p" "$tmp/missing" && exit 1
printf 'install ok installed'
STUB
printf '#!/bin/sh\necho "apt-get $*" >>"%s/apt.log"\n' "$tmp" >"$tmp/bin/apt-get"
printf '#!/bin/sh\necho "sudo $*" >>"%s/apt.log"\n' "$tmp" >"$tmp/bin/sudo"
chmod +x "$tmp/bin/"*

# Before anything else: the list exists (without it the demo would install the whole suite's packages).
# shellcheck source=scripts/lib/packages.sh
source "$srcdir/scripts/lib/packages.sh"
declare -p hg_demo_packages >/dev/null 2>&1 || fail "scripts/lib/packages.sh defines no hg_demo_packages"
for p in "${hg_demo_packages[@]}"; do
    [[ " ${hg_packages[*]} " == *" $p "* ]] || fail "hg_demo_packages has $p, which hg_packages lacks"
    [[ " ${test_only[*]} " != *" $p "* ]] || fail "hg_demo_packages has $p, which only the tests use"
done
for p in mariadb-server build-essential libleveldb-dev librabbitmq-dev; do
    [[ " ${hg_demo_packages[*]} " == *" $p "* ]] || fail "hg_demo_packages lacks $p"
done

# The demo's list: nothing missing, no apt-get. Run in a subshell: hg_install_packages exits on failure.
# shellcheck disable=SC2030  # PATH with the stubs: for that subshell only
out=$(PATH=$tmp/bin:$PATH; hg_install_packages scripts/demo "${hg_demo_packages[@]}" 2>&1) ||
    fail "hg_install_packages with the demo's list failed: $out"
[[ ! -e $tmp/apt.log ]] || fail "hg_install_packages with the demo's list ran: $(cat "$tmp/apt.log")"
[[ $out == "scripts/demo: the ${#hg_demo_packages[@]} Debian packages it needs are installed" ]] ||
    fail "unexpected message: $out"
echo "ok   the demo's ${#hg_demo_packages[@]} packages: nothing missing, no apt-get ($out)"

# scripts/demo passes that list, and rabbitmq-server with --rabbitmq (its own text, not expanded here).
# shellcheck disable=SC2016
grep -q 'demo_packages=("${hg_demo_packages\[@\]}")' "$srcdir/scripts/demo" || fail "scripts/demo does not use hg_demo_packages"
grep -q '((rabbitmq)) && demo_packages+=(rabbitmq-server)' "$srcdir/scripts/demo" ||
    fail "scripts/demo does not add rabbitmq-server for --rabbitmq"
# shellcheck disable=SC2016
grep -q 'hg_install_packages scripts/demo "${demo_packages\[@\]}"' "$srcdir/scripts/demo" ||
    fail "scripts/demo does not pass its list to hg_install_packages"
echo "ok   scripts/demo installs its list (and rabbitmq-server with --rabbitmq)"

# Without a list: every package of hg_packages is checked (scripts/test), so the stubs' missing ones are
# installed — by the stub apt-get (as root) or the stub sudo. The function is taken with its policy-rc.d
# path pointed at a file in the temp dir that exists already, so it writes nothing outside it.
touch "$tmp/policy-rc.d"
eval "$(declare -f hg_install_packages | sed "s|/usr/sbin/policy-rc.d|$tmp/policy-rc.d|")"
# shellcheck disable=SC2030,SC2031  # PATH with the stubs: for that subshell only
out=$(PATH=$tmp/bin:$PATH; hg_install_packages scripts/test 2>&1) || fail "hg_install_packages without a list failed: $out"
grep -q "install .*chromium" "$tmp/apt.log" 2>/dev/null ||
    fail "hg_install_packages without a list did not want chromium: $out"
echo "ok   without a list: every package of hg_packages (the missing ones installed: $(grep -c . "$tmp/apt.log") apt-get calls, stubbed)"
echo "PASS"
