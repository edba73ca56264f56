package shm

import (
	"errors"
	"os"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softrdma/softrdma/verbs"
)

// anonPages maps n private anonymous pages, as malloc's large blocks
// are, and unmaps them at the test's end.
func anonPages(t *testing.T, n int) []byte {
	t.Helper()
	b, err := unix.Mmap(-1, 0, n*os.Getpagesize(), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(b) })
	return b
}

// regMapped is RegMapped of buf.
func regMapped(pd verbs.PD, buf []byte, access verbs.Access) (verbs.MR, error) {
	return pd.(*PD).RegMapped(unsafe.Pointer(&buf[0]), len(buf), access)
}

// vmaOf returns the mapping of /proc/self/maps that holds b's first byte.
func vmaOf(t *testing.T, b []byte) vma {
	t.Helper()
	var got vma
	addr := uintptr(unsafe.Pointer(&b[0]))
	if err := eachMapping(addr, 1, func(m vma) error { got = m; return nil }); err != nil {
		t.Fatal(err)
	}
	return got
}

// TestRegMappedInPlace: a program's own pages, registered in place, keep
// their address and contents; a peer's WRITE, READ and atomic reach them
// through its mapping, not through this process's copies; Dereg gives
// the program private pages back, contents kept.
func TestRegMappedInPlace(t *testing.T) {
	x, y := pair(t, sideOpts{}, sideOpts{})
	page := os.Getpagesize()
	mem := anonPages(t, 4)
	for i := range mem {
		mem[i] = byte(i * 7)
	}
	addr := &mem[0]
	mr, err := regMapped(y.pd, mem, fullAccess)
	if err != nil {
		t.Fatal(err)
	}
	if mr.Addr() != uint64(uintptr(unsafe.Pointer(addr))) || &mr.(*MR).buf[0] != addr {
		t.Fatal("RegMapped moved the memory")
	}
	for i := range mem {
		if mem[i] != byte(i*7) {
			t.Fatalf("byte %d is %d after RegMapped, want %d", i, mem[i], byte(i*7))
		}
	}
	if m := vmaOf(t, mem); m.perms != "rw-s" {
		t.Fatalf("registered pages are %s %s, want a shared mapping of the memfd", m.perms, m.describe())
	}
	copies := y.dev.copies.Load()

	copy(x.mr.Bytes()[:5], "hello")
	postSend(t, x.qp, verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{x.mr.SGE(0, 5)},
		RemoteAddr: mr.Addr() + uint64(page) + 3, RKey: mr.RKey()})
	if wc := poll(t, x.cq, 1); wc[0].Status != verbs.WCSuccess {
		t.Fatalf("WRITE: %v", wc[0].Status)
	}
	if got := string(mem[page+3 : page+8]); got != "hello" {
		t.Fatalf("the WRITE left %q in the program's memory", got)
	}
	postSend(t, x.qp, verbs.SendWR{Opcode: verbs.WRRDMARead, SGList: []verbs.SGE{x.mr.SGE(64, 16)},
		RemoteAddr: mr.Addr() + 100, RKey: mr.RKey()})
	if wc := poll(t, x.cq, 1); wc[0].Status != verbs.WCSuccess {
		t.Fatalf("READ: %v", wc[0].Status)
	}
	for i, b := range x.mr.Bytes()[64:80] {
		if b != byte((100+i)*7) {
			t.Fatalf("READ byte %d: %d, want %d", i, b, byte((100+i)*7))
		}
	}
	*(*uint64)(unsafe.Pointer(&mem[2*page])) = 40
	postSend(t, x.qp, verbs.SendWR{Opcode: verbs.WRAtomicFetchAndAdd, SGList: []verbs.SGE{x.mr.SGE(128, 8)},
		RemoteAddr: mr.Addr() + uint64(2*page), RKey: mr.RKey(), CompareAdd: 2})
	if wc := poll(t, x.cq, 1); wc[0].Status != verbs.WCSuccess {
		t.Fatalf("FETCH_ADD: %v", wc[0].Status)
	}
	if v := *(*uint64)(unsafe.Pointer(&mem[2*page])); v != 42 {
		t.Fatalf("FETCH_ADD left %d, want 42", v)
	}
	if n := y.dev.copies.Load() - copies; n != 0 {
		t.Fatalf("the owner copied %d operations: the peer did not map the pages", n)
	}

	// A second registration of the same pages cannot move them again
	// (the first one's peers would lose them).
	if _, err := regMapped(y.pd, mem, fullAccess); !errors.Is(err, verbs.ErrNotSupported) {
		t.Fatalf("RegMapped of registered pages: %v, want ErrNotSupported", err)
	}

	if err := mr.Dereg(); err != nil {
		t.Fatal(err)
	}
	if m := vmaOf(t, mem); m.perms != "rw-p" || m.inode != 0 {
		t.Fatalf("after Dereg the pages are %s %s, want private anonymous", m.perms, m.describe())
	}
	if got := string(mem[page+3 : page+8]); got != "hello" || mem[5] != byte(5*7) {
		t.Fatal("Dereg lost the contents")
	}
	mem[0] = 1 // still writable
}

// TestRegMappedRefuses: what RegMapped must not move is ErrNotSupported,
// and left as it was.
func TestRegMappedRefuses(t *testing.T) {
	y := newSide(t, sideOpts{})
	defer y.close(t)
	pd := y.pd
	page := os.Getpagesize()
	mem := anonPages(t, 3)
	f, err := os.CreateTemp(t.TempDir(), "mapped")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(int64(page)); err != nil {
		t.Fatal(err)
	}
	file, err := unix.Mmap(int(f.Fd()), 0, page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(file)
	ro := anonPages(t, 1)
	if err := unix.Mprotect(ro, unix.PROT_READ); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		buf  []byte
	}{
		{"not page aligned", mem[1 : page+1]},
		{"not whole pages", mem[:page+100]},
		{"a file mapping", file},
		{"read-only memory", ro},
		{"a short buffer", make([]byte, 100)},
	} {
		before := vmaOf(t, c.buf)
		if _, err := regMapped(pd, c.buf, fullAccess); !errors.Is(err, verbs.ErrNotSupported) {
			t.Errorf("%s: %v, want ErrNotSupported", c.name, err)
		}
		if after := vmaOf(t, c.buf); after != before {
			t.Errorf("%s: the mapping changed from %+v to %+v", c.name, before, after)
		}
	}
	// A range with a hole in it.
	if err := unix.MunmapPtr(unsafe.Pointer(&mem[page]), uintptr(page)); err != nil {
		t.Fatal(err)
	}
	if _, err := regMapped(pd, mem[:3*page], fullAccess); !errors.Is(err, verbs.ErrNotSupported) {
		t.Errorf("a range with a hole: %v, want ErrNotSupported", err)
	}
}

// TestRegMappedFreedBeforeDereg: a program that unmaps its pages before
// deregistering them may have something else mapped there by then;
// Dereg must leave it alone.
func TestRegMappedFreedBeforeDereg(t *testing.T) {
	y := newSide(t, sideOpts{})
	defer y.close(t)
	mem := anonPages(t, 2)
	mr, err := regMapped(y.pd, mem, fullAccess)
	if err != nil {
		t.Fatal(err)
	}
	// The program unmaps the pages and maps something else there: a
	// file (in one step, MAP_FIXED over them, so that no other mapping
	// of this process can take the address in between).
	f, err := os.CreateTemp(t.TempDir(), "reused")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(int64(len(mem))); err != nil {
		t.Fatal(err)
	}
	p, err := unix.MmapPtr(int(f.Fd()), 0, unsafe.Pointer(&mem[0]), uintptr(len(mem)), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_FIXED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.MunmapPtr(p, uintptr(len(mem)))
	before := vmaOf(t, mem)
	if err := mr.Dereg(); err != nil {
		t.Fatal(err)
	}
	if after := vmaOf(t, mem); after != before {
		t.Fatalf("Dereg replaced the program's new mapping %+v with %+v", before, after)
	}
}

func TestParseMapping(t *testing.T) {
	for _, c := range []struct {
		line string
		ok   bool
		want vma
	}{
		{"7f0000000000-7f0000002000 rw-p 00000000 00:00 0 ", true, vma{0x7f0000000000, 0x7f0000002000, "rw-p", 0, 0, ""}},
		{"55d0-55e0 rw-p 00000000 00:00 0          [heap]", true, vma{0x55d0, 0x55e0, "rw-p", 0, 0, "[heap]"}},
		{"1000-2000 rw-s 00000000 fd:01 4242 /memfd:softrdma-shm-mr (deleted)", true, vma{0x1000, 0x2000, "rw-s", unix.Mkdev(0xfd, 1), 4242, "/memfd:softrdma-shm-mr (deleted)"}},
		{"1000-2000 rw-p 0 0001 0", false, vma{}},
		{"2000-1000 rw-p 0 00:00 0", false, vma{}},
		{"zz-1000 rw-p 0 00:00 0", false, vma{}},
		{"1000-2000 rw-p 0 00:00", false, vma{}},
		{"1000-2000 rwxp- 0 00:00 0", false, vma{}},
		{"", false, vma{}},
	} {
		got, ok := parseMapping(c.line)
		if ok != c.ok || (ok && got != c.want) {
			t.Errorf("parseMapping(%q) = %+v, %v; want %+v, %v", c.line, got, ok, c.want, c.ok)
		}
	}
}

func FuzzParseMapping(f *testing.F) {
	f.Add("7f0000000000-7f0000002000 rw-p 00000000 00:00 0 ")
	f.Add("1000-2000 rw-s 00000000 00:01 4242 /memfd:x (deleted)")
	f.Fuzz(func(t *testing.T, line string) {
		m, ok := parseMapping(line)
		if ok && (m.end <= m.start || len(m.perms) != 4) {
			t.Fatalf("parseMapping(%q) = %+v", line, m)
		}
	})
}

// TestRegMappedReadOnly: a region registered in place for remote READ
// only is read by the peer and refuses its WRITE, and the program still
// writes its own pages (the memfd is sealed against new writable
// mappings, not this one).
func TestRegMappedReadOnly(t *testing.T) {
	x, y := pair(t, sideOpts{}, sideOpts{})
	mem := anonPages(t, 1)
	mr, err := regMapped(y.pd, mem, verbs.AccessLocalWrite|verbs.AccessRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	defer mr.Dereg()
	copy(mem, "mine")
	postSend(t, x.qp, verbs.SendWR{Opcode: verbs.WRRDMARead, SGList: []verbs.SGE{x.mr.SGE(0, 4)}, RemoteAddr: mr.Addr(), RKey: mr.RKey()})
	if wc := poll(t, x.cq, 1); wc[0].Status != verbs.WCSuccess || string(x.mr.Bytes()[:4]) != "mine" {
		t.Fatalf("READ: %v, %q", wc[0].Status, x.mr.Bytes()[:4])
	}
	postSend(t, x.qp, verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{x.mr.SGE(0, 4)}, RemoteAddr: mr.Addr(), RKey: mr.RKey()})
	if wc := poll(t, x.cq, 1); wc[0].Status != verbs.WCRemAccessErr {
		t.Fatalf("WRITE to a read-only region: %v, want %v", wc[0].Status, verbs.WCRemAccessErr)
	}
	if string(mem[:4]) != "mine" {
		t.Fatalf("the refused WRITE changed the memory: %q", mem[:4])
	}
}

// TestRegMappedLeavesUnwrittenPages: pages the program never wrote are
// not copied into the memfd (it would allocate them all: a large pool
// registered up front), and still read as zeros.
func TestRegMappedLeavesUnwrittenPages(t *testing.T) {
	y := newSide(t, sideOpts{})
	defer y.close(t)
	page := os.Getpagesize()
	mem := anonPages(t, 256)
	mem[5*page+1] = 42
	mr, err := regMapped(y.pd, mem, fullAccess)
	if err != nil {
		t.Fatal(err)
	}
	defer mr.Dereg()
	var st unix.Stat_t
	if err := unix.Fstat(mr.(*MR).fd, &st); err != nil {
		t.Fatal(err)
	}
	if used := st.Blocks * 512; used > int64(8*page) {
		t.Fatalf("the memfd holds %d bytes for 1 written page of 256", used)
	}
	if mem[5*page+1] != 42 || !allZero(mem[:5*page]) || !allZero(mem[6*page:]) {
		t.Fatal("contents changed")
	}
}
