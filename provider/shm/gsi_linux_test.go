package shm

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/softrdma/softrdma/verbs"
)

func openDev(t *testing.T, cfg Config) *Device {
	t.Helper()
	d, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// connsTo lists d's connections to the device peer.
func connsTo(d *Device, peer uint64) []*conn {
	d.mu.Lock()
	defer d.mu.Unlock()
	var cs []*conn
	for c := range d.all {
		if c.peerID == peer {
			cs = append(cs, c)
		}
	}
	return cs
}

// waitConnsGone waits until d's readers saw every connection to peer end
// and d forgot them. closeNow closes c.done first, so that calls in
// flight fail at once, and only then drops c from d.all, with the rings
// c brought, under one hold of d.mu: a test that counts what is left
// waits for that too.
func waitConnsGone(d *Device, peer uint64) {
	for _, c := range connsTo(d, peer) {
		<-c.done
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			d.mu.Lock()
			in := d.all[c]
			d.mu.Unlock()
			if !in {
				break
			}
		}
	}
}

// TestServiceDirectory: a service ID is held by one device of the host at
// a time, found from a host address or the holder's GID, and free again
// after release or Close; in the abstract namespace and in a Config.Dir,
// where a killed holder's socket file does not keep it.
func TestServiceDirectory(t *testing.T) {
	for _, dir := range []string{"", t.TempDir()} {
		name := "abstract"
		if dir != "" {
			name = "dir"
		}
		t.Run(name, func(t *testing.T) {
			a, b := openDev(t, Config{Dir: dir}), openDev(t, Config{Dir: dir})
			sid := uint64(0x01060000) | uint64(time.Now().UnixNano()&0xffff)
			release, err := a.BindService(1, sid)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := b.BindService(1, sid); !errors.Is(err, verbs.ErrInUse) {
				t.Fatalf("second BindService: %v; want ErrInUse", err)
			}
			for _, addr := range []string{"127.0.0.1", "::1", "0.0.0.0"} {
				g, err := b.LookupService(1, netip.MustParseAddr(addr), sid)
				if err != nil || g != a.GID() {
					t.Errorf("LookupService(%s) = %v, %v; want %v", addr, g, err, a.GID())
				}
			}
			if g, err := b.LookupService(1, a.GID().Addr(), sid^1); err != nil || g != a.GID() {
				t.Errorf("LookupService(a's GID) = %v, %v; want a's GID whatever the service", g, err)
			}
			if _, err := b.LookupService(1, netip.MustParseAddr("192.0.2.1"), sid); !errors.Is(err, verbs.ErrInvalidArgument) {
				t.Errorf("LookupService(another host): %v; want ErrInvalidArgument", err)
			}
			release()
			release() // twice is harmless
			if _, err := b.LookupService(1, netip.MustParseAddr("127.0.0.1"), sid); !errors.Is(err, verbs.ErrNotFound) {
				t.Errorf("LookupService after release: %v; want ErrNotFound", err)
			}
			if _, err := b.BindService(1, sid); err != nil {
				t.Errorf("BindService after release: %v", err)
			}
			b.Close()
			waitConnsGone(a, b.id)
			if _, err := a.LookupService(1, netip.MustParseAddr("127.0.0.1"), sid); !errors.Is(err, verbs.ErrNotFound) {
				t.Errorf("LookupService after the holder closed: %v; want ErrNotFound", err)
			}
			if _, err := a.LookupService(1, b.GID().Addr(), sid); !errors.Is(err, verbs.ErrUnreachable) {
				t.Errorf("LookupService(a closed device's GID): %v; want ErrUnreachable", err)
			}
			if dir == "" {
				return
			}
			// A socket file nobody listens on, as a killed process leaves.
			name := a.serviceName(a.uid, sid)
			ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: name, Net: "unixpacket"})
			if err != nil {
				t.Fatal(err)
			}
			ln.SetUnlinkOnClose(false)
			ln.Close()
			if _, err := os.Stat(name); err != nil {
				t.Fatal(err)
			}
			if _, err := a.BindService(1, sid); err != nil {
				t.Errorf("BindService over a stale socket file: %v", err)
			}
		})
	}
}

// TestMADs: SendMAD reaches the peer's handler from QP1 with the sender's
// proven GID; MADs with another Q_Key, or without a handler, are dropped;
// a GID that is not a shm device's is refused and a gone device is
// unreachable.
func TestMADs(t *testing.T) {
	a, b := openDev(t, Config{}), openDev(t, Config{})
	type got struct {
		src verbs.MADSource
		mad string
	}
	ch := make(chan got, 4)
	if err := b.HandleMADs(1, func(src verbs.MADSource, mad []byte) { ch <- got{src, string(mad)} }); err != nil {
		t.Fatal(err)
	}
	if err := a.SendMAD(1, b.GID(), 1, 0x1234, []byte("wrong qkey")); err != nil {
		t.Fatal(err)
	}
	if err := a.SendMAD(1, b.GID(), 1, verbs.GSIQKey, []byte("mad")); err != nil {
		t.Fatal(err)
	}
	select {
	case g := <-ch:
		want := verbs.MADSource{GID: a.GID(), QPN: 1, PKey: 0xFFFF}
		if g.src != want || g.mad != "mad" {
			t.Errorf("got %+v %q; want %+v \"mad\"", g.src, g.mad, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no MAD arrived")
	}
	if err := a.SendMAD(1, verbs.GIDFromAddr(netip.MustParseAddr("10.0.0.1")), 1, verbs.GSIQKey, []byte("x")); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Errorf("SendMAD to an IPv4 GID: %v; want ErrInvalidArgument", err)
	}
	if err := a.SendMAD(2, b.GID(), 1, verbs.GSIQKey, []byte("x")); !errors.Is(err, verbs.ErrNotFound) {
		t.Errorf("SendMAD on port 2: %v; want ErrNotFound", err)
	}
	b.HandleMADs(1, nil)
	g := b.GID()
	b.Close()
	waitConnsGone(a, b.id) // a saw b go
	if err := a.SendMAD(1, g, 1, verbs.GSIQKey, []byte("x")); !errors.Is(err, verbs.ErrUnreachable) {
		t.Errorf("SendMAD to a closed device: %v; want ErrUnreachable", err)
	}
}

// TestPeerGoneRetiresConsumed: when the peer's device goes, a SEND it had
// already consumed completes successfully (its consumer index is its
// ACK); only what it had not taken is flushed. A cm peer that takes the
// last message, disconnects and exits is the common case.
func TestPeerGoneRetiresConsumed(t *testing.T) {
	a, b := pair(t, sideOpts{}, sideOpts{})
	qa := a.qp.(*QP)
	qa.busy.Store(0) // nothing retires a's SENDs but the PostSend and peerGone
	postRecv(t, b.qp, 1, b.mr.SGE(0, 64))
	postSend(t, a.qp, verbs.SendWR{WRID: 10, Opcode: verbs.WRSend, SGList: []verbs.SGE{a.mr.SGE(0, 8)}})
	postSend(t, a.qp, verbs.SendWR{WRID: 11, Opcode: verbs.WRSend, SGList: []verbs.SGE{a.mr.SGE(0, 8)}})
	if wc := poll(t, b.cq, 1)[0]; wc.Status != verbs.WCSuccess || wc.WRID != 1 {
		t.Fatalf("b's receive: %+v", wc)
	}
	// As if b's process died: every connection between the devices
	// closes (the two may have dialed each other at once: two conns).
	for _, c := range connsTo(a.dev, b.dev.id) {
		c.close()
	}
	waitConnsGone(a.dev, b.dev.id)
	for qa.State() != verbs.QPStateErr {
		time.Sleep(time.Millisecond) // peerGone runs after done closes
	}
	wcs := poll(t, a.cq, 2)
	if wcs[0].WRID != 10 || wcs[0].Status != verbs.WCSuccess {
		t.Errorf("the consumed SEND completed %+v; want success", wcs[0])
	}
	// b's QP saw the connection go too and may have failed the SEND it
	// holds first (a NAK, as after a wire's retries); a killed b cannot.
	if st := wcs[1].Status; wcs[1].WRID != 11 || (st != verbs.WCWRFlushErr && st != verbs.WCRetryExcErr) {
		t.Errorf("the SEND b never took completed %+v; want flushed (or failed by b's NAK)", wcs[1])
	}
}

// TestPeerGoneIdleKeepsReceives: a QP with nothing in flight whose peer
// left stays up for peerGoneGrace, its receives posted and unflushed, as
// an idle QP on a wire would until a keepalive noticed; then it moves to
// ERR and flushes them. ibv_rc_pingpong's server, polling for its last
// SEND's completion with receives left over, failed on their flush.
func TestPeerGoneIdleKeepsReceives(t *testing.T) {
	old := peerGoneGrace.Swap(int64(300 * time.Millisecond))
	defer peerGoneGrace.Store(old)
	a, b := pair(t, sideOpts{}, sideOpts{})
	qa := a.qp.(*QP)
	postRecv(t, a.qp, 7, a.mr.SGE(0, 64))
	postRecv(t, b.qp, 1, b.mr.SGE(0, 64))
	postSend(t, a.qp, verbs.SendWR{WRID: 10, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 8)}})
	if wc := poll(t, b.cq, 1)[0]; wc.Status != verbs.WCSuccess || wc.WRID != 1 {
		t.Fatalf("b's receive: %+v", wc)
	}
	if wc := poll(t, a.cq, 1)[0]; wc.Status != verbs.WCSuccess || wc.WRID != 10 {
		t.Fatalf("a's SEND: %+v", wc)
	}
	gone := time.Now()
	for _, c := range connsTo(a.dev, b.dev.id) {
		c.close()
	}
	waitConnsGone(a.dev, b.dev.id)
	time.Sleep(100 * time.Millisecond) // peerGone has run by now
	var wc [1]verbs.WC
	if n, _ := a.cq.Poll(wc[:]); n != 0 || qa.State() != verbs.QPStateRTS {
		t.Fatalf("right after the peer left: %d completions (%+v), state %v; want none, RTS", n, wc[0], qa.State())
	}
	for qa.State() != verbs.QPStateErr {
		if time.Since(gone) > 10*time.Second {
			t.Fatal("the idle QP never moved to ERR after its peer left")
		}
		time.Sleep(time.Millisecond)
	}
	if w := poll(t, a.cq, 1)[0]; w.WRID != 7 || w.Status != verbs.WCWRFlushErr {
		t.Errorf("after the grace, the posted receive completed %+v; want flushed", w)
	}
}
