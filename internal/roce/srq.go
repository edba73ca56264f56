package roce

import (
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/softrdma/softrdma/verbs"
)

// SRQ is a shared receive queue: receive WQEs that any QP attached to it
// consumes. Its lock is taken after a QP's.
type SRQ struct {
	pd    *PD
	users atomic.Int32

	mu     sync.Mutex
	q      recvQueue
	maxSGE uint32
	limit  uint32
	dead   bool
}

// CreateSRQ creates a shared receive queue.
func (pd *PD) CreateSRQ(attr *verbs.SRQInitAttr) (verbs.SRQ, error) {
	const op = "CreateSRQ"
	if err := pd.check(op); err != nil {
		return nil, err
	}
	if attr == nil || attr.MaxWR == 0 || attr.MaxWR > maxSRQWR {
		return nil, verbs.Errorf(op, verbs.ErrInvalidArgument, "MaxWR must be 1..%d", maxSRQWR)
	}
	if attr.MaxSGE > maxSGE {
		return nil, verbs.Errorf(op, verbs.ErrInvalidArgument, "MaxSGE %d: at most %d", attr.MaxSGE, maxSGE)
	}
	nsge := max(attr.MaxSGE, 1)
	// As ibv_create_srq, creating does not arm the limit: SRQ.Modify does.
	s := &SRQ{pd: pd, q: newRecvQueue(attr.MaxWR, nsge), maxSGE: nsge}
	pd.refs.Add(1)
	add(&pd.dev.objs, pd.dev.objs.srqs, s)
	return s, nil
}

// PostRecv posts receive WQEs to the SRQ.
func (s *SRQ) PostRecv(wr *verbs.RecvWR) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead {
		return &verbs.PostError{WRID: wr.WRID, Err: verbs.Errorf("PostSRQRecv", verbs.ErrDestroyed, "the SRQ was destroyed")}
	}
	for i := 0; wr != nil; wr, i = wr.Next, i+1 {
		if len(wr.SGList) > int(s.maxSGE) {
			return &verbs.PostError{Index: i, WRID: wr.WRID, Err: verbs.Errorf("PostSRQRecv", verbs.ErrInvalidArgument, "%d SGEs exceed the SRQ's MaxSGE %d", len(wr.SGList), s.maxSGE)}
		}
		if s.q.full() {
			return &verbs.PostError{Index: i, WRID: wr.WRID, Err: verbs.Errorf("PostSRQRecv", verbs.ErrQueueFull, "the SRQ is full; create it with a larger MaxWR")}
		}
		w := s.q.at(s.q.tail)
		w.wrID = wr.WRID
		total, ok := w.sgl.load(s.pd, wr.SGList, true)
		w.length, w.bad = total, !ok
		s.q.tail++
	}
	return nil
}

// pop moves the next WQE into dst.
func (s *SRQ) pop(dst *recvWQE) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.q.head == s.q.tail {
		return false
	}
	w := s.q.at(s.q.head)
	dst.wrID, dst.length, dst.bad = w.wrID, w.length, w.bad
	dst.sgl.reset()
	dst.sgl.sges = append(dst.sgl.sges, w.sgl.sges...)
	dst.sgl.mrs = append(dst.sgl.mrs, w.sgl.mrs...)
	w.sgl.reset()
	s.q.head++
	if s.limit > 0 && s.q.tail-s.q.head < s.limit {
		// IBTA 10.2.9.3: below the limit, one event, and the limit is
		// disarmed until SRQ.Modify sets it again.
		s.limit = 0
		s.pd.dev.Event(verbs.AsyncEvent{Type: verbs.EventSRQLimitReached, SRQ: s})
	}
	return true
}

// Query returns the SRQ's attributes.
func (s *SRQ) Query() (verbs.SRQAttr, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return verbs.SRQAttr{MaxWR: s.q.max, MaxSGE: s.maxSGE, SRQLimit: s.limit}, nil
}

// Modify sets the SRQ limit.
func (s *SRQ) Modify(attr *verbs.SRQAttr, mask verbs.SRQAttrMask) error {
	if mask&verbs.SRQAttrMaxWR != 0 {
		return verbs.Errorf("ModifySRQ", verbs.ErrNotSupported, "resizing an SRQ is not supported; create a new one")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if mask&verbs.SRQAttrLimit != 0 {
		s.limit = attr.SRQLimit
	}
	return nil
}

// Destroy destroys the SRQ.
func (s *SRQ) Destroy() error {
	if n := s.users.Load(); n > 0 {
		return verbs.Errorf("DestroySRQ", verbs.ErrInUse, "%d QPs still use the SRQ; destroy them first", n)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead {
		return verbs.Errorf("DestroySRQ", verbs.ErrDestroyed, "SRQ already destroyed")
	}
	s.dead = true
	s.pd.refs.Add(-1)
	remove(&s.pd.dev.objs, s.pd.dev.objs.srqs, s)
	return nil
}

// AH is an address handle for UD sends.
type AH struct {
	pd   *PD
	attr verbs.AHAttr
	dest netip.AddrPort
	src  netip.Addr
	dead atomic.Bool
}

// CreateAH creates an address handle.
func (pd *PD) CreateAH(attr *verbs.AHAttr) (verbs.AH, error) {
	const op = "CreateAH"
	if err := pd.check(op); err != nil {
		return nil, err
	}
	if attr == nil || !attr.IsGlobal || attr.GRH.DGID.IsZero() {
		return nil, verbs.Errorf(op, verbs.ErrInvalidArgument, "RoCE needs a global route: set IsGlobal and GRH.DGID to the peer's GID")
	}
	src, err := pd.dev.checkSGID(op, attr)
	if err != nil {
		return nil, err
	}
	pd.refs.Add(1)
	pd.dev.nAH.Add(1)
	ah := &AH{pd: pd, attr: *attr, dest: netip.AddrPortFrom(attr.GRH.DGID.Addr(), pd.dev.port), src: src}
	add(&pd.dev.objs, pd.dev.objs.ahs, ah)
	return ah, nil
}

// Attr returns the attributes the AH was created with.
func (ah *AH) Attr() verbs.AHAttr { return ah.attr }

// Destroy destroys the AH.
func (ah *AH) Destroy() error {
	if !ah.dead.CompareAndSwap(false, true) {
		return verbs.Errorf("DestroyAH", verbs.ErrDestroyed, "AH already destroyed")
	}
	ah.pd.refs.Add(-1)
	ah.pd.dev.nAH.Add(-1)
	remove(&ah.pd.dev.objs, ah.pd.dev.objs.ahs, ah)
	return nil
}
