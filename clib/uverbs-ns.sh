#!/usr/bin/env bash
# uverbs-ns.sh CMD [ARGS...]: run CMD where /dev/infiniband/uverbs0..7
# exist (SOFTRDMA_UVERBS=N: 0..N-1), without root and without changing
# the host.
#
# UCX lists an RDMA device only if /dev/infiniband/<ibv_device.dev_name>
# is a character device the process may read and write
# (uct_ib_device_is_accessible); it never opens it. A process without a
# kernel RDMA stack has no /dev/infiniband, and only root can create one.
# This script runs CMD in a private mount namespace (inside a user
# namespace unless it runs as root, which unprivileged users may create
# where the kernel allows it: Debian's default) whose /dev is a tmpfs
# holding the host's usual /dev entries, bound one by one, plus
# /dev/infiniband/uverbsN bound to /dev/null. The host and other
# processes see nothing of it. Example, with the library built by
# clib/build.sh into DIR:
#
#	LD_LIBRARY_PATH=DIR bash clib/uverbs-ns.sh ucx_info -d
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: clib/uverbs-ns.sh CMD [ARGS...]" >&2; exit 2; }
if [ -z "${SOFTRDMA_UVERBS_NS:-}" ]; then
	command -v unshare >/dev/null || { echo "clib/uverbs-ns.sh: unshare (util-linux) missing" >&2; exit 1; }
	# Where the namespace keeps the host's /dev: an empty directory on
	# the host, removed when CMD is done.
	SOFTRDMA_UVERBS_NS=$(mktemp -d)
	export SOFTRDMA_UVERBS_NS
	ns=(-U -r -m) # a user namespace in which the caller is root, for mount
	[ "$(id -u)" = 0 ] && ns=(-m)
	rc=0
	unshare "${ns[@]}" --propagation private bash "$0" "$@" || rc=$?
	rmdir "$SOFTRDMA_UVERBS_NS"
	exit $rc
fi
old=$SOFTRDMA_UVERBS_NS
unset SOFTRDMA_UVERBS_NS
mount --rbind /dev "$old"
mount -t tmpfs -o mode=755 softrdma-dev /dev
# The host's usual entries, each bound from the original (a device node
# on a mount made inside a user namespace could not be opened: nodev).
# Only these, and few uverbs nodes (one per device is needed: dev_name is
# uverbs<index>): every mount is a process, and on a loaded machine a
# mount for each entry of a full /dev took seconds.
for e in null zero full random urandom tty ptmx pts shm; do
	[ -e "$old/$e" ] || continue
	if [ -d "$old/$e" ]; then
		mkdir "/dev/$e" && mount --rbind "$old/$e" "/dev/$e"
	else
		: >"/dev/$e"
		mount --bind "$old/$e" "/dev/$e"
	fi
done
ln -s /proc/self/fd /dev/fd
ln -s /proc/self/fd/0 /dev/stdin
ln -s /proc/self/fd/1 /dev/stdout
ln -s /proc/self/fd/2 /dev/stderr
mkdir -p /dev/infiniband
for i in $(seq 0 $((${SOFTRDMA_UVERBS:-8} - 1))); do
	: >/dev/infiniband/uverbs$i
	mount --bind "$old/null" /dev/infiniband/uverbs$i
done
exec "$@"
