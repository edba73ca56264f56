package rdmanet

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/softrdma/softrdma/provider/soft"
	"github.com/softrdma/softrdma/verbs"
)

// A peer whose QP breaks (it stops answering: retries run out) makes a
// blocked Read and a Write fail within the transport's retry time.
func TestBrokenPeer(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the transport's retries (about 17 s)")
	}
	devices(t)
	checkGoroutines(t)
	c, s := pair(t, nil)
	defer c.Close()
	defer s.Close()
	rerr := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 10))
		rerr <- err
	}()
	// The server's QP goes to ERR: it drops what the client sends.
	s.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateErr}, verbs.QPAttrState)
	start := time.Now()
	var werr error
	for i := 0; i < 1000 && werr == nil; i++ {
		_, werr = c.Write(make([]byte, 1000))
		time.Sleep(time.Millisecond)
	}
	if werr == nil {
		t.Fatal("writes to a dead peer kept succeeding")
	}
	select {
	case err := <-rerr:
		if err == nil || err == io.EOF {
			t.Errorf("blocked Read: %v, want an error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("blocked Read did not fail")
	}
	t.Logf("failed after %v: %v", time.Since(start), werr)
}

// With KeepAlive, a peer that dies while this side only reads is found.
func TestKeepAliveFindsDeadPeer(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the transport's retries (about 17 s)")
	}
	devices(t)
	checkGoroutines(t)
	c, s := pair(t, &Config{KeepAlive: 100 * time.Millisecond})
	defer c.Close()
	defer s.Close()
	rerr := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 10))
		rerr <- err
	}()
	s.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateErr}, verbs.QPAttrState)
	select {
	case err := <-rerr:
		if err == nil || err == io.EOF {
			t.Errorf("blocked Read: %v, want an error", err)
		}
		t.Logf("Read: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("a reader of a dead peer with KeepAlive never learned of it")
	}
}

// Close wakes a Write blocked on a full ring at once.
func TestCloseWakesWrite(t *testing.T) {
	devices(t)
	checkGoroutines(t)
	c, s := pair(t, nil)
	defer s.Close()
	werr := make(chan error, 1)
	go func() {
		_, err := c.Write(make([]byte, 8<<20)) // the peer reads nothing
		werr <- err
	}()
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	go c.Close()
	select {
	case err := <-werr:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("Write after Close: %v, want net.ErrClosed", err)
		}
	case <-time.After(time.Second):
		t.Fatal("Close did not wake the blocked Write")
	}
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Errorf("Write took %v to return after Close", d)
	}
}

// hostileWrite posts an RDMA WRITE WITH IMM from s's QP outside the
// protocol: n bytes of s's send buffer to the client's ring at offset off.
func hostileWrite(t *testing.T, s *Conn, imm uint32, n int, off uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	wr := verbs.SendWR{Opcode: verbs.WRRDMAWriteWithImm, SendFlags: verbs.SendSignaled, ImmData: imm,
		RemoteAddr: s.tsgl[0].Addr + off, RKey: s.tsgl[0].Key, WRID: uint64(msgSet(opData, 0))}
	if n > 0 {
		wr.SGList = []verbs.SGE{s.sbuf.SGE(0, n)}
	}
	if err := s.qp.PostSend(&wr); err != nil {
		t.Fatal(err)
	}
	s.sending++
	s.sqeAvail--
}

// waitSent waits until every write s posted completed (a loaded machine
// under -race took more than 50 ms for nine).
func waitSent(t *testing.T, s *Conn) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		s.mu.Lock()
		n := s.sending
		s.mu.Unlock()
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d writes still not completed after 10 s", n)
		}
	}
}

func TestHostilePeer(t *testing.T) {
	devices(t)
	cases := []struct {
		name string
		imm  uint32
		n    int
	}{
		{"length-mismatch", msgSet(opData, 100), 10},
		{"beyond-granted-ring", msgSet(opData, defaultRecvBuffer/2+1), 0},
		{"reserved-op", msgSet(5, 0), 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, s := pair(t, nil)
			defer c.Close()
			defer s.Close()
			if tc.name == "beyond-granted-ring" {
				// The whole ring (both halves are granted at once), then
				// one byte more, before the client reads anything.
				hostileWrite(t, s, msgSet(opData, defaultRecvBuffer/2), defaultRecvBuffer/2, 0)
				hostileWrite(t, s, msgSet(opData, defaultRecvBuffer/2), defaultRecvBuffer/2, defaultRecvBuffer/2)
				hostileWrite(t, s, msgSet(opData, 1), 1, 0)
				time.Sleep(100 * time.Millisecond)
			} else {
				hostileWrite(t, s, tc.imm, tc.n, 0)
			}
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			var err error
			for err == nil {
				_, err = c.Read(make([]byte, 1<<20))
			}
			if !errors.Is(err, errProtocol) {
				t.Fatalf("Read: %v, want a protocol error", err)
			}
		})
	}
	t.Run("too-many-messages", func(t *testing.T) {
		c, s := pair(t, &Config{QueueDepth: 16})
		defer c.Close()
		defer s.Close()
		for i := 0; i < 17; i++ {
			hostileWrite(t, s, msgSet(opData, 1), 1, uint64(i))
			if i == 8 {
				waitSent(t, s) // the send queue drains
			}
		}
		time.Sleep(100 * time.Millisecond)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		var err error
		for err == nil {
			_, err = c.Read(make([]byte, 1))
		}
		if !errors.Is(err, errProtocol) {
			t.Fatalf("Read: %v, want a protocol error", err)
		}
	})
}

// No QP, CQ, MR or PD outlives its connection: a device whose
// connections were all closed closes without ErrInUse.
func TestNoLeaks(t *testing.T) {
	checkGoroutines(t)
	c0, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP("127.0.72.1")})
	if err != nil {
		t.Skip(err)
	}
	port := uint16(c0.LocalAddr().(*net.UDPAddr).Port)
	c0.Close()
	var devs []*soft.Device
	for _, a := range []string{"127.0.72.1", "127.0.72.2"} {
		d, err := soft.Open(soft.Config{Addr: netip.MustParseAddr(a), Port: port})
		if err != nil {
			t.Skip(err)
		}
		devs = append(devs, d)
	}
	l, err := ListenConfig("rdma", "127.0.72.2:0", &Config{Context: devs[1]})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		done := make(chan net.Conn)
		go func() {
			s, _ := l.Accept()
			done <- s
		}()
		d := Dialer{Config: &Config{Context: devs[0]}}
		c, err := d.Dial("rdma", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		s := <-done
		c.Write([]byte("hello"))
		s.Read(make([]byte, 5))
		if err := c.Close(); err != nil {
			t.Errorf("client Close: %v", err)
		}
		if err := s.Close(); err != nil {
			t.Errorf("server Close: %v", err)
		}
	}
	l.Close()
	for _, d := range devs {
		if err := d.Close(); err != nil {
			t.Errorf("closing %s after every connection closed: %v", d.Name(), err)
		}
	}
}
