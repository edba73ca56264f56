#!/usr/bin/env bash
# bench.sh DIR [REPEATS]: C perftest over the libibverbs.so.1 in DIR (built
# by clib/build.sh) against softrdma's Go perftest tools, the same tests
# and sizes, both ends on loopback (softrdma_lo, GID 1). Prints, per
# test, the median of REPEATS runs (default 5) for each and the ratio
# C/Go: latency in usec (t_typical, perftest's median; a second row,
# "SIZE avg", has t_avg from the same runs), bandwidth in MB/sec (BW
# average). The C and Go runs alternate, each repetition
# starting with the next kind, so a change in the machine's load, and
# whatever a run's place in the order costs, hits both alike. Numbers
# are only comparable within one run on one machine.
# BENCH_TESTS="ib_send_bw 64,ib_write_lat 8" runs only those (test and
# size, comma-separated).
#
# BENCH_RT=1 (root) runs both ends under SCHED_FIFO (chrt -f 10): other
# work on the machine then waits while a pair runs, so figures taken on a
# busy machine are close to a quiet machine's. Use it only with nothing
# else important running: while a pair spins, other processes get only
# the 5 % the kernel's real-time throttling leaves them, and a Go
# program whose every thread spins can starve its own runtime (sysmon
# never runs) until the 120 s timeout.
#
# rsockets: "rstream SIZE" (rstream's default, non-blocking calls
# retried at once), "rstream-blocking SIZE" (-T b) and "rstream-async
# SIZE" (-T a: rpoll before each call) run rstream over librdmacm.so.1
# in DIR against softrdma's Go rstream; a size up to 4096 prints usec
# per transfer (rstream's usec/xfer), a larger one Gb/sec:
#   BENCH_TESTS="rstream 64,rstream-blocking 64,rstream 1000000" bash clib/bench.sh DIR
#
# BENCH_BASE=DIR2 also runs the C programs over the libraries in DIR2
# (another build, say main's), interleaved with the others, and prints
# its median and DIR's over it: a before/after comparison.
#
# With ucx_perftest installed (Debian's ucx-utils; BENCH_UCX=0 skips
# it) each perftest row also gets UCX over TCP on loopback, what a C
# program uses without RDMA: tag_lat's median (one way, half a round
# trip, as ib_write_lat and ib_send_lat report; ib_read_lat and
# ib_atomic_lat report whole round trips) or tag_bw's bandwidth (MB/s as
# perftest's, 2^20 bytes), same message size and count, interleaved with
# the others.
#
# BENCH_FLAGS="-e" adds perftest flags to every C and Go run (here:
# completion events, each end sleeping on its channel); BENCH_DEV=shm0
# runs on the shared-memory device instead of softrdma_lo. Session 17's
# event-mode table: BENCH_UCX=0 BENCH_FLAGS=-e BENCH_TESTS="ib_send_lat
# 8,ib_read_lat 8,ib_atomic_lat 8,ib_send_bw 65536,ib_send_bw 64" bash
# clib/bench.sh DIR 9.
#
# BENCH_RUNS=1 prints every run's figures (to stderr) before each row.
set -uo pipefail
dir=$(cd "${1:?usage: clib/bench.sh DIR [REPEATS]}" && pwd)
reps=${2:-5}
base=${BENCH_BASE:+$(cd "$BENCH_BASE" && pwd)}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
gotool=$tmp/softrdma
(cd "$here/.." && go build -o "$gotool" ./cmd/softrdma) || exit 1
port=$((40000 + RANDOM % 10000))
rt=()
if [ "${BENCH_RT:-0}" = 1 ] && [ "$(id -u)" = 0 ] && command -v chrt >/dev/null; then
	rt=(chrt -f 10)
fi

# one KIND TEST ARGS...: one server+client run on $port; prints the
# client's figure. It runs in a subshell ($(one ...)): the caller moves
# port on, so that no run finds the last one's port still held.
one() {
	local kind=$1 t=$2; shift 2
	local cmd=($t) env=(${rt[@]+"${rt[@]}"} env LD_LIBRARY_PATH=$dir) sargs=(-d $dev ${gidx[@]+"${gidx[@]}"}) cargs=(127.0.0.1)
	case $t in rstream*) cmd=(rstream) sargs=() cargs=(-s 127.0.0.1) ;; esac
	if [ $kind = go ]; then cmd=("$gotool" "${cmd[@]}"); env=(${rt[@]+"${rt[@]}"} env); fi
	[ $kind = base ] && env=(${rt[@]+"${rt[@]}"} env LD_LIBRARY_PATH=$base)
	if [ $kind = ucx ]; then
		ucx $t "$@"
		return
	fi
	"${env[@]}" timeout 120 "${cmd[@]}" "${sargs[@]}" -p $port "$@" >/dev/null 2>&1 &
	local spid=$!
	sleep 0.5
	local out
	out=$("${env[@]}" timeout 120 "${cmd[@]}" "${sargs[@]}" -p $port "$@" "${cargs[@]}" 2>&1)
	wait $spid
	case $t in
	rstream*) echo "$out" | awk -v big=$big '$1 == "custom" {print (big ? $7 : $8); exit}' ;; # Gb/sec or usec/xfer
	*_lat) echo "$out" | awk '$1 ~ /^[0-9]+$/ && NF >= 6 {print $5, $6; exit}' ;; # t_typical t_avg
	*) echo "$out" | awk '$1 ~ /^[0-9]+$/ && NF >= 4 {print $4; exit}' ;; # BW average
	esac
}

# ucx TEST -s SIZE -n N: the UCX-over-TCP figure for a perftest row (see
# above), or nothing for rows it has no counterpart for.
ucx() {
	local t=$1 size=8 n=5000 test=tag_bw col=overall_bw; shift
	while [ $# -gt 0 ]; do
		case $1 in -s) size=$2; shift ;; -n) n=$2; shift ;; esac
		shift
	done
	case $t in *_lat) test=tag_lat col=50.0_percentile_lat,avg_lat ;; rstream*) return ;; esac
	local env=(${rt[@]+"${rt[@]}"} env UCX_TLS=tcp UCX_NET_DEVICES=lo UCX_WARN_UNUSED_ENV_VARS=n)
	"${env[@]}" timeout 120 ucx_perftest -p $port >/dev/null 2>&1 &
	local spid=$!
	sleep 0.5
	"${env[@]}" timeout 120 ucx_perftest 127.0.0.1 -p $port -t $test -s $size -n $n -w $(((n + 9) / 10)) -f -v 2>&1 |
		awk -F, -v cols=$col 'BEGIN {n = split(cols, want, ",")}
			$1 == "iterations" {for (i = 1; i <= NF; i++) for (j = 1; j <= n; j++) if ($i == want[j]) c[j] = i; next}
			c[1] && $1 ~ /^[0-9]+$/ {for (j = 1; j <= n; j++) printf "%s%s", $c[j], (j < n ? " " : "\n"); exit}'
	wait $spid
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a+0 > 0 && b+0 > 0) printf "%.2f", a/b; else print "-" }'; }

median() { sort -g | awk '{a[NR]=$1} END {if (NR) print a[int((NR+1)/2)]; else print "-"}'; }

useucx=0
dev=${BENCH_DEV:-softrdma_lo}
gidx=(-x 1)
[ "$dev" = shm0 ] && gidx=()
[ "${BENCH_UCX:-1}" != 0 ] && command -v ucx_perftest >/dev/null && useucx=1
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
# row FIELDS...: one line of the table, its columns at fixed widths.
row() {
	local w=(-16 -8 12 12 8 12 8 12) i=0 f
	for f in "$@"; do
		printf "%*s " ${w[$i]} "$f"
		i=$((i + 1))
	done
	echo
}
# medrow TEST SIZE C GO BASE UCX: the row of the medians of the runs in
# the arrays named C, GO, BASE and UCX.
medrow() {
	local -n c_=$3 g_=$4 b_=$5 u_=$6
	local c g b fields
	c=$(printf '%s\n' "${c_[@]}" | grep . | median)
	g=$(printf '%s\n' "${g_[@]}" | grep . | median)
	fields=("$1" "$2" "$c" "$g" "$(ratio "$c" "$g")")
	if [ -n "$base" ]; then
		b=$(printf '%s\n' "${b_[@]}" | grep . | median)
		fields+=("$b" "$(ratio "$c" "$b")")
	fi
	[ $useucx = 1 ] && fields+=("$(printf '%s\n' "${u_[@]}" | grep . | median)")
	row "${fields[@]}"
}
hdr=(test size C-over-lib Go-tool C/Go)
[ -n "$base" ] && hdr+=(C-over-base C/base)
[ $useucx = 1 ] && hdr+=(UCX-tcp)
row "${hdr[@]}"
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
	args+=(${BENCH_FLAGS:-})
	big=0
	case $t in
	rstream*)
		n=20000
		[ $s -gt 4096 ] && n=$((500000000 / s)) big=1
		args=(-S $s -C $n)
		;;
	esac
	case $t in
	rstream) ;;
	rstream-blocking) args+=(-T b) ;;
	rstream-async) args+=(-T a) ;;
	rstream*) echo "bench.sh: unknown test $t: rstream, rstream-blocking or rstream-async" >&2; exit 2 ;;
	esac
	# Latency runs print two figures, t_typical and t_avg: the row is the
	# typical (perftest's median) and a second row, "SIZE avg", the
	# average, which the tails (preemptions, the runtime's threads) move.
	cs=() gs=() bs=() us=() cs2=() gs2=() bs2=() us2=()
	kinds=(c go)
	[ -n "$base" ] && kinds+=(base)
	[ $useucx = 1 ] && kinds+=(ucx)
	for i in $(seq 0 $((reps - 1))); do
		# Each repetition starts with the next kind (c go base, go base
		# c, ...): a run that is slower for coming first, or right after
		# another, is then every kind's in turn.
		for j in "${!kinds[@]}"; do
			k=${kinds[$(((i + j) % ${#kinds[@]}))]}
			port=$((port + 1))
			read -r v v2 <<<"$(one $k $t "${args[@]}")"
			case $k in
			c) cs+=("$v") cs2+=("$v2") ;;
			go) gs+=("$v") gs2+=("$v2") ;;
			base) bs+=("$v") bs2+=("$v2") ;;
			ucx) us+=("$v") us2+=("$v2") ;;
			esac
		done
	done
	if [ "${BENCH_RUNS:-0}" = 1 ]; then
		echo "# $t $s runs: C ${cs[*]}; Go ${gs[*]}${bs[0]+; base ${bs[*]}}${us[0]+; UCX-tcp ${us[*]}}" >&2
		case $t in *_lat) echo "# $t $s avg runs: C ${cs2[*]}; Go ${gs2[*]}${bs2[0]+; base ${bs2[*]}}${us2[0]+; UCX-tcp ${us2[*]}}" >&2 ;; esac
	fi
	medrow $t "$s" cs gs bs us
	case $t in *_lat) medrow $t "$s avg" cs2 gs2 bs2 us2 ;; esac
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
