package roce

import (
	"bytes"
	"net/netip"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/internal/pcapfile"
	"github.com/softrdma/softrdma/transport"
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// capture is a transport that records what the engine sends and never
// receives anything: tests inject packets with HandleBatch.
type capture struct {
	local   netip.AddrPort
	discard bool // count packets only, so the transport allocates nothing
	count   int
	calls   int // Send calls
	mu      sync.Mutex
	sent    [][]byte
	done    chan struct{}
	once    sync.Once
}

func newCapture(addr string) *capture {
	return &capture{local: netip.AddrPortFrom(netip.MustParseAddr(addr), transport.Port), done: make(chan struct{})}
}

func (c *capture) Send(pkts []transport.Datagram) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.count += len(pkts)
	c.calls++
	for _, p := range pkts {
		if !c.discard && len(c.sent) < 1024 {
			c.sent = append(c.sent, bytes.Clone(p.Buf))
		}
	}
	return len(pkts), nil
}

func (c *capture) Recv(pkts []transport.Datagram) (int, error) {
	<-c.done
	return 0, transport.ErrClosed
}
func (c *capture) LocalAddr() netip.AddrPort { return c.local }
func (c *capture) LinkMTU() int              { return 1500 }
func (c *capture) BatchSize() int            { return 16 }
func (c *capture) Close() error {
	c.once.Do(func() { close(c.done) })
	return nil
}

// fuzzTarget is a device with one QP of each type in RTS/RTR, and an MR in
// the middle of a larger buffer whose guard bands must never change.
type fuzzTarget struct {
	dev        *Device
	peer       netip.AddrPort
	rc, uc, ud verbs.QP
	mem        []byte
	mr         verbs.MR
	guardLo    int
	guardHi    int
	pd         verbs.PD
	cq         verbs.CQ
	wcs        []verbs.WC
	rx         *RxBatch
}

// handle hands pkts to the device as its driver would.
func (f *fuzzTarget) handle(pkts []transport.Datagram) { f.dev.HandleBatch(f.rx, pkts, time.Now()) }

const guard = 4096

func newFuzzTarget(tb testing.TB) *fuzzTarget {
	c := newCapture("10.9.0.1")
	d := newDevice(tb, Config{Transport: c})
	f := &fuzzTarget{dev: d, peer: netip.MustParseAddrPort("10.9.0.2:4791"), wcs: make([]verbs.WC, 64), rx: NewRxBatch()}
	f.pd, _ = d.AllocPD()
	f.cq, _ = d.CreateCQ(1<<14, nil)
	f.mem = make([]byte, 3*guard)
	for i := range f.mem {
		f.mem[i] = 0xA5
	}
	f.guardLo, f.guardHi = guard, 2*guard
	all := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
	var err error
	f.mr, err = f.pd.RegMR(f.mem[guard:2*guard], all)
	must(tb, err)
	o := defaultOpts()
	o.mtu = verbs.MTU256
	mk := func(typ verbs.QPType) verbs.QP {
		qp, err := f.pd.CreateQP(&verbs.QPInitAttr{SendCQ: f.cq, RecvCQ: f.cq, QPType: typ, Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 64, MaxSendSGE: 2, MaxRecvSGE: 2}})
		must(tb, err)
		return qp
	}
	peer := cm.Endpoint{QPN: 0x99, PSN: 100, GID: verbs.GIDFromAddr(f.peer.Addr())}
	p := cm.Params{Port: 1, Access: all, QKey: 0x1234, PathMTU: verbs.MTU256, SGIDIndex: 1, HopLimit: 64,
		Timeout: 14, RetryCnt: 7, RNRRetry: 7, MinRNRTimer: 1, MaxRdAtomic: 4, MaxDestRdAtomic: 4}
	for _, typ := range []verbs.QPType{verbs.QPTypeRC, verbs.QPTypeUC, verbs.QPTypeUD} {
		qp := mk(typ)
		psn := uint32(500)
		if typ == verbs.QPTypeUD {
			psn = 1
		}
		must(tb, cm.Connect(qp, cm.Endpoint{QPN: qp.QPNum(), PSN: psn}, peer, &p))
		switch typ {
		case verbs.QPTypeRC:
			f.rc = qp
		case verbs.QPTypeUC:
			f.uc = qp
		case verbs.QPTypeUD:
			f.ud = qp
		}
	}
	f.refill()
	return f
}

// revive brings QPs that an input drove to ERR back to RTS, so later
// inputs reach the protocol code rather than the state check.
func (f *fuzzTarget) revive(tb testing.TB) {
	if f.rc.State() != verbs.QPStateErr && f.uc.State() != verbs.QPStateErr && f.ud.State() != verbs.QPStateErr {
		return
	}
	f.destroy()
	*f = *newFuzzTarget(tb)
}

func (f *fuzzTarget) destroy() {
	f.rc.Destroy()
	f.uc.Destroy()
	f.ud.Destroy()
	f.mr.Dereg()
	f.cq.Destroy()
	f.pd.Dealloc()
	f.dev.Close()
}

// refill keeps receive WQEs posted so SENDs get as far as placing data.
func (f *fuzzTarget) refill() {
	for _, qp := range []verbs.QP{f.rc, f.uc, f.ud} {
		for qp.PostRecv(&verbs.RecvWR{SGList: []verbs.SGE{f.mr.SGE(100, 300), f.mr.SGE(2000, 1000)}}) == nil {
		}
	}
	for {
		if n, _ := f.cq.Poll(f.wcs); n == 0 {
			return
		}
	}
}

func (f *fuzzTarget) checkGuards(tb testing.TB) {
	for i, b := range f.mem[:f.guardLo] {
		if b != 0xA5 {
			tb.Fatalf("byte %d below the registered region changed", i)
		}
	}
	for i, b := range f.mem[f.guardHi:] {
		if b != 0xA5 {
			tb.Fatalf("byte %d above the registered region changed", i)
		}
	}
}

// FuzzReceive feeds arbitrary datagrams to live RC, UC and UD QPs: nothing
// may panic and no byte outside the registered region may change. The
// first byte of the input picks the QP the packet is addressed to, so the
// fuzzer gets past the QP lookup.
func FuzzReceive(f *testing.F) {
	for _, s := range seedPackets(f) {
		f.Add(s)
	}
	// CNPs to each QP, and one marked CE (bit 6 of the first byte).
	for i := range byte(3) {
		f.Add(append([]byte{i}, wire.EncodeCNP(make([]byte, wire.CNPLen), 0xFFFF, 0)...))
	}
	f.Add(append([]byte{0x40}, wire.EncodeCNP(make([]byte, wire.CNPLen), 0xFFFF, 0)...))
	target := newFuzzTarget(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 1 {
			return
		}
		pkt := bytes.Clone(data[1:])
		if len(pkt) >= wire.BTHLen {
			qps := []verbs.QP{target.rc, target.uc, target.ud}
			wire.BTH(pkt).SetDestQP(qps[int(data[0])%3].QPNum())
			if data[0]&0x80 != 0 { // sometimes aim at the memory region
				rewriteKeys(pkt, target)
			}
		}
		var tclass uint8
		if data[0]&0x40 != 0 { // sometimes marked Congestion Experienced
			tclass = transport.ECNCE
		}
		target.handle([]transport.Datagram{{Buf: pkt, Peer: target.peer, Local: target.dev.local, ICRC: transport.ICRCOK, TClass: tclass}})
		target.checkGuards(t)
		target.revive(t)
		target.refill()
	})
}

// rewriteKeys points any RETH or AtomicETH in pkt at the fuzz MR, with the
// fuzzer's address offset, so bounds checks are exercised at the edges.
func rewriteKeys(pkt []byte, target *fuzzTarget) {
	var p wire.Packet
	if wire.Parse(pkt, &p) != nil {
		return
	}
	base := target.mr.Addr() - guard
	if p.RETH != nil {
		p.RETH.SetRKey(target.mr.RKey())
		p.RETH.SetVA(base + p.RETH.VA()%(3*guard))
	}
	if p.AtomicETH != nil {
		p.AtomicETH.SetRKey(target.mr.RKey())
		p.AtomicETH.SetVA(base + p.AtomicETH.VA()%(3*guard))
	}
}

// seedPackets are the RoCEv2 packets of the rxe captures, as fuzz seeds.
func seedPackets(tb testing.TB) [][]byte {
	var out [][]byte
	files, _ := filepath.Glob("../../testdata/rxe-pcaps/*.pcap")
	for _, name := range files {
		dgs, err := pcapfile.RoCEv2(name)
		if err != nil {
			tb.Fatalf("%s: %v", name, err)
		}
		for _, dg := range dgs {
			if len(out) == 200 {
				return out
			}
			out = append(out, append([]byte{byte(len(out))}, dg.Payload...))
		}
	}
	return out
}
