package udp

import (
	"errors"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/softrdma/softrdma/transport"
)

// TestICMPUnreachable: a datagram to an address where nothing listens
// comes back as an ICMP port unreachable, which OnUnreachable reports
// with the destination and ECONNREFUSED, from a sending socket (read by
// a blocked Recv's poll) and from the receiving one (SourcePorts -1: the
// receive itself finds the error); receiving and sending go on.
func TestICMPUnreachable(t *testing.T) {
	for i, ports := range []int{0, -1} {
		t.Run(map[int]string{0: "senders", -1: "receiving-socket"}[ports], func(t *testing.T) {
			a, b := testAddrs(t, byte(11+2*i))
			ta, err := Listen(Config{Addr: a, SourcePorts: ports})
			if err != nil {
				t.Skip(err)
			}
			defer ta.Close()
			type report struct {
				dst netip.AddrPort
				err error
			}
			reports := make(chan report, 16)
			ta.OnUnreachable(func(dst netip.AddrPort, err error) {
				select {
				case reports <- report{dst, err}:
				default:
				}
			})
			got := make(chan transport.Datagram, 1)
			recvErr := make(chan error, 1)
			go func() {
				in := recvBufs(4)
				n, err := ta.Recv(in)
				if err != nil {
					recvErr <- err
					return
				}
				if n > 0 {
					got <- transport.Datagram{Buf: append([]byte(nil), in[0].Buf...)}
				}
			}()
			time.Sleep(10 * time.Millisecond) // Recv is waiting
			dead := netip.AddrPortFrom(b, 4791)
			for range 2 { // the second send meets the first one's error
				if n, err := ta.Send([]transport.Datagram{{Buf: packet(8, 1), Peer: dead, Flow: 3}}); n != 1 || err != nil {
					t.Fatalf("Send to a dead address: %d, %v", n, err)
				}
				select {
				case r := <-reports:
					if r.dst != dead || !errors.Is(r.err, syscall.ECONNREFUSED) {
						t.Fatalf("report %v %v, want %v and ECONNREFUSED", r.dst, r.err, dead)
					}
				case err := <-recvErr:
					t.Fatalf("Recv failed on the ICMP error: %v", err)
				case <-time.After(5 * time.Second):
					t.Fatal("no report of the ICMP port unreachable")
				}
			}
			// Receiving still works.
			tb, err := Listen(Config{Addr: b})
			if err != nil {
				t.Skip(err)
			}
			defer tb.Close()
			if _, err := tb.Send([]transport.Datagram{{Buf: packet(8, 2), Peer: ta.LocalAddr()}}); err != nil {
				t.Fatal(err)
			}
			select {
			case <-got:
			case err := <-recvErr:
				t.Fatalf("Recv: %v", err)
			case <-time.After(5 * time.Second):
				t.Fatal("Recv got nothing after the ICMP error")
			}
			if s := ta.Stats(); s.NetErrors < 2 {
				t.Fatalf("NetErrors %d, want at least 2", s.NetErrors)
			}
		})
	}
}
