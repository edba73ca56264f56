package roce

import (
	"net/netip"
	"sync"

	"github.com/softrdma/softrdma/internal/verbsobj"
	"github.com/softrdma/softrdma/verbs"
)

// SRQ is a shared receive queue: receive WQEs that any QP attached to it
// consumes. Its lock is taken after a QP's.
type SRQ struct {
	pd    *PD
	users verbsobj.Life // the QPs attached

	mu     sync.Mutex
	q      recvQueue
	maxSGE uint32
	limit  verbsobj.SRQLimit
}

// CreateSRQ creates a shared receive queue.
func (pd *PD) CreateSRQ(attr *verbs.SRQInitAttr) (verbs.SRQ, error) {
	const op = "CreateSRQ"
	if err := pd.check(op); err != nil {
		return nil, err
	}
	nsge, err := verbsobj.CheckSRQInit(attr, maxSRQWR, maxSGE)
	if err != nil {
		return nil, err
	}
	s := &SRQ{pd: pd, q: newRecvQueue(attr.MaxWR, nsge), maxSGE: nsge}
	pd.refs.Add(1)
	add(&pd.dev.objs, pd.dev.objs.srqs, s)
	return s, nil
}

// PostRecv posts receive WQEs to the SRQ.
func (s *SRQ) PostRecv(wr *verbs.RecvWR) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.users.Check("PostSRQRecv", "SRQ"); err != nil {
		return &verbs.PostError{WRID: wr.WRID, Err: err}
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
	if s.limit.Took(s.q.tail - s.q.head) {
		s.pd.dev.Event(verbs.AsyncEvent{Type: verbs.EventSRQLimitReached, SRQ: s})
	}
	return true
}

// Query returns the SRQ's attributes.
func (s *SRQ) Query() (verbs.SRQAttr, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return verbs.SRQAttr{MaxWR: s.q.max, MaxSGE: s.maxSGE, SRQLimit: s.limit.Get()}, nil
}

// Modify sets the SRQ limit.
func (s *SRQ) Modify(attr *verbs.SRQAttr, mask verbs.SRQAttrMask) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.users.Check("ModifySRQ", "SRQ"); err != nil {
		return err
	}
	return s.limit.Modify(attr, mask, s.q.max)
}

// Destroy destroys the SRQ.
func (s *SRQ) Destroy() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.users.End("DestroySRQ", "SRQ", "QPs"); err != nil {
		return err
	}
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
	// tclass is the traffic class byte of packets to the AH (cc.go).
	tclass uint8
	life   verbsobj.Life
}

// CreateAH creates an address handle.
func (pd *PD) CreateAH(attr *verbs.AHAttr) (verbs.AH, error) {
	const op = "CreateAH"
	if err := pd.check(op); err != nil {
		return nil, err
	}
	if err := verbsobj.CheckAH(attr); err != nil {
		return nil, err
	}
	src, err := pd.dev.checkSGID(op, attr)
	if err != nil {
		return nil, err
	}
	pd.refs.Add(1)
	pd.dev.nAH.Add(1)
	ah := &AH{pd: pd, attr: *attr, dest: netip.AddrPortFrom(attr.GRH.DGID.Addr(), pd.dev.port), src: src,
		tclass: pd.dev.cc.tclassFor(attr.GRH.TrafficClass)}
	add(&pd.dev.objs, pd.dev.objs.ahs, ah)
	return ah, nil
}

// Attr returns the attributes the AH was created with.
func (ah *AH) Attr() verbs.AHAttr { return ah.attr }

// Destroy destroys the AH.
func (ah *AH) Destroy() error {
	if err := ah.life.End("DestroyAH", "AH", ""); err != nil {
		return err
	}
	ah.pd.refs.Add(-1)
	ah.pd.dev.nAH.Add(-1)
	remove(&ah.pd.dev.objs, ah.pd.dev.objs.ahs, ah)
	return nil
}
