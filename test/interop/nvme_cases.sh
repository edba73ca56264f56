# test/interop/nvme_cases.sh — NVMe over Fabrics against Linux, sourced by
# suite.sh (it uses $VM, $BIN, $HOST, $GUEST, $OUT, capture/stop_capture,
# report and selected).
#
#   nvme-linux-host    Linux's nvme-rdma host in the VM against `softrdma
#                      nvmet` on the host, serving a file: nvme discover,
#                      nvme connect, the last MiB written through
#                      /dev/nvme0n1 with O_DIRECT and read back, the same
#                      bytes found in the file on the host, a file system
#                      made on the first 32 MiB, mounted,
#                      written, remounted and read, nvme disconnect.
#   nvme-linux-target  `softrdma nvme` on the host against Linux's
#                      nvmet-rdma in the VM (configfs; a file namespace on
#                      the guest's RAM root, so buffered_io): discover,
#                      id-ctrl, id-ns, 256 KiB written and read back, the
#                      same bytes found in the guest's file.
# Each again as nvme-loss-* with 2% of RoCEv2 frames dropped (the host
# case without the file system).

NVME_NQN=nqn.2026-11.dev.softrdma:interop

nvme_linux_host() { # nvme_linux_host NAME [nofs]
	local name=$1 log=$OUT/$1.log ok=1 share img fs=1
	[ "${2:-}" = nofs ] && fs=0
	selected "$name" || return 0
	: >"$log"
	share=$($VM path vm1)
	img=$OUT/$name.img
	rm -f "$img"
	truncate -s 64M "$img"
	capture "$name"
	$VM nsexec timeout 300 "$BIN" nvmet -a "$HOST" -s 4420 -n "$NVME_NQN" -f "$img" -v >"$log.target" 2>&1 &
	local tpid=$!
	sleep 1
	# The guest's side, one script: every step must succeed.
	cat >"$share/nvme-host.sh" <<EOF
set -ex
nvme discover -t rdma -a $HOST -s 4420 | tee /tmp/disc
grep -q "subnqn: *$NVME_NQN" /tmp/disc
nvme connect -t rdma -a $HOST -s 4420 -n $NVME_NQN
# The kernel scans the namespace after connect returns. With 2 % of the
# frames dropped a lost command waits for a retransmission timeout (the
# host's rxe or softrdma's), and on the TCG guest the scan once took more
# than 10 s: wait up to 30.
for i in \$(seq 150); do [ -b /dev/nvme0n1 ] && break; sleep 0.2; done
[ -b /dev/nvme0n1 ]
cat /sys/block/nvme0n1/size /sys/block/nvme0n1/queue/logical_block_size
dd if=/dev/urandom of=/share/nvme-pattern bs=4096 count=256 2>/dev/null
dd if=/share/nvme-pattern of=/dev/nvme0n1 bs=4096 seek=16128 oflag=direct 2>&1 | tail -1
dd if=/dev/nvme0n1 of=/tmp/back bs=4096 skip=16128 count=256 iflag=direct 2>&1 | tail -1
cmp /share/nvme-pattern /tmp/back
if [ $fs = 1 ]; then
echo 3 >/proc/sys/vm/drop_caches
mke2fs -b 4096 -F /dev/nvme0n1 8192 >/dev/null
mkdir -p /mnt/nvme
mount -t ext2 /dev/nvme0n1 /mnt/nvme
cp /share/nvme-pattern /mnt/nvme/file
umount /mnt/nvme
mount -t ext2 /dev/nvme0n1 /mnt/nvme
cmp /share/nvme-pattern /mnt/nvme/file
umount /mnt/nvme
fi
nvme disconnect -n $NVME_NQN
echo GUEST-OK
EOF
	SOFTRDMA_VM_TIMEOUT=300 $VM exec vm1 "bash /share/nvme-host.sh" >>"$log" 2>&1 || ok=0
	grep -q GUEST-OK "$log" || ok=0
	kill -INT "$tpid" 2>/dev/null
	wait "$tpid"
	echo "--- softrdma nvmet:" >>"$log"
	cat "$log.target" >>"$log"
	# What the guest wrote through the block device must be in the file.
	if [ $ok = 1 ] && ! cmp <(tail -c 1048576 "$img") "$share/nvme-pattern" >>"$log" 2>&1; then
		ok=0
		echo "the namespace's file does not hold what the guest wrote" >>"$log"
	fi
	grep -q "controller .*$NVME_NQN" "$log.target" || { ok=0; echo "the target logged no controller" >>"$log"; }
	stop_capture >>"$log" 2>&1 || { ok=0; echo "ICRC check failed" >>"$log"; }
	# Linux's host asks for remote invalidation on every I/O: the
	# completions must go as SEND_WITH_INV.
	local ops
	ops=$("$ICRC" -opcodes "$CAP" | grep "^$HOST opcodes:")
	echo "$ops" >>"$log"
	grep -q "RC_SEND_ONLY_WITH_INVALIDATE=" <<<"$ops" || { ok=0; echo "softrdma nvmet sent no SEND_WITH_INV" >>"$log"; }
	report "$name" $ok "$log"
	rm -f "$img"
}

nvme_linux_target() { # nvme_linux_target NAME
	local name=$1 log=$OUT/$1.log ok=1 share
	selected "$name" || return 0
	: >"$log"
	share=$($VM path vm1)
	capture "$name"
	cat >"$share/nvmet-setup.sh" <<EOF
set -ex
C=/sys/kernel/config/nvmet
# Set up once per boot: a port that serves the subsystem cannot be changed.
if [ -e \$C/ports/1/subsystems/$NVME_NQN ]; then echo TARGET-OK; exit 0; fi
rm -f /tmp/ns.img; truncate -s 64M /tmp/ns.img
[ -d \$C/subsystems/$NVME_NQN ] || mkdir \$C/subsystems/$NVME_NQN
echo 1 >\$C/subsystems/$NVME_NQN/attr_allow_any_host
[ -d \$C/subsystems/$NVME_NQN/namespaces/1 ] || mkdir \$C/subsystems/$NVME_NQN/namespaces/1
echo /tmp/ns.img >\$C/subsystems/$NVME_NQN/namespaces/1/device_path
echo 1 >\$C/subsystems/$NVME_NQN/namespaces/1/buffered_io
echo 1 >\$C/subsystems/$NVME_NQN/namespaces/1/enable
[ -d \$C/ports/1 ] || mkdir \$C/ports/1
echo rdma >\$C/ports/1/addr_trtype
echo ipv4 >\$C/ports/1/addr_adrfam
echo $GUEST >\$C/ports/1/addr_traddr
echo 4420 >\$C/ports/1/addr_trsvcid
[ -e \$C/ports/1/subsystems/$NVME_NQN ] || ln -s \$C/subsystems/$NVME_NQN \$C/ports/1/subsystems/$NVME_NQN
echo TARGET-OK
EOF
	$VM exec vm1 "bash /share/nvmet-setup.sh" >>"$log" 2>&1 || ok=0
	head -c 262144 /dev/urandom >"$OUT/$name.pattern"
	local nv="$VM nsexec timeout 120 $BIN nvme"
	local a="-t rdma -a $GUEST -s 4420 -w $HOST"
	{
		$nv discover $a &&
			$nv id-ctrl $a -n "$NVME_NQN" &&
			$nv id-ns $a -n "$NVME_NQN" --namespace-id 1 &&
			$nv write $a -n "$NVME_NQN" --start-block 100 --block-count 63 --data-size 262144 --data "$OUT/$name.pattern" &&
			$nv read $a -n "$NVME_NQN" --start-block 100 --block-count 63 --data-size 262144 --data "$OUT/$name.back" &&
			cmp "$OUT/$name.pattern" "$OUT/$name.back" && echo HOST-OK
	} >>"$log" 2>&1 || ok=0
	grep -q HOST-OK "$log" || ok=0
	grep -q "subnqn: *$NVME_NQN" "$log" || { ok=0; echo "discover did not list $NVME_NQN" >>"$log"; }
	# The guest's file holds the bytes at block 100: a file-backed nvmet
	# namespace takes its block size from the file system (tmpfs: 4096),
	# so look at both 4096- and 512-byte blocks.
	$VM exec vm1 "dd if=/tmp/ns.img of=/share/nvme-target-back bs=4096 skip=100 count=64 2>/dev/null; dd if=/tmp/ns.img of=/share/nvme-target-back512 bs=512 skip=100 count=512 2>/dev/null" >>"$log" 2>&1
	if [ $ok = 1 ] && ! cmp -s "$OUT/$name.pattern" "$share/nvme-target-back" && ! cmp -s "$OUT/$name.pattern" "$share/nvme-target-back512"; then
		ok=0
		echo "the guest's file does not hold what softrdma nvme wrote" >>"$log"
	fi
	stop_capture >>"$log" 2>&1 || { ok=0; echo "ICRC check failed" >>"$log"; }
	report "$name" $ok "$log"
}

nvme_linux_host nvme-linux-host
nvme_linux_target nvme-linux-target
$VM loss 2 >/dev/null
# Under loss, rxe's retransmission timeout (about a second with rdma_cm's
# defaults) makes a file system's many small writes slow in the TCG guest:
# the block device's data and the connection handshakes only.
nvme_linux_host nvme-loss-linux-host nofs
nvme_linux_target nvme-loss-linux-target
$VM loss 0 >/dev/null
