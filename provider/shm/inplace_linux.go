package shm

// Registering memory the program already owns, in place.
//
// A peer maps a region only if it is a file it can be sent: AllocMR's
// memfd. A C program registers memory it allocated itself (malloc,
// memalign, an anonymous mmap), and RegMR's answer for that, copies
// through the owner's goroutines (copy_linux.go), costs a round trip over
// the device's socket per operation: ib_write_lat over the C library on
// shm0 took 122 µs a message against the Go tool's 0.22 on AllocMR
// memory.
//
// RegMapped moves such pages into a memfd without moving them in the
// address space: it maps a new memfd elsewhere, copies the pages into it,
// and mremap(MREMAP_FIXED) puts that mapping where the pages were, in
// one step that replaces the old pages. The program sees the same bytes
// at the same addresses; peers map the memfd as they map AllocMR's, and
// reach the memory with a memcpy. Dereg revokes the peers' mappings and
// puts private anonymous pages with the same contents back the same way.
//
// Only whole pages of private anonymous read-write memory are moved, as
// /proc/self/maps shows them: the bytes of a page belong to the buffer
// alone (a page shared with other heap objects could lose another
// thread's concurrent write to one of them), and a file mapping or
// shared memory must stay what it is (the program's writes go to its
// file). Anything else is ErrNotSupported, and RegMR registers it with
// copies. What changes for the program while the pages are registered:
// they are shared memory, so a child it forks shares them rather than
// getting a copy (real RDMA devices also treat registered pages apart
// across fork: ibv_fork_init); a write made to them by another thread
// while RegMapped or Dereg copies them may be lost (the caller must not
// register pages that other registrations or threads write meanwhile);
// and what was set on the old mapping (mlock, madvise, a NUMA policy)
// is not carried over. Pages never written are not copied: the memfd
// reads as zeros there and allocates nothing for them.

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softrdma/softrdma/verbs"
)

// mapsMu serialises the moves: two registrations of one range would
// otherwise both find it private and both move it, and the first one's
// peers would write into a memfd the program no longer sees.
var mapsMu sync.Mutex

// RegMapped registers length bytes at addr in place: memory outside the
// Go heap that the caller owns (a C program's buffer, its own anonymous
// mapping), page aligned, a whole number of pages, private anonymous and
// read-write. Its pages move into a memfd at the same addresses with the
// same contents, and peers reach them as they reach AllocMR memory (see
// the comment at the top of inplace_linux.go for what that means for the
// program). Memory that is not so gets verbs.ErrNotSupported; RegMR
// registers it with copies. Never pass Go heap memory, which passes
// these checks: the runtime returns unused heap pages with MADV_DONTNEED
// and expects zeros back, which shared pages do not give. Safe for
// concurrent use.
func (pd *PD) RegMapped(addr unsafe.Pointer, length int, access verbs.Access) (verbs.MR, error) {
	if err := pd.checkMR("RegMapped", access, length); err != nil {
		return nil, err
	}
	page := os.Getpagesize()
	if uintptr(addr)%uintptr(page) != 0 || length%page != 0 {
		return nil, verbs.Errorf("RegMapped", verbs.ErrNotSupported, "%d bytes at %#x are not whole pages; RegMR registers them with copies", length, uintptr(addr))
	}
	buf := unsafe.Slice((*byte)(addr), length)
	mapsMu.Lock()
	defer mapsMu.Unlock()
	if err := privateAnon(uintptr(addr), length); err != nil {
		return nil, verbs.Errorf("RegMapped", verbs.ErrNotSupported, "%v; RegMR registers it with copies", err)
	}
	var extra int
	if access&(verbs.AccessRemoteWrite|verbs.AccessRemoteAtomic) == 0 {
		extra = unix.F_SEAL_FUTURE_WRITE
	}
	fd, err := moveToMemfd(buf, extra)
	if err != nil {
		return nil, verbs.Errorf("RegMapped", verbs.ErrNotSupported, "moving %d bytes at %#x into a memfd: %v; RegMR registers them with copies", length, uintptr(addr), err)
	}
	return pd.addMR(buf, access, fd, true), nil
}

// moveToMemfd puts buf's pages into a new memfd, mapped shared at the
// same addresses, and seals it (sealMemfd with extra).
func moveToMemfd(buf []byte, extra int) (int, error) {
	n := len(buf)
	fd, err := unix.MemfdCreate("softrdma-shm-mr", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return -1, err
	}
	err = unix.Fchmod(fd, 0o600)
	if err == nil {
		err = unix.Ftruncate(fd, int64(n))
	}
	var tmp unsafe.Pointer
	if err == nil {
		tmp, err = unix.MmapPtr(fd, 0, nil, uintptr(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	}
	if err != nil {
		unix.Close(fd)
		return -1, err
	}
	copyWritten(unsafe.Slice((*byte)(tmp), n), buf)
	if _, err := unix.MremapPtr(tmp, uintptr(n), unsafe.Pointer(&buf[0]), uintptr(n), unix.MREMAP_MAYMOVE|unix.MREMAP_FIXED); err != nil {
		unix.MunmapPtr(tmp, uintptr(n))
		// mremap unmaps the target before it moves the mapping: a
		// failure after that leaves a hole where the program's pages
		// were. The memfd holds their contents; map it there.
		if privateAnon(uintptr(unsafe.Pointer(&buf[0])), n) != nil && remapMemfd(buf, fd) == nil {
			err = nil
		} else {
			unix.Close(fd)
			return -1, err
		}
	}
	// From here on buf is the memfd's pages. Sealed after the mapping:
	// F_SEAL_FUTURE_WRITE keeps this one writable and no other.
	if err := sealMemfd(fd, extra); err != nil {
		// Never granted unsealed (a peer could shrink it under us). If
		// the pages cannot move back either, they stay the memfd's,
		// which nobody else holds once fd is closed.
		moveBack(buf, fd)
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// remapMemfd maps fd shared where buf's pages were, if nothing is there.
func remapMemfd(buf []byte, fd int) error {
	_, err := unix.MmapPtr(fd, 0, unsafe.Pointer(&buf[0]), uintptr(len(buf)), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_FIXED_NOREPLACE)
	return err
}

// copyWritten copies src into dst, a fresh memfd's mapping, page by
// page, leaving out the pages of src that are all zeros: those of a
// region never written read as zeros without being allocated, and the
// memfd's holes read as zeros too.
func copyWritten(dst, src []byte) {
	page := os.Getpagesize()
	for off := 0; off < len(src); off += page {
		p := src[off:min(off+page, len(src))]
		if !allZero(p) {
			copy(dst[off:], p)
		}
	}
}

func allZero(p []byte) bool {
	for len(p) >= 8 {
		if *(*uint64)(unsafe.Pointer(&p[0])) != 0 {
			return false
		}
		p = p[8:]
	}
	for _, b := range p {
		if b != 0 {
			return false
		}
	}
	return true
}

// moveBack puts private anonymous pages with buf's contents where the
// memfd fd is mapped, if it still is: a program that unmapped the range
// (freed the buffer before deregistering it) may have something else
// there now, which must not be replaced. An error says that the pages
// stayed the memfd's.
func moveBack(buf []byte, fd int) error {
	n := len(buf)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if err := mappedFrom(uintptr(unsafe.Pointer(&buf[0])), n, st.Dev, st.Ino); err != nil {
		return nil // not ours any more: nothing to move
	}
	tmp, err := unix.MmapPtr(-1, 0, nil, uintptr(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return err
	}
	copy(unsafe.Slice((*byte)(tmp), n), buf)
	if _, err := unix.MremapPtr(tmp, uintptr(n), unsafe.Pointer(&buf[0]), uintptr(n), unix.MREMAP_MAYMOVE|unix.MREMAP_FIXED); err != nil {
		unix.MunmapPtr(tmp, uintptr(n))
		if mappedFrom(uintptr(unsafe.Pointer(&buf[0])), n, st.Dev, st.Ino) != nil {
			remapMemfd(buf, fd) // the hole mremap left (moveToMemfd)
		}
		return err
	}
	return nil
}

// privateAnon reports, as an error, what in [addr, addr+n) is not
// private anonymous read-write memory.
func privateAnon(addr uintptr, n int) error {
	return eachMapping(addr, n, func(m vma) error {
		if m.perms != "rw-p" || m.inode != 0 || (m.path != "" && m.path != "[heap]") {
			return fmt.Errorf("the memory at %#x is %s %s, not private anonymous read-write memory", m.start, m.perms, m.describe())
		}
		return nil
	})
}

// mappedFrom reports, as an error, what in [addr, addr+n) is not a
// read-write shared mapping of the file dev, ino.
func mappedFrom(addr uintptr, n int, dev, ino uint64) error {
	return eachMapping(addr, n, func(m vma) error {
		if m.perms != "rw-s" || m.inode != ino || m.dev != dev {
			return fmt.Errorf("the memory at %#x is %s %s, not the region's memfd", m.start, m.perms, m.describe())
		}
		return nil
	})
}

// vma is a line of /proc/self/maps: a virtual memory area.
type vma struct {
	start, end uintptr
	perms      string
	dev        uint64 // as unix.Mkdev makes it from the line's major:minor
	inode      uint64
	path       string
}

func (m vma) describe() string {
	if m.path == "" {
		return "anonymous"
	}
	return m.path
}

// eachMapping calls f for each mapping that overlaps [addr, addr+n); it
// fails if they do not cover the whole range.
func eachMapping(addr uintptr, n int, f func(vma) error) error {
	data, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return err
	}
	end := addr + uintptr(n)
	next := addr // the first byte not yet covered
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() && next < end {
		m, ok := parseMapping(sc.Text())
		if !ok || m.end <= next || m.start >= end {
			continue
		}
		if m.start > next {
			break // a hole
		}
		if err := f(m); err != nil {
			return err
		}
		next = m.end
	}
	if next < end {
		return fmt.Errorf("the memory at %#x is not mapped", next)
	}
	return nil
}

// parseMapping parses "start-end perms offset dev inode [path]".
func parseMapping(line string) (vma, bool) {
	var m vma
	f := bytes.Fields([]byte(line))
	if len(f) < 5 {
		return m, false
	}
	r := bytes.SplitN(f[0], []byte("-"), 2)
	if len(r) != 2 || len(f[1]) != 4 {
		return m, false
	}
	s, err1 := strconv.ParseUint(string(r[0]), 16, 64)
	e, err2 := strconv.ParseUint(string(r[1]), 16, 64)
	ino, err3 := strconv.ParseUint(string(f[4]), 10, 64)
	d := bytes.SplitN(f[3], []byte(":"), 2)
	if err1 != nil || err2 != nil || err3 != nil || e <= s || len(d) != 2 {
		return m, false
	}
	maj, err1 := strconv.ParseUint(string(d[0]), 16, 32)
	mnr, err2 := strconv.ParseUint(string(d[1]), 16, 32)
	if err1 != nil || err2 != nil {
		return m, false
	}
	m.start, m.end, m.perms, m.inode = uintptr(s), uintptr(e), string(f[1]), ino
	m.dev = unix.Mkdev(uint32(maj), uint32(mnr))
	if len(f) > 5 {
		m.path = string(bytes.Join(f[5:], []byte(" ")))
	}
	return m, true
}
