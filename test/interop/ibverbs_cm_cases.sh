# test/interop/ibverbs_cm_cases.sh — connection management on a kernel
# device: softrdma built with -tags ibverbs runs in the VM on rxe0 and
# connects through librdmacm (the kernel's CM). Sourced by suite.sh (it
# needs its VM, BIN, OUT, HOST, GUEST, QUICK, selected, capture,
# stop_capture, say, PASS/FAIL).
#
#   ibvcm-unit            provider/ibverbs' rdma_cm tests on rxe0: package cm's
#                         Listen/Dial/Accept (RC, UD by SIDR, REJ, no listener,
#                         Options.Security refused) and an rdmanet echo
#   ibvcm-*-go-server     the tag build's tool serves on rxe0, rdma-core's C tool
#   ibvcm-*-c-server      connects (and the other way round), both in the VM
#   ibvcm-*-host-client   the host's softrdma (UDP, in the namespace) against the
#   ibvcm-*-host-server   tag build on rxe0, both roles
#
# --quick runs the unit tests and rping in the four roles.

IBVCM_BIN=$OUT/softrdma-ibverbs-cm
IBVCM_TEST=$OUT/ibverbs-cm.test
IBV_COMMON=$($VM path common)

ibvcm_result() { # ibvcm_result NAME OK LOG
	if [ "$2" = 1 ] && ! grep -q 'data mismatch\|return status -\|FAIL\|panic:' "$3"; then
		PASS=$((PASS + 1))
		say "PASS $1"
	else
		FAIL=$((FAIL + 1))
		FAILED+=("$1")
		say "FAIL $1 — log: $3"
		tail -15 "$3" | sed 's/^/    /'
	fi
}

# ibvcm_retry LOG CMD...: runs the host command CMD up to 6 times, 2 s
# apart, until it succeeds (a client started before the server in the TCG
# guest listens fails). Only the attempt that counts is written to LOG;
# the failed ones before it go to LOG.retries, each under a label, so a
# passing retry's log is its own output alone and the failures it
# replaced are not judged with it.
ibvcm_retry() {
	local log=$1 tries=0 rc=1
	shift
	: >"$log.retries"
	while :; do
		if "$@" >"$log.try" 2>&1; then
			rc=0
			break
		fi
		tries=$((tries + 1))
		{ echo "=== attempt $tries:"; cat "$log.try"; } >>"$log.retries"
		[ $tries -ge 6 ] && break
		sleep 2
	done
	if [ $rc = 0 ] && [ $tries -gt 0 ]; then
		echo "(attempt $((tries + 1)); the $tries before it: $log.retries)" >>"$log"
	elif [ $rc != 0 ]; then
		echo "(all $tries attempts failed, each in $log.retries; the last:)" >>"$log"
	fi
	cat "$log.try" >>"$log"
	rm -f "$log.try"
	return $rc
}

# ibvcm_vm NAME "SERVER CMD" "CLIENT CMD": both in the VM; the client is
# retried while the server in the TCG guest is not listening yet.
ibvcm_vm() {
	local name=$1 scmd=$2 ccmd=$3
	selected "$name" || return 0
	local log=$OUT/$name.log ok=1
	: >"$log"
	local job
	job=$($VM exec -b vm1 "$scmd")
	sleep 2
	ibvcm_retry "$log" $VM exec vm1 "$ccmd" || ok=0
	echo "--- server:" >>"$log"
	$VM wait vm1 "$job" >>"$log" 2>&1 || ok=0
	ibvcm_result "$name" $ok "$log"
}

# ibvcm_host NAME DIRECTION "SERVER ARGS" "CLIENT ARGS" TOOL ADDRFLAG
#   DIRECTION go-server: the tag build serves on rxe0, the host's softrdma
#   connects to $GUEST; host-server: the other way round. ADDRFLAG (-a,
#   -s, or "" for perftest's trailing address) precedes the address.
ibvcm_host() {
	local name=$1 dir=$2 sargs=$3 cargs=$4 tool=$5 aflag=$6
	selected "$name" || return 0
	local log=$OUT/$name.log ok=1
	: >"$log"
	capture "$name"
	if [ "$dir" = go-server ]; then
		local job
		job=$($VM exec -b vm1 "/common/softrdma-ibverbs-cm $tool $sargs")
		sleep 2
		# Attempts that find the server in the TCG guest not listening
		# yet (a REJ or SIDR_REP "no such service") are retried.
		ibvcm_retry "$log" $VM nsexec env SOFTRDMA_ADDR=$HOST timeout 120 "$BIN" "$tool" $cargs $aflag $GUEST || ok=0
		echo "--- rxe0 server (tag build):" >>"$log"
		$VM wait vm1 "$job" >>"$log" 2>&1 || ok=0
	else
		$VM nsexec env SOFTRDMA_ADDR=$HOST timeout 180 "$BIN" "$tool" $sargs >"$log.server" 2>&1 &
		local spid=$!
		sleep 1
		ibvcm_retry "$log" $VM exec vm1 "/common/softrdma-ibverbs-cm $tool $cargs $aflag $HOST" || ok=0
		wait "$spid" || ok=0
		echo "--- softrdma server (host):" >>"$log"
		cat "$log.server" >>"$log"
	fi
	stop_capture >>"$log" 2>&1 || { ok=0; echo "ICRC check failed" >>"$log"; }
	tshark -r "$CAP" 2>/dev/null | grep -o 'CM: [A-Za-z]*' | sort | uniq -c | tr -s ' ' >>"$log" || true
	ibvcm_result "$name" $ok "$log"
}

ibvcm_build() {
	# ibverbs_cases.sh built and shared the same binaries already.
	if [ "${ibv_ready:-0}" = 1 ]; then
		cp "$IBV_COMMON/softrdma-ibverbs" "$IBV_COMMON/softrdma-ibverbs-cm" &&
			cp "$IBV_COMMON/ibverbs.test" "$IBV_COMMON/ibverbs-cm.test"
		return
	fi
	if ! [ -e /usr/include/rdma/rdma_cma.h ] || ! [ -e /usr/include/infiniband/verbs.h ]; then
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libibverbs-dev librdmacm-dev >/dev/null 2>&1
	fi
	go build -tags ibverbs -o "$IBVCM_BIN" ./cmd/softrdma &&
		go test -c -tags ibverbs -o "$IBVCM_TEST" ./provider/ibverbs &&
		cp "$IBVCM_BIN" "$IBV_COMMON/softrdma-ibverbs-cm" &&
		cp "$IBVCM_TEST" "$IBV_COMMON/ibverbs-cm.test"
}

# Whether SUITE_ONLY can select any of these cases.
ibvcm_any() { [ -z "${SUITE_ONLY:-}" ] || [[ "$SUITE_ONLY" == *ibvcm* ]]; }

if ibvcm_any; then
	if ! ibvcm_build >"$OUT/ibvcm-build.log" 2>&1; then
		FAIL=$((FAIL + 1))
		FAILED+=(ibvcm-build)
		say "FAIL ibvcm-build (go build -tags ibverbs) — log: $OUT/ibvcm-build.log"
		tail -15 "$OUT/ibvcm-build.log" | sed 's/^/    /'
	else
		G=/common/softrdma-ibverbs-cm
		if selected ibvcm-unit; then
			log=$OUT/ibvcm-unit.log
			ok=1
			$VM exec vm1 "cd /tmp && SOFTRDMA_IBVERBS_DEVICE=rxe0 /common/ibverbs-cm.test -test.run RDMACM -test.v -test.count 1 -test.timeout 200s" >"$log" 2>&1 || ok=0
			grep -q -- '--- PASS: TestRDMACMRdmanetEcho' "$log" || ok=0
			ibvcm_result ibvcm-unit $ok "$log"
		fi
		# Go (librdmacm) against rdma-core's C tools on the same rxe0.
		ibvcm_vm ibvcm-rping-go-server "$G rping -s -a $GUEST -C 5 -v" "rping -c -a $GUEST -C 5 -v -V"
		ibvcm_vm ibvcm-rping-c-server "rping -s -a $GUEST -C 5 -v" "$G rping -c -a $GUEST -C 5 -v -V"
		ibvcm_host ibvcm-rping-host-client go-server "-s -a $GUEST -v" "-c -C 5 -v -V" rping -a
		ibvcm_host ibvcm-rping-host-server host-server "-s -a $HOST -v" "-c -C 5 -v -V" rping -a
		if [ $QUICK = 0 ]; then
			ibvcm_vm ibvcm-ucmatose-go-server "$G ucmatose -b $GUEST" "ucmatose -s $GUEST"
			ibvcm_vm ibvcm-ucmatose-c-server "ucmatose -b $GUEST" "$G ucmatose -s $GUEST"
			ibvcm_vm ibvcm-udaddy-go-server "$G udaddy -b $GUEST" "udaddy -s $GUEST"
			ibvcm_vm ibvcm-udaddy-c-server "udaddy -b $GUEST" "$G udaddy -s $GUEST"
			ibvcm_vm ibvcm-rstream-go-server "$G rstream -b $GUEST -S 1000 -C 100 -T v" "rstream -s $GUEST -S 1000 -C 100 -T v"
			ibvcm_vm ibvcm-rstream-c-server "rstream -b $GUEST -S 1000 -C 100 -T v" "$G rstream -s $GUEST -S 1000 -C 100 -T v"
			for t in "write_bw|ib_write_bw|-s 65536 -n 50" "send_lat|ib_send_lat|-n 50" "send_bw_ud|ib_send_bw|-c UD -n 50"; do
				n=${t%%|*} r=${t#*|} tool=${r%%|*} a="-d rxe0 -x 1 -R -F ${r#*|}"
				ibvcm_vm "ibvcm-${n}_R-go-server" "$G $tool $a" "$tool $a $GUEST"
				ibvcm_vm "ibvcm-${n}_R-c-server" "$tool $a" "$G $tool $a $GUEST"
				ibvcm_host "ibvcm-${n}_R-host-client" go-server "$a" "-x 1 -R -F ${r#*|}" "$tool" ""
				ibvcm_host "ibvcm-${n}_R-host-server" host-server "-x 1 -R -F ${r#*|}" "$a" "$tool" ""
			done
			ibvcm_host ibvcm-ucmatose-host-client go-server "-b $GUEST" "" ucmatose -s
			ibvcm_host ibvcm-ucmatose-host-server host-server "" "" ucmatose -s
			ibvcm_host ibvcm-udaddy-host-client go-server "-b $GUEST" "" udaddy -s
			ibvcm_host ibvcm-udaddy-host-server host-server "" "" udaddy -s
		fi
	fi
fi
