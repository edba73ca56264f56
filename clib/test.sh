#!/usr/bin/env bash
# test.sh [-k] DIR: run Debian's unmodified rdma-core programs over the
# libibverbs.so.1 that clib/build.sh wrote into DIR (built first if
# missing), in pairs of processes on loopback, and against softrdma's Go
# tools. Prints one line per run (PASS/FAIL, the program and its flags)
# and exits non-zero if any failed. Needs ibverbs-utils and perftest
# (apt-get install ibverbs-utils perftest), and for the rdma_cm programs
# over librdmacm.so.1 rdmacm-utils. -k keeps the logs in DIR/logs.
#
# The test suite runs it when SOFTRDMA_CLIB_TEST=1 (clib/clib_test.go).
set -uo pipefail
keep=0
if [ "${1:-}" = -k ]; then keep=1; shift; fi
dir=${1:?usage: clib/test.sh [-k] DIR}
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
[ -f "$dir/libibverbs.so.1" ] || bash "$here/build.sh" "$dir" || exit 1
dir=$(cd "$dir" && pwd)
logs=$dir/logs
rm -rf "$logs"
mkdir -p "$logs"
for p in ibv_devinfo ibv_rc_pingpong ib_write_bw; do
	command -v $p >/dev/null || { echo "clib/test.sh: $p missing: apt-get install ibverbs-utils perftest" >&2; exit 1; }
done
gotool=$logs/softrdma
(cd "$root" && go build -o "$gotool" ./cmd/softrdma) || exit 1

dev=softrdma_lo
gid=1 # ::ffff:127.0.0.1 in softrdma_lo's GID table
port=$((20000 + RANDOM % 20000))
fails=0
xfails=0
n=0

# run NAME CMD...: one program alone.
run() {
	local name=$1; shift
	n=$((n + 1))
	if LD_LIBRARY_PATH=$dir timeout 60 "$@" >"$logs/$n.out" 2>&1; then
		echo "PASS  $name"
	else
		echo "FAIL  $name (log $logs/$n.out)"
		fails=$((fails + 1))
	fi
}

# xfail, when set, is why the next pairs are known to fail: a failure
# prints "XFAIL name: reason", keeps the logs and is not counted.
xfail=

# pair NAME SERVER-ENV CLIENT-ENV -- SERVER-CMD... -- CLIENT-CMD...: a
# server and a client; both must exit 0. An env of "c" runs the side
# over the C library, "go" runs it as is (a Go tool).
pair() {
	local name=$1 senv=$2 cenv=$3; shift 3
	[ "$1" = -- ] && shift
	local scmd=() ccmd=()
	while [ "$1" != -- ]; do scmd+=("$1"); shift; done
	shift
	ccmd=("$@")
	n=$((n + 1))
	local sl=() cl=()
	[ "$senv" = c ] && sl=(env LD_LIBRARY_PATH=$dir)
	[ "$cenv" = c ] && cl=(env LD_LIBRARY_PATH=$dir)
	"${sl[@]}" timeout 60 "${scmd[@]}" >"$logs/$n.server" 2>&1 &
	local spid=$!
	sleep 1
	local crc=1 i
	for i in 1 2 3 4 5 6; do # the server may still be starting
		"${cl[@]}" timeout 60 "${ccmd[@]}" >"$logs/$n.client" 2>&1 && { crc=0; break; }
		grep -q -i "couldn't connect\|Couldn't connect\|Unable to perform\|connection refused" "$logs/$n.client" || break
		sleep 0.5
	done
	wait $spid
	local src=$?
	if [ $crc = 0 ] && [ $src = 0 ]; then
		echo "PASS  $name"
	elif [ -n "$xfail" ]; then
		echo "XFAIL $name: $xfail (server rc=$src client rc=$crc, logs $logs/$n.server $logs/$n.client)"
		keep=1
		xfails=$((xfails + 1))
	else
		echo "FAIL  $name (server rc=$src client rc=$crc, logs $logs/$n.server $logs/$n.client)"
		# The logs' ends here too: go test removes its temporary directory.
		# A program's error goes to stderr at once, before the stdout it
		# flushes at exit: its lines that say so are shown as well.
		for side in server client; do
			grep -i -m 5 "error\|fail\|couldn't\|unable\|unexpected" "$logs/$n.$side" | sed "s/^/	$side (errors): /"
			tail -n 6 "$logs/$n.$side" | sed "s/^/	$side: /"
		done
		kill $spid 2>/dev/null
		fails=$((fails + 1))
	fi
	port=$((port + 1))
}

# observed NAME KIND PATTERN: at least two files (a pair's server and
# client) match PATTERN, and each is a runtime trace go tool trace reads
# (KIND trace: SOFTRDMA_TRACE) or the counters of a device that sent and
# received packets (KIND counters: SOFTRDMA_COUNTERS).
observed() {
	local name=$1 kind=$2 f files=0 bad=0 out
	n=$((n + 1))
	for f in $3; do
		[ -e "$f" ] || continue
		files=$((files + 1))
		case $kind in
		trace) out=$(cd "$root" && go tool trace -pprof=sched "$f" 2>&1 >/dev/null) || bad=$((bad + 1)) ;;
		counters)
			out=$(cat "$f")
			grep -q "^device " <<<"$out" && grep -q "^sent_pkts [1-9]" <<<"$out" && grep -q "^rcvd_pkts [1-9]" <<<"$out" || bad=$((bad + 1))
			;;
		esac
		printf '%s:\n%s\n' "$f" "$out" >>"$logs/$n.out"
	done
	if [ $files -ge 2 ] && [ $bad = 0 ]; then
		echo "PASS  $name"
	else
		echo "FAIL  $name ($files files, $bad bad; log $logs/$n.out)"
		fails=$((fails + 1))
	fi
}

# profiled NAME PATTERN: at least two files (a pair's server and client)
# match PATTERN, each a CPU profile that go tool pprof reads, and they
# hold samples (SOFTRDMA_CPUPROFILE; a client the pair ran again writes
# one more).
profiled() {
	local name=$1 f files=0 bad=0 out
	n=$((n + 1))
	for f in $2; do
		[ -e "$f" ] || continue
		files=$((files + 1))
		out=$(cd "$root" && go tool pprof -top "$f" 2>&1)
		printf '%s:\n%s\n' "$f" "$out" >>"$logs/$n.out"
		grep -q "^Type: cpu" <<<"$out" || bad=$((bad + 1))
	done
	if [ $files -ge 2 ] && [ $bad = 0 ] && grep -q "Total samples = [1-9]" "$logs/$n.out"; then
		echo "PASS  $name"
	else
		echo "FAIL  $name ($files profiles, $bad unreadable; log $logs/$n.out)"
		fails=$((fails + 1))
	fi
}

# Misuse and blocking checks through the ABI, from C (testdata/abicheck.c).
${CC:-gcc} -Wall -o "$logs/abicheck" "$here/testdata/abicheck.c" -L"$dir" -libverbs || exit 1
run "abicheck on $dev (bad arguments, errnos, bad_wr, channel fd with poll())" "$logs/abicheck" $dev $gid
run "abicheck on shm0" "$logs/abicheck" shm0 0
# The program's signal handlers run on the alternate stack, whatever
# flags it installs them with (testdata/sigstack.c); built against
# rdma-core's libibverbs, as a Debian binary is.
${CC:-gcc} -Wall -o "$logs/sigstack" "$here/testdata/sigstack.c" -libverbs || exit 1
run "sigstack on $dev (handlers installed without SA_ONSTACK gain it; 20 kHz SIGALRM into verbs calls)" "$logs/sigstack" $dev
# A C busy poller yields the CPU as the Go pollers do (testdata/pollidle.c).
${CC:-gcc} -Wall -rdynamic -o "$logs/pollidle" "$here/testdata/pollidle.c" -L"$dir" -libverbs || exit 1
run "pollidle on $dev (an empty-polling thread yields every 64 receive attempts, 4 per poll)" "$logs/pollidle" $dev 4
run "pollidle on shm0 (an empty-polling thread yields every 64 polls)" "$logs/pollidle" shm0 1
run "ibv_devices" ibv_devices
run "ibv_devinfo" ibv_devinfo
run "ibv_devinfo -v -d $dev" ibv_devinfo -v -d $dev

for t in rc uc ud srq; do
	p=ibv_${t}_pingpong
	pair "$p -g $gid (C to C)" c c -- $p -s 1024 -d $dev -g $gid -p $port -- $p -s 1024 -d $dev -g $gid -p $port 127.0.0.1
done
pair "ibv_rc_pingpong -e (events, C to C)" c c -- ibv_rc_pingpong -e -d $dev -g $gid -p $port -- ibv_rc_pingpong -e -d $dev -g $gid -p $port 127.0.0.1
pair "ibv_rc_pingpong -s 64 -n 10000 (C to C)" c c -- ibv_rc_pingpong -s 64 -n 10000 -d $dev -g $gid -p $port -- ibv_rc_pingpong -s 64 -n 10000 -d $dev -g $gid -p $port 127.0.0.1
for t in rc uc ud srq; do
	p=ibv_${t}_pingpong
	pair "$p: C server, Go client" c go -- $p -s 1024 -d $dev -g $gid -p $port -- "$gotool" $p -s 1024 -d $dev -g $gid -p $port 127.0.0.1
	pair "$p: Go server, C client" go c -- "$gotool" $p -s 1024 -d $dev -g $gid -p $port -- $p -s 1024 -d $dev -g $gid -p $port 127.0.0.1
done

# perftest: every test with each transport it supports.
pt() { # pt NAME-SUFFIX PROGRAM FLAGS...
	local suffix=$1 p=$2; shift 2
	pair "$p $* (C to C)$suffix" c c -- $p -d $dev -x $gid -p $port "$@" -- $p -d $dev -x $gid -p $port "$@" 127.0.0.1
}
for c in RC UC; do
	pt "" ib_write_bw -c $c -n 2000
	pt "" ib_write_lat -c $c -n 2000
done
# UC SEND bandwidth is left out: a UC SEND that finds no receive posted
# is dropped (IBTA), and perftest's server then waits for it forever
# (softrdma's Go tool too); latency runs one message at a time.
for c in RC UD; do
	pt "" ib_send_bw -c $c -n 2000
done
for c in RC UC UD; do
	pt "" ib_send_lat -c $c -n 2000
done
pt "" ib_read_bw -n 2000
pt "" ib_read_lat -n 2000
pt "" ib_atomic_bw -n 2000
pt "" ib_atomic_lat -n 2000
pt "" ib_atomic_bw -A FETCH_AND_ADD -n 2000
pt "" ib_write_bw -a -n 200
pt "" ib_send_bw -e -n 2000
pt "" ib_write_bw -q 4 -n 2000
# Under packet loss or heavy load the client's QP can use up its
# transport retries (IBV_WC_RETRY_EXC_ERR after seven timeouts in a row)
# and the server then waits for the rest until its timeout. Seen in CI on
# this case only, and with 1% loss on a veth pair; the cause in the
# requester's recovery is not yet found.
xfail="under loss or heavy load the client's QP may exceed its transport retries; the server then times out"
pt "" ib_send_bw --use-srq -n 2000
xfail=
pt "" ib_write_bw -I 64 -s 64 -n 2000
# SOFTRDMA_CPUPROFILE: each process writes its profile when it closes
# its last device ("%p" is its PID).
mkdir -p "$logs/cpu"
prof=(env "SOFTRDMA_CPUPROFILE=$logs/cpu/ib_write_bw.%p.pprof" "SOFTRDMA_TRACE=$logs/cpu/ib_write_bw.%p.trace" "SOFTRDMA_COUNTERS=$logs/cpu/ib_write_bw.%p.counters")
pair "ib_write_bw -n 2000 with SOFTRDMA_CPUPROFILE, _TRACE, _COUNTERS (C to C)" c c -- "${prof[@]}" ib_write_bw -d $dev -x $gid -p $port -n 2000 \
	-- "${prof[@]}" ib_write_bw -d $dev -x $gid -p $port -n 2000 127.0.0.1
profiled "SOFTRDMA_CPUPROFILE: ib_write_bw's profiles (closed devices), read by go tool pprof" "$logs/cpu/ib_write_bw.*.pprof"
observed "SOFTRDMA_TRACE: ib_write_bw's traces (closed devices), read by go tool trace" trace "$logs/cpu/ib_write_bw.*.trace"
observed "SOFTRDMA_COUNTERS: ib_write_bw's device counters (closed devices)" counters "$logs/cpu/ib_write_bw.*.counters"
for p in ib_write_bw ib_read_bw ib_send_bw ib_write_lat ib_read_lat ib_send_lat ib_atomic_lat; do
	pair "$p: C server, Go client" c go -- $p -d $dev -x $gid -p $port -n 1000 -- "$gotool" $p -d $dev -x $gid -p $port -n 1000 127.0.0.1
	pair "$p: Go server, C client" go c -- "$gotool" $p -d $dev -x $gid -p $port -n 1000 -- $p -d $dev -x $gid -p $port -n 1000 127.0.0.1
done
# Bigger consumers, where installed. rdma-core's Python bindings (Debian's
# python3-pyverbs, for the system's python3).
if /usr/bin/python3 -c "import pyverbs" 2>/dev/null; then
	run "pyverbs on $dev (devices, PD, MR, CQ, RC QP to RTS, RDMA WRITE)" /usr/bin/python3 "$here/testdata/pyverbs_check.py" $dev $gid
	run "pyverbs on shm0" /usr/bin/python3 "$here/testdata/pyverbs_check.py" shm0 0
	# rdma-core's own test suite (clib/rdmacore-tests.sh): every test
	# a software device can run, on each device.
	run "rdma-core's tests (pyverbs' suite) on $dev" bash "$here/rdmacore-tests.sh" "$dir" $dev $gid
	run "rdma-core's tests (pyverbs' suite) on shm0" bash "$here/rdmacore-tests.sh" "$dir" shm0 0
else
	echo "SKIP  pyverbs: apt-get install python3-pyverbs"
fi
# UCX lists a device only where /dev/infiniband/uverbsN exists
# (uverbs-ns.sh makes it in a private namespace). Its UD transport drops
# what its GRH check cannot match: the check reads the packet type from
# the completion's sl, which mlx5 fills and rxe and softrdma leave 0
# (docs/clib.md).
ns="bash $here/uverbs-ns.sh"
if command -v ucx_perftest >/dev/null && $ns true 2>/dev/null; then
	run "ucx_info -d lists $dev (in uverbs-ns.sh)" bash -c "$ns ucx_info -d | grep -q 'Memory domain: $dev'"
	for x in rc_verbs ud_verbs; do
		pair "ucx_perftest -x $x -t am_lat (UCT, C to C)" c c -- env UCX_UD_VERBS_ETH_DGID_CHECK=n $ns ucx_perftest -p $port -d $dev:1 -x $x -t am_lat -n 2000 \
			-- env UCX_UD_VERBS_ETH_DGID_CHECK=n $ns ucx_perftest -p $port -d $dev:1 -x $x -t am_lat -n 2000 127.0.0.1
	done
	pair "ucx_perftest -x rc_verbs -t put_bw -D zcopy -s 65536 (UCT, C to C)" c c -- $ns ucx_perftest -p $port -d $dev:1 -x rc_verbs -t put_bw -D zcopy -s 65536 -n 500 \
		-- $ns ucx_perftest -p $port -d $dev:1 -x rc_verbs -t put_bw -D zcopy -s 65536 -n 500 127.0.0.1
	ucp=(env UCX_TLS=rc_verbs,ud_verbs,self UCX_NET_DEVICES=$dev:1 UCX_UD_VERBS_ETH_DGID_CHECK=n)
	pair "ucx_perftest -t tag_lat, UCX_TLS=rc_verbs,ud_verbs (UCP, C to C)" c c -- "${ucp[@]}" $ns ucx_perftest -p $port -t tag_lat -n 2000 \
		-- "${ucp[@]}" $ns ucx_perftest -p $port -t tag_lat -n 2000 127.0.0.1
else
	echo "SKIP  UCX: apt-get install ucx-utils, and allow user namespaces (clib/uverbs-ns.sh)"
fi
# rdma_cm over librdmacm.so.1 (clib/testdata/cmcheck.c: misuse errnos,
# events on the channel fd, private data, reject, migrate, endpoints),
# then rdmacm-utils and perftest -R, C to C and against the Go tools.
if [ -f "$dir/librdmacm.so.1" ] && command -v rping >/dev/null; then
	${CC:-gcc} -Wall -o "$logs/cmcheck" "$here/testdata/cmcheck.c" -L"$dir" -lrdmacm -libverbs -lpthread || exit 1
	run "cmcheck on 127.0.0.1 (rdma_cm misuse, events, private data, reject, migrate, own QPs with rdma_init_qp_attr, TOS, rdma_create_ep)" "$logs/cmcheck" 127.0.0.1
	pair "rping (C to C)" c c -- rping -s -a 127.0.0.1 -p $port -C 10 -V -- rping -c -a 127.0.0.1 -p $port -C 10 -V
	pair "rping -S 4096 (C to C)" c c -- rping -s -a 127.0.0.1 -p $port -C 100 -S 4096 -V -- rping -c -a 127.0.0.1 -p $port -C 100 -S 4096 -V
	# librdmacm keeps its devices open: rping's profiles are written at
	# exit (a value without "%p" gets ".PID" appended).
	prof=(env "SOFTRDMA_CPUPROFILE=$logs/cpu/rping" "SOFTRDMA_COUNTERS=$logs/cpu/rping-counters")
	pair "rping with SOFTRDMA_CPUPROFILE, _COUNTERS (C to C)" c c -- "${prof[@]}" rping -s -a 127.0.0.1 -p $port -C 10 -V -- "${prof[@]}" rping -c -a 127.0.0.1 -p $port -C 10 -V
	profiled "SOFTRDMA_CPUPROFILE: rping's profiles (written at exit), read by go tool pprof" "$logs/cpu/rping.[0-9]*"
	observed "SOFTRDMA_COUNTERS: rping's device counters (written at exit)" counters "$logs/cpu/rping-counters.*"
	pair "rping: C server, Go client" c go -- rping -s -a 127.0.0.1 -p $port -C 10 -- "$gotool" rping -c -a 127.0.0.1 -p $port -C 10
	pair "rping: Go server, C client" go c -- "$gotool" rping -s -a 127.0.0.1 -p $port -C 10 -- rping -c -a 127.0.0.1 -p $port -C 10
	# rping -q: each side creates its QP with ibv_create_qp and moves it
	# with rdma_init_qp_attr's attributes; the client ends with
	# rdma_establish, the server accepts with the QP's number.
	pair "rping -q (C to C, own QPs)" c c -- rping -s -q -a 127.0.0.1 -p $port -C 10 -V -- rping -c -q -a 127.0.0.1 -p $port -C 10 -V
	pair "rping -q -S 4096 (C to C, own QPs)" c c -- rping -s -q -a 127.0.0.1 -p $port -C 100 -S 4096 -V -- rping -c -q -a 127.0.0.1 -p $port -C 100 -S 4096 -V
	pair "rping: C -q server, C client" c c -- rping -s -q -a 127.0.0.1 -p $port -C 10 -V -- rping -c -a 127.0.0.1 -p $port -C 10 -V
	pair "rping: C server, C -q client" c c -- rping -s -a 127.0.0.1 -p $port -C 10 -V -- rping -c -q -a 127.0.0.1 -p $port -C 10 -V
	pair "rping: C -q server, Go client" c go -- rping -s -q -a 127.0.0.1 -p $port -C 10 -V -- "$gotool" rping -c -a 127.0.0.1 -p $port -C 10
	pair "rping: Go server, C -q client" go c -- "$gotool" rping -s -a 127.0.0.1 -p $port -C 10 -- rping -c -q -a 127.0.0.1 -p $port -C 10 -V
	pair "ucmatose (C to C)" c c -- ucmatose -p $port -- ucmatose -s 127.0.0.1 -p $port
	pair "ucmatose -c 4 -C 100 -m (C to C: 4 connections, migrate)" c c -- ucmatose -p $port -c 4 -C 100 -- ucmatose -s 127.0.0.1 -p $port -c 4 -C 100 -m
	pair "ucmatose -t 32 -a 18 (C to C: RDMA_OPTION_ID_TOS and ACK_TIMEOUT)" c c -- ucmatose -p $port -t 32 -a 18 -- ucmatose -s 127.0.0.1 -p $port -t 32 -a 18
	pair "ucmatose: C server, Go client" c go -- ucmatose -p $port -- "$gotool" ucmatose -s 127.0.0.1 -p $port
	pair "ucmatose: Go server, C client" go c -- "$gotool" ucmatose -p $port -- ucmatose -s 127.0.0.1 -p $port
	# udaddy has a fixed port (7174): its pairs run one at a time.
	pair "udaddy (C to C)" c c -- udaddy -- udaddy -s 127.0.0.1
	pair "udaddy -c 2 -C 50 (C to C)" c c -- udaddy -c 2 -C 50 -- udaddy -s 127.0.0.1 -c 2 -C 50
	pair "udaddy: C server, Go client" c go -- udaddy -- "$gotool" udaddy -s 127.0.0.1
	pair "udaddy: Go server, C client" go c -- "$gotool" udaddy -- udaddy -s 127.0.0.1
	for t in "ib_write_bw -R" "ib_send_lat -R" "ib_send_bw -c UD -R" "ib_read_lat -R" "ib_send_bw -R"; do
		pt "" $t -n 1000
		pair "$t: C server, Go client" c go -- $t -d $dev -x $gid -p $port -n 1000 -- "$gotool" $t -d $dev -x $gid -p $port -n 1000 127.0.0.1
		pair "$t: Go server, C client" go c -- "$gotool" $t -d $dev -x $gid -p $port -n 1000 -- $t -d $dev -x $gid -p $port -n 1000 127.0.0.1
	done
	# rsockets (clib/testdata/rscheck.c: misuse errnos, non-blocking
	# calls, rpoll over rsockets and a pipe), then rstream and riostream
	# C to C and against the Go tools. Custom sizes keep each run short:
	# a default rstream run makes 200000 64-byte round trips.
	${CC:-gcc} -Wall -o "$logs/rscheck" "$here/testdata/rscheck.c" -L"$dir" -lrdmacm -libverbs || exit 1
	run "rscheck on 127.0.0.1 (rsocket misuse, EAGAIN, rpoll with a pipe, connect, shutdown)" "$logs/rscheck" 127.0.0.1 $port
	port=$((port + 2))
	rs() { # rs NAME-SUFFIX SERVER-ENV CLIENT-ENV PROGRAM FLAGS...
		local suffix=$1 se=$2 ce=$3 p=$4; shift 4
		local sp=$p cp=$p
		[ $se = go ] && sp="$gotool $p"
		[ $ce = go ] && cp="$gotool $p"
		pair "$p $*$suffix" $se $ce -- $sp -p $port "$@" -- $cp -s 127.0.0.1 -p $port "$@"
	}
	rs " (C to C)" c c rstream -C 1000 -S 1000
	rs " (C to C)" c c rstream -T b -C 100 -S 65536
	rs " (C to C, rpoll)" c c rstream -T a -C 1000 -S 4096
	rs " (C to C, rpoll, blocking)" c c rstream -T a -T b -C 200 -S 100000
	rs " (C to C)" c c rstream -T v -C 50 -S 1000000
	rs " (C to C)" c c rstream -I 500 -C 1 -S 64
	rs " (C to C)" c c riostream -C 100 -S 4096
	rs " (C to C)" c c riostream -T v -C 20 -S 1000000
	rs " (C to C)" c c riostream -T b -C 100 -S 65536
	rs ": C server, Go client" c go rstream -T v -C 100 -S 100000
	rs ": Go server, C client" go c rstream -T v -C 100 -S 100000
	rs ": C server, Go client" c go rstream -T b -C 1000 -S 1000
	rs ": Go server, C client" go c rstream -T b -C 1000 -S 1000
	rs ": C server, Go client" c go riostream -T v -C 50 -S 65536
	rs ": Go server, C client" go c riostream -T v -C 50 -S 65536
fi

# QPs that grant no remote access, idle past the keepalive (5 s), then
# used again (testdata/idleqp.c; against rxe by hand, see its header).
${CC:-gcc} -Wall -o "$logs/idleqp" "$here/testdata/idleqp.c" -L"$dir" -libverbs || exit 1
pair "idleqp -t 7 (C to C)" c c -- "$logs/idleqp" -d $dev -g $gid -p $port -t 7 -- "$logs/idleqp" -d $dev -g $gid -p $port -t 7 127.0.0.1
# A memory window between two processes (testdata/mwpeer.c): WRITE
# through it, SEND_WITH_INV of its rkey, then refused.
${CC:-gcc} -Wall -Wno-unused-function -o "$logs/mwpeer" "$here/testdata/mwpeer.c" -L"$dir" -libverbs || exit 1
pair "mwpeer (a window across processes, SEND_WITH_INV)" c c -- "$logs/mwpeer" -d $dev -g $gid -p $((port + 1)) -- "$logs/mwpeer" -d $dev -g $gid -p $((port + 1)) 127.0.0.1

# ibv_post_send's and ibv_post_recv's rings (testdata/sendring.c):
# threads posting at once, inline data, a bad request in a chain, a full
# queue, ibv_wr_* batches, ERR with requests outstanding, receive requests
# at ERR and RESET; with the rings (and the counters showing the QPs took
# requests from them) and without them.
${CC:-gcc} -Wall -Wno-unused-function -o "$logs/sendring" "$here/testdata/sendring.c" -L"$dir" -libverbs -lpthread || exit 1
run "sendring (the rings)" env SOFTRDMA_COUNTERS="$logs/sendring.counters" "$logs/sendring" -d $dev -g $gid
n=$((n + 1))
if taken=$(cat "$logs"/sendring.counters.* 2>/dev/null | awk '$1 == "feed_taken" {print $2}') && [ "${taken:-0}" -gt 1000 ]; then
	echo "PASS  sendring took $taken requests through the rings"
else
	echo "FAIL  sendring took ${taken:-no} requests through the rings (counters $logs/sendring.counters.*)"
	fails=$((fails + 1))
fi
run "sendring (SOFTRDMA_NO_SEND_RING=1 SOFTRDMA_NO_RECV_RING=1)" env SOFTRDMA_NO_SEND_RING=1 SOFTRDMA_NO_RECV_RING=1 "$logs/sendring" -d $dev -g $gid
# ibv_create_cq_ex and its polling API (testdata/cqex.c): the refusals
# with rxe's errnos, walks that stop early and leave the rest for the
# next walk or ibv_poll_cq, every field rxe offers, an empty CQ.
${CC:-gcc} -Wall -Wno-unused-function -o "$logs/cqex" "$here/testdata/cqex.c" -L"$dir" -libverbs || exit 1
run "cqex (ibv_create_cq_ex, ibv_start_poll/next_poll/end_poll)" "$logs/cqex" -d $dev -g $gid
# A CQ that overflows (testdata/overrun.c): IBV_EVENT_CQ_ERR on the async
# fd, ibv_poll_cq gives what the CQ kept and no error, and the CQ goes on,
# as with rxe.
${CC:-gcc} -Wall -Wno-unused-function -o "$logs/overrun" "$here/testdata/overrun.c" -L"$dir" -libverbs || exit 1
run "overrun (a CQ that overflows reports it and goes on)" "$logs/overrun" -d $dev -g $gid
run "overrun on shm0" "$logs/overrun" -d shm0 -g 0
# Completion events as blocking and non-blocking programs wait for them
# (testdata/evwait.c): a wait far past ibv_get_cq_event's spin, short
# waits in a row, EAGAIN and poll() on a non-blocking channel, as on rxe.
${CC:-gcc} -Wall -Wno-unused-function -o "$logs/evwait" "$here/testdata/evwait.c" -L"$dir" -libverbs || exit 1
run "evwait (ibv_get_cq_event: blocking, non-blocking, poll())" "$logs/evwait" -d $dev -g $gid
run "evwait on shm0" "$logs/evwait" -d shm0 -g 0
# Memory windows (testdata/mw.c): type 1 and type 2 binds, access
# through them and nothing beyond, local and remote invalidation, the
# errors of each; shm0 has none and must refuse them. clib/interop.sh
# runs the same program on rxe itself.
${CC:-gcc} -Wall -Wno-unused-function -o "$logs/mw" "$here/testdata/mw.c" -L"$dir" -libverbs || exit 1
run "mw (memory windows: bind, access, invalidate, errors)" "$logs/mw" -d $dev -g $gid
run "mw on shm0 (no windows: EOPNOTSUPP)" "$logs/mw" -d shm0 -g 0
# A child of fork() that uses what it inherited (testdata/forkchild.c):
# it fails fast with ENODEV and releases its copies, and the parent's
# QPs work on.
${CC:-gcc} -Wall -Wno-unused-function -o "$logs/forkchild" "$here/testdata/forkchild.c" -L"$dir" -libverbs -lrdmacm || exit 1
run "forkchild (fork() without exec: ENODEV in the child, the parent unaffected)" "$logs/forkchild" -d $dev -g $gid
run "forkchild on shm0" "$logs/forkchild" -d shm0 -g 0
# ibv_reg_mr on shm0 registers whole pages of a buffer in place, and
# deregistration (explicit, or by ibv_close_device) makes them private
# again unless another device's registration still has them
# (testdata/inplace.c).
${CC:-gcc} -Wall -Wno-unused-function -o "$logs/inplace" "$here/testdata/inplace.c" -L"$dir" -libverbs || exit 1
run "inplace (shm0 registers a program's pages in place, and gives them back)" "$logs/inplace" -d $dev
# A poll of the send CQ takes the ring: eight requests queued behind one
# that nothing will acknowledge are taken by one ibv_poll_cq (sendring -p).
run "sendring -p (a poll takes the ring)" env SOFTRDMA_COUNTERS="$logs/polltake.counters" "$logs/sendring" -d $dev -g $gid -p
n=$((n + 1))
if taken=$(cat "$logs"/polltake.counters.* 2>/dev/null | awk '$1 == "feed_taken" {print $2}') && [ "${taken:-0}" = 8 ]; then
	echo "PASS  sendring -p: the poll took $taken requests from the ring"
else
	echo "FAIL  sendring -p: the poll took ${taken:-no} requests from the ring, not 8 (counters $logs/polltake.counters.*)"
	fails=$((fails + 1))
fi

# A UD burst of 1000 4 KiB messages while the receiving process is stopped
# (testdata/udburst.c): the device's UDP socket must hold them all, as a
# busy machine needs when it does not run the receiver for a whole burst
# (ib_send_bw -c UD). The socket takes 16 MiB only with CAP_NET_ADMIN or
# net.core.rmem_max at least that.
${CC:-gcc} -Wall -o "$logs/udburst" "$here/testdata/udburst.c" -L"$dir" -libverbs || exit 1
capeff=$(awk '/^CapEff:/ {print $2}' /proc/self/status)
if (((0x${capeff:-0} >> 12) & 1)) || [ "$(cat /proc/sys/net/core/rmem_max)" -ge 16777216 ]; then
	pair "udburst -n 1000 (C to C: UD messages to a stopped process)" c c -- "$logs/udburst" -d $dev -g $gid -p $port -n 1000 -- "$logs/udburst" -d $dev -g $gid -p $port -n 1000 127.0.0.1
else
	echo "SKIP  udburst: a 16 MiB socket buffer needs CAP_NET_ADMIN or sysctl net.core.rmem_max=16777216"
fi

# The shared-memory device: its one GID, index 0, names the process.
pair "ibv_rc_pingpong on shm0 (C to C)" c c -- ibv_rc_pingpong -d shm0 -g 0 -p $port -- ibv_rc_pingpong -d shm0 -g 0 -p $port 127.0.0.1
pair "ib_write_bw on shm0 (C to C)" c c -- ib_write_bw -d shm0 -x 0 -p $port -n 2000 -- ib_write_bw -d shm0 -x 0 -p $port -n 2000 127.0.0.1

echo "$((n - fails - xfails)) of $n passed, $xfails known failures (XFAIL)"
[ $keep = 1 ] || [ $fails != 0 ] || rm -rf "$logs"
[ $fails = 0 ]
