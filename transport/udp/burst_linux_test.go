package udp

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/softrdma/softrdma/transport"
	"github.com/softrdma/softrdma/wire"
)

// TestUnreadBurst: with the default buffer sizes, a run of 1000 UD SENDs
// of 4 KiB (ib_send_bw -c UD -n 1000: the server posts a receive for
// each and waits for all), sent one per system call as a UD sender posts
// them, all wait in the receiving socket while its process does not read
// (a loaded machine runs the peer, not the receiver, for the whole
// burst), and all are received afterwards. A 4 MiB buffer held 992.
func TestUnreadBurst(t *testing.T) {
	a, b := testAddrs(t, 14)
	ta, err := Listen(Config{Addr: a, Port: 4791})
	if err != nil {
		t.Skipf("cannot bind %v: %v", a, err)
	}
	defer ta.Close()
	tb, err := Listen(Config{Addr: b, Port: 4791})
	if err != nil {
		t.Skipf("cannot bind %v: %v", b, err)
	}
	defer tb.Close()
	// Linux reports twice the value it granted; without CAP_NET_ADMIN it
	// grants at most net.core.rmem_max.
	if got, err := unix.GetsockoptInt(tb.fd, unix.SOL_SOCKET, unix.SO_RCVBUF); err != nil || got < 2*defaultSocketBuffer {
		t.Skipf("receive buffer %d bytes (%v), not the default's %d: needs CAP_NET_ADMIN or net.core.rmem_max >= %d", got, err, 2*defaultSocketBuffer, defaultSocketBuffer)
	}
	const n, mtu = 1000, 4096
	buf := make([]byte, wire.PacketLen(wire.UDSendOnly, mtu))
	wire.BTH(buf).Encode(&wire.BTHFields{Opcode: wire.UDSendOnly, PKey: 0xFFFF, DestQP: 0x11})
	one := []transport.Datagram{{Buf: buf, Peer: tb.LocalAddr(), Flow: 0x22}}
	for i := range n {
		buf[wire.BTHLen+wire.DETHLen] = byte(i)
		if sent, err := ta.Send(one); sent != 1 || err != nil {
			t.Fatalf("Send of packet %d = %d, %v", i, sent, err)
		}
	}
	in := recvBufs(64)
	got := 0
	for {
		k, err := tb.TryRecv(in)
		if err != nil {
			t.Fatal(err)
		}
		if k == 0 {
			break
		}
		for _, p := range in[:k] {
			if len(p.Buf) != len(buf) || p.Buf[wire.BTHLen+wire.DETHLen] != byte(got) {
				t.Fatalf("packet %d: %d bytes, index byte %d", got, len(p.Buf), p.Buf[wire.BTHLen+wire.DETHLen])
			}
			got++
		}
	}
	if got != n {
		t.Fatalf("received %d of the %d packets sent while the receiver did not read", got, n)
	}
}
