#!/usr/bin/env bash
# rdmacore-tests.sh DIR [DEV GID]...: run rdma-core's own test suite
# (pyverbs' tests, which Debian's python3-pyverbs ships in
# /usr/share/doc/rdma-core/tests) over the libibverbs.so.1 in DIR, once
# per device (default: softrdma_lo with GID index 1, and shm0 with 0).
# Prints one line per device with what ran, passed and was skipped, and
# exits non-zero if any test failed or errored. Skips are the suite's
# own: features a device reports it lacks (device memory, ODP, XRC, raw
# packet QPs, vendor extensions, ...).
#
# test_rdmacm is left out: it needs a netdev under
# /sys/class/infiniband/DEV and runs its peers in fork()ed children,
# which cannot use the library (docs/clib.md, "fork()").
set -uo pipefail
dir=$(cd "${1:?usage: clib/rdmacore-tests.sh DIR [DEV GID]...}" && pwd)
shift
src=/usr/share/doc/rdma-core/tests
if [ ! -f "$src/run_tests.py" ] || ! /usr/bin/python3 -c "import pyverbs" 2>/dev/null; then
	echo "SKIP  rdma-core's tests: apt-get install python3-pyverbs"
	exit 0
fi
[ $# -gt 0 ] || set -- softrdma_lo 1 shm0 0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "$src" "$work/tests"
gunzip -f "$work"/tests/*.gz
mods=$(cd "$work/tests" && ls test_*.py | sed -n 's/\.py$//p' | grep -v '^test_rdmacm$' | sed 's/^/tests./')
fails=0
while [ $# -ge 2 ]; do
	dev=$1 gid=$2
	shift 2
	log=$dir/rdmacore-$dev.log
	(cd "$work" && LD_LIBRARY_PATH=$dir timeout -s KILL 600 /usr/bin/python3 tests/run_tests.py \
		--dev "$dev" --gid "$gid" -v $mods) >"$log" 2>&1
	rc=$?
	ran=$(sed -n 's/^Ran \([0-9]*\) tests.*/\1/p' "$log")
	passed=$(grep -c '\.\.\. ok$' "$log")
	skipped=$(grep -c '\.\.\. skipped' "$log")
	bad=$(grep -cE '\.\.\. (FAIL|ERROR)$' "$log")
	if [ $rc -eq 0 ] && [ -n "$ran" ] && [ "$bad" -eq 0 ]; then
		echo "PASS  rdma-core's tests on $dev: $ran ran, $passed passed, $skipped skipped"
	else
		echo "FAIL  rdma-core's tests on $dev (exit $rc, ${ran:-?} ran, $bad failed; log $log)"
		grep -E '^(FAIL|ERROR):' "$log" | head -20
		fails=$((fails + 1))
	fi
done
exit $((fails > 0))
