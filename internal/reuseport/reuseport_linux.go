// Package reuseport lets several processes use RoCEv2 on one address:
// each binds UDP port 4791 on it with SO_REUSEPORT, and an eBPF program
// attached to the group hands each datagram to the socket of the process
// that owns its destination QP (or, for a connection-manager MAD, its
// connection or listener). See docs/sharing.md for the design.
//
// A process takes a slot (0 to Slots-1) on joining; every QPN it hands
// out carries the slot in its top SlotBits bits, and every CM comm ID in
// its top SlotBits bits, which is what the program reads. The slot is an
// entry in a BPF_MAP_TYPE_REUSEPORT_SOCKARRAY keyed by slot, so it stays
// put while others come and go, and the kernel clears it when the socket
// closes: a process that exits, however it exits, frees its share.
//
// The maps live pinned in bpffs (Dir), one pair per network namespace,
// address and port, so that every process opens the same ones. That
// needs CAP_BPF (or root) and bpffs mounted at /sys/fs/bpf; without them
// Prepare fails and a device binds its address alone, as before.
//
// The maps, the program and the pins are github.com/cilium/ebpf's; the
// program is written with its asm package (prog_linux.go).
package reuseport

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// SlotBits is how many of a QPN's (and a comm ID's) top bits name the
// process's slot; Slots processes can share one address.
const (
	SlotBits = 6
	Slots    = 1 << SlotBits
)

// Dir is where the groups' maps are pinned.
var Dir = "/sys/fs/bpf/softrdma"

// maxServices bounds the listeners on one address.
const maxServices = 4096

// Group is one shared address and port: its pinned socket array and
// service map.
type Group struct {
	addr     netip.AddrPort
	base     string    // the pins' path, less their suffixes
	socks    *ebpf.Map // slot → socket (REUSEPORT_SOCKARRAY, u32 → u64 fd/cookie)
	services *ebpf.Map // low 32 bits of a service ID (network order) → slot
}

// lockDir creates Dir if need be and locks it (flock): the holder may
// create or remove pins, and nobody takes maps that are being unpinned.
func lockDir() (int, error) {
	var fs unix.Statfs_t
	if err := unix.Statfs(filepath.Dir(Dir), &fs); err != nil || fs.Type != unix.BPF_FS_MAGIC {
		return -1, fmt.Errorf("reuseport: %s is not a bpf filesystem (mount it: mount -t bpf bpf %s)", filepath.Dir(Dir), filepath.Dir(Dir))
	}
	if err := os.Mkdir(Dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return -1, fmt.Errorf("reuseport: %w", err)
	}
	fd, err := unix.Open(Dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("reuseport: %w", err)
	}
	for {
		err = unix.Flock(fd, unix.LOCK_EX)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("reuseport: locking %s: %w", Dir, err)
	}
	return fd, nil
}

// unlockDir releases lockDir's lock.
func unlockDir(fd int) {
	if fd >= 0 {
		unix.Close(fd) // drops the flock
	}
}

// pinBase is the pins' path of addr's group, less their suffixes.
func pinBase(addr netip.AddrPort) (string, error) {
	ns, err := netnsID()
	if err != nil {
		return "", err
	}
	// bpffs refuses names with a dot (its own files have them).
	name := strings.NewReplacer(".", "_", ":", "_").Replace(addr.Addr().WithZone("").String())
	return filepath.Join(Dir, fmt.Sprintf("net%d-%s-%d", ns, name, addr.Port())), nil
}

// open opens (or creates) the maps of addr's group, under the Dir lock.
// It fails when this process cannot use bpf(2): the caller then binds
// alone.
func open(addr netip.AddrPort) (*Group, error) {
	base, err := pinBase(addr)
	if err != nil {
		return nil, err
	}
	g := &Group{addr: addr, base: base}
	g.socks, err = openOrCreate(base+"-socks", &ebpf.MapSpec{
		Name: "softrdma_socks", Type: ebpf.ReusePortSockArray, KeySize: 4, ValueSize: 8, MaxEntries: Slots,
	})
	if err == nil {
		g.services, err = openOrCreate(base+"-services", &ebpf.MapSpec{
			Name: "softrdma_svcs", Type: ebpf.Hash, KeySize: 4, ValueSize: 4, MaxEntries: maxServices,
			Flags: unix.BPF_F_NO_PREALLOC, // entries are allocated as listeners come
		})
	}
	if err != nil {
		g.Close()
		return nil, fmt.Errorf("reuseport: %v: %w", addr, err)
	}
	return g, nil
}

// netnsID names the network namespace by its inode.
func netnsID() (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/self/ns/net", &st); err != nil {
		return 0, fmt.Errorf("reuseport: reading the network namespace: %w", err)
	}
	return st.Ino, nil
}

// openOrCreate opens the map pinned at path, or creates one from spec
// and pins it there. Two processes racing to create it both end with the
// one that was pinned first.
func openOrCreate(path string, spec *ebpf.MapSpec) (*ebpf.Map, error) {
	for range 3 {
		m, err := ebpf.LoadPinnedMap(path, nil)
		if err == nil {
			return m, nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("opening %s: %w", path, err)
		}
		m, err = ebpf.NewMap(spec)
		if err != nil {
			return nil, fmt.Errorf("creating BPF map %s: %w", spec.Name, err)
		}
		err = m.Pin(path)
		if err == nil {
			return m, nil
		}
		m.Close()
		if !errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("pinning %s: %w", path, err)
		}
	}
	return nil, fmt.Errorf("opening %s: it keeps appearing and vanishing", path)
}

// Close closes the maps (the pins stay).
func (g *Group) Close() {
	for _, m := range []**ebpf.Map{&g.socks, &g.services} {
		if *m != nil {
			(*m).Close()
			*m = nil
		}
	}
}

// attach loads the program and attaches it to the group of fd, a socket
// bound with SO_REUSEPORT. Every member attaches the same program, so the
// last one to do so changes nothing.
func (g *Group) attach(fd int) error {
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:         "softrdma_steer",
		Type:         ebpf.SkReuseport,
		AttachType:   ebpf.AttachSkReuseportSelect,
		Instructions: program(g.socks.FD(), g.services.FD()),
		License:      "GPL", // sk_select_reuseport is not GPL-only; any string does
	})
	if err != nil {
		return fmt.Errorf("loading the steering program: %w", err) // a verifier error carries its log
	}
	defer prog.Close()
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ATTACH_REUSEPORT_EBPF, prog.FD()); err != nil {
		return fmt.Errorf("attaching the steering program: %w", err)
	}
	return nil
}

// alive reports whether a socket holds slot.
func (g *Group) alive(slot uint32) bool {
	var cookie uint64
	return g.socks.Lookup(slot, &cookie) == nil
}

// serviceKey is the services map's key for a service ID: its low 32 bits
// as they lie in the packet.
func serviceKey(serviceID uint64) uint32 {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], uint32(serviceID))
	return binary.NativeEndian.Uint32(b[:])
}

// Share is a device's membership: a slot in the group of each of its
// addresses.
type Share struct {
	groups []*Group
	slot   uint32
	lockFD int // Dir's lock, held from Prepare to Join

	mu       sync.Mutex
	services map[uint64]int // service ID → claims
}

// Prepare opens the groups of addrs, before their sockets are bound. It
// holds the directory's lock until Join or Close, so that the last
// member of a group cannot unpin its maps meanwhile: the caller must
// call one of them soon.
func Prepare(addrs []netip.AddrPort) (*Share, error) {
	lock, err := lockDir()
	if err != nil {
		return nil, err
	}
	s := &Share{services: map[uint64]int{}, lockFD: lock}
	for _, a := range addrs {
		g, err := open(a)
		if err != nil {
			s.Close()
			return nil, err
		}
		s.groups = append(s.groups, g)
	}
	return s, nil
}

// Join puts fds (the bound sockets of the addresses given to Prepare, in
// order) into the lowest slot free in every group, and attaches the
// program to each group that has another member. A device alone on its
// address runs no program: the kernel hands it every datagram. The
// sockets must be bound with SO_REUSEPORT.
//
// Joins are serialized by the directory's lock (Prepare to Join), so a
// newcomer always sees the members before it. Between its bind and its
// attach, datagrams of a device already there may reach the newcomer by
// hash, which drops them as packets to unknown QPs (RC peers retransmit
// them).
func (s *Share) Join(fds []int) error {
	defer func() { unlockDir(s.lockFD); s.lockFD = -1 }()
	if len(fds) != len(s.groups) {
		return fmt.Errorf("reuseport: %d sockets for %d addresses", len(fds), len(s.groups))
	}
	if err := s.takeSlot(fds); err != nil {
		return err
	}
	for i, g := range s.groups {
		if !g.othersAlive(s.slot) {
			continue
		}
		if err := g.attach(fds[i]); err != nil {
			return fmt.Errorf("reuseport: %v: %w", g.addr, err)
		}
	}
	return nil
}

func (s *Share) takeSlot(fds []int) error {
	for slot := uint32(0); slot < Slots; slot++ {
		taken := 0
		var err error
		for i, g := range s.groups {
			if err = g.socks.Update(slot, uint64(fds[i]), ebpf.UpdateNoExist); err != nil {
				break
			}
			taken++
		}
		if err == nil {
			s.slot = slot
			return nil
		}
		for _, g := range s.groups[:taken] {
			g.socks.Delete(slot)
		}
		if !errors.Is(err, ebpf.ErrKeyExist) {
			return fmt.Errorf("reuseport: taking slot %d: %w", slot, err)
		}
	}
	return fmt.Errorf("reuseport: all %d slots of %v are taken: %d processes share it already", Slots, s.groups[0].addr, Slots)
}

// othersAlive reports whether a slot other than mine holds a socket.
func (g *Group) othersAlive(mine uint32) bool {
	for slot := uint32(0); slot < Slots; slot++ {
		if slot != mine && g.alive(slot) {
			return true
		}
	}
	return false
}

// Slot is the slot Join took.
func (s *Share) Slot() uint32 { return s.slot }

// ClaimService steers connection requests for serviceID (an rdma_cm port
// space and port) to this process. It fails if a live process claimed it
// first; a claim left by a process that has gone is taken over. Claims
// nest: the service is released when each claim has been.
func (s *Share) ClaimService(serviceID uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.services == nil {
		return fmt.Errorf("reuseport: claiming service %#x: the device is closed", serviceID)
	}
	if s.services[serviceID] > 0 {
		s.services[serviceID]++
		return nil
	}
	key := serviceKey(serviceID)
	for i, g := range s.groups {
		var owner uint32
		if err := g.services.Lookup(key, &owner); err == nil && owner != s.slot && g.alive(owner) {
			s.releaseLocked(serviceID, i)
			return fmt.Errorf("reuseport: service %#x on %v is claimed by another process (slot %d): %w", serviceID, g.addr, owner, unix.EADDRINUSE)
		}
		if err := g.services.Update(key, s.slot, ebpf.UpdateAny); err != nil {
			s.releaseLocked(serviceID, i)
			return fmt.Errorf("reuseport: claiming service %#x on %v: %w", serviceID, g.addr, err)
		}
	}
	s.services[serviceID] = 1
	return nil
}

// ReleaseService undoes one ClaimService.
func (s *Share) ReleaseService(serviceID uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.services[serviceID] == 0 {
		return // never claimed, or all released by Close
	}
	if s.services[serviceID]--; s.services[serviceID] > 0 {
		return
	}
	delete(s.services, serviceID)
	s.releaseLocked(serviceID, len(s.groups))
}

// releaseLocked deletes the first n groups' entries for serviceID that
// are still this slot's.
func (s *Share) releaseLocked(serviceID uint64, n int) {
	key := serviceKey(serviceID)
	for _, g := range s.groups[:n] {
		var owner uint32
		if err := g.services.Lookup(key, &owner); err == nil && owner == s.slot {
			g.services.Delete(key)
		}
	}
}

// Close gives up the services this device claimed and closes the maps;
// call it after closing the sockets, which frees the slot. The last
// member of a group removes its pins.
func (s *Share) Close() {
	s.mu.Lock()
	for id := range s.services {
		s.releaseLocked(id, len(s.groups))
	}
	s.services = nil
	s.mu.Unlock()
	if s.lockFD < 0 {
		lock, err := lockDir()
		if err != nil {
			lock = -1 // leave the pins: the next member reuses them
		}
		s.lockFD = lock
	}
	for _, g := range s.groups {
		if s.lockFD >= 0 && !g.othersAlive(Slots) {
			unix.Unlink(g.base + "-socks")
			unix.Unlink(g.base + "-services")
		}
		g.Close()
	}
	s.groups = nil
	unlockDir(s.lockFD)
	s.lockFD = -1
}
