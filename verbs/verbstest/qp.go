package verbstest

import (
	"strings"
	"testing"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/verbs"
)

// The QP state machine and attribute masks (IBTA 11.2.5.3 as libibverbs'
// ibv_modify_qp checks them), and posting in each state.

func init() {
	register(
		testCase{"qp/a new QP is in RESET and posts nothing", testQPReset},
		testCase{"qp/invalid transitions fail and leave the state", testQPBadTransition},
		testCase{"qp/missing and extra attributes are named", testQPMask},
		testCase{"qp/Query returns what Modify set", testQPQuery},
		testCase{"qp/RESET from any state, and back up again", testQPReconnect},
		testCase{"qp/moving to ERR flushes outstanding sends and receives", testQPErrFlush},
		testCase{"qp/post checks: SGE count, atomic size and alignment, the failing request named", testPostChecks},
	)
}

func testQPReset(t *testing.T, p *Pair) {
	s := newSide(t, p, p.A, opts{}, false)
	if st := s.qp.State(); st != verbs.QPStateReset {
		t.Fatalf("new QP in %v; want RESET", st)
	}
	err := s.qp.PostRecv(&verbs.RecvWR{WRID: 1, SGList: []verbs.SGE{s.sge(0, 8)}})
	isErr(t, "PostRecv in RESET", err, verbs.ErrInvalidState)
	err = s.qp.PostSend(&verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, SGList: []verbs.SGE{s.sge(0, 8)}})
	isErr(t, "PostSend in RESET", err, verbs.ErrInvalidState)
	var pe *verbs.PostError
	if !asPostError(err, &pe) || pe.WRID != 1 || pe.Index != 0 {
		t.Errorf("PostSend error %v: want a *verbs.PostError naming wr_id 1 at index 0", err)
	}
	// Receives may be posted from INIT on; sends only from RTS.
	if err := cm.Init(s.qp, p.params(opts{})); err != nil {
		t.Fatal(err)
	}
	if err := s.qp.PostRecv(&verbs.RecvWR{WRID: 2, SGList: []verbs.SGE{s.sge(0, 8)}}); err != nil {
		t.Errorf("PostRecv in INIT: %v", err)
	}
	err = s.qp.PostSend(&verbs.SendWR{WRID: 3, Opcode: verbs.WRSend, SGList: []verbs.SGE{s.sge(0, 8)}})
	isErr(t, "PostSend in INIT", err, verbs.ErrInvalidState)
}

func asPostError(err error, pe **verbs.PostError) bool {
	p, ok := err.(*verbs.PostError)
	*pe = p
	return ok
}

func testQPBadTransition(t *testing.T, p *Pair) {
	s := newSide(t, p, p.A, opts{}, false)
	for _, to := range []verbs.QPState{verbs.QPStateRTR, verbs.QPStateRTS, verbs.QPStateSQD} {
		err := s.qp.Modify(&verbs.QPAttr{QPState: to}, verbs.QPAttrState)
		isErr(t, "RESET → "+to.String(), err, verbs.ErrInvalidState)
		if st := s.qp.State(); st != verbs.QPStateReset {
			t.Errorf("after a refused RESET → %v the QP is in %v", to, st)
		}
	}
	// CUR_STATE that does not match is refused too.
	err := s.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateInit, CurQPState: verbs.QPStateRTS}, verbs.QPAttrState|verbs.QPAttrCurState)
	isErr(t, "CUR_STATE RTS on a RESET QP", err, verbs.ErrInvalidState)
}

func testQPMask(t *testing.T, p *Pair) {
	s := newSide(t, p, p.A, opts{}, false)
	// INIT needs the port, P_Key index and access flags on RC.
	err := s.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateInit}, verbs.QPAttrState)
	isErr(t, "RESET → INIT without attributes", err, verbs.ErrInvalidArgument)
	if err != nil && !strings.Contains(err.Error(), "PORT") {
		t.Errorf("the error does not name the missing PORT: %v", err)
	}
	if err := cm.Init(s.qp, p.params(opts{})); err != nil {
		t.Fatal(err)
	}
	// INIT → RTR without the destination QPN.
	attr := &verbs.QPAttr{QPState: verbs.QPStateRTR, PathMTU: verbs.MTU1024, RQPSN: 1, MaxDestRdAtomic: 1, MinRNRTimer: 1,
		AHAttr: verbs.AHAttr{IsGlobal: true, PortNum: 1, GRH: verbs.GlobalRoute{DGID: s.gid, SGIDIndex: uint8(p.GIDIndex), HopLimit: 64}}}
	mask := verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrRQPSN | verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer
	err = s.qp.Modify(attr, mask)
	isErr(t, "INIT → RTR without DEST_QPN", err, verbs.ErrInvalidArgument)
	if err != nil && !strings.Contains(err.Error(), "DEST_QPN") {
		t.Errorf("the error does not name the missing DEST_QPN: %v", err)
	}
	// An attribute the transition does not take.
	attr.DestQPNum, attr.Timeout = 0x99, 14
	err = s.qp.Modify(attr, mask|verbs.QPAttrDestQPN|verbs.QPAttrTimeout)
	isErr(t, "INIT → RTR with TIMEOUT", err, verbs.ErrInvalidArgument)
	if err != nil && !strings.Contains(err.Error(), "TIMEOUT") {
		t.Errorf("the error does not name the extra TIMEOUT: %v", err)
	}
	if st := s.qp.State(); st != verbs.QPStateInit {
		t.Errorf("after refused modifies the QP is in %v; want INIT", st)
	}
}

func testQPQuery(t *testing.T, p *Pair) {
	a, b := connect(t, p, opts{})
	attr, init, err := a.qp.Query()
	if err != nil {
		t.Fatal(err)
	}
	if attr.QPState != verbs.QPStateRTS || attr.DestQPNum != b.qp.QPNum() || attr.SQPSN != 0x1000 || attr.RQPSN != 0xFFFF00 {
		t.Errorf("Query: state %v dest %#x sq_psn %#x rq_psn %#x; want RTS, %#x, 0x1000, 0xffff00",
			attr.QPState, attr.DestQPNum, attr.SQPSN, attr.RQPSN, b.qp.QPNum())
	}
	if attr.QPAccessFlags != fullAccess {
		t.Errorf("Query: access %v; want %v", attr.QPAccessFlags, verbs.Access(fullAccess))
	}
	if init.QPType != verbs.QPTypeRC || init.SendCQ != a.scq || init.RecvCQ != a.rcq {
		t.Errorf("Query: init attributes %+v do not match CreateQP's", init)
	}
	if init.Cap.MaxSendWR < 64 || init.Cap.MaxRecvWR < 64 {
		t.Errorf("Query: capacity %+v below what was asked (64 WRs each way)", init.Cap)
	}
}

func testQPReconnect(t *testing.T, p *Pair) {
	a, b := connect(t, p, opts{})
	for _, s := range []*side{a, b} {
		if err := s.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateReset}, verbs.QPAttrState); err != nil {
			t.Fatalf("RTS → RESET: %v", err)
		}
		if st := s.qp.State(); st != verbs.QPStateReset {
			t.Fatalf("state %v after RESET", st)
		}
	}
	c := p.params(opts{})
	ea, eb := a.endpoint(0x2000), b.endpoint(0x3000)
	if err := cm.Connect(a.qp, ea, eb, c); err != nil {
		t.Fatal(err)
	}
	if err := cm.Connect(b.qp, eb, ea, c); err != nil {
		t.Fatal(err)
	}
	b.recv(1, 0, 64)
	a.post(verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, SGList: []verbs.SGE{a.sge(0, 32)}})
	a.expect(a.scq, 2, verbs.WCSuccess)
	b.expect(b.rcq, 1, verbs.WCSuccess)
}

func testQPErrFlush(t *testing.T, p *Pair) {
	// B posts no receive and A retries RNR for ever: A's SENDs stay
	// outstanding until A moves to ERR.
	a, _ := connect(t, p, opts{rnrRetry: 7, rnrRetrySet: true})
	a.recv(50, 0, 8)
	a.recv(51, 8, 8)
	for id := uint64(1); id <= 3; id++ {
		a.post(verbs.SendWR{WRID: id, Opcode: verbs.WRSend, SGList: []verbs.SGE{a.sge(64, 8)}})
	}
	a.quiet(a.scq)
	if err := a.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateErr}, verbs.QPAttrState); err != nil {
		t.Fatal(err)
	}
	for id := uint64(1); id <= 3; id++ {
		a.expect(a.scq, id, verbs.WCWRFlushErr)
	}
	a.expect(a.rcq, 50, verbs.WCWRFlushErr)
	a.expect(a.rcq, 51, verbs.WCWRFlushErr)
	// Sends posted in ERR are accepted and flushed, as rxe does.
	a.post(verbs.SendWR{WRID: 4, Opcode: verbs.WRSend, SGList: []verbs.SGE{a.sge(64, 8)}})
	a.expect(a.scq, 4, verbs.WCWRFlushErr)
}

// testPostChecks: what ibv_post_send and ibv_post_recv refuse with EINVAL
// before anything is queued (rxe's validate_send_wr): more SGEs than the
// QP's capacity, an atomic whose buffer is not 8 bytes or whose remote
// address is not 8-byte aligned. The error names the request.
func testPostChecks(t *testing.T, p *Pair) {
	a, b := connect(t, p, opts{})
	three := []verbs.SGE{a.sge(0, 8), a.sge(8, 8), a.sge(16, 8)}
	check := func(what string, err error) {
		t.Helper()
		isErr(t, what, err, verbs.ErrInvalidArgument)
		var pe *verbs.PostError
		if !asPostError(err, &pe) || pe.WRID != 77 {
			t.Errorf("%s: %v is not a *verbs.PostError naming wr_id 77", what, err)
		}
	}
	check("PostSend with 3 SGEs on a QP of 2", a.qp.PostSend(&verbs.SendWR{WRID: 77, Opcode: verbs.WRSend, SGList: three}))
	check("PostRecv with 3 SGEs on a QP of 2", a.qp.PostRecv(&verbs.RecvWR{WRID: 77, SGList: three}))
	if _, lacks := p.Lacks[Atomics]; !lacks {
		check("an atomic of 16 bytes", a.qp.PostSend(&verbs.SendWR{WRID: 77, Opcode: verbs.WRAtomicFetchAndAdd,
			SGList: []verbs.SGE{a.sge(0, 16)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}))
		check("an atomic at an unaligned address", a.qp.PostSend(&verbs.SendWR{WRID: 77, Opcode: verbs.WRAtomicCmpAndSwp,
			SGList: []verbs.SGE{a.sge(0, 8)}, RemoteAddr: b.mr.Addr() + 4, RKey: b.mr.RKey()}))
	}
	// A chain stops at the bad request: the ones before it are posted.
	b.recv(1, 0, 8)
	err := a.qp.PostSend(&verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.sge(0, 8)},
		Next: &verbs.SendWR{WRID: 77, Opcode: verbs.WRSend, SGList: three}})
	var pe *verbs.PostError
	if !asPostError(err, &pe) || pe.Index != 1 || pe.WRID != 77 {
		t.Fatalf("a chain with a bad second request: %v; want a *verbs.PostError at index 1", err)
	}
	a.expect(a.scq, 1, verbs.WCSuccess)
	b.expect(b.rcq, 1, verbs.WCSuccess)
}
