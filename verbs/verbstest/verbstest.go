// Package verbstest is the conformance suite of the verbs API: the same
// cases run against every provider, so that a program moves between
// providers without meeting a different set of rules. A provider's test
// calls Run with a function that opens two contexts that can reach each
// other:
//
//	func TestConformance(t *testing.T) {
//		verbstest.Run(t, func(t testing.TB) verbstest.Pair {
//			a, b := open(t), open(t) // closed by t.Cleanup
//			return verbstest.Pair{A: a, B: b, GIDIndex: 1}
//		})
//	}
//
// The reference for every rule is libibverbs over the kernel's rxe; where
// softrdma deliberately differs (an error instead of a call that silently
// does nothing), the case says so. A provider that lacks a feature
// declares it in Pair.Lacks with the reason, and the cases that need it
// skip with that reason; a feature not declared missing is tested, and a
// failure is a failure.
package verbstest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/verbs"
)

// Feature is something a case needs that a provider may lack.
type Feature string

// Features a provider may declare missing (Pair.Lacks).
const (
	// QPEvents: asynchronous events about QPs (QP_REQ_ERR, QP_FATAL,
	// LAST_WQE_REACHED) on the context's verbs.AsyncEventer.
	QPEvents Feature = "QP asynchronous events"
	// ResponderAccessEvents: a one-sided operation that fails its access
	// checks moves the responder's QP to ERR with QP_ACCESS_ERR (or
	// QP_REQ_ERR when the QP's own access flags refuse it), as rxe does.
	ResponderAccessEvents Feature = "QP_ACCESS_ERR at the responder of a one-sided operation"
	// AsyncEvents: the context implements verbs.AsyncEventer (CQ_ERR,
	// SRQ_LIMIT_REACHED at least).
	AsyncEvents Feature = "asynchronous events"
	// SRQ: shared receive queues.
	SRQ Feature = "shared receive queues"
	// Atomics: ATOMIC_CMP_AND_SWP and ATOMIC_FETCH_AND_ADD.
	Atomics Feature = "atomic operations"
	// FlushPostedInErr: a receive posted to a QP already in ERR
	// completes with WR_FLUSH_ERR.
	FlushPostedInErr Feature = "WR_FLUSH_ERR for a receive posted in ERR"
	// LastWQEEvent: a QP on an SRQ that enters the error state raises
	// LAST_WQE_REACHED.
	LastWQEEvent Feature = "LAST_WQE_REACHED when a QP on an SRQ enters ERR"

	// The features below are exact completion statuses. A provider that
	// declares one missing still fails the request, with another error
	// status; the case then checks that it failed and goes on.

	// LocalKeyStatus: a request whose SGE names no region of the QP's
	// PD (an unknown lkey, another PD's) completes with LOC_PROT_ERR.
	LocalKeyStatus Feature = "LOC_PROT_ERR for an lkey that names no region of the QP's PD"
	// LengthNAKStatus: a SEND longer than the receive completes the
	// receive with LOC_LEN_ERR and the SEND with REM_INV_REQ_ERR.
	LengthNAKStatus Feature = "LOC_LEN_ERR and REM_INV_REQ_ERR for a SEND longer than its receive"
	// LengthErrEvent: the responder whose receive was too short for a
	// SEND raises QP_REQ_ERR on its QP (IBTA's local work queue
	// catastrophic error class for an invalid request).
	LengthErrEvent Feature = "QP_REQ_ERR at the responder of a SEND longer than its receive"
	// SendInvRefused: SEND_WITH_INV of a region from RegMR/AllocMR (not
	// a memory window or fast-registered region) fails as an invalid
	// request.
	SendInvRefused Feature = "SEND_WITH_INV of an ibv_reg_mr region refused"
	// MemoryWindows: PD.AllocMW, WRBindMW, verbs.BindMW, WRLocalInv and
	// SEND_WITH_INV of type 2 windows.
	MemoryWindows Feature = "memory windows"
	// WindowBounds: an access through a window's rkey beyond the window
	// (inside its region) fails with REM_ACCESS_ERR.
	WindowBounds Feature = "access beyond a memory window's range refused"
	// InvalidateFlag: the receive of a SEND_WITH_INV has WCWithInv and
	// the invalidated rkey.
	InvalidateFlag Feature = "WCWithInv on the receive of a SEND_WITH_INV"
)

// Pair is what a provider gives the suite: two open contexts whose QPs
// can be connected to each other, and what it lacks.
type Pair struct {
	// A and B are the two contexts; the suite creates and destroys its
	// objects on them and never closes them (the provider does, in a
	// t.Cleanup of its own).
	A, B verbs.Context
	// GIDIndex is the GID table index of port 1 that QPs send from and
	// peers address (RoCE devices: the IP address's index; shm: 0).
	GIDIndex int
	// Tune, if set, adjusts the connection parameters the suite starts
	// from (cm.DefaultParams with short timeouts); a provider on a slow
	// network lengthens the ACK timeout here.
	Tune func(*cm.Params)
	// Lacks names the features the provider does not have, each with the
	// reason a skipped case reports.
	Lacks map[Feature]string
	// Timeout bounds each wait for a completion or event (10 s if zero).
	Timeout time.Duration
}

func (p *Pair) need(t testing.TB, f Feature) {
	t.Helper()
	if why, ok := p.Lacks[f]; ok {
		t.Skipf("provider lacks %s: %s", f, why)
	}
}

func (p *Pair) timeout() time.Duration {
	if p.Timeout > 0 {
		return p.Timeout
	}
	return 10 * time.Second
}

// Run runs every case as a subtest, each on a fresh Pair from newPair
// (called with the subtest's t, so the provider can close its contexts
// in t.Cleanup).
func Run(t *testing.T, newPair func(t testing.TB) Pair) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := newPair(t)
			c.run(t, &p)
		})
	}
}

type testCase struct {
	name string
	run  func(t *testing.T, p *Pair)
}

// cases is filled by the files that hold them.
var cases []testCase

func register(cs ...testCase) { cases = append(cases, cs...) }

// --- the objects each case builds ---

const (
	bufLen     = 64 << 10
	fullAccess = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
)

// side is one end of a connection: its objects on one context.
type side struct {
	t    testing.TB
	p    *Pair
	ctx  verbs.Context
	pd   verbs.PD
	scq  verbs.CQ
	rcq  verbs.CQ
	mr   verbs.MR
	srq  verbs.SRQ
	qp   verbs.QP
	gid  verbs.GID
	comp *verbs.CompChannel
}

// opts shape a connection; the zero value is an RC pair with full access,
// one CQ per direction of 256 entries, and a 64 KiB MR on each side.
type opts struct {
	mrAccess    verbs.Access // default fullAccess
	qpAccess    verbs.Access // default fullAccess
	sendCQE     int          // default 256
	srq         bool         // B's QP takes its receives from an SRQ
	srqWR       uint32       // the SRQ's MaxWR (default 16)
	channel     bool         // the CQs report to a CompChannel
	rnrRetry    uint8        // default 7 (infinite)
	rnrRetrySet bool
	init        func(a, b []byte) // fills the memory before the QPs connect
}

// newSide creates the objects of one end on ctx (the QP in RESET).
func newSide(t testing.TB, p *Pair, ctx verbs.Context, o opts, withSRQ bool) *side {
	t.Helper()
	s := &side{t: t, p: p, ctx: ctx}
	var err error
	if s.pd, err = ctx.AllocPD(); err != nil {
		t.Fatalf("AllocPD: %v", err)
	}
	if o.channel {
		s.comp = verbs.NewCompChannel(4)
	}
	cqe := o.sendCQE
	if cqe == 0 {
		cqe = 256
	}
	if s.scq, err = ctx.CreateCQ(cqe, s.comp); err != nil {
		t.Fatalf("CreateCQ: %v", err)
	}
	if s.rcq, err = ctx.CreateCQ(256, s.comp); err != nil {
		t.Fatalf("CreateCQ: %v", err)
	}
	access := o.mrAccess
	if access == 0 {
		access = fullAccess
	}
	if s.mr, err = s.pd.AllocMR(bufLen, access); err != nil {
		t.Fatalf("AllocMR: %v", err)
	}
	init := &verbs.QPInitAttr{SendCQ: s.scq, RecvCQ: s.rcq, QPType: verbs.QPTypeRC,
		Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 2, MaxRecvSGE: 2}}
	if withSRQ {
		n := o.srqWR
		if n == 0 {
			n = 16
		}
		if s.srq, err = s.pd.CreateSRQ(&verbs.SRQInitAttr{MaxWR: n, MaxSGE: 1}); err != nil {
			t.Fatalf("CreateSRQ: %v", err)
		}
		init.SRQ = s.srq
	}
	if s.qp, err = s.pd.CreateQP(init); err != nil {
		t.Fatalf("CreateQP: %v", err)
	}
	if s.gid, err = ctx.QueryGID(1, p.GIDIndex); err != nil {
		t.Fatalf("QueryGID(1, %d): %v", p.GIDIndex, err)
	}
	t.Cleanup(s.destroy)
	return s
}

// destroy releases what the case left, in the order the rules require;
// objects a case destroyed itself answer ErrDestroyed, which is fine.
func (s *side) destroy() {
	check := func(what string, err error) {
		if err != nil && !errors.Is(err, verbs.ErrDestroyed) {
			s.t.Errorf("cleanup: %s: %v", what, err)
		}
	}
	if s.qp != nil {
		check("DestroyQP", s.qp.Destroy())
	}
	if s.srq != nil {
		check("DestroySRQ", s.srq.Destroy())
	}
	check("DeregMR", s.mr.Dereg())
	check("DestroyCQ", s.scq.Destroy())
	check("DestroyCQ", s.rcq.Destroy())
	check("DeallocPD", s.pd.Dealloc())
}

func (s *side) endpoint(psn uint32) cm.Endpoint {
	return cm.Endpoint{QPN: s.qp.QPNum(), PSN: psn, GID: s.gid}
}

// params are the connection parameters of the suite: cm's defaults with
// an RNR timer and ACK timeout short enough for error cases to end soon.
func (p *Pair) params(o opts) *cm.Params {
	c := cm.DefaultParams()
	c.SGIDIndex = uint8(p.GIDIndex)
	c.Access = fullAccess
	if o.qpAccess != 0 {
		c.Access = o.qpAccess
	}
	c.MaxRdAtomic, c.MaxDestRdAtomic = 4, 4
	c.MinRNRTimer = 1 // 0.01 ms
	c.Timeout = 14
	if o.rnrRetrySet {
		c.RNRRetry = o.rnrRetry
	}
	if p.Tune != nil {
		p.Tune(&c)
	}
	return &c
}

// connect builds both sides and brings their QPs to RTS towards each
// other with cm.Connect, the project's one RC bring-up.
func connect(t testing.TB, p *Pair, o opts) (a, b *side) {
	t.Helper()
	a = newSide(t, p, p.A, o, false)
	b = newSide(t, p, p.B, o, o.srq)
	if o.init != nil {
		o.init(a.mr.Bytes(), b.mr.Bytes())
	}
	c := p.params(o)
	ea, eb := a.endpoint(0x1000), b.endpoint(0xFFFF00)
	if err := cm.Connect(a.qp, ea, eb, c); err != nil {
		t.Fatalf("connecting A: %v", err)
	}
	if err := cm.Connect(b.qp, eb, ea, c); err != nil {
		t.Fatalf("connecting B: %v", err)
	}
	return a, b
}

// --- posting and completions ---

func (s *side) sge(off, n int) verbs.SGE { return s.mr.SGE(off, n) }

// post posts one signaled send work request.
func (s *side) post(wr verbs.SendWR) {
	s.t.Helper()
	wr.SendFlags |= verbs.SendSignaled
	if err := s.qp.PostSend(&wr); err != nil {
		s.t.Fatalf("PostSend %v: %v", wr.Opcode, err)
	}
}

// recv posts a receive of n bytes at off (to the SRQ if there is one).
func (s *side) recv(id uint64, off, n int) {
	s.t.Helper()
	wr := &verbs.RecvWR{WRID: id, SGList: []verbs.SGE{s.sge(off, n)}}
	var err error
	if s.srq != nil {
		err = s.srq.PostRecv(wr)
	} else {
		err = s.qp.PostRecv(wr)
	}
	if err != nil {
		s.t.Fatalf("PostRecv: %v", err)
	}
}

// wc waits for the next completion on cq.
func (s *side) wc(cq verbs.CQ) verbs.WC {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), s.p.timeout())
	defer cancel()
	var w [1]verbs.WC
	for {
		n, err := cq.Poll(w[:])
		if err != nil {
			s.t.Fatalf("PollCQ: %v", err)
		}
		if n == 1 {
			return w[0]
		}
		if err := cq.Wait(ctx); err != nil {
			s.t.Fatalf("no completion within %v: %v", s.p.timeout(), err)
		}
	}
}

// expect waits for a completion on cq and checks its WRID and status.
func (s *side) expect(cq verbs.CQ, id uint64, st verbs.WCStatus) verbs.WC {
	s.t.Helper()
	w := s.wc(cq)
	if w.WRID != id || w.Status != st {
		s.t.Fatalf("completion: wr_id %d status %v; want wr_id %d status %v", w.WRID, w.Status, id, st)
	}
	return w
}

// expectStatus is expect, unless the provider lacks f (an exact
// status): then any error status will do, and the case goes on.
func (s *side) expectStatus(cq verbs.CQ, id uint64, st verbs.WCStatus, f Feature) verbs.WC {
	s.t.Helper()
	if why, lacks := s.p.Lacks[f]; lacks {
		w := s.wc(cq)
		if w.WRID != id || w.Status == verbs.WCSuccess {
			s.t.Fatalf("completion: wr_id %d status %v; want wr_id %d with an error status", w.WRID, w.Status, id)
		}
		if w.Status != st {
			s.t.Logf("completion status %v instead of %v: the provider lacks %s: %s", w.Status, st, f, why)
		}
		return w
	}
	return s.expect(cq, id, st)
}

// quiet checks that cq holds no completion.
func (s *side) quiet(cq verbs.CQ) {
	s.t.Helper()
	var w [4]verbs.WC
	n, err := cq.Poll(w[:])
	if err != nil || n != 0 {
		s.t.Fatalf("Poll of a CQ that should be empty: %d completions (first %+v), %v", n, w[0], err)
	}
}

// read reads n bytes of peer's MR at off into s's MR at dst, to check
// remote memory through the API: the bytes it returns were copied by the
// provider, in an order a completion publishes.
func (s *side) read(peer *side, off, n, dst int) []byte {
	s.t.Helper()
	s.post(verbs.SendWR{WRID: 0xEAD, Opcode: verbs.WRRDMARead, SGList: []verbs.SGE{s.sge(dst, n)},
		RemoteAddr: peer.mr.Addr() + uint64(off), RKey: peer.mr.RKey()})
	s.expect(s.scq, 0xEAD, verbs.WCSuccess)
	return s.mr.Bytes()[dst : dst+n]
}

// events returns the context's asynchronous event channel, or skips.
func (s *side) events() <-chan verbs.AsyncEvent {
	s.t.Helper()
	s.p.need(s.t, AsyncEvents)
	ae, ok := s.ctx.(verbs.AsyncEventer)
	if !ok {
		s.t.Fatalf("%T does not implement verbs.AsyncEventer and the provider does not declare it lacks %s", s.ctx, AsyncEvents)
	}
	return ae.AsyncEvents()
}

// event waits for an event of type typ on ch, skipping others.
func (s *side) event(ch <-chan verbs.AsyncEvent, typ verbs.AsyncEventType) verbs.AsyncEvent {
	s.t.Helper()
	deadline := time.After(s.p.timeout())
	for {
		select {
		case e, ok := <-ch:
			if !ok {
				s.t.Fatalf("event channel closed waiting for %v", typ)
			}
			if e.Type == typ {
				return e
			}
		case <-deadline:
			s.t.Fatalf("no %v event within %v", typ, s.p.timeout())
		}
	}
}

// isErr fails unless err wraps want.
func isErr(t testing.TB, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: got error %v; want one wrapping %q", what, err, want)
	}
}

func pattern(b []byte, seed byte) {
	for i := range b {
		b[i] = seed + byte(i*7)
	}
}
