#!/usr/bin/env bash
# bench.sh DIR [REPEATS]: C perftest over the libibverbs.so.1 in DIR (built
# by clib/build.sh) against softrdma's Go perftest tools, the same tests
# and sizes, both ends on loopback (softrdma_lo, GID 1). Prints, per
# test, the median of REPEATS runs (default 5) for each and the ratio
# C/Go: latency in usec (t_typical, perftest's median), bandwidth in
# MB/sec (BW average). The C and Go runs alternate, so a change in the
# machine's load hits both alike. Numbers are only comparable within one
# run on one machine. BENCH_TESTS="ib_send_bw 64,ib_write_lat 8" runs
# only those (test and size, comma-separated).
#
# BENCH_RT=1 (root) runs both ends under SCHED_FIFO (chrt -f 10): other
# work on the machine then waits while a pair runs, so figures taken on a
# busy machine are close to a quiet machine's. Use it only with nothing
# else important running: while a pair spins, other processes get only
# the 5 % the kernel's real-time throttling leaves them, and a Go
# program whose every thread spins can starve its own runtime (sysmon
# never runs) until the 120 s timeout.
set -uo pipefail
dir=$(cd "${1:?usage: clib/bench.sh DIR [REPEATS]}" && pwd)
reps=${2:-5}
here=$(cd "$(dirname "$0")" && pwd)
gotool=$(mktemp -d)/softrdma
(cd "$here/.." && go build -o "$gotool" ./cmd/softrdma) || exit 1
port=$((40000 + RANDOM % 10000))
rt=()
if [ "${BENCH_RT:-0}" = 1 ] && [ "$(id -u)" = 0 ] && command -v chrt >/dev/null; then
	rt=(chrt -f 10)
fi

# one KIND TEST ARGS...: one server+client run; prints the client's figure.
one() {
	local kind=$1 t=$2; shift 2
	local cmd=($t) env=(${rt[@]+"${rt[@]}"} env LD_LIBRARY_PATH=$dir)
	if [ $kind = go ]; then cmd=("$gotool" $t); env=(${rt[@]+"${rt[@]}"} env); fi
	port=$((port + 1))
	"${env[@]}" timeout 120 "${cmd[@]}" -d softrdma_lo -x 1 -p $port "$@" >/dev/null 2>&1 &
	local spid=$!
	sleep 0.5
	local out
	out=$("${env[@]}" timeout 120 "${cmd[@]}" -d softrdma_lo -x 1 -p $port "$@" 127.0.0.1 2>&1)
	wait $spid
	case $t in
	*_lat) echo "$out" | awk '$1 ~ /^[0-9]+$/ && NF >= 6 {print $6; exit}' ;; # t_typical
	*) echo "$out" | awk '$1 ~ /^[0-9]+$/ && NF >= 4 {print $4; exit}' ;; # BW average
	esac
}

median() { sort -g | awk '{a[NR]=$1} END {if (NR) print a[int((NR+1)/2)]; else print "-"}'; }

printf "%-14s %-8s %12s %12s %8s\n" test size C-over-lib Go-tool C/Go
tests=${BENCH_TESTS:-ib_write_lat 8,ib_send_lat 8,ib_read_lat 8,ib_atomic_lat 8,ib_write_bw 65536,ib_send_bw 65536,ib_read_bw 65536,ib_write_bw 4096,ib_send_bw 64}
IFS=, read -ra specs <<<"$tests"
for spec in "${specs[@]}"; do
	set -- $spec
	t=$1 s=$2
	# Enough messages that a run lasts well beyond its start-up: small
	# bandwidth runs of 5000 messages took a few milliseconds.
	n=5000
	case $t in *_bw) [ $s -le 4096 ] && n=100000 ;; esac
	args=(-s $s -n $n)
	[ $t = ib_atomic_lat ] && args=(-n $n)
	cs=() gs=()
	for i in $(seq $reps); do
		cs+=("$(one c $t "${args[@]}")")
		gs+=("$(one go $t "${args[@]}")")
	done
	c=$(printf '%s\n' "${cs[@]}" | median)
	g=$(printf '%s\n' "${gs[@]}" | median)
	r=$(awk -v c="$c" -v g="$g" 'BEGIN { if (c+0 > 0 && g+0 > 0) printf "%.2f", c/g; else print "-" }')
	printf "%-14s %-8s %12s %12s %8s\n" $t $s "$c" "$g" "$r"
done
