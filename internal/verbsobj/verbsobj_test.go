package verbsobj

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/softrdma/softrdma/verbs"
)

// fakeCQ is the verbs.CQ a ring's events name.
type fakeCQ struct {
	verbs.CQ
	ring CQRing
}

func newRing(cqe int, ch *verbs.CompChannel) *fakeCQ {
	f := &fakeCQ{}
	f.ring.Init(cqe, ch, f)
	return f
}

func TestCQRingOverrun(t *testing.T) {
	f := newRing(2, nil)
	r := &f.ring
	want := []PushResult{Queued, Queued, Overrun, Lost}
	for i, w := range want {
		if got := r.Push(&verbs.WC{WRID: uint64(i)}, false); got != w {
			t.Fatalf("push %d: %v; want %v", i, got, w)
		}
	}
	wc := make([]verbs.WC, 4)
	n, err := r.Poll(wc)
	if n != 2 || !errors.Is(err, verbs.ErrQueueFull) || wc[0].WRID != 0 || wc[1].WRID != 1 {
		t.Fatalf("Poll after overrun: %d %v %+v", n, err, wc[:n])
	}
	if n, err := r.Poll(wc); n != 0 || err != nil {
		t.Fatalf("second Poll: %d %v; want 0, nil", n, err)
	}
	// Recovered: a new overrun is a new first loss.
	r.Push(&verbs.WC{}, false)
	r.Push(&verbs.WC{}, false)
	if got := r.Push(&verbs.WC{}, false); got != Overrun {
		t.Fatalf("overrun after recovery: %v; want Overrun", got)
	}
	// An overrun on an empty poll is reported too (the lost completions
	// were the only ones).
	r.Poll(wc)
	g := newRing(1, nil)
	g.ring.Push(&verbs.WC{}, false)
	g.ring.Push(&verbs.WC{}, false)
	g.ring.Poll(wc[:1])
	if n, err := g.ring.Poll(wc); n != 0 || err != nil {
		t.Fatalf("Poll of an empty recovered ring: %d %v", n, err)
	}
}

func TestCQRingWrap(t *testing.T) {
	r := &newRing(3, nil).ring
	wc := make([]verbs.WC, 2)
	next := uint64(0)
	for i := uint64(0); i < 20; i++ {
		r.Push(&verbs.WC{WRID: i}, false)
		if i%2 == 1 {
			n, err := r.Poll(wc)
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range wc[:n] {
				if w.WRID != next {
					t.Fatalf("got wr_id %d; want %d", w.WRID, next)
				}
				next++
			}
		}
	}
}

func TestCQRingArm(t *testing.T) {
	if err := newRing(2, nil).ring.Arm(false); !errors.Is(err, verbs.ErrInvalidState) {
		t.Fatalf("Arm without a channel: %v", err)
	}
	ch := verbs.NewCompChannel(4)
	f := newRing(8, ch)
	r := &f.ring
	events := func() int { return len(ch.C()) }
	r.Push(&verbs.WC{}, false)
	if events() != 0 {
		t.Fatal("event without arming")
	}
	r.Arm(true)
	r.Push(&verbs.WC{}, false) // unsolicited: no event
	if events() != 0 {
		t.Fatal("solicited-only arming fired on an unsolicited completion")
	}
	r.Push(&verbs.WC{Status: verbs.WCLocProtErr}, false) // an error satisfies it
	if events() != 1 {
		t.Fatal("an error completion did not fire a solicited-only arming")
	}
	r.Push(&verbs.WC{}, true) // disarmed now
	if events() != 1 {
		t.Fatal("one arming fired twice")
	}
	if cq := <-ch.C(); cq != verbs.CQ(f) {
		t.Fatalf("event names %v", cq)
	}
}

func TestCQRingDestroy(t *testing.T) {
	r := &newRing(2, verbs.NewCompChannel(1)).ring
	if err := r.Destroy(1); !errors.Is(err, verbs.ErrInUse) {
		t.Fatalf("Destroy in use: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- r.Block(context.Background(), nil) }()
	time.Sleep(time.Millisecond)
	if err := r.Destroy(0); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, verbs.ErrDestroyed) {
		t.Fatalf("Block across Destroy: %v", err)
	}
	if err := r.Destroy(0); !errors.Is(err, verbs.ErrDestroyed) {
		t.Fatalf("second Destroy: %v", err)
	}
	if _, err := r.Poll(make([]verbs.WC, 1)); !errors.Is(err, verbs.ErrDestroyed) {
		t.Fatalf("Poll after Destroy: %v", err)
	}
	if err := r.Arm(false); !errors.Is(err, verbs.ErrDestroyed) {
		t.Fatalf("Arm after Destroy: %v", err)
	}
}

func TestCQRingBlockWakes(t *testing.T) {
	r := &newRing(2, nil).ring
	done := make(chan error, 1)
	go func() { done <- r.Block(context.Background(), nil) }()
	for r.waiters.Load() == 0 {
		time.Sleep(100 * time.Microsecond)
	}
	r.Push(&verbs.WC{}, false)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r.Poll(make([]verbs.WC, 2))
	if err := r.Block(ctx, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("Block with a done context: %v", err)
	}
}

func TestCQRingZeroAllocs(t *testing.T) {
	r := &newRing(64, verbs.NewCompChannel(1)).ring
	wc := make([]verbs.WC, 16)
	w := &verbs.WC{WRID: 1}
	if n := testing.AllocsPerRun(100, func() {
		for i := 0; i < 16; i++ {
			r.Push(w, false)
		}
		r.Poll(wc)
		r.Poll(wc)
	}); n != 0 {
		t.Fatalf("Push and Poll allocate %v times per run", n)
	}
}

func TestSRQLimit(t *testing.T) {
	var l SRQLimit
	if l.Took(0) {
		t.Fatal("a disarmed limit fired")
	}
	if err := l.Modify(&verbs.SRQAttr{SRQLimit: 9}, verbs.SRQAttrLimit, 8); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Fatalf("limit above MaxWR: %v", err)
	}
	if err := l.Modify(&verbs.SRQAttr{MaxWR: 16}, verbs.SRQAttrMaxWR, 8); !errors.Is(err, verbs.ErrNotSupported) {
		t.Fatalf("resize: %v", err)
	}
	if err := l.Modify(&verbs.SRQAttr{SRQLimit: 4}, verbs.SRQAttrLimit, 8); err != nil {
		t.Fatal(err)
	}
	if l.Took(4) || !l.Took(3) || l.Took(0) || l.Get() != 0 {
		t.Fatal("the limit must fire once, below (not at) the limit, then disarm")
	}
	if _, err := CheckSRQInit(&verbs.SRQInitAttr{MaxWR: 4, SRQLimit: 2}, 8, 4); err != nil {
		t.Fatal(err)
	}
	for _, a := range []*verbs.SRQInitAttr{nil, {MaxWR: 0}, {MaxWR: 9}, {MaxWR: 4, MaxSGE: 5}} {
		if _, err := CheckSRQInit(a, 8, 4); !errors.Is(err, verbs.ErrInvalidArgument) {
			t.Errorf("CheckSRQInit(%+v): %v", a, err)
		}
	}
}

func TestLife(t *testing.T) {
	var l Life
	l.Add(2)
	if err := l.End("DeallocPD", "PD", "MRs"); !errors.Is(err, verbs.ErrInUse) {
		t.Fatalf("End with users: %v", err)
	}
	l.Add(-2)
	if err := l.End("DeallocPD", "PD", "MRs"); err != nil {
		t.Fatal(err)
	}
	if err := l.Check("RegMR", "PD"); !errors.Is(err, verbs.ErrDestroyed) {
		t.Fatalf("Check after End: %v", err)
	}
	if err := l.End("DeallocPD", "PD", "MRs"); !errors.Is(err, verbs.ErrDestroyed) {
		t.Fatalf("second End: %v", err)
	}
}

func TestEvents(t *testing.T) {
	var e Events
	e.Init()
	for i := 0; i < EventBuffer; i++ {
		if e.Send(verbs.AsyncEvent{Type: verbs.EventCQErr}) {
			t.Fatalf("event %d dropped with room left", i)
		}
	}
	if !e.Send(verbs.AsyncEvent{}) || e.Dropped() != 1 {
		t.Fatal("an event to a full channel must be dropped and counted")
	}
	e.Close()
	e.Close()
	if e.Send(verbs.AsyncEvent{}) {
		t.Fatal("an event after Close counts as dropped")
	}
}

func TestCheckAccess(t *testing.T) {
	for _, c := range []struct {
		a  verbs.Access
		ok bool
	}{
		{0, true}, {verbs.AccessLocalWrite, true}, {verbs.AccessRemoteRead, true},
		{verbs.AccessRemoteWrite, false}, {verbs.AccessRemoteAtomic, false},
		{verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteAtomic, true},
		{1 << 20, false},
	} {
		if err := CheckAccess("RegMR", c.a); (err == nil) != c.ok {
			t.Errorf("CheckAccess(%v) = %v", c.a, err)
		}
	}
}

// FuzzSpan: addresses and lengths come from the network; Span must never
// panic and never return bytes outside the region.
func FuzzSpan(f *testing.F) {
	f.Add(uint64(0x1000), uint64(0x1000), uint64(16), 64)
	f.Add(uint64(0x1000), uint64(0xFFFFFFFFFFFFFFF0), uint64(0x20), 64)
	f.Add(uint64(1<<63), uint64(1<<63+60), uint64(8), 64)
	f.Fuzz(func(t *testing.T, base, addr, n uint64, size int) {
		if size < 0 || size > 1<<16 {
			return
		}
		buf := make([]byte, size)
		b, ok := Span(buf, base, addr, n)
		if !ok {
			return
		}
		if uint64(len(b)) != n || addr < base || addr-base+n > uint64(size) {
			t.Fatalf("Span(%d bytes at %#x, %#x, %d) = %d bytes", size, base, addr, n, len(b))
		}
	})
}

// TestCQRingResizeClean: Resize keeps the completions in order across the
// ring's wrap and refuses to drop any; Clean removes one QP's and keeps
// the rest in order.
func TestCQRingResizeClean(t *testing.T) {
	var r CQRing
	r.Init(4, nil, nil)
	push := func(id uint64, qpn uint32) {
		if res := r.Push(&verbs.WC{WRID: id, QPNum: qpn}, false); res != Queued {
			t.Fatalf("push %d: %v", id, res)
		}
	}
	poll := func(want ...uint64) {
		t.Helper()
		wc := make([]verbs.WC, 8)
		n, err := r.Poll(wc)
		if err != nil || n != len(want) {
			t.Fatalf("Poll: %d, %v; want %d", n, err, len(want))
		}
		for i, id := range want {
			if wc[i].WRID != id {
				t.Fatalf("completion %d is wr_id %d; want %d", i, wc[i].WRID, id)
			}
		}
	}
	push(1, 7)
	push(2, 7)
	poll(1, 2)
	push(3, 7) // the ring now wraps
	push(4, 9)
	push(5, 7)
	push(6, 9)
	if err := r.Resize(3, 100); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Fatalf("Resize below the held count: %v", err)
	}
	if err := r.Resize(8, 100); err != nil || r.Cap() != 8 {
		t.Fatalf("Resize(8): %v, Cap %d", err, r.Cap())
	}
	push(7, 9)
	if n := r.Clean(9); n != 3 {
		t.Fatalf("Clean removed %d; want 3", n)
	}
	push(8, 7)
	poll(3, 5, 8)
	if n := r.Clean(9); n != 0 {
		t.Fatalf("Clean of an empty ring removed %d", n)
	}
}
