#!/usr/bin/env bash
# test/congestion/incast-run.sh — N softrdma ib_write_bw pairs through one
# shaped, congested uplink, in network namespaces of the kernel it runs in.
#
# Runs as root in whichever kernel has the qdiscs asked for: the interop VM's
# (incast.sh starts it there: red, fq_codel) or this host's (htb, tbf and
# pfifo only: tail drop). See README.md next to this file.
#
#   incast-run.sh [-n PAIRS] [-r RATE] [-D SECS] [-q QDISC] [-c "off dcqcn"] [-s SIZE] [-b BINARY] [-- IB_WRITE_BW_ARGS...]
#
#   -n PAIRS   sender/receiver pairs (default 4)
#   -r RATE    the uplink's rate, tc syntax (default 8mbit)
#   -D SECS    each ib_write_bw's -D (default 10)
#   -q QDISC   the uplink's queue under the htb class: red (ECN-marking RED,
#              the default), codel (fq_codel with ce_threshold), pfifo
#              (tail drop, 32 packets)
#   -c MODES   SOFTRDMA_CC values, one run each (default "off")
#   -s SIZE    message size (default: ib_write_bw's, 65536)
#   -b BINARY  the softrdma binary (default /common/softrdma)
#
# Topology: namespaces cc-s1..N (senders, 10.79.0.1..N) hang off bridge br0
# in cc-swa; cc-r1..N (receivers, 10.79.0.101..100+N) off br0 in cc-swb; one
# veth joins the two bridges, and its cc-swa end (the uplink) is shaped:
# htb at RATE with QDISC under it. Receivers' ACKs come back unshaped. All
# pairs share the one bottleneck queue. Prints, per CC mode, a table of the
# pairs' goodput (client's BW average), the share of the link, Jain's
# fairness index, the uplink's qdisc counters and each side's retransmission
# counters and exit status.
set -uo pipefail

N=4 RATE=8mbit DUR=10 QDISC=red MODES=off SIZE="" BIN=/common/softrdma
while getopts "n:r:D:q:c:s:b:" o; do
	case $o in
	n) N=$OPTARG ;; r) RATE=$OPTARG ;; D) DUR=$OPTARG ;; q) QDISC=$OPTARG ;;
	c) MODES=$OPTARG ;; s) SIZE=$OPTARG ;; b) BIN=$OPTARG ;;
	*) sed -n '9,10p' "$0" >&2; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
EXTRA=("$@")

# iproute2 by path: the interop guest's busybox has ip and tc applets of its own.
IP=/usr/sbin/ip TC=/usr/sbin/tc
[ -x $IP ] || IP=/sbin/ip
[ -x $TC ] || TC=/sbin/tc
P=cc
WORK=${INCAST_WORK:-/tmp/incast}
mkdir -p "$WORK"

die() { echo "incast-run: $*" >&2; exit 1; }
[ -x "$BIN" ] || die "no softrdma binary at $BIN (-b)"

# rate_bits RATE: tc's rate syntax (8mbit, 500kbit, 1gbit) in bit/s.
rate_bits() {
	awk -v r="$1" 'BEGIN { n = r + 0; u = tolower(substr(r, length(n "") + 1))
		m = 1; if (u ~ /^k/) m = 1e3; else if (u ~ /^m/) m = 1e6; else if (u ~ /^g/) m = 1e9
		if (u ~ /bps$/) m *= 8; printf "%d", n * m }'
}
LINK=$(rate_bits "$RATE")
[ "$LINK" -gt 0 ] || die "bad rate $RATE"

down() {
	local ns
	for ns in $($IP netns list 2>/dev/null | awk '{print $1}' | grep "^$P-"); do $IP netns del "$ns"; done
}

# up builds the namespaces and the shaped uplink.
up() {
	local i side ns sw addr
	down
	for sw in swa swb; do
		$IP netns add $P-$sw || die "ip netns add"
		$IP -n $P-$sw link add name br0 type bridge || die "no bridge support"
		$IP -n $P-$sw link set br0 up
	done
	$IP link add up-a netns $P-swa type veth peer name up-b netns $P-swb || die "no veth support"
	$IP -n $P-swa link set up-a master br0 up
	$IP -n $P-swb link set up-b master br0 up
	for ((i = 1; i <= N; i++)); do
		for side in s r; do
			ns=$P-$side$i sw=$P-swa addr=10.79.0.$i
			[ $side = r ] && sw=$P-swb addr=10.79.0.$((100 + i))
			$IP netns add $ns
			$IP link add $P-$side$i-0 netns $ns type veth peer name $side$i netns $sw
			$IP -n $sw link set $side$i master br0 up
			$IP -n $ns link set $P-$side$i-0 name eth0
			$IP -n $ns addr add $addr/24 dev eth0
			$IP -n $ns link set eth0 up
			$IP -n $ns link set lo up
		done
	done
	# The bottleneck: htb shapes the uplink to RATE; the queue under it
	# marks (or drops) as QDISC says. RED's thresholds are in bytes:
	# min 15 KB, max 45 KB (about 15 and 45 full 1 KB-MTU packets),
	# marking probability up to 10 %, hard limit 120 KB.
	local T="$TC -n $P-swa"
	$T qdisc add dev up-a root handle 1: htb default 1 || die "no htb qdisc"
	$T class add dev up-a parent 1: classid 1:1 htb rate "$RATE" ceil "$RATE" || die "htb class"
	case $QDISC in
	red) $T qdisc add dev up-a parent 1:1 handle 10: red limit 120000 min 15000 max 45000 avpkt 1100 \
		burst 25 probability 0.1 bandwidth "$RATE" ecn || die "no red qdisc (ecn)" ;;
	codel) $T qdisc add dev up-a parent 1:1 handle 10: fq_codel ce_threshold 5ms limit 128 ecn ||
		die "no fq_codel qdisc (ce_threshold)" ;;
	pfifo) $T qdisc add dev up-a parent 1:1 handle 10: pfifo limit 32 || die "no pfifo qdisc" ;;
	*) die "unknown qdisc $QDISC (red, codel, pfifo)" ;;
	esac
	# ARP before the runs, so no first packet waits for it.
	for ((i = 1; i <= N; i++)); do
		$IP netns exec $P-s$i ping -c1 -W2 10.79.0.$((100 + i)) >/dev/null 2>&1 ||
			die "s$i cannot reach r$i"
	done
}

# counter FILE NAME: a counter from a SOFTRDMA_COUNTERS file (empty if none).
counter() { awk -v n="$2" '$1 == n { s += $2 } END { if (NR) print s + 0 }' "$1" 2>/dev/null; }

# goodput FILE: the client's BW average in bit/s (--report_gbits row).
goodput() {
	awk '/^ *[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+/ { g = $4 } END { printf "%.0f", g * 1e9 }' "$1"
}

# run MODE: one run of N pairs with SOFTRDMA_CC=MODE.
run() {
	local mode=$1 i d=$WORK/$1 args=(-D "$DUR" --report_gbits) rc
	[ -n "$SIZE" ] && args+=(-s "$SIZE")
	args+=("${EXTRA[@]}")
	rm -rf "$d"
	mkdir -p "$d"
	up
	local spid=() cpid=()
	for ((i = 1; i <= N; i++)); do
		SOFTRDMA_CC=$mode SOFTRDMA_NO_PROGRESS=1 SOFTRDMA_ADDR=10.79.0.$((100 + i)) SOFTRDMA_COUNTERS=$d/r$i.ctr \
			$IP netns exec $P-r$i "$BIN" ib_write_bw "${args[@]}" >"$d/r$i.out" 2>&1 &
		spid+=($!)
	done
	# Each client starts once its server listens (TCP 18515 = 0x4853; a
	# slow guest takes seconds to start them).
	local k
	for ((i = 1; i <= N; i++)); do
		for ((k = 0; k < 300; k++)); do
			$IP netns exec $P-r$i cat /proc/net/tcp /proc/net/tcp6 | grep -qE '^ *[0-9]+: [0-9A-F]+:4853 [0-9A-F]+:0000 0A' && break
			sleep 0.1
		done
	done
	local t0=$SECONDS
	for ((i = 1; i <= N; i++)); do
		SOFTRDMA_CC=$mode SOFTRDMA_NO_PROGRESS=1 SOFTRDMA_ADDR=10.79.0.$i SOFTRDMA_COUNTERS=$d/s$i.ctr \
			$IP netns exec $P-s$i "$BIN" ib_write_bw "${args[@]}" 10.79.0.$((100 + i)) >"$d/s$i.out" 2>&1 &
		cpid+=($!)
	done
	for ((i = 1; i <= N; i++)); do
		wait "${cpid[i - 1]}"
		echo $? >"$d/s$i.rc"
	done
	local wall=$((SECONDS - t0))
	# A server whose client failed early would wait for it a long time:
	# 30 s after the last client, the rest are stopped (status 143).
	local p alive
	for ((k = 0; k < 300; k++)); do
		alive=0
		for p in "${spid[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
		[ $alive = 0 ] && break
		sleep 0.1
	done
	for ((i = 1; i <= N; i++)); do
		kill "${spid[i - 1]}" 2>/dev/null
		wait "${spid[i - 1]}"
		echo $? >"$d/r$i.rc"
	done
	$TC -n $P-swa -s qdisc show dev up-a >"$d/qdisc"
	down
	report "$mode" "$d" "$wall"
}

# report MODE DIR WALL: the table of one run.
report() {
	local mode=$1 d=$2 wall=$3 i g gs=() sum=0 sq=0 bad=0
	printf '\n== SOFTRDMA_CC=%s: %d pairs, uplink %s (%s), ib_write_bw -D %s %s%s; clients ended after %d s\n' \
		"$mode" "$N" "$RATE" "$QDISC" "$DUR" "${SIZE:+-s $SIZE }" "${EXTRA[*]:-}" "$wall"
	printf '%-5s %12s %7s %12s %9s %8s %9s %13s %9s %s\n' pair "goodput" "link" retransmits timeouts seq_naks retry_exc "CE rcvd/CNPs" "exit s/r" "error"
	for ((i = 1; i <= N; i++)); do
		g=$(goodput "$d/s$i.out")
		gs+=("$g")
		local rs rr err
		rs=$(cat "$d/s$i.rc") rr=$(cat "$d/r$i.rc")
		[ "$rs" = 0 ] && [ "$rr" = 0 ] || bad=$((bad + 1))
		err=$(grep -hiE "error|fail|EOF|giving up|couldn't" "$d/s$i.out" "$d/r$i.out" | head -n1 | cut -c1-70)
		printf '%-5s %7.3f Mb/s %6.1f%% %12s %9s %8s %9s %13s %4s/%-4s %s\n' "$i" \
			"$(awk -v g="$g" 'BEGIN { print g / 1e6 }')" "$(awk -v g="$g" -v l="$LINK" 'BEGIN { print 100 * g / l }')" \
			"$(counter "$d/s$i.ctr" retransmits)" "$(counter "$d/s$i.ctr" timeouts)" \
			"$(counter "$d/s$i.ctr" rcvd_seq_err)" "$(counter "$d/s$i.ctr" retry_exceeded_err)" \
			"$(counter "$d/r$i.ctr" np_ecn_marked_roce_packets)/$(counter "$d/s$i.ctr" rp_cnp_handled)" "$rs" "$rr" "$err"
	done
	awk -v l="$LINK" -v n="$N" 'BEGIN {
		for (i = 1; i < ARGC; i++) { s += ARGV[i]; q += ARGV[i] * ARGV[i] }
		printf "total %7.3f Mb/s %6.1f%% of the link; Jain fairness %.3f\n", s / 1e6, 100 * s / l, (q > 0 ? s * s / (n * q) : 0)
	}' "${gs[@]}"
	# The bottleneck queue's counters: tc prints "Sent B bytes P pkt
	# (dropped D, overlimits O ...)", "backlog", and for red "marked M
	# early E pdrop P", for fq_codel "ecn_mark M drop_overlimit D".
	awk -v q="$QDISC" '
		/^qdisc/ { leaf = ($2 != "htb") }
		leaf && /Sent/ { gsub(/[(,)]/, " "); sent = $2; pkts = $4; drop = $7 }
		leaf && /backlog/ { backlog = $2 " " $3 }
		leaf && /marked/ { for (i = 1; i <= NF; i++) { if ($i == "marked") mark = $(i + 1); if ($i == "early") early = $(i + 1); if ($i == "pdrop") pdrop = $(i + 1) } }
		leaf && /ecn_mark/ { for (i = 1; i <= NF; i++) { if ($i == "ecn_mark") mark = $(i + 1); if ($i == "drop_overlimit") pdrop = $(i + 1) } }
		END { printf "qdisc %s: sent %d bytes in %d packets, dropped %d (red early %s, forced %s), ECN-marked %s, backlog at the end %s\n",
			q, sent, pkts, drop, (early == "" ? "-" : early), (pdrop == "" ? "-" : pdrop), (mark == "" ? "-" : mark), backlog }' "$d/qdisc"
	printf 'runs: %d of %d pairs ended with an error (outputs in %s)\n' "$bad" "$N" "$d"
}

trap down EXIT
for m in $MODES; do run "$m"; done
