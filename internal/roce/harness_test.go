package roce

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/transport"
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// node is one side of a test: a device with a PD, CQs, a QP and a buffer.
type node struct {
	t    testing.TB
	dev  *Device
	pd   verbs.PD
	scq  verbs.CQ
	rcq  verbs.CQ
	qp   verbs.QP
	mr   verbs.MR
	buf  []byte
	wcs  []verbs.WC
	peer *node // set by pair
}

type qpOpts struct {
	typ         verbs.QPType
	mtu         verbs.MTU
	timeout     uint8
	retry       uint8
	rnrRetry    uint8
	minRNRTimer uint8
	rdAtomic    uint8
	access      verbs.Access
	sendWR      uint32
	recvWR      uint32
	bufSize     int
	srq         verbs.SRQ
	recvEvents  *verbs.CompChannel // the receive CQ's completion channel
}

func defaultOpts() qpOpts {
	return qpOpts{
		typ: verbs.QPTypeRC, mtu: verbs.MTU1024, timeout: 10, retry: 7, rnrRetry: 7, minRNRTimer: 1,
		rdAtomic: 16, access: verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic,
		sendWR: 256, recvWR: 256, bufSize: 1 << 20,
	}
}

func newNode(t testing.TB, tr transport.Transport, o qpOpts) *node {
	t.Helper()
	return newNodeWith(t, Config{Transport: tr}, o)
}

// newNodeWith is newNode with a device configured by cfg.
func newNodeWith(t testing.TB, cfg Config, o qpOpts) *node {
	t.Helper()
	d := newDevice(t, cfg)
	go serve(d, cfg.Transport)
	n := &node{t: t, dev: d, wcs: make([]verbs.WC, 64)}
	var err error
	t.Cleanup(n.close)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	n.pd, err = d.AllocPD()
	must(err)
	n.scq, err = d.CreateCQ(4096, nil)
	must(err)
	n.rcq, err = d.CreateCQ(4096, o.recvEvents)
	must(err)
	n.buf = make([]byte, o.bufSize)
	n.mr, err = n.pd.RegMR(n.buf, o.access)
	must(err)
	n.qp, err = n.pd.CreateQP(&verbs.QPInitAttr{
		SendCQ: n.scq, RecvCQ: n.rcq, QPType: o.typ, SRQ: o.srq,
		Cap: verbs.QPCap{MaxSendWR: o.sendWR, MaxRecvWR: o.recvWR, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInlineData: 256},
	})
	must(err)
	return n
}

// close releases everything; it runs as a test cleanup, and tolerates
// objects that were never created because the test failed early.
func (n *node) close() {
	if n.qp != nil {
		n.qp.Destroy()
	}
	if n.mr != nil {
		n.mr.Dereg()
	}
	for _, cq := range []verbs.CQ{n.scq, n.rcq} {
		if cq != nil {
			cq.Destroy()
		}
	}
	if n.pd != nil {
		n.pd.Dealloc()
	}
	if err := n.dev.Close(); err != nil {
		n.t.Errorf("close device: %v", err)
	}
}

func (n *node) gid() verbs.GID {
	g, err := n.dev.QueryGID(1, 1)
	if err != nil {
		n.t.Fatal(err)
	}
	return g
}

// testTimer is the tests' driver of a device's deadlines: one runtime
// timer (virtual inside a testing/synctest bubble) that calls OnTimeout.
type testTimer struct {
	mu sync.Mutex
	t  *time.Timer
	d  atomic.Pointer[Device]
}

func (tt *testTimer) set(at time.Time) {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	if tt.t == nil {
		tt.t = time.AfterFunc(time.Until(at), func() {
			if d := tt.d.Load(); d != nil {
				d.OnTimeout(time.Now())
			}
		})
		return
	}
	tt.t.Reset(time.Until(at))
}

// newDevice creates a device driven as the tests drive it: time.Now for
// the clock (virtual inside a bubble) and a testTimer for the deadlines.
// Receiving is up to the test (serve, or HandleBatch by hand).
func newDevice(tb testing.TB, cfg Config) *Device {
	tb.Helper()
	tt := &testTimer{}
	cfg.Clock, cfg.SetTimer = time.Now, tt.set
	d, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tt.d.Store(d)
	return d
}

// serve is the tests' receive loop: it blocks in Recv and hands each
// batch to the device until the transport closes (Device.Close). The
// provider's loop (provider/soft) adds busy polling and deferred ACKs.
func serve(d *Device, tr transport.Transport) {
	rx := NewRxBatch()
	pkts := make([]transport.Datagram, tr.BatchSize())
	bufs := make([][]byte, len(pkts))
	for i := range bufs {
		bufs[i] = make([]byte, MaxPacketSize+64)
	}
	for {
		for i := range pkts {
			pkts[i] = transport.Datagram{Buf: bufs[i]}
		}
		n, err := tr.Recv(pkts)
		if err != nil {
			return
		}
		d.HandleBatch(rx, pkts[:n], time.Now())
	}
}

// connect moves a's QP to RTS towards b's (and is called both ways),
// through cm as applications do.
func connect(t testing.TB, a, b *node, o qpOpts) {
	t.Helper()
	psnA := uint32(0xFFFFF0) // near the wrap, so PSN arithmetic is exercised
	psnB := uint32(0x000100)
	if a.dev.local.Compare(b.dev.local) > 0 {
		psnA, psnB = psnB, psnA
	}
	p := cm.Params{
		Port: 1, Access: o.access, QKey: 0x11111111, PathMTU: o.mtu, SGIDIndex: 1, HopLimit: 64,
		Timeout: o.timeout, RetryCnt: o.retry, RNRRetry: o.rnrRetry, MinRNRTimer: o.minRNRTimer,
		MaxRdAtomic: o.rdAtomic, MaxDestRdAtomic: o.rdAtomic,
	}
	local := cm.Endpoint{QPN: a.qp.QPNum(), PSN: psnA, GID: a.gid()}
	remote := cm.Endpoint{QPN: b.qp.QPNum(), PSN: psnB, GID: b.gid()}
	must(t, cm.Connect(a.qp, local, remote, &p))
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// pair builds two connected nodes over the two transports.
func pair(t testing.TB, ta, tb transport.Transport, o qpOpts) (*node, *node) {
	return pairWith(t, Config{Transport: ta}, Config{Transport: tb}, o)
}

// pairWith is pair with devices configured by ca and cb.
func pairWith(t testing.TB, ca, cb Config, o qpOpts) (*node, *node) {
	a, b := newNodeWith(t, ca, o), newNodeWith(t, cb, o)
	a.peer, b.peer = b, a
	connect(t, a, b, o)
	connect(t, b, a, o)
	return a, b
}

// waitWC waits for the next completion on cq, failing the test after a
// generous (possibly virtual) timeout.
func (n *node) waitWC(cq verbs.CQ) verbs.WC {
	n.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		if k, err := cq.Poll(n.wcs[:1]); err != nil {
			n.t.Fatalf("poll: %v", err)
		} else if k == 1 {
			return n.wcs[0]
		}
		if err := cq.Wait(ctx); err != nil {
			n.t.Fatalf("waiting for a completion on QP %d: %v", n.qp.QPNum(), err)
		}
	}
}

// busyPoll polls cq as a busy application does (receiving inline) until
// it returns a completion, and returns it; also, if set, runs on every
// empty poll. It fails the test with what after 10 s.
func (n *node) busyPoll(cq verbs.CQ, also func(), what string) verbs.WC {
	n.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		k, err := cq.Poll(n.wcs[:1])
		if err != nil {
			n.t.Fatalf("poll: %v", err)
		}
		if k == 1 {
			return n.wcs[0]
		}
		if also != nil {
			also()
		}
		if time.Now().After(deadline) {
			n.t.Fatal(what)
		}
	}
}

// settle orders the test's accesses to n's memory against the engine's in
// the memory model's sense. Over real sockets the chain "responder writes,
// sends ACK, requester completes" (and "test reads, posts the next WRITE,
// responder writes") passes through the kernel, which the race detector
// cannot see. The engine writes MR memory only under the MR's read lock,
// so taking its write lock orders the test's reads after earlier writes
// (call settle before reading) and later writes after the reads (call it
// again after). (A gathered send reads MR memory under the QP's lock,
// which the post and the completion order.)
func (n *node) settle() {
	mr := n.mr.(*MR)
	mr.mu.Lock()
	mr.mu.Unlock()
}

func (n *node) postRecv(id uint64, off, length int) {
	n.t.Helper()
	must(n.t, n.qp.PostRecv(&verbs.RecvWR{WRID: id, SGList: []verbs.SGE{n.mr.SGE(off, length)}}))
}

func (n *node) post(wr *verbs.SendWR) {
	n.t.Helper()
	if n.peer != nil {
		n.peer.settle() // the test may have just written the peer's memory
	}
	must(n.t, n.qp.PostSend(wr))
}

func expectWC(t testing.TB, wc verbs.WC, id uint64, st verbs.WCStatus, op verbs.WCOpcode) {
	t.Helper()
	if wc.WRID != id || wc.Status != st || (st == verbs.WCSuccess && wc.Opcode != op) {
		t.Fatalf("completion %+v (status %v, opcode %v); want wr_id %d status %v opcode %v", wc, wc.Status, wc.Opcode, id, st, op)
	}
}

func fill(b []byte, seed uint64) {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
}

// lossy wraps a transport and drops, duplicates and reorders outgoing
// packets, so the reliability suite can run over real sockets too.
type lossy struct {
	transport.Transport
	mu      sync.Mutex
	rng     *rand.Rand
	loss    float64
	dup     float64
	held    []byte // one packet held back to reorder
	heldDst netip.AddrPort
	heldFl  uint32
	dropped atomic.Int64
	out     []transport.Datagram
	// trace: the last traceLen packets offered to Send and what became of
	// each, for a failure's report (dumpTrace).
	start time.Time
	trace []string
}

const traceLen = 400

func (l *lossy) note(what string, b []byte) {
	if len(b) < wire.BTHLen {
		return
	}
	bth := wire.BTH(b)
	s := fmt.Sprintf("%9.3fms %-4s op=%#02x psn=%#06x", float64(time.Since(l.start).Microseconds())/1000, what, uint8(bth.Opcode()), uint32(bth.PSN()))
	if bth.AckReq() {
		s += " A"
	}
	if bth.Opcode() == wire.RCAck && len(b) >= wire.BTHLen+4 {
		a := wire.AETH(b[wire.BTHLen:])
		s += fmt.Sprintf(" syn=%#02x msn=%d", a.Syndrome(), a.MSN())
	}
	if len(l.trace) == traceLen {
		copy(l.trace, l.trace[1:])
		l.trace = l.trace[:traceLen-1]
	}
	l.trace = append(l.trace, s)
}

// dumpTrace logs the packets the two sides sent last, each side's in order.
func dumpTrace(t *testing.T, name string, l *lossy) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t.Logf("%s sent (last %d):\n%s", name, len(l.trace), strings.Join(l.trace, "\n"))
}

func newLossy(tr transport.Transport, seed uint64, loss, dup float64) *lossy {
	return &lossy{Transport: tr, rng: rand.New(rand.NewPCG(seed, 7)), loss: loss, dup: dup, start: time.Now()}
}

func (l *lossy) Send(pkts []transport.Datagram) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.out = l.out[:0]
	for _, p := range pkts {
		r := l.rng.Float64()
		switch {
		case r < l.loss:
			l.dropped.Add(1)
			l.note("drop", p.Buf)
		case r < l.loss+l.dup:
			l.out = append(l.out, p, p)
			l.note("dup", p.Buf)
		case r < l.loss+l.dup+0.05 && l.held == nil:
			l.held = make([]byte, p.Len())
			p.CopyTo(l.held)
			l.heldDst, l.heldFl = p.Peer, p.Flow
			l.note("hold", p.Buf)
		default:
			l.out = append(l.out, p)
			l.note("send", p.Buf)
			if l.held != nil {
				l.out = append(l.out, transport.Datagram{Buf: l.held, Peer: l.heldDst, Flow: l.heldFl})
				l.note("late", l.held)
				l.held = nil
			}
		}
	}
	if len(l.out) > 0 {
		if _, err := l.Transport.Send(l.out); err != nil {
			return 0, err
		}
	}
	return len(pkts), nil
}

func seedName(seed uint64) string { return fmt.Sprintf("seed=%d", seed) }
