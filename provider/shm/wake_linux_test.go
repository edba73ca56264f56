package shm

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softrdma/softrdma/verbs"
)

// TestBlockingPingPongNoLostWake: SENDs back and forth between two
// devices whose every receiver blocks in CQ.Wait, each SEND posted after
// a random pause so that it meets the peer's progress goroutine in every
// phase of going to sleep, with the safety wake-up taken away: a wake-up
// lost between a ring's publishing and the peer's sleeping flag (on x86,
// a load passing an earlier store) hangs a round trip for good.
//
// The race it looks for is a matter of nanoseconds: the test cannot be
// sure to meet it, and did not on the code before ring's fence in a short
// run; it failed there (a 5 s stall, the safety wake-up) only in gRPC
// runs of tens of thousands of calls. SHM_WAKE_ROUNDS sets the round
// trips (default 3000) for a longer hunt.
func TestBlockingPingPongNoLostWake(t *testing.T) {
	if testing.Short() {
		t.Skip("a few thousand blocking round trips")
	}
	defer func(d time.Duration) { safetyWake = d }(safetyWake)
	safetyWake = 0 // no safety net: a lost wake-up is lost for good
	rounds := 3000
	if v, err := strconv.Atoi(os.Getenv("SHM_WAKE_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	a, b := pair(t, sideOpts{}, sideOpts{})
	// wait blocks for one completion of cq; a round trip that takes
	// seconds is a lost wake-up (the slowest seen under heavy load:
	// tens of milliseconds).
	wait := func(cq verbs.CQ, what string, i int) error {
		wc := make([]verbs.WC, 1)
		for {
			if n, err := cq.Poll(wc); err != nil {
				return err
			} else if n == 1 {
				if wc[0].Status != verbs.WCSuccess {
					return fmt.Errorf("round %d: %s: a completion with %v", i, what, wc[0].Status)
				}
				return nil
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			err := cq.Wait(ctx)
			cancel()
			if err != nil {
				return fmt.Errorf("round %d: %s: no completion in 3 s (a lost wake-up): %v", i, what, err)
			}
		}
	}
	pause := func(r *rand.Rand) {
		// A busy pause: a sleep would be rounded up to the timer's
		// granularity and miss the short phases.
		for end := time.Now().Add(time.Duration(r.IntN(200)) * time.Microsecond); time.Now().Before(end); {
		}
	}
	done := make(chan error, 1)
	go func() { // b echoes every SEND
		r := rand.New(rand.NewPCG(2, 2))
		for i := range rounds {
			if err := wait(b.cq, "b", i); err != nil {
				done <- err
				return
			}
			if err := b.qp.PostRecv(&verbs.RecvWR{WRID: uint64(i + 1), SGList: []verbs.SGE{b.mr.SGE(0, 8)}}); err != nil {
				done <- err
				return
			}
			pause(r)
			if err := b.qp.PostSend(&verbs.SendWR{Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{b.mr.SGE(8, 8)}}); err != nil {
				done <- err
				return
			}
			if err := wait(b.cq, "b", i); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	postRecv(t, b.qp, 0, b.mr.SGE(0, 8))
	r := rand.New(rand.NewPCG(1, 1))
	for i := range rounds {
		postRecv(t, a.qp, uint64(i), a.mr.SGE(0, 8))
		pause(r)
		postSend(t, a.qp, verbs.SendWR{Opcode: verbs.WRSend, SGList: []verbs.SGE{a.mr.SGE(8, 8)}})
		for range 2 { // the SEND's and the echo's
			if err := wait(a.cq, "a", i); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestWakeAfterUnlock: a post that must wake the peer's sleeping progress
// goroutine makes the wake's system calls after it has released the QP
// (a thread that lost its CPU in them held the QP against every other
// goroutine that wanted it), and the wake still reaches the peer.
func TestWakeAfterUnlock(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the peer to fall asleep")
	}
	a, b := pair(t, sideOpts{}, sideOpts{})
	qp := a.qp.(*QP)
	var wakes, held atomic.Int32
	wakeHook = func(*conn) {
		wakes.Add(1)
		// A poster that wakes with the QP held holds it for as long as
		// the hook runs; another goroutine (a's progress goroutine,
		// completing the SEND before) holds it only a moment, so a lock
		// that stays taken for 50 ms is the poster's.
		for deadline := time.Now().Add(50 * time.Millisecond); !qp.mu.TryLock(); time.Sleep(100 * time.Microsecond) {
			if time.Now().After(deadline) {
				held.Add(1)
				return
			}
		}
		qp.mu.Unlock()
	}
	t.Cleanup(func() { wakeHook = nil })
	for i := range 3 {
		postRecv(t, b.qp, uint64(i), b.mr.SGE(0, 8))
		// b's progress goroutine goes to sleep on its doorbell.
		deadline := time.Now().Add(5 * time.Second)
		for atomic.LoadUint32(b.dev.bell.word(bellSleeping)) == 0 {
			if time.Now().After(deadline) {
				t.Fatal("b's progress goroutine never went to sleep")
			}
			time.Sleep(time.Millisecond)
		}
		postSend(t, a.qp, verbs.SendWR{Opcode: verbs.WRSend, SGList: []verbs.SGE{a.mr.SGE(0, 8)}})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := b.cq.Wait(ctx)
		cancel()
		if err != nil {
			t.Fatalf("the SEND did not wake b: %v", err)
		}
		poll(t, b.cq, 1)
		poll(t, a.cq, 1)
	}
	if wakes.Load() == 0 {
		t.Fatal("no post woke the sleeping peer")
	}
	if n := held.Load(); n != 0 {
		t.Errorf("%d of %d wakes were made with the QP held", n, wakes.Load())
	}
}
