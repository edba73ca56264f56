#!/usr/bin/env bash
# bench/flood.sh: what a flood of forged packets from another process costs
# a legitimate RDMA WRITE stream (docs/security.md, "Flood").
#
# Three processes on loopback: a victim `softrdma ib_write_bw -b` server on
# $VICTIM, its client on $PEER (a duplex WRITE stream, so the victim's QP
# is requester and responder), and `softrdma flood`, which floods the
# victim's UDP port 4791 with forged packets (unknown QPNs, the victim's
# QPN with random PSNs, NAKs, READ "replays") from the peer's address as
# fast as it can. Every round runs each scenario quiet and flooded, back to
# back; the report is the median over rounds of the stream's bandwidth
# (both directions, the client's perftest report), the flood's rate and
# the victim's counters (scraped from --metrics when the flood ends).
#
# Scenarios (SCENARIOS, default all five):
#   control      plain RoCEv2, the flood aimed at an address nobody listens on:
#                what the flooder's CPU alone costs the stream on this machine
#   plain        plain RoCEv2, the flood from an ephemeral port of the peer's address
#   auth         --secure auth on both ends, the same flood
#   auth-spoof   --secure auth, the flood from the peer's own UDP ports (raw socket, root)
#   plain-spoof  plain RoCEv2, the same spoofed flood: what authentication is for
#
#   bash bench/flood.sh                     # 3 rounds, 6 s runs: about 3 minutes
#   ROUNDS=5 D=8 SCENARIOS="plain auth" bash bench/flood.sh
#
# Run it under the benchmark lock on a shared machine:
#   flock /tmp/softrdma-bench.lock bash bench/flood.sh
set -euo pipefail

ROUNDS=${ROUNDS:-3}
D=${D:-6}                       # seconds per perftest run (-D)
SIZE=${SIZE:-65536}             # WRITE message size
VICTIM=${VICTIM:-127.0.79.32}
PEER=${PEER:-127.0.79.33}
UNUSED=${UNUSED:-127.0.79.34}   # the control's target: no process there
SCENARIOS=${SCENARIOS:-"control plain auth auth-spoof plain-spoof"}
BIN=${SOFTRDMA_BIN:-}
OUT=${OUT:-$(mktemp -d /tmp/softrdma-flood.XXXXXX)}
mkdir -p "$OUT"

cd "$(dirname "$0")/.."
if [[ -z $BIN ]]; then
	BIN=$OUT/softrdma
	go build -o "$BIN" ./cmd/softrdma
fi
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# run SCENARIO FLOOD(0|1) TAG: one perftest run; prints "bw pps counters..."
run() {
	local scen=$1 flood=$2 tag=$3
	local secure=() spoof=()
	[[ $scen == auth* ]] && secure=(--secure auth)
	[[ $scen == *-spoof ]] && spoof=(-spoof)
	local port mport
	port=$(free_port)
	mport=$(free_port)
	SOFTRDMA_ADDR=$VICTIM timeout $((D + 60)) "$BIN" ib_write_bw -b -D "$D" -s "$SIZE" -p "$port" \
		--metrics "127.0.0.1:$mport" "${secure[@]}" >"$OUT/$tag.srv" 2>&1 &
	local srv=$!
	pids+=("$srv")
	until grep -q "Waiting for client" "$OUT/$tag.srv" 2>/dev/null; do sleep 0.05; done
	SOFTRDMA_ADDR=$PEER timeout $((D + 60)) "$BIN" ib_write_bw -b -D "$D" -s "$SIZE" -p "$port" \
		"${secure[@]}" "$VICTIM" >"$OUT/$tag.cli" 2>&1 &
	local cli=$!
	pids+=("$cli")
	until grep -q "local address" "$OUT/$tag.srv" 2>/dev/null; do
		kill -0 "$srv" 2>/dev/null || { echo "server died: $(tail -3 "$OUT/$tag.srv")" >&2; return 1; }
		sleep 0.02
	done
	local qpn pps=0
	qpn=$(sed -n 's/.*local address: .* QPN \(0x[0-9a-f]*\) .*/\1/p' "$OUT/$tag.srv" | head -1)
	# The victim's counters, scraped until it exits: the last scrape is
	# the end of the measurement.
	(while kill -0 "$srv" 2>/dev/null; do
		curl -s -m 1 "127.0.0.1:$mport/metrics" >"$OUT/$tag.m" 2>/dev/null && [[ -s $OUT/$tag.m ]] && mv "$OUT/$tag.m" "$OUT/$tag.metrics"
		sleep 0.25
	done) &
	local scraper=$!
	if [[ $flood == 1 ]]; then
		# Until the measurement ends: -D plus perftest's margins. The
		# control floods an address nobody listens on: the CPU the
		# flooder takes, without a packet reaching the victim.
		local to=$VICTIM
		[[ $scen == control ]] && to=$UNUSED
		"$BIN" flood -to "$to" -from "$PEER" -qpn "$qpn" -d "$((D + 1))s" "${spoof[@]}" >"$OUT/$tag.flood" 2>&1
		pps=$(sed -n 's/.* s: \([0-9]*\) packets\/s.*/\1/p' "$OUT/$tag.flood")
	else
		sleep $((D + 1))
	fi
	wait "$cli" || true
	wait "$srv" || true
	wait "$scraper" || true
	local bw
	bw=$(awk '/BW average/{getline; print $4; exit}' "$OUT/$tag.cli")
	# A run whose connection failed prints its error where the row goes.
	[[ $bw =~ ^[0-9.]+$ ]] || bw=FAILED
	local counters=""
	for c in naks_sent drop_unknown_qp drop_wrong_source drop_out_of_window drop_bad_replay drop_unexpected drop_auth drop_replay out_of_seq_request duplicate_request rcvd_pkts sent_pkts; do
		local v
		v=$(awk -v n="softrdma_${c}_total" '$1 ~ "^"n"[{]" {printf "%.0f", $2}' "$OUT/$tag.metrics" 2>/dev/null)
		counters+=" $c=${v:-?}"
	done
	echo "$bw $pps$counters"
}

echo "softrdma flood bench: $ROUNDS rounds, ib_write_bw -b -D $D -s $SIZE, victim $VICTIM, peer $PEER; outputs in $OUT"
declare -A res
for r in $(seq "$ROUNDS"); do
	for scen in $SCENARIOS; do
		for flood in 0 1; do
			line=$(run "$scen" "$flood" "r$r-$scen-$flood")
			res[$scen,$flood,$r]=$line
			printf 'round %d %-12s %-7s %s\n' "$r" "$scen" "$([[ $flood == 1 ]] && echo flooded || echo quiet)" "$line"
		done
	done
done

median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) print "-"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
field() { # field NAME LINE
	if [[ $1 == bw ]]; then echo "$2" | awk '{print $1}'
	elif [[ $1 == pps ]]; then echo "$2" | awk '{print $2}'
	else echo "$2" | tr ' ' '\n' | sed -n "s/^$1=//p"; fi
}
set +e
echo
echo "medians over $ROUNDS rounds (MB/s = 2^20 B/s, duplex sum as perftest reports it)"
printf '%-12s %10s %10s %7s %12s  %s\n' scenario quiet flooded ratio "forged pkt/s" "victim counters during the flooded run (medians)"
for scen in $SCENARIOS; do
	q=$(for r in $(seq "$ROUNDS"); do field bw "${res[$scen,0,$r]}"; done | grep -v FAILED | median)
	f=$(for r in $(seq "$ROUNDS"); do field bw "${res[$scen,1,$r]}"; done | grep -v FAILED | median)
	fails=$(for r in $(seq "$ROUNDS"); do field bw "${res[$scen,1,$r]}"; done | grep -c FAILED || true)
	p=$(for r in $(seq "$ROUNDS"); do field pps "${res[$scen,1,$r]}"; done | median)
	ratio=$(awk -v q="$q" -v f="$f" 'BEGIN { if (q > 0 && f != "-") printf "%.2fx", f / q; else print "-" }')
	cs=""
	for c in naks_sent drop_unknown_qp drop_wrong_source drop_out_of_window drop_bad_replay drop_unexpected drop_auth drop_replay out_of_seq_request; do
		v=$(for r in $(seq "$ROUNDS"); do field "$c" "${res[$scen,1,$r]}"; done | grep -v '?' | median)
		[[ $v == 0 || $v == - ]] || cs+=" $c=$v"
	done
	[[ $fails == 0 ]] || cs+=" (flooded runs FAILED: $fails of $ROUNDS)"
	printf '%-12s %10s %10s %7s %12s %s\n' "$scen" "$q" "$f" "$ratio" "$p" "$cs"
done
