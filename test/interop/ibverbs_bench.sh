#!/usr/bin/env bash
# test/interop/ibverbs_bench.sh — softrdma's perftest tools built with
# -tags ibverbs against rdma-core's C perftest, side by side on the same
# rxe pair: two VMs of the fixture (vm.sh up 2), server on vm1's rxe0,
# client on vm2's. Each measurement runs REPEATS times (default 5),
# alternating C and Go; the table shows the medians and Go/C.
#
#   SOFTRDMA_VM_LOCK=/tmp/vm.lock bash test/interop/ibverbs_bench.sh
#   REPEATS=3 bash test/interop/ibverbs_bench.sh
#   BENCH_ONLY=UD bash test/interop/ibverbs_bench.sh   # only measurements whose name matches (grep -E)
#   BENCH_GO_ENV=GODEBUG=asyncpreemptoff=1 bash ...  # environment of the Go tool's runs (both ends)
#
# The VMs run under TCG emulation, so absolute numbers are far below any
# real NIC's and noisy; the ratio is what the script is for.
set -uo pipefail
cd "$(dirname "$0")/../.."
if [ -n "${SOFTRDMA_VM_LOCK:-}" ]; then
	exec 9>"$SOFTRDMA_VM_LOCK"
	flock 9
fi
VM="bash $PWD/test/interop/vm.sh"
REPEATS=${REPEATS:-5}
RUN=${SOFTRDMA_VM_RUN:-/tmp/softrdma-vm}
OUT=$RUN/ibverbs-bench
mkdir -p "$OUT"
go build -tags ibverbs -o "$OUT/softrdma-ibverbs" ./cmd/softrdma || exit 1
trap '$VM down >/dev/null 2>&1' EXIT
$VM up 2 >/dev/null || { echo "vm.sh up 2 failed"; exit 1; }
cp "$OUT/softrdma-ibverbs" "$($VM path common)/softrdma-ibverbs"
# The Go tool runs from each guest's tmpfs, as the C tools run from the
# initramfs: run from /common (9p, no page cache across opens), every
# first touch of a page of the binary is a 9p round trip, and the runtime
# first reads much of its symbol table (pclntab, for preemption checks
# and stack walks) during the timed loop, stalling it for milliseconds.
for vm in vm1 vm2; do
	$VM exec $vm "cp /common/softrdma-ibverbs /tmp/softrdma-ibverbs" || { echo "copy to $vm failed"; exit 1; }
done
export SOFTRDMA_VM_TIMEOUT=300

# one IMPL TOOL "ARGS" COLUMN: one run; prints the client's value in
# COLUMN of perftest's result line (4: BW average MB/s, 5: t_typical us).
one() {
	local bin=$2 job out
	[ "$1" = go ] && bin="env ${BENCH_GO_ENV:-} /tmp/softrdma-ibverbs $2"
	job=$($VM exec -b vm1 "$bin -d rxe0 $3")
	sleep 2
	out=$($VM exec vm2 "for i in 1 2 3 4 5; do $bin -d rxe0 $3 10.77.0.2 && exit 0; sleep 2; done; exit 1" 2>&1)
	echo "$out" >>"$OUT/$1-$2.log"
	$VM wait vm1 "$job" >>"$OUT/$1-$2.server.log" 2>&1
	awk -v c="$4" '/^ *[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+/ {v = $c} END {print v}' <<<"$out"
}

median() { sort -g | awk '{a[NR] = $1} END {if (NR == 0) print "-"; else if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }

# bench NAME TOOL "ARGS" COLUMN UNIT
bench() {
	local c=() g=() i v cm gm
	[ -z "${BENCH_ONLY:-}" ] || grep -qE "$BENCH_ONLY" <<<"$1" || return 0
	for i in $(seq "$REPEATS"); do
		v=$(one c "$2" "$3" "$4") && [ -n "$v" ] && c+=("$v")
		v=$(one go "$2" "$3" "$4") && [ -n "$v" ] && g+=("$v")
	done
	cm=$(printf '%s\n' "${c[@]}" | median)
	gm=$(printf '%s\n' "${g[@]}" | median)
	printf '| %s | %s | %s %s | %s %s | %s | C: %s; Go: %s |\n' "$1" "$2 $3" "$cm" "$5" "$gm" "$5" \
		"$(awk -v a="$gm" -v b="$cm" 'BEGIN {if (b > 0) printf "%.2f", a / b; else print "-"}')" "${c[*]}" "${g[*]}"
}

echo "| measurement | command | C perftest (median) | softrdma -tags ibverbs (median) | Go/C | runs |"
echo "|---|---|---|---|---|---|"
bench "RC WRITE bandwidth" ib_write_bw "-x 1 -s 65536 -n 1000 -F" 4 MB/s
bench "RC WRITE latency" ib_write_lat "-x 1 -s 2 -n 1000 -F" 5 us
bench "UD SEND bandwidth" ib_send_bw "-x 1 -c UD -s 1024 -n 2000 -F" 4 MB/s
