package reuseport

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// need skips (fails under CI) when this machine cannot share addresses.
func need(t *testing.T, addr netip.AddrPort) *Share {
	t.Helper()
	s, err := Prepare([]netip.AddrPort{addr})
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI must be able to share addresses (root, bpffs): %v", err)
		}
		t.Skipf("cannot share addresses here: %v", err)
	}
	return s
}

// bindShared opens a UDP socket on addr with SO_REUSEPORT.
func bindShared(t *testing.T, addr netip.AddrPort) int {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); err != nil {
		t.Fatal(err)
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: addr.Addr().As4(), Port: int(addr.Port())}); err != nil {
		t.Fatal(err)
	}
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 200000})
	return fd
}

// member is one process's socket in the group, joined.
type member struct {
	fd int
	s  *Share
}

func join(t *testing.T, addr netip.AddrPort) *member {
	t.Helper()
	s := need(t, addr)
	fd := bindShared(t, addr)
	if err := s.Join([]int{fd}); err != nil {
		t.Fatal(err)
	}
	m := &member{fd: fd, s: s}
	t.Cleanup(m.close)
	return m
}

func (m *member) close() {
	if m.fd >= 0 {
		unix.Close(m.fd)
		m.s.Close()
		m.fd = -1
	}
}

// bthTo is a UDP payload: a BTH addressed to qpn, then a DETH and, for
// QP1, a CM MAD of attribute attr with the comm IDs and service ID.
func bthTo(qpn uint32, attr uint16, local, remote uint32, service uint64) []byte {
	b := make([]byte, 12+8+256+4)
	b[0] = 0x64 // UD SEND only
	binary.BigEndian.PutUint32(b[4:], qpn)
	mad := b[20:]
	mad[0], mad[1], mad[2], mad[3] = 1, mgmtClassCM, 2, 3
	binary.BigEndian.PutUint16(mad[16:], attr)
	binary.BigEndian.PutUint32(mad[24:], local)
	binary.BigEndian.PutUint32(mad[28:], remote)
	binary.BigEndian.PutUint64(mad[32:], service)
	return b
}

// receiver returns the index in ms of the member that got b, or -1.
func receiver(t *testing.T, addr netip.AddrPort, ms []*member, b []byte) int {
	t.Helper()
	out, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(out)
	if err := unix.Sendto(out, b, 0, &unix.SockaddrInet4{Addr: addr.Addr().As4(), Port: int(addr.Port())}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Second)
	buf := make([]byte, 2048)
	for time.Now().Before(deadline) {
		for i, m := range ms {
			if m.fd < 0 {
				continue
			}
			n, _, err := unix.Recvfrom(m.fd, buf, unix.MSG_DONTWAIT)
			if err == nil && n == len(b) {
				return i
			}
		}
		time.Sleep(time.Millisecond)
	}
	return -1
}

// TestSteering: datagrams reach the member whose slot their QPN or comm
// ID carries, connection requests the member that claimed the service;
// a member that leaves stops getting its QPs' datagrams while the others'
// still go where they belong (the socket array does not reorder).
func TestSteering(t *testing.T) {
	addr := netip.MustParseAddrPort("127.0.0.77:47910")
	ms := []*member{join(t, addr), join(t, addr), join(t, addr)}
	for i, m := range ms {
		if m.s.Slot() != uint32(i) {
			t.Fatalf("member %d took slot %d, want %d (lowest free)", i, m.s.Slot(), i)
		}
	}
	qpn := func(slot uint32) uint32 { return slot<<(24-SlotBits) | 0x1234 }
	comm := func(slot uint32) uint32 { return slot<<(32-SlotBits) | 0x55 }
	for round := range 3 {
		for i := range ms {
			if got := receiver(t, addr, ms, bthTo(qpn(uint32(i)), 0, 0, 0, 0)); got != i {
				t.Fatalf("round %d: QPN of slot %d reached member %d", round, i, got)
			}
		}
	}
	const rep, rtu, sidrRep = 0x13, 0x14, attrSIDRRep
	for i := range ms {
		for _, attr := range []uint16{rep, rtu} {
			if got := receiver(t, addr, ms, bthTo(1, attr, 0xdead, comm(uint32(i)), 0)); got != i {
				t.Fatalf("CM attribute %#x to comm ID of slot %d reached member %d", attr, i, got)
			}
		}
		if got := receiver(t, addr, ms, bthTo(1, sidrRep, comm(uint32(i)), 0, 0)); got != i {
			t.Fatalf("SIDR_REP to request ID of slot %d reached member %d", i, got)
		}
	}
	svc := uint64(0x0106)<<16 | 18515
	if err := ms[2].s.ClaimService(svc); err != nil {
		t.Fatal(err)
	}
	if err := ms[1].s.ClaimService(svc); !errors.Is(err, unix.EADDRINUSE) {
		t.Fatalf("a second claim on a live service: %v, want EADDRINUSE", err)
	}
	for _, attr := range []uint16{attrREQ, attrSIDRReq} {
		if got := receiver(t, addr, ms, bthTo(1, attr, comm(0), 0, svc)); got != 2 {
			t.Fatalf("request %#x for the claimed service reached member %d, want 2", attr, got)
		}
	}
	// A request for a service nobody claims reaches somebody (who rejects it).
	if got := receiver(t, addr, ms, bthTo(1, attrREQ, comm(0), 0, svc+1)); got < 0 {
		t.Fatal("a request for an unclaimed service was dropped; some process should answer it")
	}

	ms[0].close() // the first member leaves: no slot moves
	if got := receiver(t, addr, ms, bthTo(qpn(0), 0, 0, 0, 0)); got != -1 {
		t.Fatalf("a datagram to the departed member's QP reached member %d, want dropped", got)
	}
	for _, i := range []int{1, 2} {
		if got := receiver(t, addr, ms, bthTo(qpn(uint32(i)), 0, 0, 0, 0)); got != i {
			t.Fatalf("after member 0 left, QPN of slot %d reached member %d", i, got)
		}
	}
	ms[2].close() // the service's owner leaves: another may claim it
	if err := ms[1].s.ClaimService(svc); err != nil {
		t.Fatalf("claiming a service whose owner left: %v", err)
	}
	if got := receiver(t, addr, ms, bthTo(1, attrREQ, comm(0), 0, svc)); got != 1 {
		t.Fatalf("request reached member %d after the claim moved, want 1", got)
	}
	if m := join(t, addr); m.s.Slot() != 0 {
		t.Fatalf("a newcomer took slot %d; the lowest free is 0", m.s.Slot())
	}
}

// TestLastMemberUnpins: the maps stay pinned while a member is alive and
// go with the last one, so addresses used once leave nothing behind.
func TestLastMemberUnpins(t *testing.T) {
	addr := netip.MustParseAddrPort("127.0.0.78:47911")
	a, b := join(t, addr), join(t, addr)
	pins, _ := filepathGlob(t, "net*-127_0_0_78-47911-*")
	if pins != 2 {
		t.Fatalf("%d pins for the group, want 2", pins)
	}
	a.close()
	if n, _ := filepathGlob(t, "net*-127_0_0_78-47911-*"); n != 2 {
		t.Fatalf("%d pins after one of two members left, want 2", n)
	}
	b.close()
	if n, names := filepathGlob(t, "net*-127_0_0_78-47911-*"); n != 0 {
		t.Fatalf("pins left after the last member: %v", names)
	}
}

func filepathGlob(t *testing.T, pattern string) (int, []string) {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(Dir, pattern))
	if err != nil {
		t.Fatal(err)
	}
	return len(m), m
}

// TestClaimAfterClose: a listener closed after its device (the order a
// program's defers may take) releases nothing and does not panic; a claim
// on a closed device is an error.
func TestClaimAfterClose(t *testing.T) {
	addr := netip.MustParseAddrPort("127.0.0.79:47912")
	m := join(t, addr)
	svc := uint64(0x0106)<<16 | 7000
	if err := m.s.ClaimService(svc); err != nil {
		t.Fatal(err)
	}
	m.close()
	m.s.ReleaseService(svc)
	m.s.ReleaseService(svc + 1)
	if err := m.s.ClaimService(svc); err == nil {
		t.Fatal("a claim on a closed device succeeded")
	}
}

// TestShared: an address without a group, or with a group of one, is not
// shared; with two members it is, and stops being when one leaves.
func TestShared(t *testing.T) {
	addr := netip.MustParseAddrPort("127.0.0.79:47911")
	check := func(when string, want bool) {
		t.Helper()
		got, err := Shared(addr)
		if err != nil || got != want {
			t.Fatalf("%s: Shared = %v, %v; want %v", when, got, err, want)
		}
	}
	check("no group", false)
	a := join(t, addr)
	check("one member", false)
	b := join(t, addr)
	check("two members", true)
	a.close()
	check("one member left", false)
	b.close()
	check("group removed", false)
}

// TestSharedZeroAllocs: once an address was asked about, Shared allocates
// nothing, with or without a group (transports ask it from the send path
// every steering refresh, and the one-sided calls' allocation tests count
// the whole process).
func TestSharedZeroAllocs(t *testing.T) {
	addr := netip.MustParseAddrPort("127.0.0.79:47912")
	measure := func(when string, want bool) {
		t.Helper()
		if got, err := Shared(addr); err != nil || got != want {
			t.Fatalf("%s: Shared = %v, %v; want %v", when, got, err, want)
		}
		if n := testing.AllocsPerRun(100, func() { Shared(addr) }); n != 0 {
			t.Errorf("%s: Shared allocates %v times per call", when, n)
		}
	}
	measure("no group", false)
	a := join(t, addr)
	defer a.close()
	measure("one member", false)
	b := join(t, addr)
	defer b.close()
	measure("two members", true)
}
