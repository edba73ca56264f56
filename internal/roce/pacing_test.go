package roce

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/internal/netsim"
	"github.com/softrdma/softrdma/transport"
	"github.com/softrdma/softrdma/verbs"
)

// slowRecv is a receiving host that spends cost of (virtual) time on every
// packet it takes from its socket, so a burst faster than that fills the
// socket's queue and the rest is dropped, as on a loaded host.
type slowRecv struct {
	transport.Transport
	cost time.Duration
}

func (s *slowRecv) Recv(pkts []transport.Datagram) (int, error) {
	n, err := s.Transport.Recv(pkts)
	if n > 0 {
		time.Sleep(time.Duration(n) * s.cost)
	}
	return n, err
}

// manyQPs is one side of a many-QP test: a device with one PD, CQ and MR
// and a QP per connection.
type manyQPs struct {
	dev *Device
	pd  verbs.PD
	cq  verbs.CQ
	mr  verbs.MR
	buf []byte
	qps []verbs.QP
}

func newManyQPs(t *testing.T, tr transport.Transport, nqp, bufSize int, o qpOpts) *manyQPs {
	t.Helper()
	return newManyQPsWith(t, Config{Transport: tr}, nqp, bufSize, o)
}

// newManyQPsWith is newManyQPs with a device configured by cfg.
func newManyQPsWith(t *testing.T, cfg Config, nqp, bufSize int, o qpOpts) *manyQPs {
	t.Helper()
	m := &manyQPs{dev: newDevice(t, cfg)}
	go serve(m.dev, cfg.Transport)
	var err error
	m.pd, err = m.dev.AllocPD()
	must(t, err)
	m.cq, err = m.dev.CreateCQ(maxCQE, nil)
	must(t, err)
	m.buf = make([]byte, bufSize)
	m.mr, err = m.pd.RegMR(m.buf, o.access)
	must(t, err)
	for range nqp {
		qp, err := m.pd.CreateQP(&verbs.QPInitAttr{SendCQ: m.cq, RecvCQ: m.cq, QPType: verbs.QPTypeRC,
			Cap: verbs.QPCap{MaxSendWR: o.sendWR, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
		must(t, err)
		m.qps = append(m.qps, qp)
	}
	t.Cleanup(func() {
		for _, qp := range m.qps {
			qp.Destroy()
		}
		m.mr.Dereg()
		m.cq.Destroy()
		m.pd.Dealloc()
		if err := m.dev.Close(); err != nil {
			t.Errorf("close device: %v", err)
		}
	})
	return m
}

// connectMany connects a's i-th QP to b's i-th, both ways.
func connectMany(t *testing.T, a, b *manyQPs, o qpOpts) {
	t.Helper()
	ga, err := a.dev.QueryGID(1, 1)
	must(t, err)
	gb, err := b.dev.QueryGID(1, 1)
	must(t, err)
	p := cm.Params{
		Port: 1, Access: o.access, PathMTU: o.mtu, SGIDIndex: 1, HopLimit: 64,
		Timeout: o.timeout, RetryCnt: o.retry, RNRRetry: o.rnrRetry, MinRNRTimer: o.minRNRTimer,
		MaxRdAtomic: o.rdAtomic, MaxDestRdAtomic: o.rdAtomic,
	}
	for i := range a.qps {
		ea := cm.Endpoint{QPN: a.qps[i].QPNum(), PSN: uint32(0xFFFF00+i) & 0xFFFFFF, GID: ga}
		eb := cm.Endpoint{QPN: b.qps[i].QPNum(), PSN: uint32(0x100 * i), GID: gb}
		must(t, cm.Connect(a.qps[i], ea, eb, &p))
		must(t, cm.Connect(b.qps[i], eb, ea, &p))
	}
}

// TestManyQPsOverflow: many QPs lose packets at the same moment in a
// receiver's overflowing socket queue. Every QP's ACK timer then fires at
// about the same time; if each resent its whole window at once, the
// retransmissions would overflow the queue again, round after round,
// until QPs ran out of retries. After a timeout a QP restarts with a
// window of one packet and grows it as ACKs come back, and the timeouts
// are spread by jitter: every WRITE completes with its bytes, and the
// retransmissions stay a fraction of the data.
func TestManyQPsOverflow(t *testing.T) {
	for _, seed := range []uint64{1, 2} {
		t.Run(seedName(seed), func(t *testing.T) { testManyQPsOverflow(t, seed) })
	}
}

func testManyQPsOverflow(t *testing.T, seed uint64) {
	const (
		nqp  = 512
		msgs = 2        // WRITEs per QP
		size = 16 << 10 // 16 packets at MTU 1024
		slot = msgs * size
		// The receiver's socket holds 256 packets and it takes 500 ns
		// per packet, while the sender's link moves one in about 100 ns:
		// of a burst of all QPs' windows, about four in five are lost.
		queue = 256
		cost  = 500 * time.Nanosecond
	)
	synctest.Test(t, func(t *testing.T) {
		n, ea, eb := netsimEndpoints(t, netsim.Config{Delay: 10 * time.Microsecond, Jitter: time.Microsecond, Bandwidth: 10 << 30,
			QueueLimit: queue, Seed: seed, MTU: 9000})
		o := defaultOpts()
		o.retry = 7
		o.timeout = 9 // 2.1 ms
		a := newManyQPs(t, ea, nqp, nqp*slot, o)
		b := newManyQPs(t, &slowRecv{Transport: eb, cost: cost}, nqp, nqp*slot, o)
		connectMany(t, a, b, o)
		fill(a.buf, seed)
		for m := range msgs {
			for i, qp := range a.qps {
				off := i*slot + m*size
				must(t, qp.PostSend(&verbs.SendWR{WRID: uint64(i*msgs + m), Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
					SGList: []verbs.SGE{a.mr.SGE(off, size)}, RemoteAddr: b.mr.Addr() + uint64(off), RKey: b.mr.RKey()}))
			}
		}
		start := time.Now()
		wcs := make([]verbs.WC, 256)
		failed := map[verbs.WCStatus]int{}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for got := 0; got < nqp*msgs; {
			k, err := a.cq.Poll(wcs)
			must(t, err)
			for _, wc := range wcs[:k] {
				if wc.Status != verbs.WCSuccess {
					failed[wc.Status]++
				}
			}
			got += k
			if k == 0 {
				if err := a.cq.Wait(ctx); err != nil {
					t.Fatalf("%d of %d completions: %v", got, nqp*msgs, err)
				}
			}
		}
		ca := &a.dev.Counters
		need := uint64(nqp * msgs * size / 1024)
		report := fmt.Sprintf("%d QPs: sent %d packets for %d, %d retransmitted, %d ACK timeouts, %d QPs out of retries, %v (virtual); network %+v",
			nqp, ca.SentPkts.Load(), need, ca.Retransmits.Load(), ca.Timeouts.Load(), ca.RetryExceededErr.Load(), time.Since(start), n.Stats())
		t.Log(report)
		if len(failed) > 0 {
			t.Fatalf("failed WRITEs by status: %v", failed)
		}
		if n.Stats().QueueDrops == 0 {
			t.Fatal("the receiver's queue never overflowed: the test tests nothing")
		}
		mr := b.mr.(*MR)
		mr.mu.Lock() // orders the engine's writes before the reads (node.settle)
		defer mr.mu.Unlock()
		for i := range nqp {
			if !bytes.Equal(a.buf[i*slot:(i+1)*slot], b.buf[i*slot:(i+1)*slot]) {
				t.Fatalf("QP %d: the bytes written differ", i)
			}
		}
		// The first burst alone loses about 13000 packets, which must be
		// resent. Before the pacing, 3.1 times the data was resent and 8
		// QPs ran out of retries.
		if re := ca.Retransmits.Load(); re > need*3/2 {
			t.Errorf("%d packets retransmitted for %d of data: retransmissions are not bounded", re, need)
		}
	})
}
