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
