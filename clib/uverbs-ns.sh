#!/usr/bin/env bash
# uverbs-ns.sh CMD [ARGS...]: run CMD where /dev/infiniband/uverbs0..31
# exist, without root and without changing the host.
#
# UCX lists an RDMA device only if /dev/infiniband/<ibv_device.dev_name>
# is a character device the process may read and write
# (uct_ib_device_is_accessible); it never opens it. A process without a
# kernel RDMA stack has no /dev/infiniband, and only root can create one.
# This script runs CMD in a private mount namespace (inside a user
# namespace unless it runs as root, which unprivileged users may create
# where the kernel allows it: Debian's default) whose /dev is a tmpfs
# holding the host's /dev entries, bound one by one, plus
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
# The host's entries, each bound from the original: a device node on a
# mount made inside a user namespace could not be opened (nodev).
for e in "$old"/* "$old"/.[!.]*; do
	[ -e "$e" ] || [ -L "$e" ] || continue
	b=/dev/$(basename "$e")
	[ -e "$b" ] && continue
	if [ -L "$e" ]; then
		cp -P "$e" "$b"
	elif [ -d "$e" ]; then
		mkdir "$b" && mount --rbind "$e" "$b"
	else
		touch "$b" && mount --bind "$e" "$b"
	fi
done
mkdir -p /dev/infiniband
for i in $(seq 0 31); do
	touch /dev/infiniband/uverbs$i
	mount --bind "$old/null" /dev/infiniband/uverbs$i
done
exec "$@"
