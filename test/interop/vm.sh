#!/usr/bin/env bash
# test/interop/vm.sh — the softrdma interop VM fixture.
#
# Boots small Linux VMs (Debian 12 kernel, busybox userland) that run the real
# Linux soft-RoCE driver (rdma_rxe) and the rdma-core / perftest tools, on a
# bridge inside a private network namespace, so that host-side tests can run
# softrdma against the real rxe. See README.md next to this file.
#
#   vm.sh build [--refresh]      fetch Debian packages, pack kernel + initramfs (cached)
#   vm.sh up [N]                 build if needed, boot N VMs (default 1), wait until rxe0 is ACTIVE
#   vm.sh exec [-b] VM CMD...    run CMD (a bash command line) in VM; -b: background, prints a job id
#   vm.sh wait VM JOB            collect a background job: prints its output, exits with its status
#   vm.sh kill VM JOB [SIG]      signal a (background) job's process group (default TERM)
#   vm.sh nsexec CMD...          run a host command inside the network namespace
#   vm.sh loss PCT [all|data]    drop PCT% of RoCEv2 (UDP 4791) frames on br0 (all: every IPv4 frame;
#                                data: RoCEv2 frames other than RC ACKNOWLEDGE); 0 = off
#   vm.sh status                 namespace and VM state
#   vm.sh selftest               rxe<->rxe checks across vm1/vm2 (after `up 2`)
#   vm.sh path VM|common         host path of a VM's share (/share in the guest) or of /common
#   vm.sh log VM                 print the VM's serial console log
#   vm.sh down                   stop the VMs (by PID) and delete the namespace
#
# Topology: namespace "softrdma-interop" holds bridge br0 = 10.77.0.1/24 (the
# host side, where softrdma runs via `nsexec`) and one tap per VM; VM i is
# "vm<i>" = 10.77.0.(1+i), MAC 52:54:00:77:00:(1+i in hex), rxe device rxe0 on
# eth0 (GID index 1 = the RoCEv2 IPv4 GID). For RoCEv2 over IPv6, `up` also
# gives br0 the ULA fd77::1/64 and vm<i> fd77::(1+i) (rxe0's GID index 2).
#
# Environment:
#   SOFTRDMA_VM_CACHE         package cache and build output (default /var/cache/softrdma-vm)
#   SOFTRDMA_VM_RUN           run dir: consoles, shares, pid files (default /tmp/softrdma-vm)
#   SOFTRDMA_VM_TIMEOUT       per-command timeout for exec/wait, seconds; 0 = none (default 120)
#   SOFTRDMA_VM_BOOT_TIMEOUT  how long `up` waits for all VMs (default 300)
#   SOFTRDMA_VM_ACCEL         qemu accelerator (default tcg; "kvm" where /dev/kvm works)
#   SOFTRDMA_VM_MEM           guest memory in MiB (default 768)
#   SOFTRDMA_VM_SMP           virtual CPUs per guest (default 1)
#
# Everything runs as root (namespaces, taps, apt-get). No traffic ever leaves
# the namespace: the VMs have only the tap NIC (-nodefaults, no user-mode net)
# and no default route.

set -euo pipefail

SELF=$(readlink -f "${BASH_SOURCE[0]}")
CACHE=${SOFTRDMA_VM_CACHE:-/var/cache/softrdma-vm}
RUN=${SOFTRDMA_VM_RUN:-/tmp/softrdma-vm}
TIMEOUT=${SOFTRDMA_VM_TIMEOUT:-120}
BOOT_TIMEOUT=${SOFTRDMA_VM_BOOT_TIMEOUT:-300}
ACCEL=${SOFTRDMA_VM_ACCEL:-tcg}
MEM=${SOFTRDMA_VM_MEM:-768}
SMP=${SOFTRDMA_VM_SMP:-1}

NS=softrdma-interop   # network namespace
BR=br0                # bridge inside it
NET=10.77.0           # /24; .1 = host side (br0), .(1+i) = vm<i>
NET6=fd77:           # ULA /64; ::1 = host side (br0), ::(1+i) = vm<i>
MAX_VMS=8

DEBS=$CACHE/debs      # downloaded .deb files
STAGE=$CACHE/stage    # all guest packages unpacked with dpkg -x
OUT=$CACHE/out        # vmlinuz, initrd.img, stamp
LOCK=$CACHE/packages.lock   # pinned "name=version" list of guest packages (see resolve_packages)

# Host tools we need, and the Debian package that provides each.
HOST_TOOLS="qemu-system-x86_64:qemu-system-x86 cpio:cpio depmod:kmod modprobe:kmod
readelf:binutils ip:iproute2 tc:iproute2 dpkg-deb:dpkg gzip:gzip ldconfig:libc-bin
xz:xz-utils nft:nftables tcpdump:tcpdump ping:iputils-ping"

# Guest packages (the kernel is added by resolve_packages). Their shared-library
# dependencies (Depends closure restricted to library packages) are added too;
# which files of them end up in the initramfs is decided by ELF NEEDED entries.
GUEST_PKGS="rdma-core libibverbs1 ibverbs-providers ibverbs-utils perftest rdmacm-utils
librdmacm1 iproute2 busybox-static bash libc6 libgcc-s1 nvme-cli"

# Kernel modules to load in the guest (their dependencies are resolved with
# modprobe --show-depends against the unpacked modules tree).
# crc32_generic: rxe computes the ICRC through the crypto API ("crc32"); without
# it `rdma link add` fails with ENOENT. crc32c_generic and crct10dif_generic
# serve ext4 and the block layer (NVMe-oF cases) where the CPU-specific
# versions cannot load. veth, bridge and the sch_* qdiscs build the congestion
# tests' namespaces (test/congestion): a shaped (htb/tbf) uplink that marks or
# drops (red, fq_codel).
GUEST_MODULES="virtio_pci virtio_net 9pnet_virtio 9p crc32_generic rdma_rxe ib_uverbs ib_umad
rdma_ucm sch_netem crc32c_generic crct10dif_generic nvme_rdma nvmet_rdma null_blk ext4
veth bridge sch_htb sch_red sch_fq_codel sch_tbf"

# Executables copied into the guest (globs relative to the unpacked packages);
# busybox provides everything else (mount, sleep, timeout, ...). /bin/sh is
# bash: busybox's ash prefers its own applets over $PATH, so under it `ip` or
# `tc` would be busybox's cut-down versions instead of iproute2's.
GUEST_BINS="bin/bash usr/bin/ibv_* usr/bin/ib_* usr/bin/raw_ethernet_* usr/bin/rping usr/bin/ucmatose
usr/bin/udaddy usr/bin/mckey usr/bin/rdma_client usr/bin/rdma_server usr/bin/rdma_xclient
usr/bin/rdma_xserver usr/bin/rstream usr/bin/riostream usr/bin/rcopy usr/bin/udpong
usr/bin/cmtime usr/bin/rdma sbin/ip sbin/tc sbin/bridge bin/ss usr/sbin/nvme"

# libibverbs provider drivers to install (config file + plugin library).
GUEST_PROVIDERS="rxe siw"

MULTIARCH=x86_64-linux-gnu

log() { printf 'vm.sh: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
need_root() { [ "$(id -u)" = 0 ] || die "must run as root"; }

usage() {
	echo "usage:" >&2
	sed -n '/^#   vm.sh/s/^#   /  /p' "$SELF" >&2
	exit 2
}

########################################################################
# build
########################################################################

# host_prereqs installs the host packages whose commands are missing.
host_prereqs() {
	local pkgs="" pair
	for pair in $HOST_TOOLS; do
		command -v "${pair%%:*}" >/dev/null 2>&1 || pkgs="$pkgs ${pair#*:}"
	done
	[ -n "$pkgs" ] || return 0
	# shellcheck disable=SC2086 # split the list on purpose
	pkgs=$(printf '%s\n' $pkgs | sort -u | tr '\n' ' ')
	log "installing host packages: $pkgs"
	apt-get update -qq >/dev/null || log "warning: apt-get update reported errors"
	local out
	# shellcheck disable=SC2086
	out=$(DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $pkgs 2>&1) ||
		{ printf '%s\n' "$out" >&2; die "apt-get install failed"; }
}

# apt_ready makes sure apt's package lists exist (fresh machines have none).
apt_ready() {
	apt-cache show --no-all-versions linux-image-amd64 >/dev/null 2>&1 && return 0
	log "apt-get update"
	apt-get update -qq >/dev/null || log "warning: apt-get update reported errors"
}

# lib_closure PKG... prints PKG... plus every library package (lib*, zlib1g)
# reachable through Depends/Pre-Depends.
lib_closure() {
	local -A seen=()
	local frontier=("$@") next p
	for p in "$@"; do seen[$p]=1; done
	while ((${#frontier[@]})); do
		next=()
		while read -r p; do
			[ -n "${seen[$p]:-}" ] && continue
			seen[$p]=1
			next+=("$p")
		done < <(apt-cache depends --no-recommends --no-suggests --no-conflicts \
			--no-breaks --no-replaces --no-enhances "${frontier[@]}" 2>/dev/null |
			awk '$1 ~ /^\|?(Pre)?Depends:$/ && $2 !~ /^</ { sub(/:any$/, "", $2); print $2 }' |
			grep -E '^(lib|zlib1g$)' | grep -vE '^(libc-bin|libc-l10n|libpam)' | sort -u)
		frontier=("${next[@]}")
	done
	printf '%s\n' "${!seen[@]}" | sort
}

# resolve_packages writes $LOCK: "name=version" for the guest kernel and all
# guest packages with their library closure. An existing lock is reused unless
# --refresh was given, so builds are reproducible and need no apt look-ups.
resolve_packages() {
	local refresh=$1 kpkg want
	# The lock remembers the package list it was resolved from: adding a
	# guest package resolves again.
	want="# $(echo $GUEST_PKGS)"
	if [ -s "$LOCK" ] && [ "$refresh" = 0 ] && [ "$(head -n1 "$LOCK")" = "$want" ]; then return 0; fi
	apt_ready
	kpkg=$(apt-cache depends linux-image-amd64 | awk '$1 == "Depends:" && $2 ~ /^linux-image-[0-9]/ { print $2; exit }')
	[ -n "$kpkg" ] || die "cannot resolve linux-image-amd64"
	# shellcheck disable=SC2086
	{
		echo "$want"
		{ echo "$kpkg"; lib_closure $GUEST_PKGS; } | sort -u |
			xargs apt-cache show --no-all-versions |
			awk '/^Package:/ { p = $2 } /^Version:/ { print p "=" $2 }' | sort -u
	} >"$LOCK.tmp"
	mv "$LOCK.tmp" "$LOCK"
	log "resolved $(($(wc -l <"$LOCK") - 1)) guest packages (kernel $kpkg) into $LOCK"
}

# deb_file NAME=VERSION prints the cached .deb path (empty if not downloaded).
deb_file() {
	local n=${1%%=*} v=${1#*=}
	v=${v//:/%3a}
	compgen -G "$DEBS/${n}_${v}_*.deb" | head -n1 || true
}

download_debs() {
	local missing=() e
	mkdir -p "$DEBS"
	while read -r e; do
		[ -n "$(deb_file "$e")" ] || missing+=("$e")
	done < <(grep -v "^#" "$LOCK")
	((${#missing[@]})) || return 0
	log "downloading ${#missing[@]} packages into $DEBS"
	apt_ready
	# apt drops privileges to _apt for downloads; let it write here.
	id _apt >/dev/null 2>&1 && chown _apt "$DEBS"
	(cd "$DEBS" && apt-get download -qq "${missing[@]}" >/dev/null)
	for e in "${missing[@]}"; do [ -n "$(deb_file "$e")" ] || die "download of $e failed"; done
}

# unpack_debs extracts all locked packages into $STAGE (once per lock) and
# generates modules.dep for the unpacked kernel.
unpack_debs() {
	local want e
	want=$(sha256sum <"$LOCK" | cut -c1-16)
	[ "$(cat "$STAGE/.stamp" 2>/dev/null)" = "$want" ] && return 0
	log "unpacking packages into $STAGE"
	rm -rf "$STAGE"
	mkdir -p "$STAGE"
	while read -r e; do dpkg-deb -x "$(deb_file "$e")" "$STAGE"; done < <(grep -v "^#" "$LOCK")
	depmod -b "$STAGE" "$(stage_kver)"
	echo "$want" >"$STAGE/.stamp"
}

stage_kver() { find "$STAGE/lib/modules" -mindepth 1 -maxdepth 1 -printf '%f\n' | sort | head -n1; }

# stage_deref PATH follows symlinks inside $STAGE (absolute targets are taken
# relative to $STAGE, not to the host) and prints the final path below $STAGE.
stage_deref() {
	local p=$1 t n=0
	while [ -L "$STAGE/$p" ] && [ $n -lt 40 ]; do
		t=$(readlink "$STAGE/$p")
		case $t in
		/*) p=${t#/} ;;
		*) p=$(dirname "$p")/$t ;;
		esac
		n=$((n + 1))
	done
	[ -e "$STAGE/$p" ] || return 1
	printf '%s\n' "$p"
}

# stage_find_lib SONAME prints the path (below $STAGE) of a shared library.
stage_find_lib() {
	local d
	for d in lib/$MULTIARCH usr/lib/$MULTIARCH lib64 usr/lib64 lib usr/lib; do
		if [ -e "$STAGE/$d/$1" ] || [ -L "$STAGE/$d/$1" ]; then
			stage_deref "$d/$1" && return 0
		fi
	done
	return 1
}

# assemble_initramfs builds $1 (a directory) as the guest root file system.
# Layout is merged-/usr: /bin, /sbin, /lib, /lib64 are symlinks into /usr.
assemble_initramfs() {
	local R=$1 kver f b dst rel so p n
	kver=$(stage_kver)
	rm -rf "$R"
	mkdir -p "$R"/usr/{bin,sbin,lib/$MULTIARCH/libibverbs,lib64} \
		"$R"/{proc,sys,dev,tmp,run,share,common,root,mnt,etc/libibverbs.d,etc/softrdma,var/tmp}
	ln -s usr/bin "$R/bin"
	ln -s usr/sbin "$R/sbin"
	ln -s usr/lib "$R/lib"
	ln -s usr/lib64 "$R/lib64"

	# busybox and its applet links (package binaries below replace some).
	cp "$STAGE/bin/busybox" "$R/usr/bin/busybox"
	for a in $("$R/usr/bin/busybox" --list-full); do
		case $a in */*) ;; *) continue ;; esac
		dst=$R/usr/${a#usr/}
		[ -e "$dst" ] || ln -s /usr/bin/busybox "$dst"
	done

	# ELF executables from the packages; libraries follow from NEEDED.
	local queue=()
	for f in $GUEST_BINS; do
		for p in "$STAGE"/$f; do
			[ -f "$p" ] || continue
			head -c4 "$p" | grep -q ELF || continue
			b=${p#"$STAGE"/}
			case $b in bin/* | usr/bin/*) dst=$R/usr/bin/${b##*/} ;; *) dst=$R/usr/sbin/${b##*/} ;; esac
			rm -f "$dst" # may be a busybox link: never write through it
			cp -L "$p" "$dst"
			queue+=("$dst")
		done
	done

	ln -sf bash "$R/usr/bin/sh"

	# libibverbs providers: config file + plugin (the plugin is dlopen()ed).
	for n in $GUEST_PROVIDERS; do
		cp "$STAGE/etc/libibverbs.d/$n.driver" "$R/etc/libibverbs.d/"
		p=$(stage_deref "usr/lib/$MULTIARCH/libibverbs/lib$n-rdmav34.so") || die "no provider $n"
		cp "$STAGE/$p" "$R/usr/lib/$MULTIARCH/libibverbs/lib$n-rdmav34.so"
		queue+=("$R/usr/lib/$MULTIARCH/libibverbs/lib$n-rdmav34.so")
	done

	# libgcc_s: glibc dlopen()s it to unwind threads in pthread_exit and
	# pthread_cancel; without it rping aborts when its CM thread exits.
	p=$(stage_find_lib libgcc_s.so.1) || die "no libgcc_s.so.1"
	cp "$STAGE/$p" "$R/usr/lib/$MULTIARCH/libgcc_s.so.1"

	# The dynamic loader (PT_INTERP /lib64/ld-linux-x86-64.so.2).
	p=$(stage_find_lib ld-linux-x86-64.so.2) || die "no ld.so"
	cp "$STAGE/$p" "$R/usr/lib/$MULTIARCH/ld-linux-x86-64.so.2"
	ln -s ../lib/$MULTIARCH/ld-linux-x86-64.so.2 "$R/usr/lib64/ld-linux-x86-64.so.2"

	# Transitive NEEDED closure, all libraries into /usr/lib/<multiarch>.
	local unresolved=""
	while ((${#queue[@]})); do
		f=${queue[0]}
		queue=("${queue[@]:1}")
		for so in $(readelf -d "$f" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
			[ -e "$R/usr/lib/$MULTIARCH/$so" ] && continue
			if p=$(stage_find_lib "$so"); then
				cp "$STAGE/$p" "$R/usr/lib/$MULTIARCH/$so"
				queue+=("$R/usr/lib/$MULTIARCH/$so")
			else
				unresolved="$unresolved $so(${f##*/})"
			fi
		done
	done
	[ -z "$unresolved" ] || die "unresolved shared libraries:$unresolved"
	echo "/usr/lib/$MULTIARCH" >"$R/etc/ld.so.conf"
	ldconfig -r "$R"

	# Kernel modules: dependency-ordered insmod list + a depmod'ed subset so
	# that busybox modprobe (and the kernel's request_module) also work.
	local order=()
	for n in $GUEST_MODULES; do
		while read -r kw p _; do
			[ "$kw" = insmod ] || continue
			rel=${p#"$STAGE/lib/modules/$kver/"}
			case " ${order[*]:-} " in *" $rel "*) continue ;; esac
			# CPU-specific crypto (PCLMUL, SSE4.2 CRC) does not load on
			# qemu's TCG CPU; the *_generic modules listed above serve.
			case $rel in kernel/arch/x86/crypto/*) continue ;; esac
			order+=("$rel")
		done < <(modprobe -d "$STAGE" -S "$kver" --show-depends "$n")
	done
	for rel in "${order[@]}"; do
		mkdir -p "$R/usr/lib/modules/$kver/$(dirname "$rel")"
		cp "$STAGE/lib/modules/$kver/$rel" "$R/usr/lib/modules/$kver/$rel"
	done
	cp "$STAGE/lib/modules/$kver"/modules.{builtin,builtin.modinfo,order} "$R/usr/lib/modules/$kver/"
	depmod -b "$R" "$kver"
	printf '%s\n' "${order[@]}" >"$R/etc/softrdma/modules"

	# Small /etc: users, name resolution (vm<i> and host), the init + agent.
	printf 'root:x:0:0:root:/root:/bin/sh\n' >"$R/etc/passwd"
	printf 'root:x:0:\n' >"$R/etc/group"
	printf 'hosts: files\npasswd: files\ngroup: files\n' >"$R/etc/nsswitch.conf"
	{
		echo "127.0.0.1 localhost"
		echo "$NET.1 host"
		for ((n = 1; n <= MAX_VMS; n++)); do echo "$NET.$((1 + n)) vm$n"; done
	} >"$R/etc/hosts"
	guest_init >"$R/init"
	chmod 755 "$R/init"
}

# guest_init prints /init, the guest's PID 1 (busybox sh).
guest_init() {
	cat <<'EOF'
#!/bin/sh
# softrdma interop guest init (PID 1, bash); generated by test/interop/vm.sh build.
export PATH=/usr/sbin:/usr/bin HOME=/root
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
ln -s /proc/self/fd /dev/fd

say() { echo "softrdma-vm: $*"; }
uptime_s() { read -r u _ </proc/uptime; echo "$u"; }
ERR=""
fail() { ERR="$ERR $*;"; say "ERROR: $*"; }

# Parameters from the kernel command line: softrdma.name=vm1 softrdma.ip=10.77.0.2/24
NAME=vm IP=""
for a in $(cat /proc/cmdline); do
	case $a in
	softrdma.name=*) NAME=${a#*=} ;;
	softrdma.ip=*) IP=${a#*=} ;;
	esac
done
hostname "$NAME"
T_INIT=$(uptime_s)
say "init started at ${T_INIT}s name=$NAME ip=$IP"

# Kernel modules, dependencies first (order computed at build time).
KDIR=/lib/modules/$(uname -r)
while read -r m; do insmod "$KDIR/$m" || fail "insmod $m"; done </etc/softrdma/modules

# configfs, where nvmet is set up; the NVMe host's identity for nvme-cli.
mount -t configfs configfs /sys/kernel/config 2>/dev/null || true
mkdir -p /etc/nvme
U=$(cat /proc/sys/kernel/random/uuid)
echo "nqn.2014-08.org.nvmexpress:uuid:$U" >/etc/nvme/hostnqn
echo "$U" >/etc/nvme/hostid

# Network: eth0 is the virtio NIC on the namespace bridge.
ip link set lo up
ip addr add "$IP" dev eth0 && ip link set eth0 up || fail "eth0 setup"

# Shares: /share is this VM's own directory on the host, /common is shared by all VMs.
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 share /share || fail "mount /share"
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 common /common || fail "mount /common"

# Soft-RoCE on eth0, then wait for the port to become ACTIVE.
T_RXE=$(uptime_s)
rdma link add rxe0 type rxe netdev eth0 || fail "rdma link add"
i=0
until grep -q ACTIVE /sys/class/infiniband/rxe0/ports/1/state 2>/dev/null; do
	i=$((i + 1))
	[ $i -gt 300 ] && { fail "rxe0 port not ACTIVE after 60s"; break; }
	sleep 0.2
done
# Confirm through userspace (libibverbs + rxe provider).
ibv_devinfo -d rxe0 | grep -q PORT_ACTIVE || fail "ibv_devinfo -d rxe0 does not show PORT_ACTIVE"
T_ACTIVE=$(uptime_s)

A=/share/.agent
mkdir -p $A/new $A/run $A/tmp
{
	echo "name=$NAME"
	echo "ip=$IP"
	echo "kernel=$(uname -r)"
	echo "uptime_init=$T_INIT"
	echo "uptime_rxe_add=$T_RXE"
	echo "uptime_active=$T_ACTIVE"
	echo "status=${ERR:-ok}"
} >$A/ready.tmp && mv $A/ready.tmp $A/ready
if [ -z "$ERR" ]; then
	say "READY name=$NAME ip=$IP active_at=${T_ACTIVE}s"
else
	say "FAILED:$ERR"
fi

# run_job DIR: run DIR/cmd with bash (by path: busybox tools would exec their
# own applets) in /share, as the leader of its own process group (pid in
# DIR/pid, for `vm.sh kill`); stdout/stderr to files; exit status last,
# atomically, to DIR/rc. With DIR/timeout > 0 seconds, a watcher sends the
# whole group SIGTERM when it expires and SIGKILL 5 s later (busybox timeout
# would signal only the top process and leave e.g. a server behind).
run_job() {
	d=$1
	t=0
	[ -f "$d/timeout" ] && read -r t <"$d/timeout"
	cd /share || return
	setsid /bin/bash "$d/cmd" >"$d/stdout" 2>"$d/stderr" </dev/null &
	pid=$!
	echo "$pid" >"$d/pid"
	w=""
	if [ "$t" -gt 0 ] 2>/dev/null; then
		# `read -t` on the tick FIFO (fd 9, never written) sleeps without a child process.
		(
			read -r -t "$t" -u 9 _
			kill -TERM -- "-$pid"
			read -r -t 5 -u 9 _
			kill -KILL -- "-$pid"
		) 2>/dev/null &
		w=$!
	fi
	wait "$pid"
	rc=$?
	[ -n "$w" ] && kill "$w" 2>/dev/null
	echo "$rc" >"$d/rc.tmp"
	mv "$d/rc.tmp" "$d/rc"
}

# The agent: the host drops job directories into $A/new (atomically, by
# rename); each is moved to $A/run and started in the background. Polling is
# 0.1 s while jobs come in, backing off to 0.5 s after 10 s without any (an
# idle VM then costs a few % of a host core under TCG). `read -t` on a FIFO
# that never gets data sleeps without forking.
mkfifo /run/agent.tick
exec 9<>/run/agent.tick
idle=0
while :; do
	for d in $A/new/*; do
		[ -d "$d" ] || continue
		j=$A/run/${d##*/}
		mv "$d" "$j" || continue
		run_job "$j" &
		idle=0
	done
	if [ $idle -lt 100 ]; then
		idle=$((idle + 1))
		read -r -t 0.1 -u 9 _ || true
	else
		read -r -t 0.5 -u 9 _ || true
	fi
done
EOF
}

# extract_vmlinux BZIMAGE OUT: decompress the ELF vmlinux out of a bzImage
# (Debian's is xz-compressed). qemu boots an ELF kernel with a PVH entry note
# directly, which skips the real-mode setup and, above all, the in-guest xz
# decompression: about 5 s of every TCG boot. Fails if there is no PVH note.
extract_vmlinux() {
	local off
	off=$(LC_ALL=C grep -abo $'\xfd7zXZ' "$1" | head -n1 | cut -d: -f1)
	[ -n "$off" ] || return 1
	tail -c +$((off + 1)) "$1" | xz -dc --single-stream >"$2.tmp" 2>/dev/null || true
	# XEN_ELFNOTE_PHYS32_ENTRY (18) marks the PVH entry point.
	if readelf -n "$2.tmp" 2>/dev/null | grep -q 'Xen.*(0x00000012)'; then
		mv "$2.tmp" "$2"
	else
		rm -f "$2.tmp"
		return 1
	fi
}

cmd_build() {
	need_root
	local refresh=0 t0=$SECONDS key R
	[ "${1:-}" = --refresh ] && refresh=1
	host_prereqs
	mkdir -p "$CACHE"
	resolve_packages "$refresh"
	# The build output is keyed by the package lock and the build recipe.
	key=$({
		cat "$LOCK"
		declare -f assemble_initramfs guest_init stage_deref stage_find_lib extract_vmlinux
		echo "$GUEST_MODULES $GUEST_BINS $GUEST_PROVIDERS $NET $MAX_VMS"
	} | sha256sum | cut -c1-16)
	if [ -f "$OUT/initrd.img" ] && [ -f "$OUT/vmlinuz" ] &&
		[ "$(cat "$OUT/stamp" 2>/dev/null)" = "$key" ]; then
		log "build is up to date ($OUT, $((SECONDS - t0))s)"
		return 0
	fi
	download_debs
	unpack_debs
	R=$CACHE/initramfs.root
	log "assembling initramfs"
	assemble_initramfs "$R"
	mkdir -p "$OUT"
	(cd "$R" && find . -print0 | LC_ALL=C sort -z | cpio --null -o -H newc -R 0:0 --quiet) |
		gzip -6 >"$OUT/initrd.img.tmp"
	mv "$OUT/initrd.img.tmp" "$OUT/initrd.img"
	cp "$STAGE/boot/vmlinuz-$(stage_kver)" "$OUT/vmlinuz"
	rm -f "$OUT/vmlinux"
	extract_vmlinux "$OUT/vmlinuz" "$OUT/vmlinux" ||
		log "warning: no PVH vmlinux could be extracted; VMs boot the slower bzImage"
	echo "$key" >"$OUT/stamp"
	log "built $OUT/vmlinuz ($(stage_kver)) and initrd.img ($(du -h "$OUT/initrd.img" | cut -f1)) in $((SECONDS - t0))s"
}

########################################################################
# VMs
########################################################################

vm_dir() { echo "$RUN/$1"; }
# kv FILE KEY prints the value of KEY=... in FILE (never sourced: guest data).
kv() { sed -n "s/^$2=//p" "$1" | head -n1; }
vm_share() { echo "$RUN/$1/share"; }

# check_vm NAME: NAME must be vm<i> with a running qemu.
check_vm() {
	[[ $1 =~ ^vm[1-9][0-9]*$ ]] || die "bad VM name '$1' (want vm1, vm2, ...)"
	vm_alive "$1" || die "$1 is not running (vm.sh up?)"
}

vm_pid() { cat "$RUN/$1/qemu.pid" 2>/dev/null || true; }

vm_alive() {
	local pid
	pid=$(vm_pid "$1")
	[ -n "$pid" ] && kill -0 "$pid" 2>/dev/null &&
		grep -q qemu "/proc/$pid/cmdline" 2>/dev/null
}

vm_names() {
	local d
	for d in "$RUN"/vm*; do [ -d "$d" ] && echo "${d##*/}"; done | sort -V
}

setup_ns() {
	if ! ip netns list | grep -qw "$NS"; then
		ip netns add "$NS"
	fi
	ip -n "$NS" link set lo up
	if ! ip -n "$NS" link show "$BR" >/dev/null 2>&1; then
		# A fixed MAC: a bridge otherwise takes its lowest port's MAC,
		# and its IPv6 link-local address (made from the first MAC) would
		# no longer be the GID made from its MAC (GID index 0).
		ip -n "$NS" link add "$BR" address 52:54:00:77:00:01 type bridge
		ip -n "$NS" addr add "$NET.1/24" dev "$BR"
	fi
	ip -n "$NS" link set "$BR" up
}

# start_vm I: create tap<I> and boot vm<I> (qemu daemonizes; pid in qemu.pid).
start_vm() {
	local i=$1 name=vm$1 d mac kernel=$OUT/vmlinuz
	d=$(vm_dir "$name")
	[ -f "$OUT/vmlinux" ] && kernel=$OUT/vmlinux # PVH entry: boots ~5 s faster
	rm -rf "$d"
	mkdir -p "$d/share/.agent"/{new,run,tmp} "$RUN/common"
	mac=$(printf '52:54:00:77:00:%02x' $((1 + i)))
	ip -n "$NS" link del "tap$i" >/dev/null 2>&1 || true
	ip -n "$NS" tuntap add dev "tap$i" mode tap
	ip -n "$NS" link set "tap$i" master "$BR" up
	ip netns exec "$NS" qemu-system-x86_64 \
		-name "$name" -accel "$ACCEL" -smp "$SMP" -m "$MEM" \
		-nodefaults -display none -no-reboot -monitor none \
		-kernel "$kernel" -initrd "$OUT/initrd.img" \
		-append "console=ttyS0 panic=-1 loglevel=4 softrdma.name=$name softrdma.ip=$NET.$((1 + i))/24" \
		-serial "file:$d/console.log" \
		-netdev "tap,id=net0,ifname=tap$i,script=no,downscript=no" \
		-device "virtio-net-pci,netdev=net0,mac=$mac,romfile=" \
		-virtfs "local,path=$d/share,mount_tag=share,security_model=none,id=share" \
		-virtfs "local,path=$RUN/common,mount_tag=common,security_model=none,id=common" \
		-daemonize -pidfile "$d/qemu.pid" >"$d/qemu.out" 2>&1 ||
		{ cat "$d/qemu.out" >&2; die "qemu failed to start $name"; }
	date +%s.%N >"$d/started"
}

cmd_up() {
	need_root
	local n=${1:-1} i name t0 pending ready now
	if ! [[ $n =~ ^[1-9][0-9]*$ ]] || [ "$n" -gt $MAX_VMS ]; then die "up: N must be 1..$MAX_VMS"; fi
	for name in $(vm_names); do
		vm_alive "$name" && die "$name is already running; run: vm.sh down"
	done
	cmd_build # a no-op (well under a second) when the cached build is current
	case $RUN in /*/*) ;; *) die "SOFTRDMA_VM_RUN=$RUN: want an absolute path at least two levels deep" ;; esac
	rm -rf "$RUN"/vm[0-9]*   # old consoles and shares; $RUN/common is kept
	mkdir -p "$RUN/common"
	setup_ns
	t0=$(date +%s.%N)
	for ((i = 1; i <= n; i++)); do start_vm "$i"; done
	log "booting $n VM(s) (accel=$ACCEL, ${MEM} MiB), waiting up to ${BOOT_TIMEOUT}s for rxe0 ACTIVE"
	pending=$n
	declare -A done_=()
	while ((pending > 0)); do
		for ((i = 1; i <= n; i++)); do
			name=vm$i
			[ -n "${done_[$name]:-}" ] && continue
			ready=$(vm_share "$name")/.agent/ready
			if [ -f "$ready" ]; then
				done_[$name]=1
				pending=$((pending - 1))
				now=$(date +%s.%N)
				printf 'vm.sh: %s ready: %s on %s, host wall %.1fs; guest uptime: init %ss, rxe0 added %ss, ACTIVE %ss; status=%s\n' \
					"$name" "$(kv "$ready" ip)" "$(kv "$ready" kernel)" "$(awk "BEGIN{print $now - $t0}")" \
					"$(kv "$ready" uptime_init)" "$(kv "$ready" uptime_rxe_add)" \
					"$(kv "$ready" uptime_active)" "$(kv "$ready" status)" >&2
				[ "$(kv "$ready" status)" = ok ] || die "$name came up with errors (see $(vm_dir "$name")/console.log)"
			elif ! vm_alive "$name"; then
				tail -n 30 "$(vm_dir "$name")/console.log" >&2 || true
				die "$name exited during boot"
			elif grep -q 'softrdma-vm: FAILED' "$(vm_dir "$name")/console.log" 2>/dev/null; then
				tail -n 30 "$(vm_dir "$name")/console.log" >&2
				die "$name failed during boot"
			fi
		done
		((pending > 0)) || break
		if awk "BEGIN{exit !($(date +%s.%N) - $t0 > $BOOT_TIMEOUT)}"; then
			for ((i = 1; i <= n; i++)); do
				[ -n "${done_[vm$i]:-}" ] || { log "vm$i console tail:"; tail -n 20 "$(vm_dir "vm$i")/console.log" >&2 || true; }
			done
			die "timeout after ${BOOT_TIMEOUT}s waiting for VMs (vm.sh down to clean up)"
		fi
		sleep 0.5
	done
	log "all $n VM(s) ready in $(awk "BEGIN{printf \"%.1f\", $(date +%s.%N) - $t0}")s"
	# IPv6 (nodad: usable at once); rxe adds each address to its GID table.
	# Then wait out duplicate address detection of the link-local
	# addresses (GID index 0), which cannot send while tentative.
	ip -n "$NS" -6 addr replace "$NET6:1/64" dev "$BR" nodad
	for ((i = 1; i <= n; i++)); do
		cmd_exec "vm$i" "ip -6 addr add $NET6:$((1 + i))/64 dev eth0 nodad &&
			for k in \$(seq 50); do ip -6 addr show dev eth0 tentative | grep -q inet6 || exit 0; sleep 0.2; done; exit 1" ||
			die "vm$i: adding $NET6:$((1 + i)), or its link-local address stayed tentative"
	done
	for ((i = 0; i < 50; i++)); do
		ip -n "$NS" -6 addr show dev "$BR" tentative | grep -q inet6 || break
		sleep 0.2
	done
}

cmd_down() {
	need_root
	local name pid k
	for name in $(vm_names); do
		pid=$(vm_pid "$name")
		if vm_alive "$name"; then
			kill "$pid" 2>/dev/null || true
			for ((k = 0; k < 50; k++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
			if kill -0 "$pid" 2>/dev/null; then kill -9 "$pid" 2>/dev/null || true; fi
			log "stopped $name (pid $pid)"
		fi
		rm -f "$RUN/$name/qemu.pid"
	done
	if ip netns list | grep -qw "$NS"; then
		ip netns del "$NS"
		log "deleted namespace $NS"
	fi
}

cmd_status() {
	local name pid st
	if ip netns list | grep -qw "$NS"; then
		echo "namespace $NS: present ($BR $(ip -n "$NS" -br addr show "$BR" 2>/dev/null | awk '{print $3}'))"
	else
		echo "namespace $NS: absent"
	fi
	[ -f "$OUT/stamp" ] && echo "build: $OUT ($(cat "$OUT/stamp"))" || echo "build: none (vm.sh build)"
	for name in $(vm_names); do
		pid=$(vm_pid "$name")
		if vm_alive "$name"; then
			st="running pid $pid"
			if [ -f "$(vm_share "$name")/.agent/ready" ]; then
				st="$st, ready ($(grep -h '^status=' "$(vm_share "$name")/.agent/ready"))"
			else
				st="$st, booting"
			fi
		else
			st="stopped"
		fi
		echo "$name: $st; ip $NET.$((1 + ${name#vm})); console $(vm_dir "$name")/console.log; share $(vm_share "$name")"
	done
}

# new_job VM CMD: queue CMD for the guest agent; prints the job id.
new_job() {
	local vm=$1 cmd=$2 a id
	a=$(vm_share "$vm")/.agent
	[ -f "$a/ready" ] || die "$vm is not ready"
	id=j$(date +%s%N | cut -c6-16)$RANDOM
	mkdir "$a/tmp/$id"
	printf '%s\n' "$cmd" >"$a/tmp/$id/cmd"
	echo "$TIMEOUT" >"$a/tmp/$id/timeout"
	date +%s >"$a/tmp/$id/submitted"
	mv "$a/tmp/$id" "$a/new/$id"
	echo "$id"
}

# collect VM JOB: wait for the job's exit status, print its output, remove it.
collect() {
	local vm=$1 id=$2 d deadline rc
	d=$(vm_share "$vm")/.agent/run/$id
	# new/ first: the guest's agent moves a job from new/ to run/, and
	# looking in run/ first misses a job that moves between the looks.
	[ -d "$(vm_share "$vm")/.agent/new/$id" ] || [ -d "$d" ] || die "$vm: no such job $id"
	deadline=$((SECONDS + TIMEOUT + 15))
	while [ ! -f "$d/rc" ]; do
		if [ "$TIMEOUT" -gt 0 ] && [ $SECONDS -gt $deadline ]; then
			log "$vm: job $id did not finish within ${TIMEOUT}s; killing it"
			if [ -f "$d/pid" ]; then cmd_kill "$vm" "$id" KILL || true; fi
			cat "$d/stdout" 2>/dev/null || true
			cat "$d/stderr" >&2 2>/dev/null || true
			return 124
		fi
		vm_alive "$vm" || die "$vm died while running job $id"
		sleep 0.1
	done
	cat "$d/stdout"
	cat "$d/stderr" >&2
	rc=$(cat "$d/rc")
	if [ "$rc" = 143 ] && [ -f "$d/killed" ]; then
		log "$vm: job $id ended by vm.sh kill"
	elif [ "$rc" = 143 ] && [ "$(cat "$d/timeout")" -gt 0 ] &&
		[ $(($(date +%s) - $(cat "$d/submitted"))) -ge "$(cat "$d/timeout")" ]; then
		log "$vm: job $id timed out after $(cat "$d/timeout")s (SOFTRDMA_VM_TIMEOUT); the guest sent its process group SIGTERM"
		rc=124
	fi
	[ -n "${SOFTRDMA_VM_KEEP:-}" ] || rm -rf "$d"
	return "$rc"
}

cmd_exec() {
	need_root
	local bg=0 vm id d k
	if [ "${1:-}" = -b ]; then bg=1; shift; fi
	[ $# -ge 2 ] || die "usage: vm.sh exec [-b] VM CMD..."
	vm=$1
	shift
	check_vm "$vm"
	id=$(new_job "$vm" "$*")
	if [ $bg = 1 ]; then
		# Return once the guest has started the job (its pid file exists).
		d=$(vm_share "$vm")/.agent/run/$id
		for ((k = 0; k < 300; k++)); do [ -s "$d/pid" ] && break; sleep 0.1; done
		[ -s "$d/pid" ] || die "$vm: agent did not start job $id"
		echo "$id"
		return 0
	fi
	collect "$vm" "$id"
}

cmd_wait() {
	need_root
	[ $# = 2 ] || die "usage: vm.sh wait VM JOB"
	check_vm "$1"
	collect "$1" "$2"
}

cmd_kill() {
	need_root
	[ $# -ge 2 ] || die "usage: vm.sh kill VM JOB [SIGNAL]"
	local vm=$1 id=$2 sig=${3:-TERM} pid
	local TIMEOUT=15 # for the little kill job below (dynamic scope)
	check_vm "$vm"
	pid=$(cat "$(vm_share "$vm")/.agent/run/$id/pid" 2>/dev/null) || die "$vm: job $id not running"
	# The job leads its own process group: signal the whole group.
	touch "$(vm_share "$vm")/.agent/run/$id/killed"
	collect "$vm" "$(new_job "$vm" "kill -$sig -- -$pid 2>/dev/null || true")" >/dev/null
}

cmd_nsexec() {
	need_root
	[ $# -ge 1 ] || die "usage: vm.sh nsexec CMD..."
	ip netns list | grep -qw "$NS" || die "namespace $NS does not exist (vm.sh up)"
	exec ip netns exec "$NS" "$@"
}

# cmd_loss PCT [all|data]: drop PCT% of frames crossing br0 with nftables
# (the host kernel has no sch_netem). Covers VM<->VM (bridge forward) and
# host<->VM (bridge input/output) in both directions. data spares RC
# ACKNOWLEDGE packets (BTH opcode 0x11, the first byte after the UDP
# header): for tools with no closing handshake, whose last ACK lost means
# a peer that retries into a QP already destroyed.
cmd_loss() {
	need_root
	[ $# -ge 1 ] || die "usage: vm.sh loss PCT [all|data]"
	local pct=$1 what=${2:-roce} n match
	ip netns list | grep -qw "$NS" || die "namespace $NS does not exist (vm.sh up)"
	ip netns exec "$NS" nft delete table bridge softrdma_loss 2>/dev/null || true
	n=$(awk -v p="$pct" 'BEGIN { if (p !~ /^[0-9.]+$/ || p > 100) exit 1; printf "%d", p * 100 + 0.5 }') ||
		die "loss: PCT must be a number 0..100"
	[ "$n" -gt 0 ] || { log "loss: off"; return 0; }
	case $what in
	roce) match="udp dport 4791" ;;
	all) match="meta protocol ip" ;;
	data) match="udp dport 4791 @th,64,8 != 0x11" ;;
	*) die "loss: second argument must be 'all', 'data' or absent" ;;
	esac
	ip netns exec "$NS" nft -f - <<EOF
table bridge softrdma_loss {
	chain drop_forward { type filter hook forward priority 0; $match numgen random mod 10000 < $n counter drop; }
	chain drop_input { type filter hook input priority 0; $match numgen random mod 10000 < $n counter drop; }
	chain drop_output { type filter hook output priority 0; $match numgen random mod 10000 < $n counter drop; }
}
EOF
	local desc=${what/roce/RoCEv2 (UDP 4791)}
	desc=${desc/data/RoCEv2 (UDP 4791) non-ACK}
	log "loss: dropping $pct% of $desc frames on $BR (counters: vm.sh nsexec nft list table bridge softrdma_loss)"
}

# cmd_selftest: rxe against rxe across vm1 and vm2 (needs `up 2`), plus
# host<->guest reachability. Prints one line per check and a summary.
cmd_selftest() {
	need_root
	local pass=0 fail=0 j out
	check_vm vm1
	check_vm vm2
	check() { # check NAME CMD...: run CMD, count the result
		local name=$1
		shift
		if out=$("$@" 2>&1); then
			pass=$((pass + 1))
			printf 'ok   %s\n' "$name"
		else
			fail=$((fail + 1))
			printf 'FAIL %s\n%s\n' "$name" "$out" | sed '2,$s/^/     /'
		fi
	}
	check "namespace -> vm1 ping" ip netns exec "$NS" ping -c1 -W5 "$NET.2"
	check "vm2 -> vm1 ping" cmd_exec vm2 "ping -c1 -W5 vm1"
	check "vm1 rxe0 PORT_ACTIVE" cmd_exec vm1 "ibv_devinfo -d rxe0 | grep -q PORT_ACTIVE"
	pair() { # pair NAME SERVER-CMD: server on vm1 (background), client on vm2
		local name=$1 srv=$2 k
		j=$(cmd_exec -b vm1 "$srv") || return 1
		for ((k = 0; k < 20; k++)); do # until the server listens on TCP 18515
			cmd_exec vm1 "grep -qE '^ *[0-9]+: [0-9A-F]+:4853 [0-9A-F]+:0000 0A' /proc/net/tcp /proc/net/tcp6" && break
			sleep 0.2
		done
		cmd_exec vm2 "$srv vm1" && collect vm1 "$j"
	}
	check "ibv_rc_pingpong vm2 -> vm1" pair rc "ibv_rc_pingpong -d rxe0 -g 1 -n 5"
	check "ibv_ud_pingpong vm2 -> vm1" pair ud "ibv_ud_pingpong -d rxe0 -g 1 -n 5"
	check "ib_write_bw vm2 -> vm1" pair wbw "ib_write_bw -d rxe0 -x 1 -s 4096 -n 20 -F"
	check "ib_read_lat vm2 -> vm1" pair rlat "ib_read_lat -d rxe0 -x 1 -n 20 -F"
	check "hw_counters rcvd_pkts > 0" cmd_exec vm1 \
		"[ \$(cat /sys/class/infiniband/rxe0/ports/1/hw_counters/rcvd_pkts) -gt 0 ]"
	check "rdma statistic" cmd_exec vm1 "rdma statistic show link rxe0/1 | grep -q sent_pkts"
	# A hand-made RoCEv2 packet from the namespace: counted by rxe with a good
	# ICRC, dropped with a bad one.
	if command -v python3 >/dev/null; then
		probe() { # probe good|bad EXPECTED-INCREMENT
			local c0 c1 f=/sys/class/infiniband/rxe0/ports/1/hw_counters/rcvd_pkts
			c0=$(cmd_exec vm1 "cat $f") &&
				ip netns exec "$NS" python3 "$(dirname "$SELF")/roce_probe.py" "$NET.2" "$1" &&
				sleep 0.5 && c1=$(cmd_exec vm1 "cat $f") &&
				{ [ $((c1 - c0)) = "$2" ] || { echo "rcvd_pkts $c0 -> $c1, want +$2"; false; }; }
		}
		check "namespace -> vm1 RoCEv2 packet, good ICRC, counted" probe good 1
		check "namespace -> vm1 RoCEv2 packet, bad ICRC, dropped" probe bad 0
	else
		echo "skip RoCEv2 probe (no python3)"
	fi
	echo "selftest: $pass passed, $fail failed"
	[ "$fail" = 0 ]
}

cmd_path() {
	[ $# = 1 ] || die "usage: vm.sh path VM|common"
	if [ "$1" = common ]; then echo "$RUN/common"; else vm_share "$1"; fi
}

cmd_log() {
	[ $# = 1 ] || die "usage: vm.sh log VM"
	cat "$(vm_dir "$1")/console.log"
}

main() {
	[ $# -ge 1 ] || usage
	local c=$1
	shift
	case $c in
	build) cmd_build "$@" ;;
	up) cmd_up "$@" ;;
	down) cmd_down "$@" ;;
	status) cmd_status "$@" ;;
	exec) cmd_exec "$@" ;;
	wait) cmd_wait "$@" ;;
	kill) cmd_kill "$@" ;;
	nsexec) cmd_nsexec "$@" ;;
	loss) cmd_loss "$@" ;;
	selftest) cmd_selftest "$@" ;;
	path) cmd_path "$@" ;;
	log) cmd_log "$@" ;;
	-h | --help | help) usage ;;
	*) usage ;;
	esac
}

main "$@"
