#!/usr/bin/env bash
# build.sh DIR: build softrdma's drop-in libibverbs.so.1 and
# librdmacm.so.1 (and the .so links) into DIR. Needs Go, a C compiler and the headers of
# Debian's libibverbs-dev. docs/clib.md says how to use them.
set -euo pipefail
out=${1:?usage: clib/build.sh DIR}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
[ -f /usr/include/infiniband/verbs.h ] || { echo "clib/build.sh: /usr/include/infiniband/verbs.h missing: apt-get install libibverbs-dev librdmacm-dev" >&2; exit 1; }
cc=${CC:-gcc}
# One Go runtime per process: all Go code is one c-archive, linked into
# libibverbs.so.1; the version script exports rdma-core's symbols with
# their versions and hides the rest.
# libsoftrdma/signals.c defines sigaction and signal (a handler the
# program installs gains SA_ONSTACK) under the symbol version the C
# library gives them on this machine, so that a program's references,
# which name that version, bind to them; the version node is added to
# the map.
printf '#include <signal.h>\nint main(void) { return sigaction(0, 0, 0) + (signal(0, 0) == 0); }\n' >"$tmp/probe.c"
"$cc" -o "$tmp/probe" "$tmp/probe.c"
libcver=$(objdump -T "$tmp/probe" | awk '$NF == "sigaction" {gsub(/[()]/, "", $(NF-1)); print $(NF-1); exit}')
[ -n "$libcver" ] || { echo "clib/build.sh: cannot find the C library's symbol version of sigaction (objdump -T)" >&2; exit 1; }
{ cat "$here/libibverbs.map"; printf '\n%s {\n\tglobal:\n\t\tsigaction;\n\t\tsignal;\n};\n' "$libcver"; } >"$tmp/libibverbs.map"
(cd "$here/libsoftrdma" && CGO_ENABLED=1 CGO_CFLAGS="${CGO_CFLAGS:--O2 -g} -DSRD_LIBC_SIGVER=\"$libcver\"" go build -tags clib -buildmode=c-archive -trimpath -o "$tmp/libsoftrdma.a" .)
"$cc" -shared -o "$out/libibverbs.so.1" -Wl,-soname,libibverbs.so.1 \
	-Wl,--version-script="$tmp/libibverbs.map" -Wl,-z,nodelete \
	-Wl,--whole-archive "$tmp/libsoftrdma.a" -Wl,--no-whole-archive -lpthread
ln -sf libibverbs.so.1 "$out/libibverbs.so"
echo "built $out/libibverbs.so.1"
# librdmacm.so.1: C over libibverbs.so.1's private cm entry points.
"$cc" -shared -fPIC -O2 -Wall -o "$out/librdmacm.so.1" -Wl,-soname,librdmacm.so.1 \
	-Wl,--version-script="$here/librdmacm.map" -I"$here/libsoftrdma" \
	"$here"/librdmacm/*.c -L"$out" -l:libibverbs.so.1 -lpthread
ln -sf librdmacm.so.1 "$out/librdmacm.so"
echo "built $out/librdmacm.so.1"
