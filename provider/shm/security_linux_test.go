package shm

// Attacks by a hostile peer in this process: another device, speaking
// the public API and the shm control protocol over its own socket.

import (
	"fmt"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/verbs"
)

// sealedRingFd returns a memfd shaped like a request ring, unmapped.
func sealedRingFd(t testing.TB) int {
	t.Helper()
	fd, err := unix.MemfdCreate("attacker-ring", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Ftruncate(fd, ringBytes); err != nil {
		t.Fatal(err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
		t.Fatal(err)
	}
	return fd
}

// ringsFrom counts the rings parked at d that came from c's device.
func ringsFrom(d *Device, c *conn) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for k := range d.inboxes {
		if k.peer == c.peerID {
			n++
		}
	}
	return n
}

func parkedRings(d *Device) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.inboxes)
}

// flushReader waits until the victim's reader has handled everything c
// sent before: it answers a request only after them.
func flushReader(t *testing.T, c *conn) {
	t.Helper()
	if _, err := c.call(&ctrl{typ: mGrantReq, a: 1, b: 1, c: 1, d: 1}, nil, 5*time.Second); err != nil {
		t.Fatal(err)
	}
}

// TestRingFlood: peers send RINGs naming the victim's QP with QPNs of
// their choosing, each a 512 KiB memfd the victim maps. The victim keeps
// at most maxRingsPerPeer per connection and maxRings in all, counts the
// rest, replaces (unmapping) a ring for the same QP pair, and frees a
// peer's rings when it goes.
func TestRingFlood(t *testing.T) {
	v := newSide(t, sideOpts{})
	defer v.close(t)
	var attackers []*Device
	defer func() {
		for _, d := range attackers {
			d.Close()
		}
	}()
	attacker := func() *conn {
		d, err := Open(Config{})
		if err != nil {
			t.Fatal(err)
		}
		attackers = append(attackers, d)
		c, err := d.connTo(v.dev.id, "test")
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	ring := func(c *conn, a, b uint32) {
		fd := sealedRingFd(t)
		defer unix.Close(fd)
		if err := c.send(&ctrl{typ: mRing, a: a, b: b}, nil, fd, false); err != nil {
			t.Fatal(err)
		}
	}
	qpn := v.qp.QPNum()
	c := attacker()
	for i := range maxRingsPerPeer + 50 {
		ring(c, uint32(1000+i), qpn)
	}
	ring(c, 77, qpn^0x5555) // no such QP
	flushReader(t, c)
	vc := connsTo(v.dev, c.dev.id)
	if len(vc) != 1 {
		t.Fatalf("%d connections from the attacker", len(vc))
	}
	if n := ringsFrom(v.dev, vc[0]); n != maxRingsPerPeer {
		t.Errorf("%d rings parked from one peer, want the limit %d", n, maxRingsPerPeer)
	}
	if n := v.dev.ctr.ringRefused.Load(); n != 51 {
		t.Errorf("ring_refused %d, want 51", n)
	}
	// The same QP pair again: replaced, not added.
	for range 10 {
		ring(c, 1000, qpn)
	}
	flushReader(t, c)
	if n := ringsFrom(v.dev, vc[0]); n != maxRingsPerPeer {
		t.Errorf("%d rings after replacing one ten times, want %d", n, maxRingsPerPeer)
	}
	// Enough peers to pass the total.
	for range maxRings/maxRingsPerPeer + 1 {
		c := attacker()
		for i := range maxRingsPerPeer {
			ring(c, uint32(1000+i), qpn)
		}
		flushReader(t, c)
	}
	if n := parkedRings(v.dev); n != maxRings {
		t.Errorf("%d rings parked in all, want the limit %d", n, maxRings)
	}
	for _, d := range attackers {
		id := d.id
		d.Close()
		waitConnsGone(v.dev, id)
	}
	attackers = nil
	if n := parkedRings(v.dev); n != 0 {
		t.Errorf("%d rings still parked after every attacker left", n)
	}
}

// TestSendWithInvRefused: a client's SEND_WITH_INV names the region a
// server shares with another client. As on RoCEv2 it is refused (both
// the SEND and the receive fail as invalid requests, counted), and the
// other client keeps its access.
func TestSendWithInvRefused(t *testing.T) {
	srv := newSide(t, sideOpts{})
	a, b := newSide(t, sideOpts{}), newSide(t, sideOpts{})
	s2, err := srv.pd.CreateQP(&verbs.QPInitAttr{SendCQ: srv.cq, RecvCQ: srv.cq, QPType: verbs.QPTypeRC, Cap: verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s2.Destroy(); b.close(t); a.close(t); srv.close(t) }()
	connect := func(x verbs.QP, xe cm.Endpoint, y verbs.QP, ye cm.Endpoint) {
		t.Helper()
		if err := cm.Connect(x, xe, ye, params(sideOpts{rnrRetry: 7})); err != nil {
			t.Fatal(err)
		}
		if err := cm.Connect(y, ye, xe, params(sideOpts{rnrRetry: 7})); err != nil {
			t.Fatal(err)
		}
	}
	connect(srv.qp, srv.endpoint(), a.qp, a.endpoint())
	s2ep := cm.Endpoint{QPN: s2.QPNum(), GID: srv.dev.GID()}
	connect(s2, s2ep, b.qp, b.endpoint())
	write := func(id uint64) verbs.WCStatus {
		postSend(t, b.qp, verbs.SendWR{WRID: id, Opcode: verbs.WRRDMAWrite, RemoteAddr: srv.mr.Addr(), RKey: srv.mr.RKey(), SGList: []verbs.SGE{b.mr.SGE(0, 8)}})
		return poll(t, b.cq, 1)[0].Status
	}
	if st := write(1); st != verbs.WCSuccess {
		t.Fatalf("b's first WRITE: %v", st)
	}
	postRecv(t, srv.qp, 5, srv.mr.SGE(4096, 64))
	postSend(t, a.qp, verbs.SendWR{WRID: 6, Opcode: verbs.WRSendWithInv, InvalidateRKey: srv.mr.RKey(), SGList: []verbs.SGE{a.mr.SGE(0, 8)}})
	if wc := poll(t, a.cq, 1)[0]; wc.Status != verbs.WCRemInvReqErr {
		t.Errorf("a's SEND_WITH_INV: %v, want %v", wc.Status, verbs.WCRemInvReqErr)
	}
	if wc := poll(t, srv.cq, 1)[0]; wc.WRID != 5 || wc.Status != verbs.WCRemInvReqErr {
		t.Errorf("the server's receive: %+v, want %v", wc, verbs.WCRemInvReqErr)
	}
	if st := write(2); st != verbs.WCSuccess {
		t.Errorf("b's WRITE after a's SEND_WITH_INV: %v; want success (a cannot revoke b's access)", st)
	}
	if n := srv.dev.ctr.badInvalidate.Load(); n != 1 {
		t.Errorf("bad_invalidate %d, want 1", n)
	}
}

// TestGrantEndsWithOwnerQP: what the owner's QP granted ends when the
// QP is destroyed, moves to ERR or changes its access flags, not only
// at DeregMR: the peer's device (this package) unmaps it when told.
func TestGrantEndsWithOwnerQP(t *testing.T) {
	granted := func(qa *QP) int {
		c := qa.conn
		if c == nil {
			return 0
		}
		c.gmu.RLock()
		defer c.gmu.RUnlock()
		n := 0
		for k, g := range c.grants {
			g.mu.RLock()
			if k.qpn == qa.qpn && g.live() {
				n++
			}
			g.mu.RUnlock()
		}
		return n
	}
	waitNoGrant := func(t *testing.T, qa *QP) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); granted(qa) != 0; {
			if time.Now().After(deadline) {
				t.Fatal("the peer still holds the owner's region mapped")
			}
			time.Sleep(time.Millisecond)
		}
	}
	cases := []struct {
		name string
		end  func(t *testing.T, b *side)
	}{
		{"destroy", func(t *testing.T, b *side) {
			if err := b.qp.Destroy(); err != nil {
				t.Fatal(err)
			}
			// The side's cleanup destroys a QP: give it one.
			b.qp, _ = b.pd.CreateQP(&verbs.QPInitAttr{SendCQ: b.cq, RecvCQ: b.cq, QPType: verbs.QPTypeRC, Cap: verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})
		}},
		{"error", func(t *testing.T, b *side) {
			if err := b.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateErr}, verbs.QPAttrState); err != nil {
				t.Fatal(err)
			}
		}},
		{"access flags", func(t *testing.T, b *side) {
			if err := b.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateRTS, QPAccessFlags: verbs.AccessLocalWrite | verbs.AccessRemoteRead}, verbs.QPAttrState|verbs.QPAttrAccessFlags); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, b := pair(t, sideOpts{}, sideOpts{})
			qa := a.qp.(*QP)
			postSend(t, a.qp, verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey(), SGList: []verbs.SGE{a.mr.SGE(0, 8)}})
			if wc := poll(t, a.cq, 1)[0]; wc.Status != verbs.WCSuccess {
				t.Fatalf("WRITE: %v", wc.Status)
			}
			if granted(qa) != 1 {
				t.Fatalf("a holds %d grants, want 1", granted(qa))
			}
			c.end(t, b)
			waitNoGrant(t, qa)
			if c.name == "access flags" {
				postSend(t, a.qp, verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMAWrite, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey(), SGList: []verbs.SGE{a.mr.SGE(0, 8)}})
				if wc := poll(t, a.cq, 1)[0]; wc.Status != verbs.WCRemInvReqErr {
					t.Errorf("WRITE after the owner's QP dropped remote write: %v, want %v", wc.Status, verbs.WCRemInvReqErr)
				}
			}
		})
	}
}

// TestDoorbellPeersReadOnly: a peer (here a bare socket that reads the
// device's HELLO) gets the device's doorbell read-only, so it cannot
// clear the flag that tells other peers the device sleeps; and the
// device, with the safety wake-up taken away, is still woken by its
// other peer's SEND.
func TestDoorbellPeersReadOnly(t *testing.T) {
	defer func(d time.Duration) { safetyWake = d }(safetyWake)
	safetyWake = 0 // no safety net: a lost wake-up is lost for good
	a, b := pair(t, sideOpts{}, sideOpts{})
	uc, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: b.dev.sockName(b.dev.id), Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	defer uc.Close()
	buf, oob := make([]byte, ctrlMax), make([]byte, unix.CmsgSpace(4*4))
	_, oobn, _, _, err := uc.ReadMsgUnix(buf, oob)
	if err != nil {
		t.Fatal(err)
	}
	fds := parseFds(oob[:oobn])
	if len(fds) != 1 {
		t.Fatalf("HELLO carried %d fds", len(fds))
	}
	defer closeFds(fds)
	var bell []byte
	if m, err := unix.Mmap(fds[0], 0, bellBytes, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err == nil {
		bell = m
		t.Error("a peer mapped the doorbell writable through the fd it was sent")
	} else if fd, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", fds[0]), unix.O_RDWR, 0); err == nil {
		if m, err := unix.Mmap(fd, 0, bellBytes, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err == nil {
			bell = m
			t.Error("a peer mapped the doorbell writable by reopening its fd")
		}
		unix.Close(fd)
	}
	postRecv(t, b.qp, 1, b.mr.SGE(0, 64))
	// b's progress goroutine goes to sleep once nothing moves.
	for deadline := time.Now().Add(5 * time.Second); atomic.LoadUint32(b.dev.bell.word(bellSleeping)) == 0; {
		if time.Now().After(deadline) {
			t.Fatal("b's progress goroutine does not sleep")
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond) // and is in its futex wait by now
	if bell != nil {
		defer unix.Munmap(bell)
		// The attack: b seems awake, so a does not ring.
		atomic.StoreUint32(doorbell(bell).word(bellSleeping), 0)
	}
	postSend(t, a.qp, verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, SGList: []verbs.SGE{a.mr.SGE(0, 8)}})
	if wc := poll(t, a.cq, 1)[0]; wc.Status != verbs.WCSuccess {
		t.Errorf("a's SEND: %v", wc.Status)
	}
	if wc := poll(t, b.cq, 1)[0]; wc.Status != verbs.WCSuccess {
		t.Errorf("b's receive: %v", wc.Status)
	}
}

// TestReconnectsHoldNothing: a peer that connects and disconnects again
// and again leaves no doorbell mapping and no fd behind at the device
// (each connection used to cost a map entry until Device.Close).
func TestReconnectsHoldNothing(t *testing.T) {
	v := newSide(t, sideOpts{})
	defer v.close(t)
	atk, err := Open(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer atk.Close()
	count := func() (bells, fds int) {
		maps, _ := os.ReadFile("/proc/self/maps")
		bells = strings.Count(string(maps), "softrdma-shm-bell")
		ents, _ := os.ReadDir("/proc/self/fd")
		return bells, len(ents)
	}
	cycle := func() {
		c, err := atk.connTo(v.dev.id, "test")
		if err != nil {
			t.Fatal(err)
		}
		flushReader(t, c) // the victim has the connection in service
		c.close()
		<-c.done
		waitConnsGone(v.dev, atk.id)
	}
	cycle()
	bells0, fds0 := count()
	for range 100 {
		cycle()
	}
	// The last connection's reader frees its doorbell just after done.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		bells, fds := count()
		if bells <= bells0 && fds <= fds0+4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 100 connections: %d doorbell mappings (was %d), %d fds (was %d)", bells, bells0, fds, fds0)
		}
	}
}
