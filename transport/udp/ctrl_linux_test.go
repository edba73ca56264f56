package udp

import (
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softrdma/softrdma/transport"
)

// TestTClass: every datagram arrives with the traffic class byte it was
// sent with — the socket's (no control message) or its own (IP_TOS in
// the message), ECN bits included — in the batched path and in a GSO run,
// which a change of class ends.
func TestTClass(t *testing.T) {
	for _, gso := range []bool{true, false} {
		a, b := testAddrs(t, 9)
		if !gso {
			a, b = testAddrs(t, 10)
		}
		const sock = 0x68 | transport.ECNECT0 // DSCP 26 (AF31), ECT(0)
		ta, err := Listen(Config{Addr: a, DisableGSO: !gso, TClass: sock})
		if err != nil {
			t.Skip(err)
		}
		tb, err := Listen(Config{Addr: b, DisableGSO: !gso})
		if err != nil {
			ta.Close()
			t.Skip(err)
		}
		classes := []uint8{sock, sock, sock, transport.ECNCE, transport.ECNCE, 0xB8 | transport.ECNECT1, 0, sock}
		out := make([]transport.Datagram, len(classes))
		for i, c := range classes {
			out[i] = transport.Datagram{Buf: packet(512, byte(i)), Peer: tb.LocalAddr(), Flow: 3, TClass: c}
		}
		if _, err := ta.Send(out); err != nil {
			t.Fatal(err)
		}
		in := recvBufs(16)
		for got := 0; got < len(out); {
			k, err := tb.Recv(in)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range in[:k] {
				if string(p.Buf) != string(out[got].Buf) {
					t.Fatalf("gso=%v: packet %d differs", gso, got)
				}
				if p.TClass != classes[got] {
					t.Errorf("gso=%v: packet %d arrived with traffic class %#02x, sent with %#02x", gso, got, p.TClass, classes[got])
				}
				if p.CE() != (classes[got]&3 == 3) {
					t.Errorf("gso=%v: packet %d: CE() = %v", gso, got, p.CE())
				}
				got++
			}
		}
		ta.Close()
		tb.Close()
	}
}

// FuzzParseRecvCtrl: any control buffer parses without a panic or a read
// outside it; a well-formed one round-trips.
func FuzzParseRecvCtrl(f *testing.F) {
	buf := make([]byte, ctrlSlot)
	n := putSendCtrl(buf, 2, 1000, 0x03, 0, false)
	// putSendCtrl writes send-side messages; rewrite the first as UDP_GRO.
	(*unix.Cmsghdr)(unsafe.Pointer(&buf[0])).Type = unix.UDP_GRO
	(*unix.Cmsghdr)(unsafe.Pointer(&buf[0])).SetLen(unix.CmsgLen(4))
	f.Add(buf[:n])
	f.Add(buf[:n-3])
	f.Add([]byte{})
	f.Add(make([]byte, 40))
	f.Fuzz(func(t *testing.T, b []byte) {
		// The kernel's buffer is word-aligned; so is this copy.
		words := make([]uint64, (len(b)+7)/8)
		al := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(words))), len(words)*8)[:len(b)]
		copy(al, b)
		parseRecvCtrl(al)
	})
}

func TestParseRecvCtrl(t *testing.T) {
	buf := make([]byte, ctrlSlot)
	// A GRO message, then a v6 traffic class.
	cm := (*unix.Cmsghdr)(unsafe.Pointer(&buf[0]))
	cm.Level, cm.Type = unix.SOL_UDP, unix.UDP_GRO
	cm.SetLen(unix.CmsgLen(4))
	*(*int32)(unsafe.Pointer(&buf[unix.CmsgLen(0)])) = 1200
	n := unix.CmsgSpace(4)
	n += putSendCtrl(buf[n:], 1, 0, 0x2B, 0, true)
	gro, tc := parseRecvCtrl(buf[:n])
	if gro != 1200 || tc != 0x2B {
		t.Fatalf("parseRecvCtrl = %d, %#x; want 1200, 0x2b", gro, tc)
	}
	if gro, tc := parseRecvCtrl(buf[:n-5]); gro != 1200 || tc != 0 {
		t.Fatalf("truncated second message: %d, %#x; want 1200, 0", gro, tc)
	}
}
