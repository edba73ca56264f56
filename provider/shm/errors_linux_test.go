package shm

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/verbs"
)

// TestErrorStatuses checks that each failure completes with the status the
// RoCEv2 provider gives it, and that the requester's QP then flushes.
func TestErrorStatuses(t *testing.T) {
	type tc struct {
		name      string
		a, b      sideOpts
		wr        func(a, b *side) verbs.SendWR
		recv      bool // b posts a small receive first
		want      verbs.WCStatus
		wantRecv  verbs.WCStatus // b's receive completion, if recv
		bErrState bool           // b's QP ends in ERR
	}
	write := func(off uint64, n int) func(a, b *side) verbs.SendWR {
		return func(a, b *side) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRRDMAWrite, RemoteAddr: b.mr.Addr() + off, RKey: b.mr.RKey(), SGList: []verbs.SGE{a.mr.SGE(0, n)}}
		}
	}
	cases := []tc{
		{name: "bad rkey", wr: func(a, b *side) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRRDMAWrite, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey() ^ 0x5a5a, SGList: []verbs.SGE{a.mr.SGE(0, 8)}}
		}, want: verbs.WCRemAccessErr, bErrState: true},
		{name: "out of bounds", wr: write(1<<20-4, 8), want: verbs.WCRemAccessErr, bErrState: true},
		{name: "MR without remote write", b: sideOpts{mrAccess: verbs.AccessLocalWrite | verbs.AccessRemoteRead}, wr: write(0, 8), want: verbs.WCRemAccessErr, bErrState: true},
		{name: "QP without remote read", b: sideOpts{qpAccess: verbs.AccessLocalWrite | verbs.AccessRemoteWrite}, wr: func(a, b *side) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRRDMARead, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey(), SGList: []verbs.SGE{a.mr.SGE(0, 8)}}
		}, want: verbs.WCRemInvReqErr, bErrState: true},
		{name: "bad lkey", wr: func(a, b *side) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRSend, SGList: []verbs.SGE{{Addr: a.mr.Addr(), Length: 8, LKey: a.mr.LKey() + 1}}}
		}, want: verbs.WCLocProtErr},
		{name: "SEND longer than the receive", recv: true, wr: func(a, b *side) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRSend, SGList: []verbs.SGE{a.mr.SGE(0, 64)}}
		}, want: verbs.WCRemInvReqErr, wantRecv: verbs.WCLocLenErr, bErrState: true},
		{name: "RNR retry exceeded", a: sideOpts{rnrRetry: 1}, wr: func(a, b *side) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRSend, SGList: []verbs.SGE{a.mr.SGE(0, 8)}}
		}, want: verbs.WCRNRRetryExcErr},
	}
	// The same rules for a responder's RegMR'd Go memory, which the owner
	// checks on each COPY_* message instead of once per grant.
	for _, c := range cases[:4] {
		c.name += " (RegMR)"
		c.b.regMR = true
		cases = append(cases, c)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, b := pair(t, c.a, c.b)
			if c.recv {
				postRecv(t, b.qp, 99, b.mr.SGE(0, 16))
			}
			wr := c.wr(a, b)
			wr.WRID = 1
			postSend(t, a.qp, wr)
			postSend(t, a.qp, verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMAWrite, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey(), SGList: []verbs.SGE{a.mr.SGE(0, 8)}})
			wcs := poll(t, a.cq, 2)
			if wcs[0].WRID != 1 || wcs[0].Status != c.want {
				t.Errorf("failed request: %+v, want status %v", wcs[0], c.want)
			}
			if wcs[1].WRID != 2 || wcs[1].Status != verbs.WCWRFlushErr {
				t.Errorf("next request: %+v, want it flushed", wcs[1])
			}
			if s := a.qp.State(); s != verbs.QPStateErr {
				t.Errorf("requester QP in %v, want ERR", s)
			}
			if c.recv {
				if wc := poll(t, b.cq, 1)[0]; wc.WRID != 99 || wc.Status != c.wantRecv {
					t.Errorf("receive: %+v, want %v", wc, c.wantRecv)
				}
			}
			if c.bErrState {
				deadline := time.Now().Add(5 * time.Second)
				for b.qp.State() != verbs.QPStateErr && time.Now().Before(deadline) {
					b.cq.Poll(nil)
					time.Sleep(time.Millisecond)
				}
				if s := b.qp.State(); s != verbs.QPStateErr {
					t.Errorf("responder QP in %v, want ERR", s)
				}
			}
		})
	}
}

func TestFlushOnModifyToErr(t *testing.T) {
	a, _ := pair(t, sideOpts{}, sideOpts{})
	for i := range 3 {
		postRecv(t, a.qp, uint64(i), a.mr.SGE(0, 8))
	}
	if err := a.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateErr}, verbs.QPAttrState); err != nil {
		t.Fatal(err)
	}
	for i, wc := range poll(t, a.cq, 3) {
		if wc.Status != verbs.WCWRFlushErr || wc.WRID != uint64(i) {
			t.Errorf("%+v", wc)
		}
	}
	// Posting to an ERR QP completes at once, flushed.
	postSend(t, a.qp, verbs.SendWR{WRID: 9, Opcode: verbs.WRSend, SGList: []verbs.SGE{a.mr.SGE(0, 8)}})
	if wc := poll(t, a.cq, 1)[0]; wc.Status != verbs.WCWRFlushErr || wc.WRID != 9 {
		t.Errorf("%+v", wc)
	}
}

func TestRNRWaitsForReceive(t *testing.T) {
	a, b := pair(t, sideOpts{}, sideOpts{})
	postSend(t, a.qp, verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, SGList: []verbs.SGE{a.mr.SGE(0, 8)}})
	time.Sleep(20 * time.Millisecond)
	var wc [1]verbs.WC
	if n, _ := a.cq.Poll(wc[:]); n != 0 {
		t.Fatalf("SEND completed without a receive: %+v", wc[0])
	}
	postRecv(t, b.qp, 7, b.mr.SGE(0, 8))
	if wc := poll(t, a.cq, 1)[0]; wc.Status != verbs.WCSuccess {
		t.Errorf("%+v", wc)
	}
	if wc := poll(t, b.cq, 1)[0]; wc.Status != verbs.WCSuccess || wc.WRID != 7 {
		t.Errorf("%+v", wc)
	}
}

func TestSRQ(t *testing.T) {
	a, b := pair(t, sideOpts{}, sideOpts{srq: true})
	if err := b.qp.PostRecv(&verbs.RecvWR{SGList: []verbs.SGE{b.mr.SGE(0, 8)}}); err == nil {
		t.Error("PostRecv on a QP with an SRQ succeeded")
	}
	for i := range 4 {
		postRecv(t, b.srq, uint64(i), b.mr.SGE(i*64, 64))
	}
	for i := range 4 {
		postSend(t, a.qp, verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRSend, SGList: []verbs.SGE{a.mr.SGE(0, 8+i)}})
	}
	poll(t, a.cq, 4)
	for i, wc := range poll(t, b.cq, 4) {
		if wc.Status != verbs.WCSuccess || wc.WRID != uint64(i) || wc.ByteLen != uint32(8+i) {
			t.Errorf("%+v", wc)
		}
	}
	if err := b.srq.Destroy(); !errors.Is(err, verbs.ErrInUse) {
		t.Errorf("destroying an SRQ in use: %v", err)
	}
}

func TestDeregRevokesPeerMapping(t *testing.T) {
	a, b := pair(t, sideOpts{}, sideOpts{})
	mr2, err := b.pd.AllocMR(4096, fullAccess)
	if err != nil {
		t.Fatal(err)
	}
	postSend(t, a.qp, verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, RemoteAddr: mr2.Addr(), RKey: mr2.RKey(), SGList: []verbs.SGE{a.mr.SGE(0, 8)}})
	if wc := poll(t, a.cq, 1)[0]; wc.Status != verbs.WCSuccess {
		t.Fatalf("%+v", wc)
	}
	a.dev.mu.Lock()
	c := a.dev.conns[b.dev.id]
	a.dev.mu.Unlock()
	c.gmu.RLock()
	n := len(c.grants)
	c.gmu.RUnlock()
	if n != 1 {
		t.Fatalf("%d grants, want 1", n)
	}
	if err := mr2.Dereg(); err != nil {
		t.Fatal(err)
	}
	c.gmu.RLock()
	n = len(c.grants)
	c.gmu.RUnlock()
	if n != 0 {
		t.Errorf("the peer still maps the region after Dereg returned (%d grants)", n)
	}
	postSend(t, a.qp, verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMAWrite, RemoteAddr: mr2.Addr(), RKey: mr2.RKey(), SGList: []verbs.SGE{a.mr.SGE(0, 8)}})
	if wc := poll(t, a.cq, 1)[0]; wc.Status != verbs.WCRemAccessErr {
		t.Errorf("WRITE after Dereg: %v, want %v", wc.Status, verbs.WCRemAccessErr)
	}
}

// TestLocalMRAfterDereg checks the PD's cache of the last local MR: a
// WRITE from a region that was deregistered since the last one used it
// fails with WCLocProtErr, and a new region is found.
func TestLocalMRAfterDereg(t *testing.T) {
	a, b := pair(t, sideOpts{}, sideOpts{})
	src, err := a.pd.AllocMR(4096, verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	write := func(id uint64, sge verbs.SGE) verbs.WCStatus {
		postSend(t, a.qp, verbs.SendWR{WRID: id, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey(), SGList: []verbs.SGE{sge}})
		return poll(t, a.cq, 1)[0].Status
	}
	if st := write(1, src.SGE(0, 16)); st != verbs.WCSuccess {
		t.Fatalf("WRITE from a live region: %v", st)
	}
	stale := src.SGE(0, 16)
	if err := src.Dereg(); err != nil {
		t.Fatal(err)
	}
	if st := write(2, stale); st != verbs.WCLocProtErr {
		t.Fatalf("WRITE from a deregistered region: %v, want %v", st, verbs.WCLocProtErr)
	}
	// The failed WRITE moved the QP to ERR; the PD finds a new region
	// and still refuses the old key.
	src2, err := a.pd.AllocMR(4096, verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer src2.Dereg()
	pd := a.pd.(*PD)
	mr, _, ok := pd.local(src2.LKey(), src2.Addr(), 16, true)
	if !ok || mr != src2 {
		t.Fatalf("local(new region) = %p, %v; want %p", mr, ok, src2)
	}
	mr.mu.RUnlock()
	if _, _, ok := pd.local(stale.LKey, stale.Addr, 16, false); ok {
		t.Fatal("local(deregistered region) succeeded")
	}
}

func TestUD(t *testing.T) {
	a, b, ah := udPair(t)
	postRecv(t, b.qp, 1, b.mr.SGE(0, 100))
	copy(a.mr.Bytes(), "datagram")
	postSend(t, a.qp, verbs.SendWR{WRID: 1, Opcode: verbs.WRSendWithImm, ImmData: 5, AH: ah, RemoteQPN: b.qp.QPNum(), RemoteQKey: 0x1234, SGList: []verbs.SGE{a.mr.SGE(0, 8)}})
	poll(t, a.cq, 1)
	wc := poll(t, b.cq, 1)[0]
	if wc.Status != verbs.WCSuccess || wc.ByteLen != 48 || wc.SrcQP != a.qp.QPNum() || wc.ImmData != 5 || wc.WCFlags != verbs.WCWithGRH|verbs.WCWithImm {
		t.Errorf("%+v", wc)
	}
	if got := string(b.mr.Bytes()[40:48]); got != "datagram" {
		t.Errorf("payload %q", got)
	}
	gid := a.dev.GID()
	if got := b.mr.Bytes()[8:24]; string(got) != string(gid[:]) {
		t.Errorf("GRH source GID %x, want %x", got, gid)
	}
	// A wrong Q_Key is dropped.
	postSend(t, a.qp, verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, AH: ah, RemoteQPN: b.qp.QPNum(), RemoteQKey: 0x9999, SGList: []verbs.SGE{a.mr.SGE(0, 8)}})
	poll(t, a.cq, 1)
	postRecv(t, b.qp, 3, b.mr.SGE(0, 100))
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := b.cq.Wait(ctx); err == nil {
		t.Errorf("a datagram with a wrong Q_Key arrived")
	}
}

func TestCompChannel(t *testing.T) {
	dev, err := Open(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	ch := verbs.NewCompChannel(1)
	cq, _ := dev.CreateCQ(4, ch)
	defer cq.Destroy()
	if err := cq.ReqNotify(false); err != nil {
		t.Fatal(err)
	}
	cq.(*CQ).push(&verbs.WC{WRID: 1}, false)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	got, err := ch.GetEvent(ctx)
	if err != nil || got != cq {
		t.Fatalf("GetEvent: %v %v", got, err)
	}
}

func TestModifyChecks(t *testing.T) {
	s := newSide(t, sideOpts{})
	defer s.close(t)
	err := s.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateRTR}, verbs.QPAttrState)
	if !errors.Is(err, verbs.ErrInvalidState) {
		t.Errorf("RESET → RTR: %v", err)
	}
	if err := cm.Init(s.qp, nil); err != nil {
		t.Fatal(err)
	}
	// A GID that is not a shm device's.
	err = cm.ReadyToReceive(s.qp, cm.Endpoint{QPN: 5, GID: verbs.GID{0xfe, 0x80}}, nil)
	if !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Errorf("RTR to a non-shm GID: %v", err)
	}
	if err := s.qp.PostSend(&verbs.SendWR{Opcode: verbs.WRSend}); !errors.Is(err, verbs.ErrInvalidState) {
		t.Errorf("PostSend in INIT: %v", err)
	}
}

// TestConfigDir: devices that meet in a directory the user names connect
// through socket files there, which Close removes.
func TestConfigDir(t *testing.T) {
	dir := t.TempDir()
	var s [2]*side
	for i := range s {
		dev, err := Open(Config{Dir: dir, Name: "shm_dir"})
		if err != nil {
			t.Fatal(err)
		}
		s[i] = &side{dev: dev}
		s[i].pd, _ = dev.AllocPD()
		s[i].cq, _ = dev.CreateCQ(8, nil)
		s[i].mr, _ = s[i].pd.AllocMR(4096, fullAccess)
		s[i].qp, _ = s[i].pd.CreateQP(&verbs.QPInitAttr{SendCQ: s[i].cq, RecvCQ: s[i].cq, QPType: verbs.QPTypeRC, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4}})
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 2 {
		t.Errorf("%d entries in %s, want 2 sockets", len(ents), dir)
	}
	for i, j := range []int{1, 0} {
		if err := cm.Connect(s[i].qp, s[i].endpoint(), s[j].endpoint(), params(sideOpts{rnrRetry: 7})); err != nil {
			t.Fatal(err)
		}
	}
	postSend(t, s[0].qp, verbs.SendWR{Opcode: verbs.WRRDMAWrite, RemoteAddr: s[1].mr.Addr(), RKey: s[1].mr.RKey(), SGList: []verbs.SGE{s[0].mr.SGE(0, 8)}})
	if wc := poll(t, s[0].cq, 1)[0]; wc.Status != verbs.WCSuccess {
		t.Errorf("%+v", wc)
	}
	s[0].close(t)
	s[1].close(t)
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("%d entries left in %s after Close", len(ents), dir)
	}
}
