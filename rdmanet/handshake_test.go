package rdmanet

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/internal/cmattack"
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// spoofREQs sends n rsocket REQs to the listener at to from another
// address (as if spoofed: the REPs go where nobody answers), each with a
// comm ID of its own.
func spoofREQs(t *testing.T, to netip.AddrPort, n int, firstID uint32) {
	t.Helper()
	evil := netip.MustParseAddr("127.0.71.9")
	p, err := cmattack.Open(evil, 0, devPort)
	if err != nil {
		t.Skipf("attacker socket: %v", err)
	}
	defer p.Close()
	var cd [connDataLen]byte
	(&connData{Version: 1, Credits: 16, TargetSGL: sge{Addr: 0x1000, Key: 1, Length: 1}, DataBuf: sge{Addr: 0x2000, Key: 2, Length: 1 << 16}}).encode(cd[:])
	for i := range n {
		r := wire.CMReq{LocalCommID: firstID + uint32(i), ServiceID: cm.ServiceID(cm.PortSpaceTCP, to.Port()), LocalCAGUID: 0xbad,
			LocalQPN: 0x1234 + uint32(i), ResponderResources: 1, InitiatorDepth: 1, Transport: wire.CMTransportRC,
			StartingPSN: 0x100, RemoteCMTimeout: 20, LocalCMTimeout: 20, RetryCount: 7, RNRRetryCount: 7, MaxCMRetries: 15,
			PKey: 0xffff, PathMTU: uint8(verbs.MTU1024),
			Primary: wire.CMPath{LocalLID: 0xffff, RemoteLID: 0xffff, LocalGID: verbs.GIDFromAddr(evil), RemoteGID: verbs.GIDFromAddr(to.Addr()), HopLimit: 64, LocalACKTimeout: 19}}
		h := wire.CMAHeader{SrcPort: 40000, Src: evil, Dst: to.Addr()}
		h.Encode(r.PrivateData[:])
		copy(r.PrivateData[wire.CMAHeaderLen:], cd[:])
		if err := p.Send(to.Addr(), wire.CMReqAttr, uint64(i), r.Encode); err != nil {
			t.Fatal(err)
		}
	}
}

// serveAccepted accepts connections until the listener closes and hands
// them over.
func serveAccepted(l net.Listener) chan net.Conn {
	ch := make(chan net.Conn, 16)
	go func() {
		defer close(ch)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			ch <- c
		}
	}()
	return ch
}

// TestAttackPendingHandshakes: 20 REQs that are never completed (spoofed:
// they need no answer) do not stop a legitimate dial with a 5 s timeout:
// their handshakes wait on their own. Before, Accept handled one request
// at a time and waited up to 30 s for each: the dial failed.
func TestAttackPendingHandshakes(t *testing.T) {
	devices(t)
	l, err := ListenConfig("rdma", addrB+":0", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	conns := serveAccepted(l)
	spoofREQs(t, l.Addr().(*Addr).AddrPort, 20, 0x100000)
	time.Sleep(100 * time.Millisecond) // the spoofed requests come first
	d := Dialer{Timeout: 5 * time.Second}
	c, err := d.Dial("rdma", l.Addr().String())
	if err != nil {
		t.Fatalf("a legitimate dial behind 20 pending handshakes: %v", err)
	}
	defer c.Close()
	select {
	case s := <-conns:
		s.Close()
	case <-time.After(5 * time.Second):
		t.Fatal("Accept did not return the legitimate connection")
	}
}

// TestPendingHandshakesBounded: beyond MaxPendingHandshakes, requests are
// rejected and counted; after HandshakeTimeout the pending ones are
// dropped and counted, and a legitimate dial gets in again.
func TestPendingHandshakesBounded(t *testing.T) {
	devices(t)
	l, err := ListenConfig("rdma", addrB+":0", &Config{MaxPendingHandshakes: 4, HandshakeTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	conns := serveAccepted(l)
	spoofREQs(t, l.Addr().(*Addr).AddrPort, 10, 0x200000)
	deadline := time.Now().Add(5 * time.Second)
	for l.Stats().TimedOut < 4 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	st := l.Stats()
	if st.Refused < 6 || st.TimedOut < 4 {
		t.Fatalf("stats %+v: want at least 6 refused and 4 timed out", st)
	}
	d := Dialer{Timeout: 5 * time.Second}
	c, err := d.Dial("rdma", l.Addr().String())
	if err != nil {
		t.Fatalf("dial after the pending handshakes timed out: %v", err)
	}
	defer c.Close()
	select {
	case s := <-conns:
		s.Close()
	case <-time.After(5 * time.Second):
		t.Fatal("Accept did not return the legitimate connection")
	}
}
