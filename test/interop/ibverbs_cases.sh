# test/interop/ibverbs_cases.sh — softrdma built with -tags ibverbs on the
# VM's rxe0 (provider/ibverbs, through libibverbs), sourced by suite.sh (it
# uses $VM, $BIN, $HOST, $GUEST, $OUT, $QUICK, report and selected).
#
#   ibv-conformance            the verbs conformance suite (verbs/verbstest)
#                              on two contexts of rxe0, in the VM
#   ibv-<case>-host-server     the host's softrdma (UDP, in the namespace)
#                              serves, the tag-built tool on rxe0 connects
#   ibv-<case>-host-client     the other way round
#   ibv-<case>-c-server        rdma-core's C tool serves on rxe0, the
#                              tag-built tool connects (same VM, rxe0's
#                              loopback)
#   ibv-<case>-c-client        the tag-built tool serves, the C tool connects
#
# The tag-built binary links libibverbs.so.1 and loads the rxe provider the
# guest has; it is built here, dropped into the common share and copied
# into the guest's /tmp.

IBV_BIN=$OUT/softrdma-ibverbs
IBV_TEST=$OUT/ibverbs.test
IBV_COMMON=$($VM path common)
ibv_ready=0
if go build -tags ibverbs -o "$IBV_BIN" ./cmd/softrdma && go test -c -tags ibverbs -o "$IBV_TEST" ./provider/ibverbs; then
	cp "$IBV_BIN" "$IBV_COMMON/softrdma-ibverbs" && cp "$IBV_TEST" "$IBV_COMMON/ibverbs.test" && ibv_ready=1
fi
[ $ibv_ready = 1 ] || { FAIL=$((FAIL + 1)); FAILED+=(ibv-build); say "FAIL ibv-build: go build -tags ibverbs (needs libibverbs-dev)"; }
# The tool runs from the guest's tmpfs, as the C tools run from the
# initramfs: from /common (9p, no page cache across opens) every first
# touch of a page of the binary is a 9p round trip, and the Go runtime
# first reads much of its symbol table inside the timed loops (see
# ibverbs_bench.sh). /common stays the fallback if the copy fails.
IBV_GO="/common/softrdma-ibverbs"
if [ $ibv_ready = 1 ] && $VM exec vm1 "cp /common/softrdma-ibverbs /tmp/softrdma-ibverbs" >/dev/null 2>&1; then
	IBV_GO="/tmp/softrdma-ibverbs"
fi
[ $ibv_ready = 1 ] && say "ibv: the tag-built tool runs from $IBV_GO in the guest"

# ibv_case NAME MODE TOOL "SERVER ARGS" "CLIENT ARGS"
#   MODE host-server, host-client, c-server or c-client (see above).
ibv_case() {
	local name=ibv-$1-$2 mode=$2 tool=$3 sargs=$4 cargs=$5
	selected "$name" || return 0
	[ $ibv_ready = 1 ] || return 0
	local log=$OUT/$name.log ok=1 job spid
	: >"$log"
	case $mode in
	host-server)
		$VM nsexec env SOFTRDMA_ADDR=$HOST timeout 120 "$BIN" "$tool" $sargs >"$log.server" 2>&1 &
		spid=$!
		sleep 1
		$VM exec vm1 "for i in 1 2 3 4 5 6; do $IBV_GO $tool -d rxe0 $cargs $HOST && exit 0; sleep 2; done; exit 1" >>"$log" 2>&1 || ok=0
		wait "$spid" || ok=0
		echo "--- softrdma (UDP) server:" >>"$log"
		cat "$log.server" >>"$log"
		;;
	host-client)
		job=$($VM exec -b vm1 "$IBV_GO $tool -d rxe0 $sargs")
		sleep 2
		local tries=0
		# The server in the TCG guest may not listen yet: retry while
		# the connection is refused.
		until $VM nsexec env SOFTRDMA_ADDR=$HOST timeout 120 "$BIN" "$tool" $cargs $GUEST >"$log.try" 2>&1; do
			cat "$log.try" >>"$log"
			tries=$((tries + 1))
			if [ $tries -ge 8 ] || ! grep -qiE "connection refused|couldn't connect" "$log.try"; then ok=0; break; fi
			sleep 2
		done
		[ $ok = 0 ] || cat "$log.try" >>"$log"
		rm -f "$log.try"
		echo "--- softrdma (rxe0) server:" >>"$log"
		$VM wait vm1 "$job" >>"$log" 2>&1 || ok=0
		;;
	c-server | c-client)
		local server=$tool client="$IBV_GO $tool"
		[ $mode = c-client ] && server="$IBV_GO $tool" client=$tool
		job=$($VM exec -b vm1 "$server -d rxe0 $sargs")
		sleep 2
		$VM exec vm1 "for i in 1 2 3 4 5 6; do $client -d rxe0 $cargs $GUEST && exit 0; sleep 2; done; exit 1" >>"$log" 2>&1 || ok=0
		echo "--- server ($server):" >>"$log"
		$VM wait vm1 "$job" >>"$log" 2>&1 || ok=0
		;;
	esac
	report "$name" $ok "$log"
}

ibv_all() { # ibv_all NAME TOOL "ARGS": every mode with the same arguments
	local m
	for m in host-server host-client c-server c-client; do
		ibv_case "$1" $m "$2" "$3" "$3"
	done
}

ibv_conformance() {
	local name=ibv-conformance log=$OUT/ibv-conformance.log ok=1
	selected "$name" || return 0
	[ $ibv_ready = 1 ] || return 0
	SOFTRDMA_VM_TIMEOUT=600 $VM exec vm1 "cd /common && SOFTRDMA_IBVERBS_DEVICE=rxe0 ./ibverbs.test -test.v -test.timeout 500s" >"$log" 2>&1 || ok=0
	grep -E '^(--- |    --- )(PASS|FAIL|SKIP)' "$log" | awk '{print $2}' | sort | uniq -c | tr '\n' ' ' >>"$log.sum"
	say "    provider tests: $(cat "$log.sum")"
	rm -f "$log.sum"
	report "$name" $ok "$log"
}

ibv_conformance
if [ $QUICK = 1 ]; then
	# Each direction of each pairing once.
	ibv_case rc_pingpong host-server ibv_rc_pingpong "-g 1 -n 20" "-g 1 -n 20"
	ibv_case rc_pingpong c-client ibv_rc_pingpong "-g 1 -n 20" "-g 1 -n 20"
	ibv_case write_bw host-client ib_write_bw "-x 1 -s 65536 -n 50 -F" "-x 1 -s 65536 -n 50 -F"
	ibv_case send_bw_ud c-server ib_send_bw "-x 1 -c UD -n 50 -F" "-x 1 -c UD -n 50 -F"
else
	ibv_all rc_pingpong ibv_rc_pingpong "-g 1 -n 20"
	ibv_all uc_pingpong ibv_uc_pingpong "-g 1 -n 20"
	ibv_all ud_pingpong ibv_ud_pingpong "-g 1 -n 20 -s 1024"
	ibv_all write_bw ib_write_bw "-x 1 -s 65536 -n 50 -F"
	ibv_all read_bw ib_read_bw "-x 1 -s 65536 -n 50 -F"
	ibv_all atomic_bw ib_atomic_bw "-x 1 -n 50 -F"
	ibv_all send_bw_ud ib_send_bw "-x 1 -c UD -n 50 -F"
	ibv_case srq_pingpong host-server ibv_srq_pingpong "-g 1 -n 20" "-g 1 -n 20"
	ibv_case srq_pingpong c-client ibv_srq_pingpong "-g 1 -n 20" "-g 1 -n 20"
	ibv_case send_bw_uc host-client ib_send_bw "-x 1 -c UC -s 4096 -n 50 -F" "-x 1 -c UC -s 4096 -n 50 -F"
	ibv_case send_bw_uc c-server ib_send_bw "-x 1 -c UC -s 4096 -n 50 -F" "-x 1 -c UC -s 4096 -n 50 -F"
	ibv_case write_lat host-server ib_write_lat "-x 1 -n 50 -F" "-x 1 -n 50 -F"
	ibv_case write_lat c-client ib_write_lat "-x 1 -n 50 -F" "-x 1 -n 50 -F"
	ibv_case atomic_lat_cas host-client ib_atomic_lat "-x 1 -A CMP_AND_SWAP -n 50 -F" "-x 1 -A CMP_AND_SWAP -n 50 -F"
	ibv_case atomic_lat_cas c-server ib_atomic_lat "-x 1 -A CMP_AND_SWAP -n 50 -F" "-x 1 -A CMP_AND_SWAP -n 50 -F"
	ibv_case send_lat_ud host-server ib_send_lat "-x 1 -c UD -n 50 -F" "-x 1 -c UD -n 50 -F"
	ibv_case send_lat_ud c-client ib_send_lat "-x 1 -c UD -n 50 -F" "-x 1 -c UD -n 50 -F"
fi
