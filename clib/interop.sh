#!/usr/bin/env bash
# interop.sh DIR: Debian's C programs over the libibverbs.so.1 and
# librdmacm.so.1 in DIR (built by clib/build.sh) against Linux rxe in the interop VM
# (test/interop/vm.sh), both roles: the C program runs in the VM fixture's
# network namespace on softrdma's device for br0, the same program runs
# in the guest on rxe0. Boots one VM and stops it at the end. Needs root
# and the VM's lock: run it as
#   flock /tmp/vm.lock bash clib/interop.sh DIR
set -uo pipefail
dir=$(cd "${1:?usage: clib/interop.sh DIR}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
vm="bash $here/../test/interop/vm.sh"
trap '$vm down >/dev/null 2>&1' EXIT
$vm up 1 || exit 1
host=10.77.0.1 guest=10.77.0.2
lib=(env LD_LIBRARY_PATH=$dir SOFTRDMA_ADDR=$host)
fails=0 xfails=0 n=0
# xfail, when set, is why the next cases are known to fail: a failure
# prints "XFAIL name: reason" and is not counted.
xfail=

# guest_server NAME GUEST-CMD -- HOST-CMD...: the server on rxe in the VM,
# the client over the library in the namespace.
guest_server() {
	local name=$1 gcmd=$2; shift 3
	n=$((n + 1))
	local job
	job=$($vm exec -b vm1 "$gcmd") || { echo "FAIL  $name (could not start the guest side)"; fails=$((fails + 1)); return; }
	sleep 2
	local out crc grc
	out=$($vm nsexec "${lib[@]}" timeout 60 "$@" 2>&1); crc=$?
	gout=$($vm wait vm1 $job 2>&1); grc=$?
	if [ $crc = 0 ] && [ $grc = 0 ]; then echo "PASS  $name"; else
		echo "FAIL  $name (client rc=$crc, rxe server rc=$grc)"; echo "$out" | tail -5; echo "$gout" | tail -5
		fails=$((fails + 1))
	fi
}

# host_server NAME GUEST-CMD -- HOST-CMD...: the server over the library
# in the namespace, the client on rxe in the VM.
host_server() {
	local name=$1 gcmd=$2; shift 3
	n=$((n + 1))
	$vm nsexec "${lib[@]}" timeout 60 "$@" >/tmp/clib-interop-server.$$ 2>&1 &
	local spid=$!
	sleep 2
	local gout grc src
	gout=$($vm exec vm1 "$gcmd" 2>&1); grc=$?
	wait $spid; src=$?
	if [ $src = 0 ] && [ $grc = 0 ]; then echo "PASS  $name"; elif [ -n "$xfail" ]; then
		echo "XFAIL $name: $xfail (server rc=$src, rxe client rc=$grc)"; tail -5 /tmp/clib-interop-server.$$; echo "$gout" | tail -5
		xfails=$((xfails + 1))
	else
		echo "FAIL  $name (server rc=$src, rxe client rc=$grc)"; tail -5 /tmp/clib-interop-server.$$; echo "$gout" | tail -5
		fails=$((fails + 1))
	fi
	rm -f /tmp/clib-interop-server.$$
}

# on_rxe NAME PROGRAM ARGS: a program of testdata, built against rdma-core's
# own library, run in the VM on rxe0: what it checks over the library
# holds on rxe itself.
on_rxe() {
	local name=$1 prog=$2 args=$3 out
	${CC:-gcc} -Wall -Wno-unused-function -o "$($vm path vm1)/$prog" "$here/testdata/$prog.c" -libverbs || exit 1
	n=$((n + 1))
	if out=$($vm exec vm1 "/share/$prog $args" 2>&1); then
		echo "PASS  $name on rxe0 (rdma-core's library): $(echo "$out" | tail -1)"
	else
		echo "FAIL  $name on rxe0 (rdma-core's library)"; echo "$out" | tail -5
		fails=$((fails + 1))
	fi
}

dev=softrdma_br0
guest_server "ibv_rc_pingpong: rxe server, C client over softrdma" "ibv_rc_pingpong -d rxe0 -g 1" -- ibv_rc_pingpong -d $dev -g 1 $guest
host_server "ibv_rc_pingpong: C server over softrdma, rxe client" "ibv_rc_pingpong -d rxe0 -g 1 $host" -- ibv_rc_pingpong -d $dev -g 1
guest_server "ibv_ud_pingpong: rxe server, C client over softrdma" "ibv_ud_pingpong -d rxe0 -g 1 -s 1024" -- ibv_ud_pingpong -d $dev -g 1 -s 1024 $guest
for t in ib_write_bw ib_read_lat ib_send_bw ib_atomic_lat; do
	guest_server "$t: rxe server, C client over softrdma" "$t -F -d rxe0 -x 1 -n 500" -- $t -F -d $dev -x 1 -n 500 $guest
	# Now and then the C server receives all 500 SENDs but rxe's client
	# never completes its last ones (rxe retries forever with
	# retry_cnt 7), and both ends time out; the cause is not yet found.
	[ $t = ib_send_bw ] && xfail="intermittent: the server receives all SENDs, rxe's client never completes, both time out"
	host_server "$t: C server over softrdma, rxe client" "$t -F -d rxe0 -x 1 -n 500 $host" -- $t -F -d $dev -x 1 -n 500
	xfail=
done
# An RC connection between QPs that grant no remote access, idle for
# longer than softrdma's keepalive (5 s), then used again
# (testdata/idleqp.c): rxe refuses a WRITE to such a QP, so softrdma's
# probe must be one rxe answers (a duplicate of the last acknowledged PSN).
# The softrdma end probes in either role.
${CC:-gcc} -Wall -o "$($vm path vm1)/idleqp" "$here/testdata/idleqp.c" -libverbs || exit 1
guest_server "idleqp -t 12: rxe server, C client over softrdma" "/share/idleqp -d rxe0 -g 1 -p 18601 -t 12" -- "$($vm path vm1)/idleqp" -d $dev -g 1 -p 18601 -t 12 $guest
host_server "idleqp -t 12: C server over softrdma, rxe client" "/share/idleqp -d rxe0 -g 1 -p 18602 -t 12 $host" -- "$($vm path vm1)/idleqp" -d $dev -g 1 -p 18602 -t 12
# A memory window across the wire (testdata/mwpeer.c): one end binds a
# type 2 window, the other WRITEs through it, invalidates it with a
# SEND_WITH_INV (its IETH) and is refused after; each role on each side.
${CC:-gcc} -Wall -Wno-unused-function -o "$($vm path vm1)/mwpeer" "$here/testdata/mwpeer.c" -libverbs || exit 1
guest_server "mwpeer: rxe binds the window, C client over softrdma" "/share/mwpeer -d rxe0 -g 1 -p 18621" -- "$($vm path vm1)/mwpeer" -d $dev -g 1 -p 18621 $guest
host_server "mwpeer: C over softrdma binds the window, rxe client" "/share/mwpeer -d rxe0 -g 1 -p 18622 $host" -- "$($vm path vm1)/mwpeer" -d $dev -g 1 -p 18622
# ibv_create_cq_ex's walks as rxe itself gives them (testdata/cqex.c -r,
# in the guest through rdma-core's own library): the completions, fields
# and order that clib/test.sh checks over the library hold on rxe too.
on_rxe "cqex -r" cqex "-d rxe0 -g 1 -r"
# A CQ that overflows, on rxe itself (testdata/overrun.c): the async
# event, what polling gives, the CQ going on; clib/test.sh checks the
# library against the same program.
on_rxe overrun overrun "-d rxe0 -g 1"
# Completion events on rxe itself (testdata/evwait.c): the waits, EAGAIN
# and poll() that clib/test.sh checks over the library.
on_rxe evwait evwait "-d rxe0 -g 1"
# Memory windows on rxe itself (testdata/mw.c): what clib/test.sh checks
# over the library, with rxe's departures from IBTA (a window's bounds,
# its receive flag) as rxe has them.
on_rxe mw mw "-d rxe0 -g 1"
# rdma_cm over librdmacm.so.1 against the kernel's rdma_cm on rxe.
guest_server "rping: rxe server, C client over softrdma" "rping -s -a $guest -p 7471 -C 10 -V" -- rping -c -a $guest -p 7471 -C 10 -V
host_server "rping: C server over softrdma, rxe client" "rping -c -a $host -p 7472 -C 10 -V" -- rping -s -a $host -p 7472 -C 10 -V
guest_server "ucmatose: rxe server, C client over softrdma" "ucmatose -p 7473" -- ucmatose -s $guest -p 7473
host_server "ucmatose: C server over softrdma, rxe client" "ucmatose -s $host -p 7474" -- ucmatose -p 7474
guest_server "udaddy: rxe server, C client over softrdma" "udaddy" -- udaddy -s $guest
host_server "udaddy: C server over softrdma, rxe client" "udaddy -s $host" -- udaddy
guest_server "ib_write_bw -R: rxe server, C client over softrdma" "ib_write_bw -R -F -d rxe0 -x 1 -n 500" -- ib_write_bw -R -F -d $dev -x 1 -n 500 $guest
host_server "ib_write_bw -R: C server over softrdma, rxe client" "ib_write_bw -R -F -d rxe0 -x 1 -n 500 $host" -- ib_write_bw -R -F -d $dev -x 1 -n 500
# rsockets over librdmacm.so.1 against rdma-core's own rsockets on rxe.
guest_server "rstream -T b: rxe server, C client over softrdma" "rstream -p 7475 -T b -C 100 -S 4096" -- rstream -s $guest -p 7475 -T b -C 100 -S 4096
host_server "rstream -T b: C server over softrdma, rxe client" "rstream -s $host -p 7476 -T b -C 100 -S 4096" -- rstream -b $host -p 7476 -T b -C 100 -S 4096
guest_server "rstream (non-blocking): rxe server, C client over softrdma" "rstream -p 7479 -C 100 -S 4096" -- rstream -s $guest -p 7479 -C 100 -S 4096
host_server "rstream (non-blocking): C server over softrdma, rxe client" "rstream -s $host -p 7480 -C 100 -S 4096" -- rstream -b $host -p 7480 -C 100 -S 4096
guest_server "riostream -T b: rxe server, C client over softrdma" "riostream -p 7477 -T b -C 20 -S 4096" -- riostream -s $guest -p 7477 -T b -C 20 -S 4096
host_server "riostream -T b: C server over softrdma, rxe client" "riostream -s $host -p 7478 -T b -C 20 -S 4096" -- riostream -b $host -p 7478 -T b -C 20 -S 4096
echo "$((n - fails - xfails)) of $n passed, $xfails known failures (XFAIL)"
[ $fails = 0 ]
