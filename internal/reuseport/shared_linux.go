package reuseport

import (
	"fmt"
	"net/netip"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Shared reports whether processes share addr, an address of this
// network namespace: whether its group has two members or more, and so
// steers datagrams by QPN slot. An address without a group (no pins in
// Dir, or no bpffs there) is not shared; a group of one runs no program.
// It fails when it cannot tell (the pins cannot be read, as for a user
// other than theirs). It takes no lock on the group: the answer may be
// stale as soon as it is given.
//
// Transports ask it about every loopback peer they send to, again and
// again (transport/udp's steering refresh), from the send path, so after
// the first question about an address it allocates nothing: it opens the
// pinned socket array with raw bpf(2) calls on buffers kept per address,
// looks at the slots, and closes it. Opening it anew every time (three to
// sixty-five system calls) keeps no stale map: a group that was removed
// and created again is a new map at the same path. cilium/ebpf's
// LoadPinnedMap made about 200 allocations per question, which the
// process-wide allocation tests of the one-sided calls counted.
func Shared(addr netip.AddrPort) (bool, error) {
	probesMu.Lock()
	defer probesMu.Unlock()
	p := probes[addr]
	if p == nil {
		base, err := pinBase(addr)
		if err != nil {
			return false, err
		}
		if len(probes) >= maxProbes {
			clear(probes)
		}
		p = &sharedProbe{path: append([]byte(base+"-socks"), 0)}
		probes[addr] = p
	}
	return p.shared(addr)
}

// maxProbes bounds the addresses Shared keeps buffers for; past it they
// start again.
const maxProbes = 1024

var (
	probesMu sync.Mutex // guards probes and every probe's buffers
	probes   = map[netip.AddrPort]*sharedProbe{}
)

// sharedProbe holds what the bpf(2) calls of one address's questions
// point at: heap memory, which does not move while the kernel reads it.
type sharedProbe struct {
	path  []byte // the socket array's pin, NUL-terminated
	get   bpfObjGetAttr
	look  bpfMapElemAttr
	key   uint32
	value uint64 // a member's socket cookie
}

// bpfObjGetAttr is union bpf_attr for BPF_OBJ_GET.
type bpfObjGetAttr struct {
	pathname  uint64
	bpfFD     uint32
	fileFlags uint32
	pathFD    int32
	_         uint32
}

// bpfMapElemAttr is union bpf_attr for BPF_MAP_LOOKUP_ELEM.
type bpfMapElemAttr struct {
	mapFD uint32
	_     uint32
	key   uint64
	value uint64
	flags uint64
}

func bpf(cmd uintptr, attr unsafe.Pointer, size uintptr) (uintptr, unix.Errno) {
	r, _, errno := unix.Syscall(unix.SYS_BPF, cmd, uintptr(attr), size)
	return r, errno
}

// shared answers Shared for addr. Precondition: probesMu held.
func (p *sharedProbe) shared(addr netip.AddrPort) (bool, error) {
	p.get = bpfObjGetAttr{pathname: uint64(uintptr(unsafe.Pointer(&p.path[0]))), fileFlags: unix.BPF_F_RDONLY}
	fd, errno := bpf(unix.BPF_OBJ_GET, unsafe.Pointer(&p.get), unsafe.Sizeof(p.get))
	switch errno {
	case 0:
	case unix.ENOENT:
		return false, nil
	default:
		return false, fmt.Errorf("reuseport: %v: opening %s: %w", addr, p.path[:len(p.path)-1], errno)
	}
	defer unix.Close(int(fd))
	members := 0
	for slot := uint32(0); slot < Slots && members < 2; slot++ {
		p.key = slot
		p.look = bpfMapElemAttr{mapFD: uint32(fd), key: uint64(uintptr(unsafe.Pointer(&p.key))), value: uint64(uintptr(unsafe.Pointer(&p.value)))}
		if _, errno := bpf(unix.BPF_MAP_LOOKUP_ELEM, unsafe.Pointer(&p.look), unsafe.Sizeof(p.look)); errno == 0 {
			members++
		}
	}
	return members > 1, nil
}
