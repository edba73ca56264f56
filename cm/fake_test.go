package cm

import (
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// fakeNet connects fake devices: SendMAD delivers to the device that has
// the destination GID, through a filter that may drop or duplicate.
type fakeNet struct {
	mu   sync.Mutex
	devs map[verbs.GID]*fakeDev
	// filter decides how many copies of a MAD from src arrive (0 = lost).
	filter func(src verbs.GID, attr wire.CMAttr, n int) int
	// rewrite, if set, may change a MAD on the way (a man in the middle).
	rewrite func(attr wire.CMAttr, mad []byte)
	count   map[wire.CMAttr]int
}

func newFakeNet() *fakeNet {
	return &fakeNet{devs: map[verbs.GID]*fakeDev{}, count: map[wire.CMAttr]int{}}
}

func (n *fakeNet) sent(attr wire.CMAttr) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.count[attr]
}

// fakeDev is a verbs.Context and verbs.GSI with fake PD, CQ and QP objects.
type fakeDev struct {
	verbs.Context
	net     *fakeNet
	name    string
	addr    netip.Addr
	handler atomic.Pointer[func(verbs.MADSource, []byte)]
	nextQPN atomic.Uint32
	qps     []*fakeRCQP
}

func (n *fakeNet) newDev(name, addr string) *fakeDev {
	d := &fakeDev{net: n, name: name, addr: netip.MustParseAddr(addr)}
	d.nextQPN.Store(0x10)
	n.mu.Lock()
	n.devs[verbs.GIDFromAddr(d.addr)] = d
	n.mu.Unlock()
	return d
}

func (d *fakeDev) Name() string                 { return d.name }
func (d *fakeDev) GUID() uint64                 { return 0 }
func (d *fakeDev) Open() (verbs.Context, error) { return d, nil }
func (d *fakeDev) Device() verbs.Device         { return d }
func (d *fakeDev) Close() error                 { return nil }
func (d *fakeDev) QueryDevice() (verbs.DeviceAttr, error) {
	return verbs.DeviceAttr{NodeGUID: 0x0200_0000_0000_0000 | uint64(d.addr.As4()[3]), MaxQPRdAtom: 16, MaxQPInitRdAtom: 16}, nil
}
func (d *fakeDev) QueryPort(port uint8) (verbs.PortAttr, error) {
	return verbs.PortAttr{State: verbs.PortActive, ActiveMTU: verbs.MTU1024, GIDTblLen: 2}, nil
}
func (d *fakeDev) QueryGID(port uint8, i int) (verbs.GID, error) {
	switch i {
	case 0:
		return verbs.ParseGID("fe80::1")
	case 1:
		return verbs.GIDFromAddr(d.addr), nil
	}
	return verbs.GID{}, verbs.ErrNotFound
}
func (d *fakeDev) AllocPD() (verbs.PD, error) { return &fakePD{dev: d}, nil }
func (d *fakeDev) CreateCQ(n int, ch *verbs.CompChannel) (verbs.CQ, error) {
	return &fakeCQ{}, nil
}

func (d *fakeDev) HandleMADs(port uint8, h func(verbs.MADSource, []byte)) error {
	if h == nil {
		d.handler.Store(nil)
	} else {
		d.handler.Store(&h)
	}
	return nil
}

func (d *fakeDev) SendMAD(port uint8, dst verbs.GID, dstQP, qkey uint32, mad []byte) error {
	n := d.net
	attr := wire.CMAttr(wire.MAD(mad).AttrID())
	n.mu.Lock()
	n.count[attr]++
	copies := 1
	if n.filter != nil {
		copies = n.filter(verbs.GIDFromAddr(d.addr), attr, n.count[attr])
	}
	peer := n.devs[dst]
	rewrite := n.rewrite
	n.mu.Unlock()
	if peer == nil || dstQP != 1 || qkey != verbs.GSIQKey {
		return nil
	}
	b := append([]byte(nil), mad...)
	if rewrite != nil {
		rewrite(attr, b)
	}
	for range copies {
		if h := peer.handler.Load(); h != nil {
			(*h)(verbs.MADSource{GID: verbs.GIDFromAddr(d.addr), QPN: 1, PKey: 0xffff}, b)
		}
	}
	return nil
}

type fakePD struct {
	verbs.PD
	dev *fakeDev
}

func (p *fakePD) Dealloc() error { return nil }
func (p *fakePD) AllocMW(verbs.MWType) (verbs.MW, error) {
	return nil, verbs.Errorf("AllocMW", verbs.ErrNotSupported, "fake")
}
func (p *fakePD) CreateQP(a *verbs.QPInitAttr) (verbs.QP, error) {
	q := &fakeRCQP{typ: a.QPType, num: p.dev.nextQPN.Add(1)}
	p.dev.net.mu.Lock()
	p.dev.qps = append(p.dev.qps, q)
	p.dev.net.mu.Unlock()
	return q, nil
}
func (p *fakePD) CreateAH(a *verbs.AHAttr) (verbs.AH, error) { return &fakeAH{attr: *a}, nil }

type fakeAH struct {
	verbs.AH
	attr verbs.AHAttr
}

func (a *fakeAH) Destroy() error { return nil }

type fakeCQ struct{ verbs.CQ }

func (c *fakeCQ) Destroy() error { return nil }

// fakeRCQP follows Modify's state and keeps the attributes that matter.
type fakeRCQP struct {
	verbs.QP
	mu        sync.Mutex
	typ       verbs.QPType
	num       uint32
	state     verbs.QPState
	attr      verbs.QPAttr // the union of what was set
	destroyed bool
	sec       *verbs.Security // what Secure was given
}

// Secure records s (verbs.Securer), in INIT or RTR as the real QPs.
func (q *fakeRCQP) Secure(s verbs.Security) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.state != verbs.QPStateInit && q.state != verbs.QPStateRTR {
		return verbs.ErrInvalidState
	}
	q.sec = &s
	return nil
}

func (q *fakeRCQP) security() *verbs.Security {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.sec
}

func (q *fakeRCQP) QPNum() uint32      { return q.num }
func (q *fakeRCQP) Type() verbs.QPType { return q.typ }
func (q *fakeRCQP) State() verbs.QPState {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.state
}
func (q *fakeRCQP) Destroy() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.destroyed = true
	return nil
}
func (q *fakeRCQP) setState(s verbs.QPState) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.state = s
}
func (q *fakeRCQP) Modify(a *verbs.QPAttr, m verbs.QPAttrMask) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if _, err := verbs.CheckModify(q.state, q.typ, a, m); err != nil {
		return err
	}
	q.state = a.QPState
	if m&verbs.QPAttrDestQPN != 0 {
		q.attr.DestQPNum, q.attr.RQPSN, q.attr.AHAttr, q.attr.PathMTU = a.DestQPNum, a.RQPSN, a.AHAttr, a.PathMTU
	}
	if m&verbs.QPAttrSQPSN != 0 {
		q.attr.SQPSN = a.SQPSN
	}
	if m&verbs.QPAttrMaxDestRdAtomic != 0 {
		q.attr.MaxDestRdAtomic = a.MaxDestRdAtomic
	}
	if m&verbs.QPAttrMaxQPRdAtomic != 0 {
		q.attr.MaxRdAtomic, q.attr.Timeout = a.MaxRdAtomic, a.Timeout
	}
	return nil
}
func (q *fakeRCQP) get() (verbs.QPState, verbs.QPAttr) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.state, q.attr
}
