package roce

import (
	"net/netip"
	"sync"
	"testing"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/verbs"
)

// doorbellFixture is a device on a capture transport with n RC QPs in RTS
// towards a peer that never answers, with no ACK timeout.
func doorbellFixture(t *testing.T, n int) (*Device, *capture, []verbs.QP, verbs.MR) {
	t.Helper()
	c := newCapture("10.9.0.1")
	d := newDevice(t, Config{Transport: c})
	pd, _ := d.AllocPD()
	cq, _ := d.CreateCQ(4096, nil)
	mr, err := pd.RegMR(make([]byte, 64), verbs.AccessLocalWrite)
	must(t, err)
	p := cm.DefaultParams()
	p.PathMTU, p.SGIDIndex = verbs.MTU1024, 1
	p.Timeout = 0 // no ACK timer: nothing is sent again
	peer := verbs.GIDFromAddr(netip.MustParseAddr("10.9.0.2"))
	qps := make([]verbs.QP, n)
	for i := range qps {
		qp, err := pd.CreateQP(&verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTypeRC, Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 16}})
		must(t, err)
		must(t, cm.Connect(qp, cm.Endpoint{QPN: qp.QPNum(), PSN: 1}, cm.Endpoint{QPN: 0x99 + uint32(i), PSN: 1, GID: peer}, &p))
		qps[i] = qp
	}
	return d, c, qps, mr
}

func (c *capture) tally() (pkts, calls int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.count, c.calls
}

// TestDoorbellBatch: posts to idle QPs leave one system call each, but
// between HoldDoorbells and RingDoorbells they wait and then leave in one
// call; holds nest.
func TestDoorbellBatch(t *testing.T) {
	d, c, qps, mr := doorbellFixture(t, 40)
	wr := &verbs.SendWR{Opcode: verbs.WRSend, SendFlags: verbs.SendInline, SGList: []verbs.SGE{mr.SGE(0, 8)}}
	for _, qp := range qps[:10] {
		must(t, qp.PostSend(wr))
	}
	if pkts, calls := c.tally(); pkts != 10 || calls != 10 {
		t.Fatalf("without a hold: %d packets in %d calls; want 10 in 10", pkts, calls)
	}
	d.HoldDoorbells()
	d.HoldDoorbells()
	for _, qp := range qps[10:] {
		must(t, qp.PostSend(wr))
		must(t, qp.PostSend(wr)) // a second post to the same held QP
	}
	d.RingDoorbells() // the inner hold: nothing leaves yet
	if pkts, calls := c.tally(); pkts != 10 || calls != 10 {
		t.Fatalf("during the hold: %d packets in %d calls; want none more than the 10 before", pkts, calls)
	}
	d.RingDoorbells()
	if pkts, calls := c.tally(); pkts != 70 || calls != 11 {
		t.Fatalf("after the ring: %d packets in %d calls; want 70 in 11 (the 60 held in one)", pkts, calls)
	}
	d.RingDoorbells() // unmatched: nothing happens
	must(t, qps[0].PostSend(wr))
	if pkts, calls := c.tally(); pkts != 70 || calls != 11 {
		// qps[0] has a SEND in flight: it waits for the ACK (the QP's own
		// doorbell batching), as before.
		t.Fatalf("%d packets in %d calls", pkts, calls)
	}
}

// TestDoorbellConcurrent: posts from goroutines racing with holds and
// rings all leave, each exactly once.
func TestDoorbellConcurrent(t *testing.T) {
	const perQP = 40
	d, c, qps, mr := doorbellFixture(t, 8)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			d.HoldDoorbells()
			d.RingDoorbells()
		}
	}()
	var posters sync.WaitGroup
	for _, qp := range qps {
		posters.Add(1)
		go func() {
			defer posters.Done()
			wr := &verbs.SendWR{Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendInline, SGList: []verbs.SGE{mr.SGE(0, 8)}, RemoteAddr: 0x1000, RKey: 1}
			for range perQP {
				if err := qp.PostSend(wr); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	posters.Wait()
	close(stop)
	wg.Wait()
	d.HoldDoorbells()
	d.RingDoorbells()
	// Each QP sent its first WRITE and then, with one in flight and no
	// ACK coming, kept the rest in its own batch: nothing is stranded
	// on the doorbell list, nothing was sent twice.
	d.doorbells.mu.Lock()
	held, holds := len(d.doorbells.qps), d.doorbells.holds
	d.doorbells.mu.Unlock()
	if held != 0 || holds != 0 {
		t.Fatalf("%d QPs still held, %d holds open", held, holds)
	}
	pkts, _ := c.tally()
	queued := 0
	for _, qp := range qps {
		q := qp.(*QP)
		q.mu.Lock()
		queued += q.tx.n
		q.mu.Unlock()
	}
	if pkts+queued != len(qps)*perQP || pkts < len(qps) {
		t.Fatalf("%d packets sent and %d queued; want %d in all, at least one per QP sent", pkts, queued, len(qps)*perQP)
	}
}
