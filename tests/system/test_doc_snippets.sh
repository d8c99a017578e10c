#!/usr/bin/env bash
# tests/system/test_doc_snippets.sh — what an application developer copies compiles.
#
#  1. Every public header (include/hourglass/*.h) compiles alone, first in a translation unit,
#     as C99 and C11 (-Wall -Wextra -Werror -pedantic) and as C++ (its extern "C" included).
#  2. Every ```c block of docs/libhourglass.md, docs/order-service.md and docs/getting-started.md
#     compiles as C99 and C11 with -Wall -Wextra -Werror: each block is a whole translation unit after the lines
#     #include <stdio.h>, <string.h> and <hourglass/hourglass.h> (so a block is written as
#     functions, not loose statements), with MariaDB Connector/C's flags for <mysql.h>.
#  3. The hourglass.pc this build installs resolves with no other .pc file than libmariadb's
#     (its headers need nothing else; the library's own dependencies are not the program's).
#  4. As an application builds: a producer-only program compiles, links against this build's
#     libhourglass.so and runs with nothing but `pkg-config --cflags --libs hourglass` (the .pc's
#     libdir and includedir pointed at the build), and is not linked to libmariadb (no -lmariadb, no
#     NEEDED entry): no public header includes <mysql.h>, so MariaDB is Requires.private. A program
#     calling Connector/C itself links with `pkg-config --cflags --libs hourglass libmariadb`, and
#     `pkg-config --static --libs hourglass` names MariaDB's and the private libraries, as the .pc
#     promises (the build makes no libhourglass.a: configure --enable-static for a static link).
# A missing compiler or pkg-config is a failure, never a skip.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
srcdir=$(cd "$here/../.." && pwd)
builddir=${HG_BUILDDIR:-$PWD}
for tool in cc c++ pkg-config; do
    command -v "$tool" >/dev/null || { echo "FAIL: $tool not installed"; exit 1; }
done
tmp=$(mktemp -d "${TMPDIR:-/tmp}/hg-test-snippets-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# compile LABEL FILE COMPILER FLAGS... — compile FILE to an object; on failure show the errors.
compile() {
    local label=$1 file=$2
    shift 2
    if "$@" -c "$file" -o "$tmp/out.o" >"$tmp/cc.log" 2>&1; then
        echo "ok   $label"
    else
        sed 's/^/    /' "$tmp/cc.log"
        fail "$label"
    fi
}

mariadb_cflags=$(pkg-config --cflags libmariadb) || { fail "pkg-config --cflags libmariadb"; exit 1; }

# ---------------------------------------------------------------- 1. each header alone
for h in "$srcdir"/include/hourglass/*.h; do
    name=hourglass/$(basename "$h")
    printf '#include <%s>\n' "$name" >"$tmp/header.c"
    cp "$tmp/header.c" "$tmp/header.cpp"
    for std in c99 c11; do
        compile "<$name> alone, -std=$std" "$tmp/header.c" cc -std="$std" -Wall -Wextra -Werror -pedantic \
            -I"$srcdir/include"
    done
    compile "<$name> alone, C++" "$tmp/header.cpp" c++ -Wall -Wextra -Werror -pedantic -I"$srcdir/include"
done

# ---------------------------------------------------------------- 2. the C blocks of the docs
for doc in docs/libhourglass.md docs/order-service.md docs/getting-started.md; do
    [[ -f $srcdir/$doc ]] || { fail "$doc missing"; continue; }
    # One file per block, named after the line its fence opens on.
    awk -v dir="$tmp" -v base="$(basename "$doc" .md)" -v doc="$doc" '
        /^```c$/ { start = NR; file = dir "/" base "-" NR ".c"
                   print "#include <stdio.h>\n#include <string.h>\n#include <hourglass/hourglass.h>\n#line " NR + 1 " \"" doc "\"" > file
                   next }
        /^```/   { if (file != "") close(file); file = ""; next }
        file != "" { print > file }' "$srcdir/$doc"
    blocks=("$tmp/$(basename "$doc" .md)"-*.c)
    [[ -e ${blocks[0]} ]] || { fail "$doc has no \`\`\`c block"; continue; }
    for b in "${blocks[@]}"; do
        line=${b##*-}
        line=${line%.c}
        for std in c99 c11; do
            # shellcheck disable=SC2086  # mariadb_cflags is a word list
            compile "$doc:$line, -std=$std" "$b" cc -std="$std" -D_POSIX_C_SOURCE=200809L -Wall -Wextra -Werror \
                -I"$srcdir/include" $mariadb_cflags
        done
    done
done

# ---------------------------------------------------------------- 3. hourglass.pc's requirements
pc=$builddir/lib/hourglass.pc
if [[ ! -f $pc ]]; then
    fail "lib/hourglass.pc not built"
else
    mkdir -p "$tmp/pc"
    cp "$pc" "$tmp/pc/"
    cp "$(pkg-config --variable=pcfiledir libmariadb)/libmariadb.pc" "$tmp/pc/"
    if out=$(PKG_CONFIG_LIBDIR=$tmp/pc PKG_CONFIG_PATH='' pkg-config --cflags --libs hourglass 2>&1); then
        echo "ok   pkg-config --cflags --libs hourglass with only libmariadb.pc beside it: $out"
    else
        fail "pkg-config --cflags --libs hourglass wants more than libmariadb.pc: $out"
    fi
fi

# ---------------------------------------------------------------- 4. linking as an application does
so=$builddir/lib/.libs/libhourglass.so
if [[ ! -f $pc || ! -f $so ]]; then
    fail "lib/hourglass.pc or lib/.libs/libhourglass.so not built"
else
    # hourglass.pc as installed, with libdir and includedir at the build (pkg-config's
    # --define-variable would move libmariadb.pc's too).
    mkdir -p "$tmp/app-pc"
    sed -e "s|^libdir=.*|libdir=$builddir/lib/.libs|" -e "s|^includedir=.*|includedir=$srcdir/include|" "$pc" \
        >"$tmp/app-pc/hourglass.pc"
    pcpath=$tmp/app-pc${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
    # A library built with --enable-sanitizers needs its application built with them too (ASan's runtime
    # must come first): the sanitizer build's pass of this test builds the programs as that application would.
    san=()
    if readelf -d "$so" 2>/dev/null | grep -q 'libasan'; then
        san=("-fsanitize=address,undefined" -fno-omit-frame-pointer)
    fi
    cat >"$tmp/producer.c" <<'EOF_C'
#include <stdio.h>
#include <hourglass/hourglass.h>
int main(void)
{
    hg_client_opts_t o;
    hg_client_opts_init(&o);
    printf("producer: %s\n", hg_strerror(HG_ERR_ARG));
    return 0;
}
EOF_C
    cat >"$tmp/service.c" <<'EOF_C'
#include <stdio.h>
#include <mysql.h>
#include <hourglass/hourglass.h>
int main(void)
{
    printf("service: %s %s\n", hg_order_outcome_name(HG_ORDER_CANCELLED), mysql_get_client_info());
    return 0;
}
EOF_C
    if ! libs=$(PKG_CONFIG_PATH=$pcpath pkg-config --cflags --libs hourglass 2>&1); then
        fail "pkg-config --cflags --libs hourglass: $libs"
    elif [[ " $libs " == *" -lmariadb "* ]]; then
        fail "pkg-config --libs hourglass links every application to MariaDB: $libs"
    else
        echo "ok   pkg-config --cflags --libs hourglass: $libs"
    fi
    # shellcheck disable=SC2086  # libs is a word list, as in an application's Makefile
    if cc -std=c11 -Wall -Wextra -Werror "${san[@]}" "$tmp/producer.c" -o "$tmp/producer" $libs >"$tmp/cc.log" 2>&1; then
        echo "ok   producer.c links with pkg-config --cflags --libs hourglass"
        if needed=$(readelf -d "$tmp/producer" 2>&1) && [[ $needed == *libmariadb* ]]; then
            fail "the producer has a NEEDED libmariadb entry: $(grep -i mariadb <<<"$needed")"
        fi
        if out=$(LD_LIBRARY_PATH=$builddir/lib/.libs "$tmp/producer" 2>&1) && [[ $out == "producer: "* ]]; then
            echo "ok   the producer runs: $out"
        else
            fail "the producer does not run: $out"
        fi
    else
        sed 's/^/    /' "$tmp/cc.log"
        fail "producer.c does not link with pkg-config --cflags --libs hourglass"
    fi
    out=
    libs=$(PKG_CONFIG_PATH=$pcpath pkg-config --cflags --libs hourglass libmariadb 2>&1) ||
        fail "pkg-config --cflags --libs hourglass libmariadb: $libs"
    # shellcheck disable=SC2086  # libs is a word list
    if cc -std=c11 -Wall -Wextra -Werror "${san[@]}" "$tmp/service.c" -o "$tmp/service" $libs >"$tmp/cc.log" 2>&1 &&
        out=$(LD_LIBRARY_PATH=$builddir/lib/.libs "$tmp/service" 2>&1); then
        echo "ok   a program calling Connector/C builds with pkg-config hourglass libmariadb and runs: $out"
    else
        sed 's/^/    /' "$tmp/cc.log"
        fail "service.c with pkg-config --cflags --libs hourglass libmariadb: $out"
    fi
    static=$(PKG_CONFIG_PATH=$pcpath pkg-config --static --libs hourglass 2>&1)
    missing=
    for l in -lhourglass -lmariadb -lrabbitmq -lssl -lcrypto -lpthread; do
        [[ " $static " == *" $l "* ]] || missing+=" $l"
    done
    if [[ -n $missing ]]; then
        fail "pkg-config --static --libs hourglass lacks$missing: $static"
    else
        echo "ok   pkg-config --static --libs hourglass: $static"
    fi
fi

if ((failures > 0)); then
    echo "FAIL: $failures check(s) failed"
    exit 1
fi
echo "PASS"
