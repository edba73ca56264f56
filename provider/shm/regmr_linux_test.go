package shm

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/verbs"
)

// TestRegMRTwoProcesses: WRITE (one chunk, several chunks, inline),
// WRITE_WITH_IMM, READ and both atomics on a peer process's RegMR'd Go
// memory, which the peer's device applies as copies.
func TestRegMRTwoProcesses(t *testing.T) {
	s := twoProcSide(t)
	p := startPeerEnv(t, s, "SHM_TEST_PEER_REGMR=1")
	m := s.mr.Bytes()
	copy(m, "into the Go heap")
	big := bytes.Repeat([]byte("0123456789abcdef"), 100<<10/16) // 100 KiB: four COPY_WRITEs
	copy(m[200000:], big)
	if l := p.do(t, "recv 1 0 64"); l != "OK" {
		t.Fatal(l)
	}
	postSend(t, s.qp, verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, RemoteAddr: p.info.addr + 2000, RKey: p.info.rkey, SGList: []verbs.SGE{s.mr.SGE(0, 16)}})
	postSend(t, s.qp, verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendInline, RemoteAddr: p.info.addr + 3000, RKey: p.info.rkey, SGList: []verbs.SGE{s.mr.SGE(0, 4)}})
	postSend(t, s.qp, verbs.SendWR{WRID: 3, Opcode: verbs.WRRDMAWrite, RemoteAddr: p.info.addr + 300000, RKey: p.info.rkey, SGList: []verbs.SGE{s.mr.SGE(200000, len(big))}})
	postSend(t, s.qp, verbs.SendWR{WRID: 4, Opcode: verbs.WRRDMARead, RemoteAddr: p.info.addr + 300000, RKey: p.info.rkey, SGList: []verbs.SGE{s.mr.SGE(500000, len(big))}})
	postSend(t, s.qp, verbs.SendWR{WRID: 5, Opcode: verbs.WRRDMAWriteWithImm, ImmData: 9, RemoteAddr: p.info.addr + 4000, RKey: p.info.rkey, SGList: []verbs.SGE{s.mr.SGE(0, 16)}})
	postSend(t, s.qp, verbs.SendWR{WRID: 6, Opcode: verbs.WRAtomicFetchAndAdd, CompareAdd: 5, RemoteAddr: p.info.addr + 8000, RKey: p.info.rkey, SGList: []verbs.SGE{s.mr.SGE(8000, 8)}})
	postSend(t, s.qp, verbs.SendWR{WRID: 7, Opcode: verbs.WRAtomicCmpAndSwp, CompareAdd: 5, Swap: 11, RemoteAddr: p.info.addr + 8000, RKey: p.info.rkey, SGList: []verbs.SGE{s.mr.SGE(8008, 8)}})
	postSend(t, s.qp, verbs.SendWR{WRID: 8, Opcode: verbs.WRAtomicCmpAndSwp, CompareAdd: 5, Swap: 12, RemoteAddr: p.info.addr + 8000, RKey: p.info.rkey, SGList: []verbs.SGE{s.mr.SGE(8016, 8)}})
	for i, wc := range poll(t, s.cq, 8) {
		if wc.Status != verbs.WCSuccess || wc.WRID != uint64(i+1) {
			t.Errorf("completion %d: %+v", i, wc)
		}
	}
	if l := p.do(t, "poll 1"); l != "WC 1 0 129 16 9 2" {
		t.Errorf("peer's WRITE_WITH_IMM completion %q", l)
	}
	for _, c := range []struct {
		off  int
		want []byte
	}{{2000, m[:16]}, {3000, m[:4]}, {4000, m[:16]}, {300000, big[:64]}, {300000 + len(big) - 64, big[len(big)-64:]}} {
		if got := p.do(t, "dump %d %d", c.off, len(c.want)); got != hex.EncodeToString(c.want) {
			t.Errorf("peer's memory at %d: %s, want %q", c.off, got, c.want)
		}
	}
	if !bytes.Equal(m[500000:500000+len(big)], big) {
		t.Error("READ of the peer's Go memory returned other bytes")
	}
	if a, b, c := binary.LittleEndian.Uint64(m[8000:]), binary.LittleEndian.Uint64(m[8008:]), binary.LittleEndian.Uint64(m[8016:]); a != 0 || b != 5 || c != 11 {
		t.Errorf("atomics returned %d, %d, %d; want 0, 5, 11", a, b, c)
	}
	if got := p.do(t, "dump 8000 8"); got != "0b00000000000000" {
		t.Errorf("atomic target is %s, want 11", got)
	}
	if l := p.do(t, "exit"); l != "OK" {
		t.Errorf("peer exit: %q", l)
	}
}

// TestRegMRAtomicsFromSeveralProcesses has three processes add to one
// word of our Go memory: each FETCH_ADD is applied exactly once.
func TestRegMRAtomicsFromSeveralProcesses(t *testing.T) {
	atomicsFromSeveralProcesses(t, 300, func(pd verbs.PD) (verbs.MR, error) { return pd.RegMR(make([]byte, 4096), fullAccess) })
}

// TestRegMRDereg: after DeregMR of Go memory returns, a peer's WRITE
// fails with WCRemAccessErr and no byte of it lands, even while the peer
// was streaming WRITEs into it when Dereg began.
func TestRegMRDereg(t *testing.T) {
	a, b := pair(t, sideOpts{}, sideOpts{})
	buf := make([]byte, 1<<16)
	mr, err := b.pd.RegMR(buf, fullAccess)
	if err != nil {
		t.Fatal(err)
	}
	src := a.mr.Bytes()
	for i := range 4096 {
		src[i] = 0xee
	}
	// Stream WRITEs until one fails; Dereg in the middle.
	done := make(chan verbs.WCStatus)
	go func() {
		wc := make([]verbs.WC, 1)
		for i := uint64(0); ; i++ {
			wr := verbs.SendWR{WRID: i, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled, RemoteAddr: mr.Addr(), RKey: mr.RKey(), SGList: []verbs.SGE{a.mr.SGE(0, 4096)}}
			if err := a.qp.PostSend(&wr); err != nil {
				done <- 255
				return
			}
			n := 0
			for n == 0 {
				n, _ = a.cq.Poll(wc)
			}
			if wc[0].Status != verbs.WCSuccess {
				done <- wc[0].Status
				return
			}
		}
	}()
	time.Sleep(20 * time.Millisecond) // let some WRITEs land (not an assertion)
	if err := mr.Dereg(); err != nil {
		t.Fatal(err)
	}
	// Dereg held the MR's lock after the last copy: reading is ordered.
	for i := range buf {
		buf[i] = 0
	}
	if st := <-done; st != verbs.WCRemAccessErr {
		t.Errorf("WRITE after Dereg: %v, want %v", st, verbs.WCRemAccessErr)
	}
	// The requester's QP is in ERR now; the race detector and this check
	// would see any byte that still landed.
	if i := bytes.IndexByte(buf, 0xee); i >= 0 {
		t.Errorf("byte %d written after Dereg returned", i)
	}
}

// TestHostileCopyMessages: COPY_* messages no requester sends cost the
// sender its connection; those RDMA's rules refuse get a status; neither
// touches memory outside the region.
func TestHostileCopyMessages(t *testing.T) {
	type msg struct {
		m       ctrl
		payload []byte
	}
	cases := []struct {
		name string
		msg  func(a, b *side, rkey uint32, addr uint64) msg
		drop bool
	}{
		{"write chunk beyond its operation", func(a, b *side, rkey uint32, addr uint64) msg {
			return msg{ctrl{typ: mCopyWrite, c: rkey, x: addr, y: 8, e: 4}, make([]byte, 8)}
		}, true},
		{"empty write", func(a, b *side, rkey uint32, addr uint64) msg {
			return msg{ctrl{typ: mCopyWrite, c: rkey, x: addr, y: 8}, nil}
		}, true},
		{"read chunk too long", func(a, b *side, rkey uint32, addr uint64) msg {
			return msg{ctrl{typ: mCopyRead, c: rkey, x: addr, y: 1 << 20, d: copyChunk + 1}, nil}
		}, true},
		{"read with a payload", func(a, b *side, rkey uint32, addr uint64) msg {
			return msg{ctrl{typ: mCopyRead, c: rkey, x: addr, y: 8, d: 8}, []byte{1}}
		}, true},
		{"atomic without its operand", func(a, b *side, rkey uint32, addr uint64) msg {
			return msg{ctrl{typ: mCopyAtomic, c: rkey, x: addr}, []byte{1, 2, 3}}
		}, true},
		{"unknown atomic", func(a, b *side, rkey uint32, addr uint64) msg {
			return msg{ctrl{typ: mCopyAtomic, c: rkey, x: addr, d: 7}, make([]byte, 8)}
		}, true},
		{"write wrapping around the address space", func(a, b *side, rkey uint32, addr uint64) msg {
			return msg{ctrl{typ: mCopyWrite, c: rkey, x: ^uint64(0) - 3, y: 16}, make([]byte, 16)}
		}, false},
		{"write below the region", func(a, b *side, rkey uint32, addr uint64) msg {
			return msg{ctrl{typ: mCopyWrite, c: rkey, x: addr - 8, y: 8}, make([]byte, 8)}
		}, false},
		{"read past the region", func(a, b *side, rkey uint32, addr uint64) msg {
			return msg{ctrl{typ: mCopyRead, c: rkey, x: addr, y: 1 << 30, e: 4096, d: 8}, nil}
		}, false},
		{"atomic past the region", func(a, b *side, rkey uint32, addr uint64) msg {
			return msg{ctrl{typ: mCopyAtomic, c: rkey, x: addr + 4096}, make([]byte, 8)}
		}, false},
		{"from a QP not connected to ours", func(a, b *side, rkey uint32, addr uint64) msg {
			return msg{ctrl{typ: mCopyWrite, a: a.qp.QPNum() ^ 1, c: rkey, x: addr, y: 8}, make([]byte, 8)}
		}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, b := pair(t, sideOpts{}, sideOpts{})
			// The region is the middle of a buffer whose guard bytes
			// must stay as they are.
			backing := bytes.Repeat([]byte{0x77}, 3*4096)
			mr, err := b.pd.RegMR(backing[4096:8192], fullAccess)
			if err != nil {
				t.Fatal(err)
			}
			defer mr.Dereg()
			x := c.msg(a, b, mr.RKey(), mr.Addr())
			if x.m.a == 0 {
				x.m.a = a.qp.QPNum()
			}
			x.m.b = b.qp.QPNum()
			qa := a.qp.(*QP)
			r, err := qa.conn.call(&x.m, x.payload, 2*time.Second)
			if c.drop {
				// The connection is gone (the QPs go to ERR with it unless
				// the devices hold a second one: pair dials both ways).
				if err != errConnDead {
					t.Fatalf("owner answered %+v (%v); want the connection dropped", r.m, err)
				}
			} else if err != nil || (r.m.d != grantAccess && r.m.d != grantInvReq) || len(r.payload) != 0 {
				t.Errorf("answer %+v %v, payload %d bytes; want an access or invalid-request status", r.m, err, len(r.payload))
			}
			mr.Dereg()
			if !bytes.Equal(backing[:4096], bytes.Repeat([]byte{0x77}, 4096)) || !bytes.Equal(backing[8192:], bytes.Repeat([]byte{0x77}, 4096)) {
				t.Error("memory outside the region changed")
			}
		})
	}
}

// FuzzCopyOwner feeds the owner arbitrary COPY_* requests for a live QP
// and region: it answers or drops the connection, never panics, and
// never writes outside the region.
func FuzzCopyOwner(f *testing.F) {
	a, b := pair(f, sideOpts{}, sideOpts{})
	backing := bytes.Repeat([]byte{0x77}, 3*4096)
	mr, err := b.pd.RegMR(backing[4096:8192], fullAccess)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { mr.Dereg() })
	// The owner's end of the connection: b's conn to a's device.
	qb := b.qp.(*QP)
	qb.mu.Lock()
	owner := qb.conn
	qb.mu.Unlock()
	f.Add(uint8(mCopyWrite), true, uint64(0), uint64(8), uint32(0), uint32(0), make([]byte, 8))
	f.Add(uint8(mCopyRead), true, uint64(4088), uint64(8), uint32(8), uint32(0), []byte(nil))
	f.Add(uint8(mCopyAtomic), true, uint64(8), uint64(1), uint32(copyCmpSwap), uint32(0), make([]byte, 8))
	f.Add(uint8(mCopyWrite), true, uint64(4090), uint64(1<<40), uint32(0), uint32(1<<31), make([]byte, 30))
	f.Fuzz(func(t *testing.T, typ uint8, goodKey bool, off, y uint64, d, e uint32, payload []byte) {
		m := ctrl{typ: mCopyWrite + typ%3, a: a.qp.QPNum(), b: b.qp.QPNum(), c: mr.RKey() ^ 1, x: mr.Addr() + off, y: y, d: d, e: e}
		if goodKey {
			m.c = mr.RKey()
		}
		if len(payload) > copyChunk {
			payload = payload[:copyChunk]
		}
		owner.applyCopy(&m, payload)
		lk := mr.(*MR)
		lk.mu.RLock()
		defer lk.mu.RUnlock()
		for _, g := range [][]byte{backing[:4096], backing[8192:]} {
			if bytes.IndexFunc(g, func(r rune) bool { return r != 0x77 }) >= 0 {
				t.Fatal("memory outside the region changed")
			}
		}
	})
}

// TestRegMRWriteImmOrdersData: the receive completion of a WRITE_WITH_IMM
// into Go memory orders the data before the application's reads (under
// -race, a missing edge from the owner's copy to the completion is a
// reported race).
func TestRegMRWriteImmOrdersData(t *testing.T) {
	a, b := pair(t, sideOpts{}, sideOpts{regMR: true})
	copy(a.mr.Bytes(), "ordered")
	for i := range 3 {
		postRecv(t, b.qp, uint64(i), verbs.SGE{})
		postSend(t, a.qp, verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRRDMAWriteWithImm, ImmData: uint32(i), RemoteAddr: b.mr.Addr() + uint64(i)*64, RKey: b.mr.RKey(), SGList: []verbs.SGE{a.mr.SGE(0, 7)}})
		poll(t, a.cq, 1)
		if wc := poll(t, b.cq, 1)[0]; wc.Status != verbs.WCSuccess || wc.ImmData != uint32(i) {
			t.Fatalf("%+v", wc)
		}
		if got := string(b.mr.Bytes()[i*64 : i*64+7]); got != "ordered" {
			t.Errorf("WRITE_WITH_IMM %d landed as %q", i, got)
		}
	}
}

// TestHostileOwnerCopyReplies: an owner whose COPY_RESP no owner sends
// fails the request with WCRemOpErr, and nothing else happens to us. The
// owner here is a bare socket speaking the control protocol.
func TestHostileOwnerCopyReplies(t *testing.T) {
	cases := []struct {
		name   string
		op     verbs.WROpcode
		answer func(m ctrl) (ctrl, []byte)
	}{
		{"unknown status", verbs.WRRDMARead, func(m ctrl) (ctrl, []byte) {
			return ctrl{typ: mCopyResp, reqID: m.reqID, d: 99}, make([]byte, m.d)
		}},
		{"READ answer too short", verbs.WRRDMARead, func(m ctrl) (ctrl, []byte) {
			return ctrl{typ: mCopyResp, reqID: m.reqID}, make([]byte, m.d-1)
		}},
		{"READ answer too long", verbs.WRRDMARead, func(m ctrl) (ctrl, []byte) {
			return ctrl{typ: mCopyResp, reqID: m.reqID}, make([]byte, m.d+1)
		}},
		{"atomic answer with data", verbs.WRAtomicFetchAndAdd, func(m ctrl) (ctrl, []byte) {
			return ctrl{typ: mCopyResp, reqID: m.reqID}, make([]byte, 8)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := twoProcSide(t)
			fakeID := uint64(time.Now().UnixNano()) | 1
			ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: s.dev.sockName(fakeID), Net: "unixpacket"})
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			go fakeCopyOwner(t, ln, fakeID, c.answer)
			remote := cm.Endpoint{QPN: 77, GID: gidOf(s.dev.uid, fakeID)}
			if err := cm.Connect(s.qp, s.endpoint(), remote, params(sideOpts{rnrRetry: 7})); err != nil {
				t.Fatal(err)
			}
			postSend(t, s.qp, verbs.SendWR{WRID: 1, Opcode: c.op, RemoteAddr: 1 << 20, RKey: 5, SGList: []verbs.SGE{s.mr.SGE(0, 8)}})
			if wc := poll(t, s.cq, 1)[0]; wc.Status != verbs.WCRemOpErr {
				t.Errorf("%+v, want %v", wc, verbs.WCRemOpErr)
			}
			if st := s.qp.State(); st != verbs.QPStateErr {
				t.Errorf("QP in %v, want ERR", st)
			}
		})
	}
}

// fakeCopyOwner accepts one connection, says "copy" to every grant
// request and answers COPY_* requests with answer.
func fakeCopyOwner(t *testing.T, ln *net.UnixListener, id uint64, answer func(ctrl) (ctrl, []byte)) {
	uc, err := ln.AcceptUnix()
	if err != nil {
		return
	}
	defer uc.Close()
	bellFD, bell, err := newMemfd("softrdma-shm-bell", bellBytes)
	if err != nil {
		t.Error(err)
		return
	}
	defer unix.Munmap(bell)
	defer unix.Close(bellFD)
	send := func(m ctrl, payload []byte, oob []byte) {
		b := make([]byte, ctrlHdr+len(payload))
		m.encode(b)
		copy(b[ctrlHdr:], payload)
		uc.WriteMsgUnix(b, oob, nil)
	}
	send(ctrl{typ: mHello, x: id}, nil, unix.UnixRights(bellFD))
	buf, oob := make([]byte, ctrlMax), make([]byte, 256)
	for {
		n, oobn, _, _, err := uc.ReadMsgUnix(buf, oob)
		if err != nil || n == 0 {
			return
		}
		closeFds(parseFds(oob[:oobn]))
		m, ok := decodeCtrl(buf[:n])
		switch {
		case !ok:
		case m.typ == mGrantReq:
			send(ctrl{typ: mGrantResp, reqID: m.reqID, d: grantCopy}, nil, nil)
		case m.typ == mCopyRead || m.typ == mCopyWrite || m.typ == mCopyAtomic:
			r, payload := answer(m)
			send(r, payload, nil)
		}
	}
}

// TestRegMRBidirectionalStreams: several QPs each way between two devices
// stream large WRITEs and READs into each other's Go memory at once. The
// conn readers answer each other's copies through one socket pair; none
// may end up waiting for the other.
func TestRegMRBidirectionalStreams(t *testing.T) {
	const qps, ops, size = 4, 8, 256 << 10
	type end struct {
		dev *Device
		pd  verbs.PD
		cq  verbs.CQ
		mr  verbs.MR
		qp  [qps]verbs.QP
	}
	var ends [2]*end
	for i := range ends {
		dev, err := Open(Config{})
		if err != nil {
			t.Fatal(err)
		}
		e := &end{dev: dev}
		e.pd, _ = dev.AllocPD()
		e.cq, _ = dev.CreateCQ(qps*ops, nil)
		if e.mr, err = e.pd.RegMR(make([]byte, 2*qps*size), fullAccess); err != nil {
			t.Fatal(err)
		}
		for j := range e.qp {
			if e.qp[j], err = e.pd.CreateQP(&verbs.QPInitAttr{SendCQ: e.cq, RecvCQ: e.cq, QPType: verbs.QPTypeRC, Cap: verbs.QPCap{MaxSendWR: ops, MaxRecvWR: 1}}); err != nil {
				t.Fatal(err)
			}
		}
		ends[i] = e
		defer func() {
			for _, qp := range e.qp {
				qp.Destroy()
			}
			e.mr.Dereg()
			e.cq.Destroy()
			e.pd.Dealloc()
			e.dev.Close()
		}()
	}
	for i, e := range ends {
		o := ends[1-i]
		for j := range e.qp {
			local := cmEndpoint(e.qp[j], e.dev)
			if err := cm.Connect(e.qp[j], local, cmEndpoint(o.qp[j], o.dev), params(sideOpts{rnrRetry: 7})); err != nil {
				t.Fatal(err)
			}
		}
	}
	errs := make(chan error, 2*qps)
	for i, e := range ends {
		o := ends[1-i]
		for j := range e.qp {
			go func() {
				for k := range ops {
					op := verbs.WRRDMAWrite
					if k%2 == 1 {
						op = verbs.WRRDMARead
					}
					wr := verbs.SendWR{WRID: uint64(j), Opcode: op, SendFlags: verbs.SendSignaled, RemoteAddr: o.mr.Addr() + uint64(j*size), RKey: o.mr.RKey(), SGList: []verbs.SGE{e.mr.SGE(qps*size+j*size, size)}}
					if err := e.qp[j].PostSend(&wr); err != nil {
						errs <- err
						return
					}
				}
				errs <- nil
			}()
		}
	}
	for range 2 * qps {
		select {
		case err := <-errs:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(60 * time.Second):
			t.Fatal("posting stalled: the devices' readers wait for each other")
		}
	}
	for _, e := range ends {
		for _, wc := range poll(t, e.cq, qps*ops) {
			if wc.Status != verbs.WCSuccess {
				t.Errorf("%+v", wc)
			}
		}
	}
}

func cmEndpoint(qp verbs.QP, dev *Device) cm.Endpoint {
	return cm.Endpoint{QPN: qp.QPNum(), GID: dev.GID()}
}

// TestHostileRequesterDoesNotRead: a peer that floods COPY requests and
// never reads the answers loses its connection once our answers have
// waited sendTimeout for room.
func TestHostileRequesterDoesNotRead(t *testing.T) {
	s := twoProcSide(t)
	uc, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: s.dev.sockName(s.dev.id), Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	defer uc.Close()
	bellFD, bell, err := newMemfd("softrdma-shm-bell", bellBytes)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(bell)
	defer unix.Close(bellFD)
	b := make([]byte, ctrlHdr)
	(&ctrl{typ: mHello, x: uint64(time.Now().UnixNano()) | 1}).encode(b)
	if _, _, err := uc.WriteMsgUnix(b, unix.UnixRights(bellFD), nil); err != nil {
		t.Fatal(err)
	}
	// Flood: each request is answered; we read nothing.
	uc.SetWriteDeadline(time.Now().Add(30 * time.Second))
	(&ctrl{typ: mCopyRead, a: 1, b: s.qp.QPNum(), c: 2, y: 8, d: 8}).encode(b)
	var werr error
	for i := 0; werr == nil; i++ {
		_, _, werr = uc.WriteMsgUnix(b, nil, nil)
	}
	if ne, ok := werr.(net.Error); ok && ne.Timeout() {
		t.Fatalf("still connected after 30 s of unread answers: %v", werr)
	}
	// Our side of the connection is gone (closeNow runs as its reader ends).
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.dev.mu.Lock()
		n := len(s.dev.all)
		s.dev.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d connections remain to the flooding peer", n)
		}
		time.Sleep(time.Millisecond)
	}
}
