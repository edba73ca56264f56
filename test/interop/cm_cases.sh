# test/interop/cm_cases.sh — rdma_cm cases, sourced by suite.sh (it needs
# its VM, BIN, OUT, HOST, GUEST, capture, stop_capture and counters).
# librdmacm's tools take the address with their own flag and no -d, so
# they do not fit run_case.

# cm_case NAME DIRECTION TOOL "SERVER ARGS" "CLIENT ARGS" ADDRFLAG
#   The client gets "ADDRFLAG <server address>" appended: $GUEST or $HOST,
#   or with CM_V6=1 $GUEST6 or $HOST6.
cm_case() {
	local name=$1 dir=$2 tool=$3 sargs=$4 cargs=$5 aflag=$6
	selected "$name" || return 0
	local guest=$GUEST host=$HOST
	[ -n "${CM_V6:-}" ] && guest=$GUEST6 host=$HOST6
	local log=$OUT/$name.log ok=1
	: >"$log"
	capture "$name"
	if [ "$dir" = rxe-server ]; then
		job=$($VM exec -b vm1 "$tool $sargs")
		sleep 2 # rdma_listen in the TCG guest
		$VM nsexec env SOFTRDMA_ADDR=$HOST timeout 120 "$BIN" "$tool" $cargs $aflag $guest >>"$log" 2>&1 || ok=0
		echo "--- rxe server:" >>"$log"
		$VM wait vm1 "$job" >>"$log" 2>&1 || ok=0
	else
		$VM nsexec env SOFTRDMA_ADDR=$HOST timeout 120 "$BIN" "$tool" $sargs >"$log.server" 2>&1 &
		local spid=$!
		sleep 1
		$VM exec vm1 "$tool $cargs $aflag $host" >>"$log" 2>&1 || ok=0
		wait "$spid" || ok=0
		echo "--- softrdma server:" >>"$log"
		cat "$log.server" >>"$log"
	fi
	stop_capture >>"$log" 2>&1 || { ok=0; echo "ICRC check failed" >>"$log"; }
	# The CM exchange must be in the capture.
	tshark -r "$CAP" 2>/dev/null | grep -o 'CM: [A-Za-z]*' | sort | uniq -c | tr -s ' ' >>"$log" || true
	if [ $ok = 1 ] && grep -q 'data mismatch\|return status -' "$log"; then ok=0; fi
	if [ $ok = 1 ]; then
		PASS=$((PASS + 1))
		say "PASS $name ($(grep -h -E 'RoCEv2 packets, .* ICRC ok' "$log" | sed 's/, 0 malformed//' | paste -sd ';' -))"
	else
		FAIL=$((FAIL + 1))
		FAILED+=("$name")
		say "FAIL $name — log: $log"
		tail -15 "$log" | sed 's/^/    /'
	fi
}

cm_case rping-rxe-server rxe-server rping "-s -a $GUEST -v" "-c -C 10 -v -V" -a
cm_case rping-softrdma-server soft-server rping "-s -a $HOST -v" "-c -C 10 -v -V" -a
cm_case ucmatose-rxe-server rxe-server ucmatose "" "" -s
cm_case ucmatose-softrdma-server soft-server ucmatose "" "" -s
cm_case udaddy-rxe-server rxe-server udaddy "" "" -s
cm_case udaddy-softrdma-server soft-server udaddy "" "" -s
# rdma_cm over IPv6: each side resolves the ULA to its GID index 2.
if [ $QUICK = 0 ]; then
	CM_V6=1 cm_case rping6-rxe-server rxe-server rping "-s -a $GUEST6 -v" "-c -C 10 -v -V" -a
	CM_V6=1 cm_case rping6-softrdma-server soft-server rping "-s -a $HOST6 -v" "-c -C 10 -v -V" -a
	CM_V6=1 cm_case ucmatose6-rxe-server rxe-server ucmatose "-b $GUEST6" "" -s
	CM_V6=1 cm_case ucmatose6-softrdma-server soft-server ucmatose "-b $HOST6" "" -s
fi
# Several connections per run, both roles (rdma_cm's comm IDs, one QP each).
if [ $QUICK = 0 ]; then
	cm_case ucmatose_c4-rxe-server rxe-server ucmatose "-c 4 -C 20" "-c 4 -C 20" -s
	cm_case ucmatose_c4-softrdma-server soft-server ucmatose "-c 4 -C 20" "-c 4 -C 20" -s
fi

# shared_case NAME TOOL "SERVER ARGS" "CLIENT ARGS": a softrdma server and a
# softrdma client as two processes with devices on one address (the
# namespace's $HOST, or $HOST6 with CM_V6=1), as two rdma_cm programs on
# one rxe host would be (docs/sharing.md). nsenter, not `ip netns exec`,
# which would hide the bpffs at /sys/fs/bpf that the two share.
shared_case() {
	local name=$1 tool=$2 sargs=$3 cargs=$4
	selected "$name" || return 0
	local addr=$HOST log=$OUT/$1.log ok=1
	[ -n "${CM_V6:-}" ] && addr=$HOST6
	local ns="nsenter --net=/run/netns/softrdma-interop env SOFTRDMA_ADDR=$addr timeout 60"
	$ns "$BIN" "$tool" $sargs >"$log.server" 2>&1 &
	local spid=$!
	sleep 1
	$ns "$BIN" "$tool" $cargs >"$log" 2>&1 || ok=0
	wait "$spid" || ok=0
	echo "--- server:" >>"$log"
	cat "$log.server" >>"$log"
	if [ $ok = 1 ] && grep -q 'data mismatch\|return status -' "$log"; then ok=0; fi
	if [ $ok = 1 ]; then
		PASS=$((PASS + 1))
		say "PASS $name (server and client on $addr)"
	else
		FAIL=$((FAIL + 1))
		FAILED+=("$name")
		say "FAIL $name — log: $log"
		tail -15 "$log" | sed 's/^/    /'
	fi
}
if [ $QUICK = 0 ]; then
	grep -q ' /sys/fs/bpf bpf ' /proc/mounts || mount -t bpf bpf /sys/fs/bpf
	shared_case shared-rping rping "-s -a $HOST -C 10" "-c -a $HOST -C 10 -v -V"
	shared_case shared-ucmatose ucmatose "-b $HOST -c 3" "-s $HOST -b $HOST -c 3"
	shared_case shared-udaddy udaddy "-b $HOST" "-s $HOST -b $HOST"
	shared_case shared-write_bw_R ib_write_bw "-x 1 -R -s 65536 -n 200" "-x 1 -R -s 65536 -n 200 $HOST"
	shared_case shared-read_lat ib_read_lat "-x 1 -n 200" "-x 1 -n 200 $HOST"
	shared_case shared-rc_pingpong ibv_rc_pingpong "-g 1 -n 200" "-g 1 -n 200 $HOST"
	CM_V6=1 shared_case shared-rping6 rping "-s -a $HOST6 -C 10" "-c -a $HOST6 -C 10 -v -V"
	CM_V6=1 shared_case shared-ucmatose6 ucmatose "-b $HOST6 -c 3" "-s $HOST6 -b $HOST6 -c 3"
fi
