package roce

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/softrdma/softrdma/internal/netsim"
	"github.com/softrdma/softrdma/verbs"
)

// testRing is a feed with the producer side clib's C rings have
// (ibverbs_sring.c), written in Go: post queues a request when the QP is
// armed and its queue has room, and calls the QP's take (TakeFeed,
// TakeRecvFeed) when the QP disarmed meanwhile; otherwise it posts
// directly (PostSend, PostRecv). It is the QP's SendFeed for
// W = verbs.SendWR and its RecvFeed for verbs.RecvWR.
type testRing[W verbs.SendWR | verbs.RecvWR] struct {
	max    uint32 // the QP's queue depth
	direct func(*W) error
	take   func()

	// Hooks that place the two sides' steps of the handshake in a
	// chosen order (TestSendFeedHandshake): beforePush runs between the
	// producer's first look at armed and its publishing of the request;
	// onDisarm runs as the QP's Arm(false, ...) begins, before it stores.
	beforePush func()
	onDisarm   func()

	mu     sync.Mutex // the producer's: posted, and the slots
	posted uint32     // requests accepted, through the ring or directly
	slots  [32]W
	sges   [32][5]verbs.SGE

	tail, head atomic.Uint32
	armed      atomic.Bool
	retired    atomic.Uint32
	discarded  uint32 // the QP's side, under its lock

	queued, kicks, takes, discards atomic.Int64
	pendings                       atomic.Int64 // Pending calls that found requests: the QP disarming found a post
}

type testFeed = testRing[verbs.SendWR]
type testRecvFeed = testRing[verbs.RecvWR]

func (f *testRing[W]) Take(post func(*W) error) {
	f.takes.Add(1)
	h, t := f.head.Load(), f.tail.Load()
	for ; h != t; h++ {
		wr := f.slots[h%32]
		post(&wr)
	}
	f.head.Store(h)
}

func (f *testRing[W]) Discard() {
	f.discards.Add(1)
	h, t := f.head.Load(), f.tail.Load()
	f.discarded += t - h
	f.head.Store(t)
}

func (f *testRing[W]) Arm(armed bool, retired uint32) {
	if !armed && f.onDisarm != nil {
		f.onDisarm()
	}
	f.Retired(retired)
	f.armed.Store(armed)
}

func (f *testRing[W]) Retired(retired uint32) { f.retired.Store(retired + f.discarded) }

func (f *testRing[W]) Pending() bool {
	p := f.head.Load() != f.tail.Load()
	if p {
		f.pendings.Add(1)
	}
	return p
}

// post is ibv_post_send or ibv_post_recv over the ring; queued says
// whether the request went through it.
func (f *testRing[W]) post(wr *W) (queued bool, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.tail.Load()
	if f.armed.Load() && f.posted-f.retired.Load() < f.max && t-f.head.Load() < uint32(len(f.slots)) {
		if f.beforePush != nil {
			f.beforePush()
		}
		f.push(wr)
		if !f.armed.Load() {
			f.kicks.Add(1)
			f.take()
		}
		return true, nil
	}
	if err := f.direct(wr); err != nil {
		return false, err
	}
	f.posted++
	return false, nil
}

// push publishes wr in the slot at tail, as ring_push does.
// Precondition: f.mu held.
func (f *testRing[W]) push(wr *W) {
	t := f.tail.Load()
	{
		f.slots[t%32] = *wr
		switch s := any(&f.slots[t%32]).(type) { // the slot keeps its own SGEs, as the C ring's
		case *verbs.SendWR:
			s.Next, s.SGList = nil, f.sges[t%32][:copy(f.sges[t%32][:], s.SGList)]
		case *verbs.RecvWR:
			s.Next, s.SGList = nil, f.sges[t%32][:copy(f.sges[t%32][:], s.SGList)]
		}
		f.tail.Store(t + 1)
		f.posted++
		f.queued.Add(1)
	}
}

func newTestFeed(t *testing.T, n *node, max uint32) *testFeed {
	t.Helper()
	q := n.qp.(*QP)
	f := &testFeed{max: max, direct: q.PostSend, take: q.TakeFeed}
	must(t, q.SetSendFeed(f))
	return f
}

func newTestRecvFeed(t *testing.T, n *node, max uint32) *testRecvFeed {
	t.Helper()
	q := n.qp.(*QP)
	f := &testRecvFeed{max: max, direct: q.PostRecv, take: q.TakeRecvFeed}
	must(t, q.SetRecvFeed(f))
	return f
}

// TestSendFeed: requests from a feed and from PostSend, interleaved by a
// producer racing the QP's acknowledgements on real sockets, all go out,
// in order, and complete in order; most of them are taken by the QP by
// itself (no TakeFeed), and the producer's view of the queue's room never
// lets it overfill the send queue (no request refused).
func TestSendFeed(t *testing.T) {
	ta, tb := udpPair(t)
	o := realOpts()
	o.sendWR = 32
	a, b := pair(t, ta, tb, o)
	f := newTestFeed(t, a, o.sendWR)
	const n = 20000
	var completed atomic.Int64
	done := make(chan error, 1)
	go func() { // the application's poller
		wcs := make([]verbs.WC, 16)
		next := uint64(0)
		for next < n {
			k, err := a.scq.Poll(wcs)
			if err != nil {
				done <- err
				return
			}
			for _, wc := range wcs[:k] {
				if wc.Status != verbs.WCSuccess || wc.WRID != next {
					t.Errorf("completion %d: wr_id %d status %v", next, wc.WRID, wc.Status)
					done <- nil
					return
				}
				next++
			}
			completed.Store(int64(next))
		}
		done <- nil
	}()
	for i := uint64(0); i < n; i++ {
		off := int(i%4096) * 8
		binary.LittleEndian.PutUint64(a.buf[off:], i)
		wr := &verbs.SendWR{WRID: i, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled | verbs.SendInline,
			SGList: []verbs.SGE{a.mr.SGE(off, 8)}, RemoteAddr: b.mr.Addr() + uint64(off), RKey: b.mr.RKey()}
		if i%7 == 3 {
			wr.SendFlags = verbs.SendSignaled // gathered from the MR, not copied at post
		}
		for {
			if _, err := f.post(wr); err == nil {
				break
			} else if !errors.Is(err, verbs.ErrQueueFull) {
				t.Fatalf("post %d: %v", i, err)
			}
			for completed.Load() <= int64(i)-int64(o.sendWR) {
				time.Sleep(time.Microsecond)
			}
		}
		if i%7 == 3 {
			for completed.Load() <= int64(i) { // its memory is rewritten 4096 posts later
				time.Sleep(time.Microsecond)
			}
		}
	}
	select {
	case err := <-done:
		must(t, err)
	case <-time.After(30 * time.Second):
		t.Fatalf("%d of %d completions after 30 s; feed queued %d, kicked %d", completed.Load(), n, f.queued.Load(), f.kicks.Load())
	}
	b.settle()
	for k := 0; k < 4096; k++ {
		want := uint64(k + 4096*((n-1-k)/4096)) // the last request that wrote word k
		if got := binary.LittleEndian.Uint64(b.buf[k*8:]); got != want {
			t.Fatalf("peer's word %d holds %d, want %d", k, got, want)
		}
	}
	c := &a.dev.Counters
	t.Logf("queued %d of %d, kicked %d, found pending while disarming %d, taken %d in %d takes", f.queued.Load(), n, f.kicks.Load(), f.pendings.Load(), c.FeedTaken.Load(), f.takes.Load())
	if c.FeedRefused.Load() != 0 {
		t.Errorf("%d requests refused: the producer's room check let the send queue overfill", c.FeedRefused.Load())
	}
	if got := c.FeedTaken.Load(); got != uint64(f.queued.Load()) {
		t.Errorf("the QP took %d requests from the feed, the producer queued %d", got, f.queued.Load())
	}
	if f.queued.Load() < n/4 || f.kicks.Load() > f.queued.Load()/2 {
		t.Errorf("queued %d of %d with %d kicks: the QP did not take its feed by itself", f.queued.Load(), n, f.kicks.Load())
	}
	if f.armed.Load() || f.Pending() {
		t.Errorf("armed %v, pending %v with every request complete", f.armed.Load(), f.Pending())
	}
	if f.retired.Load() != f.posted {
		t.Errorf("retired %d, posted %d", f.retired.Load(), f.posted)
	}
}

// feedPair is a connected RC pair on a simulated network with a delay, so
// that a request stays unacknowledged while the test queues more.
func feedPair(t *testing.T) (*node, *node, *testFeed) {
	o := defaultOpts()
	o.sendWR = 8
	_, a, b := netsimPair(t, netsim.Config{Seed: 1, Delay: 50 * time.Microsecond}, o)
	return a, b, newTestFeed(t, a, o.sendWR)
}

func (n *node) writeWR(id uint64, off int) *verbs.SendWR {
	return &verbs.SendWR{WRID: id, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{n.mr.SGE(off, 8)}, RemoteAddr: n.peer.mr.Addr() + uint64(off), RKey: n.peer.mr.RKey()}
}

// TestSendFeedArming: a QP is armed exactly while it is in RTS with
// requests outstanding; what a producer queues while it is armed the QP
// takes when the acknowledgement comes, with no call from the producer; a
// request it refuses completes in error and takes the QP to ERR; an error
// flushes what waits in the feed, in order; a reset discards it.
func TestSendFeedArming(t *testing.T) {
	t.Run("taken on the acknowledgement", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			a, _, f := feedPair(t)
			if f.armed.Load() {
				t.Fatal("armed before RTS's first request")
			}
			if q, _ := f.post(a.writeWR(0, 0)); q {
				t.Fatal("the first request of an idle QP was queued: nothing would take it")
			}
			if !f.armed.Load() {
				t.Fatal("not armed with a request outstanding")
			}
			for i := uint64(1); i < 6; i++ {
				if q, err := f.post(a.writeWR(i, int(i)*8)); !q || err != nil {
					t.Fatalf("request %d: queued %v, %v", i, q, err)
				}
			}
			if f.kicks.Load() != 0 || a.dev.Counters.FeedTaken.Load() != 0 {
				t.Fatal("taken before the acknowledgement came")
			}
			start := time.Now()
			for i := uint64(0); i < 6; i++ {
				expectWC(t, a.waitWC(a.scq), i, verbs.WCSuccess, verbs.WCRDMAWrite)
			}
			// Two round trips of 100 µs: the first request's, then the
			// five's; the ACK timeout (4 ms) would take them too, late.
			if d := time.Since(start); d > time.Millisecond {
				t.Fatalf("the queued requests completed after %v: taken by a timeout, not on the acknowledgement", d)
			}
			if f.kicks.Load() != 0 || a.dev.Counters.FeedTaken.Load() != 5 {
				t.Fatalf("%d kicks, %d taken; want 0 and 5", f.kicks.Load(), a.dev.Counters.FeedTaken.Load())
			}
			synctest.Wait()
			if f.armed.Load() || f.retired.Load() != 6 {
				t.Fatalf("armed %v, retired %d once all completed; want false, 6", f.armed.Load(), f.retired.Load())
			}
		})
	})
	t.Run("an ACK waiting for the poller disarms", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			a, _, f := feedPair(t)
			f.post(a.writeWR(0, 0))
			if !f.armed.Load() {
				t.Fatal("not armed with a request outstanding")
			}
			// PostSend sends such an ACK with the request at once; a
			// queued request would hold both back.
			q := a.qp.(*QP)
			q.mu.Lock()
			q.resp.ackPending = true
			q.armFeedLocked()
			armed := f.armed.Load()
			q.resp.ackPending = false
			q.armFeedLocked()
			q.mu.Unlock()
			if armed {
				t.Fatal("armed while an ACK waits for the poller")
			}
			expectWC(t, a.waitWC(a.scq), 0, verbs.WCSuccess, verbs.WCRDMAWrite)
		})
	})
	t.Run("room", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			a, _, f := feedPair(t)
			for i := uint64(0); i < 8; i++ {
				if _, err := f.post(a.writeWR(i, int(i)*8)); err != nil {
					t.Fatal(err)
				}
			}
			// The ninth would overfill the queue: the producer sees it
			// and asks PostSend, which refuses it.
			if q, err := f.post(a.writeWR(8, 64)); q || !errors.Is(err, verbs.ErrQueueFull) {
				t.Fatalf("ninth request of 8: queued %v, %v; want PostSend's queue-full error", q, err)
			}
			for i := uint64(0); i < 8; i++ {
				expectWC(t, a.waitWC(a.scq), i, verbs.WCSuccess, verbs.WCRDMAWrite)
			}
		})
	})
	t.Run("refused", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			a, _, f := feedPair(t)
			f.post(a.writeWR(0, 0))
			bad := a.writeWR(1, 8)
			bad.SGList = []verbs.SGE{a.mr.SGE(0, 1), a.mr.SGE(1, 1), a.mr.SGE(2, 1), a.mr.SGE(3, 1), a.mr.SGE(4, 1)} // Cap.MaxSendSGE is 4
			f.post(bad)
			f.post(a.writeWR(2, 16))
			expectWC(t, a.waitWC(a.scq), 0, verbs.WCSuccess, verbs.WCRDMAWrite) // acknowledged before the feed is taken
			expectWC(t, a.waitWC(a.scq), 1, verbs.WCLocQPOpErr, 0)
			expectWC(t, a.waitWC(a.scq), 2, verbs.WCWRFlushErr, 0)
			if a.qp.State() != verbs.QPStateErr || a.dev.Counters.FeedRefused.Load() != 1 {
				t.Fatalf("QP in %v, %d refused; want ERR, 1", a.qp.State(), a.dev.Counters.FeedRefused.Load())
			}
			if f.armed.Load() || f.retired.Load() != 3 {
				t.Fatalf("armed %v, retired %d; want false, 3", f.armed.Load(), f.retired.Load())
			}
		})
	})
	t.Run("error flushes the feed", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			a, _, f := feedPair(t)
			for i := uint64(0); i < 4; i++ {
				f.post(a.writeWR(i, int(i)*8))
			}
			must(t, a.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateErr}, verbs.QPAttrState))
			for i := uint64(0); i < 4; i++ {
				expectWC(t, a.waitWC(a.scq), i, verbs.WCWRFlushErr, 0)
			}
			if f.armed.Load() || f.Pending() || f.retired.Load() != 4 {
				t.Fatalf("armed %v, pending %v, retired %d; want false, false, 4", f.armed.Load(), f.Pending(), f.retired.Load())
			}
			// In ERR a post is flushed through PostSend.
			if q, err := f.post(a.writeWR(9, 0)); q || err != nil {
				t.Fatalf("post in ERR: queued %v, %v", q, err)
			}
			expectWC(t, a.waitWC(a.scq), 9, verbs.WCWRFlushErr, 0)
		})
	})
	t.Run("reset discards the feed", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			a, _, f := feedPair(t)
			for i := uint64(0); i < 4; i++ {
				f.post(a.writeWR(i, int(i)*8))
			}
			must(t, a.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateReset}, verbs.QPAttrState))
			if f.discards.Load() == 0 || f.Pending() || f.armed.Load() || f.retired.Load() != 4 {
				t.Fatalf("discards %d, pending %v, armed %v, retired %d; want >0, false, false, 4",
					f.discards.Load(), f.Pending(), f.armed.Load(), f.retired.Load())
			}
			synctest.Wait()
			if k, _ := a.scq.Poll(a.wcs); k != 0 {
				t.Fatalf("%d completions after a reset", k)
			}
			if q, err := f.post(a.writeWR(5, 0)); q || err == nil {
				t.Fatalf("post in RESET: queued %v, %v; want PostSend's refusal", q, err)
			}
		})
	})
	t.Run("destroy disarms", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			a, _, f := feedPair(t)
			f.post(a.writeWR(0, 0))
			f.post(a.writeWR(1, 8))
			must(t, a.qp.Destroy())
			a.qp = nil
			if f.armed.Load() {
				t.Fatal("armed after Destroy")
			}
		})
	})
	t.Run("only RC", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			o := defaultOpts()
			o.typ = verbs.QPTypeUC
			_, a, _ := netsimPair(t, netsim.Config{Seed: 1}, o)
			if err := a.qp.(*QP).SetSendFeed(&testFeed{}); err == nil {
				t.Fatal("a UC QP took a send feed")
			}
		})
	})
}

// TestSendFeedDisarmRace: a producer that keeps one or two requests
// outstanding posts just as the QP handles the acknowledgement that
// disarms it, over and over; whichever side sees the other (the producer
// calls TakeFeed, or the QP finds the request as it disarms), no request
// is left in the feed.
func TestSendFeedDisarmRace(t *testing.T) {
	ta, tb := udpPair(t)
	a, b := pair(t, ta, tb, realOpts())
	f := newTestFeed(t, a, realOpts().sendWR)
	const n = 20000
	got := uint64(0)
	for i := uint64(0); i < n; i++ {
		if _, err := f.post(a.writeWR(i, int(i%64)*8)); err != nil {
			t.Fatalf("post %d: %v", i, err)
		}
		for got+1 < i { // at most two outstanding
			k, err := a.scq.Poll(a.wcs[:1])
			if err != nil {
				t.Fatal(err)
			}
			if k == 1 {
				expectWC(t, a.wcs[0], got, verbs.WCSuccess, verbs.WCRDMAWrite)
				got++
			}
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for got < n {
		k, err := a.scq.Poll(a.wcs[:1])
		if err != nil {
			t.Fatal(err)
		}
		if k == 1 {
			expectWC(t, a.wcs[0], got, verbs.WCSuccess, verbs.WCRDMAWrite)
			got++
		} else if time.Now().After(deadline) {
			t.Fatalf("request %d never completed: queued %d, kicked %d, pending %v, armed %v", got, f.queued.Load(), f.kicks.Load(), f.Pending(), f.armed.Load())
		}
	}
	_ = b
	t.Logf("queued %d of %d, kicked %d, found pending while disarming %d", f.queued.Load(), n, f.kicks.Load(), f.pendings.Load())
}

// TestSendFeedHandshake: each half of the arming handshake alone saves a
// request posted as the QP disarms. The QP's half: the request lands
// after the QP's last take but before it stores the disarming, so the
// producer's second look still finds it armed and does not call; the QP
// finds the request as it disarms (Pending). The producer's half: the
// QP disarms between the producer's first look and its publishing, and
// finds nothing; the producer's second look finds it disarmed and calls
// TakeFeed. Either way the request completes.
func TestSendFeedHandshake(t *testing.T) {
	t.Run("the QP finds it", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			a, _, f := feedPair(t)
			f.post(a.writeWR(0, 0))
			late := a.writeWR(1, 8)
			f.onDisarm = func() {
				f.onDisarm = nil
				f.push(late) // the producer's store and second look both come before the QP's store
			}
			start := time.Now()
			expectWC(t, a.waitWC(a.scq), 0, verbs.WCSuccess, verbs.WCRDMAWrite)
			expectWC(t, a.waitWC(a.scq), 1, verbs.WCSuccess, verbs.WCRDMAWrite)
			if d := time.Since(start); d > time.Millisecond {
				t.Fatalf("the late request completed after %v: a timer took it, not the disarming", d)
			}
			if f.kicks.Load() != 0 || f.pendings.Load() == 0 {
				t.Fatalf("%d kicks, %d pending finds; want 0 and at least 1", f.kicks.Load(), f.pendings.Load())
			}
		})
	})
	t.Run("the producer calls", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			a, _, f := feedPair(t)
			f.post(a.writeWR(0, 0))
			f.beforePush = func() {
				f.beforePush = nil
				time.Sleep(time.Millisecond) // the ACK comes back: the QP disarms and finds nothing
				synctest.Wait()
			}
			if q, err := f.post(a.writeWR(1, 8)); !q || err != nil {
				t.Fatalf("queued %v, %v", q, err)
			}
			expectWC(t, a.waitWC(a.scq), 0, verbs.WCSuccess, verbs.WCRDMAWrite)
			expectWC(t, a.waitWC(a.scq), 1, verbs.WCSuccess, verbs.WCRDMAWrite)
			if f.kicks.Load() != 1 {
				t.Fatalf("%d kicks; want 1", f.kicks.Load())
			}
		})
	})
}

// TestRecvFeed: a receiver that reposts each receive request through the
// feed as its message completes, against a sender that keeps its queue
// full, over real sockets: every message lands in the request posted for
// it, in order, and the QP takes nearly all of them from the feed.
func TestRecvFeed(t *testing.T) {
	ta, tb := udpPair(t)
	o := realOpts()
	o.recvWR = 32
	a, b := pair(t, ta, tb, o)
	f := newTestRecvFeed(t, b, o.recvWR)
	const n = 20000
	slot := func(i uint64) int { return int(i%32) * 64 }
	for i := uint64(0); i < 32; i++ {
		if _, err := f.post(&verbs.RecvWR{WRID: i, SGList: []verbs.SGE{b.mr.SGE(slot(i), 64)}}); err != nil {
			t.Fatal(err)
		}
	}
	var posted atomic.Uint64 // one past the last message a receive request waits for
	posted.Store(32)
	errc := make(chan error, 1)
	go func() { // the sender
		wcs := make([]verbs.WC, 16)
		done := uint64(0)
		for i := uint64(0); i < n; {
			// Only into requests the receiver posted: an RNR NAK would
			// test the retry path, slowly, not the feed.
			if i < posted.Load() && i-done < 16 {
				binary.LittleEndian.PutUint64(a.buf[slot(i):], i)
				err := a.qp.PostSend(&verbs.SendWR{WRID: i, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled | verbs.SendInline,
					SGList: []verbs.SGE{a.mr.SGE(slot(i), 8)}})
				if err == nil {
					i++
					continue
				}
				if !errors.Is(err, verbs.ErrQueueFull) {
					errc <- err
					return
				}
			}
			k, err := a.scq.Poll(wcs)
			if err != nil {
				errc <- err
				return
			}
			if k == 0 {
				runtime.Gosched() // the devices' receive goroutines need the Ps two spinners hold
			}
			done += uint64(k)
		}
		errc <- nil
	}()
	deadline := time.Now().Add(30 * time.Second)
	for next := uint64(0); next < n; {
		k, err := b.rcq.Poll(b.wcs[:1])
		must(t, err)
		if k == 0 {
			runtime.Gosched()
			if time.Now().After(deadline) {
				var sendErr error
				select {
				case sendErr = <-errc:
				default:
				}
				q := b.qp.(*QP)
				q.mu.Lock()
				h, tl := q.rq.head, q.rq.tail
				q.mu.Unlock()
				qa := a.qp.(*QP)
				qa.mu.Lock()
				sqs := fmt.Sprintf("sq %d/%d/%d timer %v state %v", qa.sq.head, qa.sq.next, qa.sq.tail, qa.timerAt, qa.stateLocked())
				qa.mu.Unlock()
				t.Fatalf("message %d never arrived: queued %d, kicked %d, armed %v, pending %v, rq %d..%d, sender: %v; a %s %v; b %v",
					next, f.queued.Load(), f.kicks.Load(), f.armed.Load(), f.Pending(), h, tl, sendErr, sqs, a.dev.Counters.Snapshot(), b.dev.Counters.Snapshot())
			}
			continue
		}
		wc := b.wcs[0]
		b.settle()
		if wc.Status != verbs.WCSuccess || wc.WRID != next {
			t.Fatalf("completion %d: wr_id %d status %v", next, wc.WRID, wc.Status)
		}
		if got := binary.LittleEndian.Uint64(b.buf[slot(next):]); got != next {
			t.Fatalf("message %d landed as %d", next, got)
		}
		if next+32 < n {
			if _, err := f.post(&verbs.RecvWR{WRID: next + 32, SGList: []verbs.SGE{b.mr.SGE(slot(next), 64)}}); err != nil {
				t.Fatalf("repost %d: %v", next+32, err)
			}
			posted.Store(next + 33)
		}
		next++
	}
	must(t, <-errc)
	c := &b.dev.Counters
	t.Logf("queued %d of %d, kicked %d, taken %d", f.queued.Load(), n, f.kicks.Load(), c.FeedTaken.Load())
	if c.SendRNRErr.Load() != 0 {
		t.Errorf("%d RNR NAKs: a message found no receive request though one was posted for it", c.SendRNRErr.Load())
	}
	if c.FeedRefused.Load() != 0 || c.FeedTaken.Load() != uint64(f.queued.Load()) {
		t.Errorf("taken %d, refused %d; queued %d", c.FeedTaken.Load(), c.FeedRefused.Load(), f.queued.Load())
	}
	if f.queued.Load() < n/2 {
		t.Errorf("only %d of %d receive requests went through the feed", f.queued.Load(), n)
	}
}

// TestRecvFeedStates: armed from INIT to SQE; ERR flushes what waits in
// the feed, in order, and disarms it (a post then flushes through
// PostRecv); RESET discards it.
func TestRecvFeedStates(t *testing.T) {
	recv := func(n *node, id uint64) *verbs.RecvWR {
		return &verbs.RecvWR{WRID: id, SGList: []verbs.SGE{n.mr.SGE(int(id)*64, 64)}}
	}
	t.Run("ERR flushes", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			_, b, _ := feedPair(t)
			f := newTestRecvFeed(t, b, 256)
			for i := uint64(0); i < 5; i++ {
				if q, err := f.post(recv(b, i)); !q || err != nil {
					t.Fatalf("request %d: queued %v, %v", i, q, err)
				}
			}
			must(t, b.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateErr}, verbs.QPAttrState))
			for i := uint64(0); i < 5; i++ {
				expectWC(t, b.waitWC(b.rcq), i, verbs.WCWRFlushErr, 0)
			}
			if f.armed.Load() || f.Pending() || f.retired.Load() != 5 {
				t.Fatalf("armed %v, pending %v, retired %d; want false, false, 5", f.armed.Load(), f.Pending(), f.retired.Load())
			}
			if q, err := f.post(recv(b, 9)); q || err != nil {
				t.Fatalf("post in ERR: queued %v, %v", q, err)
			}
			expectWC(t, b.waitWC(b.rcq), 9, verbs.WCWRFlushErr, 0)
		})
	})
	t.Run("RESET discards", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			_, b, _ := feedPair(t)
			f := newTestRecvFeed(t, b, 256)
			for i := uint64(0); i < 5; i++ {
				f.post(recv(b, i))
			}
			must(t, b.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateReset}, verbs.QPAttrState))
			synctest.Wait()
			if k, _ := b.rcq.Poll(b.wcs); k != 0 || f.Pending() || f.armed.Load() || f.retired.Load() != 5 {
				t.Fatalf("%d completions, pending %v, armed %v, retired %d after a reset; want 0, false, false, 5", k, f.Pending(), f.armed.Load(), f.retired.Load())
			}
			if q, err := f.post(recv(b, 7)); q || err == nil {
				t.Fatalf("post in RESET: queued %v, %v; want PostRecv's refusal", q, err)
			}
		})
	})
	t.Run("a message takes the feed", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			a, b, _ := feedPair(t)
			f := newTestRecvFeed(t, b, 256)
			f.post(recv(b, 3))
			a.post(&verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 8)}})
			expectWC(t, b.waitWC(b.rcq), 3, verbs.WCSuccess, verbs.WCRecv)
			if b.dev.Counters.FeedTaken.Load() != 1 || b.dev.Counters.SendRNRErr.Load() != 0 {
				t.Fatalf("taken %d, RNR NAKs %d; want 1, 0", b.dev.Counters.FeedTaken.Load(), b.dev.Counters.SendRNRErr.Load())
			}
		})
	})
}
