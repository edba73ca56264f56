package shm

import (
	"context"
	"testing"
	"time"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/verbs"
)

// side is one end of a test connection.
type side struct {
	dev *Device
	pd  verbs.PD
	cq  verbs.CQ
	qp  verbs.QP
	mr  verbs.MR
	srq verbs.SRQ
	ch  *verbs.CompChannel // sideOpts.channel: the CQ's completion channel
}

const fullAccess = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic

type sideOpts struct {
	qpAccess verbs.Access
	mrAccess verbs.Access
	srq      bool
	typ      verbs.QPType
	rnrRetry uint8
	regMR    bool // the side's MR is RegMR'd Go memory, not AllocMR's memfd
	channel  bool // the side's CQ has a completion channel (side.ch)
}

func newSide(t testing.TB, o sideOpts) *side {
	t.Helper()
	dev, err := Open(Config{})
	if err != nil {
		t.Fatal(err)
	}
	s := &side{dev: dev}
	s.pd, _ = dev.AllocPD()
	if o.channel {
		s.ch = verbs.NewCompChannel(1)
	}
	s.cq, _ = dev.CreateCQ(256, s.ch)
	if o.mrAccess == 0 {
		o.mrAccess = fullAccess
	}
	if o.regMR {
		s.mr, err = s.pd.RegMR(make([]byte, 1<<20), o.mrAccess)
	} else {
		s.mr, err = s.pd.AllocMR(1<<20, o.mrAccess)
	}
	if err != nil {
		t.Fatal(err)
	}
	init := &verbs.QPInitAttr{SendCQ: s.cq, RecvCQ: s.cq, QPType: verbs.QPTypeRC, Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInlineData: 64}}
	if o.typ != 0 {
		init.QPType = o.typ
	}
	if o.srq {
		s.srq, _ = s.pd.CreateSRQ(&verbs.SRQInitAttr{MaxWR: 64, MaxSGE: 2})
		init.SRQ = s.srq
	}
	if s.qp, err = s.pd.CreateQP(init); err != nil {
		t.Fatal(err)
	}
	return s
}

func (s *side) endpoint() cm.Endpoint {
	return cm.Endpoint{QPN: s.qp.QPNum(), GID: s.dev.GID()}
}

func (s *side) close(t testing.TB) {
	t.Helper()
	for _, err := range []error{s.qp.Destroy(), s.srqDestroy(), s.mr.Dereg(), s.cq.Destroy(), s.pd.Dealloc(), s.dev.Close()} {
		if err != nil {
			t.Error(err)
		}
	}
}

func (s *side) srqDestroy() error {
	if s.srq == nil {
		return nil
	}
	return s.srq.Destroy()
}

func params(o sideOpts) *cm.Params {
	p := cm.DefaultParams()
	p.Access = fullAccess
	if o.qpAccess != 0 {
		p.Access = o.qpAccess
	}
	p.RNRRetry = o.rnrRetry
	p.MinRNRTimer = 1 // 0.01 ms
	return &p
}

// pair connects two sides in this process (two devices, as two
// processes would have).
func pair(t testing.TB, a, b sideOpts) (*side, *side) {
	t.Helper()
	if a.rnrRetry == 0 {
		a.rnrRetry = 7
	}
	if b.rnrRetry == 0 {
		b.rnrRetry = 7
	}
	x, y := newSide(t, a), newSide(t, b)
	if err := cm.Connect(x.qp, x.endpoint(), y.endpoint(), params(a)); err != nil {
		t.Fatal(err)
	}
	if err := cm.Connect(y.qp, y.endpoint(), x.endpoint(), params(b)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { y.close(t); x.close(t) })
	return x, y
}

// poll waits for n completions.
func poll(t testing.TB, cq verbs.CQ, n int) []verbs.WC {
	t.Helper()
	out := make([]verbs.WC, 0, n)
	wc := make([]verbs.WC, 16)
	deadline := time.Now().Add(10 * time.Second)
	for len(out) < n {
		k, err := cq.Poll(wc[:min(16, n-len(out))])
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, wc[:k]...)
		if k == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("timed out with %d of %d completions: %+v", len(out), n, out)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
			cq.Wait(ctx)
			cancel()
		}
	}
	return out
}

func postRecv(t testing.TB, qp interface{ PostRecv(*verbs.RecvWR) error }, id uint64, sge verbs.SGE) {
	t.Helper()
	if err := qp.PostRecv(&verbs.RecvWR{WRID: id, SGList: []verbs.SGE{sge}}); err != nil {
		t.Fatal(err)
	}
}

func postSend(t testing.TB, qp verbs.QP, wr verbs.SendWR) {
	t.Helper()
	wr.SendFlags |= verbs.SendSignaled
	if err := qp.PostSend(&wr); err != nil {
		t.Fatal(err)
	}
}
