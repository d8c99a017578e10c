# shellcheck shell=bash
# scripts/lib/packages.sh — the Debian packages Hourglass needs, and the one
# function that installs the missing ones. Sourced by scripts/test and
# scripts/demo (bash); defines hg_build_packages, hg_packages, hg_demo_packages,
# hg_install_packages and hg_packages_cleanup, and sets nothing else.
#
# Targets Debian 12, run as root (or with sudo). Installing mariadb-server,
# redis-server, rabbitmq-server or prometheus would start system services that nothing here
# uses (the tests and the demo start private servers in temp dirs), so while
# apt-get runs a policy-rc.d refuses every service start; it is removed
# afterwards, and by hg_packages_cleanup (call it from an EXIT trap) when the
# script is interrupted in between.

# What building, testing and the demo need:
#   build       build-essential autoconf automake libtool pkg-config and the -dev libraries
#   tests       mariadb-server (private servers; brings mariadb-client, the `mariadb` command),
#               redis-tools (redis-cli, redis-benchmark), redis-server (the benchmarks), valgrind,
#               prometheus (promtool checks the shipped alert rules), man-db (man -l renders the pages),
#               rabbitmq-server (private nodes for the amqp:// transport's tests; the service never starts),
#               tmux (an interactive redis-cli session), python3-redis (redis-py's pipeline against the broker),
#               openssl (the TLS tests make a throwaway CA and use s_client),
#               strace (attached to the broker, it holds every fdatasync: a slow disk, for the read-after-SEND test),
#               nftables and iproute2 (nft drops a RabbitMQ node's distribution traffic, ss finds its links:
#               the partition test of test_rabbit_cluster)
#               systemd and systemd-container (systemd-nspawn boots a systemd to run the installed units:
#               test_systemd_units.sh)
#   console     chromium, chromium-driver, python3-selenium (the console's real-browser test)
#   fuzzing     clang and libclang-rt-dev (libFuzzer and the sanitizer runtimes: make fuzz)
#   layout      clang-format (tests/system/test_format.sh checks the tree against .clang-format)
#   shell       shellcheck (tests/system/test_shellcheck.sh checks the demo's shell)
hg_build_packages=(
    build-essential autoconf automake libtool pkg-config
    libevent-dev libleveldb-dev libmariadb-dev libssl-dev libcunit1-dev libinih-dev librabbitmq-dev
)
hg_packages=(
    "${hg_build_packages[@]}"
    mariadb-server redis-tools redis-server valgrind prometheus man-db openssl
    rabbitmq-server
    chromium chromium-driver python3-selenium
    clang libclang-rt-dev clang-format
    tmux python3-redis strace shellcheck nftables iproute2 systemd systemd-container
)

# What scripts/demo needs, a part of the above: the build's packages and mariadb-server (the private MariaDB);
# with --rabbitmq also rabbitmq-server. A newcomer's first command installs no browser, fuzzer or test tool.
# shellcheck disable=SC2034  # used by scripts/demo
hg_demo_packages=("${hg_build_packages[@]}" mariadb-server)

hg_sudo=()            # the command prefix for package installation: empty as root, (sudo) otherwise
hg_created_policy=""  # the policy-rc.d hg_install_packages wrote, until it removes it

# Remove the policy-rc.d this script wrote, if any. Safe to call at any time.
hg_packages_cleanup() {
    if [[ -n "$hg_created_policy" ]]; then
        "${hg_sudo[@]}" rm -f "$hg_created_policy"
        hg_created_policy=""
    fi
}

# hg_install_packages PROGRAM [PACKAGE...] — install the PACKAGEs (default: every one of
# hg_packages) that are missing (apt-get, without recommends), naming PROGRAM in its messages.
# Returns 0; exits 1 when it cannot (not Debian, not root and no sudo).
hg_install_packages() {
    local prog=$1
    shift
    local wanted=("$@")
    ((${#wanted[@]})) || wanted=("${hg_packages[@]}")
    if ! command -v dpkg-query >/dev/null 2>&1; then
        echo "$prog: dpkg-query not found — this script supports Debian 12." >&2
        echo "Install these packages (or their equivalents) by hand: ${wanted[*]}" >&2
        exit 1
    fi
    local missing=() p
    for p in "${wanted[@]}"; do
        if [[ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)" != "install ok installed" ]]; then
            missing+=("$p")
        fi
    done
    if ((${#missing[@]} == 0)); then
        echo "$prog: the ${#wanted[@]} Debian packages it needs are installed"
        return 0
    fi
    if ((EUID != 0)); then
        if command -v sudo >/dev/null 2>&1; then
            hg_sudo=(sudo)
        else
            echo "$prog: missing packages (${missing[*]}) and not root; rerun as root" >&2
            exit 1
        fi
    fi
    echo "$prog: installing ${missing[*]}"
    # invoke-rc.d and deb-systemd-invoke honour policy-rc.d exit code 101: no service starts.
    local policy=/usr/sbin/policy-rc.d
    if [[ ! -e "$policy" ]]; then
        printf '#!/bin/sh\n# written by hourglass %s during apt-get install; removed after\nexit 101\n' "$prog" |
            "${hg_sudo[@]}" tee "$policy" >/dev/null
        "${hg_sudo[@]}" chmod 755 "$policy"
        hg_created_policy=$policy
    fi
    "${hg_sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
    "${hg_sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -q --no-install-recommends "${missing[@]}"
    hg_packages_cleanup
}
