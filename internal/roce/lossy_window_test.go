package roce

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/softrdma/softrdma/internal/netsim"
	"github.com/softrdma/softrdma/verbs"
)

// TestLossEfficiency: a stream of WRITEs over a link that loses 2% of the
// packets completes, and go-back-N does not resend whole windows over and
// over: the requester sends at most a few times the packets the data needs.
func TestLossEfficiency(t *testing.T) {
	for _, seed := range []uint64{7, 8, 9} {
		t.Run(seedName(seed), func(t *testing.T) { testLossEfficiency(t, seed) })
	}
}

func testLossEfficiency(t *testing.T, seed uint64) {
	const msgs, size = 100, 64 << 10 // 6400 packets at MTU 1024
	synctest.Test(t, func(t *testing.T) {
		o := defaultOpts()
		o.bufSize = 2 << 20
		_, a, _ := netsimPair(t, netsim.Config{Loss: 0.02, Delay: 20 * time.Microsecond, Bandwidth: 1 << 30, Seed: seed, MTU: 9000}, o)
		start := time.Now() // virtual
		for i := 0; i < msgs; i++ {
			a.post(&verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
				SGList: []verbs.SGE{a.mr.SGE((i%16)*size, size)}, RemoteAddr: a.peer.mr.Addr() + uint64((i%16)*size), RKey: a.peer.mr.RKey()})
		}
		for i := 0; i < msgs; i++ {
			expectWC(t, a.waitWC(a.scq), uint64(i), verbs.WCSuccess, verbs.WCRDMAWrite)
		}
		need := uint64(msgs * size / 1024)
		sent := a.dev.Counters.SentPkts.Load()
		t.Logf("sent %d packets for %d (%.2fx), retransmits %d, timeouts %d, %v (virtual)", sent, need, float64(sent)/float64(need),
			a.dev.Counters.Retransmits.Load(), a.dev.Counters.Timeouts.Load(), time.Since(start))
		// With the window at 512 PSNs throughout, this was 11x.
		if float64(sent) > 3*float64(need) {
			t.Errorf("sent %d packets for %d: go-back-N resends too much under 2%% loss", sent, need)
		}
	})
}

// TestWindow: a loss halves the window down to minWindow; acknowledged
// PSNs grow it back by one per window, up to ackWindow.
func TestWindow(t *testing.T) {
	var r requester
	if r.window() != ackWindow {
		t.Fatalf("initial window %d, want %d", r.window(), ackWindow)
	}
	r.onAcked(1000)
	if r.window() != ackWindow {
		t.Fatal("acknowledgements grew the window past ackWindow")
	}
	r.onLoss(ackWindow)
	if r.window() != ackWindow/2 {
		t.Fatalf("after a loss: %d, want %d", r.window(), ackWindow/2)
	}
	for range 10 {
		r.onLoss(uint32(r.window())) // a full window in flight
	}
	if r.window() != minWindow {
		t.Fatalf("after many losses: %d, want %d", r.window(), minWindow)
	}
	r.onAcked(minWindow - 1)
	if r.window() != minWindow {
		t.Fatal("grew before a whole window was acknowledged")
	}
	r.onAcked(1)
	if r.window() != minWindow+1 {
		t.Fatalf("after a window acknowledged: %d, want %d", r.window(), minWindow+1)
	}
	for range 10000 {
		r.onAcked(64)
	}
	if r.window() != ackWindow || r.cwnd != 0 {
		t.Fatalf("did not grow back to ackWindow: %d", r.window())
	}
}

// TestWindowFlight: a sequence NAK halves the PSNs that were in flight, not
// an idle window, and never grows the window.
func TestWindowFlight(t *testing.T) {
	var r requester
	r.onLoss(64) // 64 in flight of a 512 window
	if r.window() != 32 {
		t.Fatalf("after a loss with 64 in flight: %d, want 32", r.window())
	}
	r.onLoss(4)
	if r.window() != minWindow {
		t.Fatalf("after a loss with 4 in flight: %d, want minWindow", r.window())
	}
	r.cwnd = 3
	r.onLoss(3)
	if r.window() != 3 {
		t.Fatalf("a loss grew a window of 3 to %d", r.window())
	}
}

// TestWindowRestart: a local ACK timeout restarts the window at
// restartWindow; it grows by every PSN acknowledged up to half the window
// it had (slow start), then by one PSN per window, back to ackWindow. A
// sequence NAK while it doubles stops the doubling at minWindow.
func TestWindowRestart(t *testing.T) {
	var r requester
	r.onTimeout()
	if r.window() != restartWindow {
		t.Fatalf("after a timeout: %d, want %d", r.window(), restartWindow)
	}
	// One round trip per window: 1, 2, 4, ... up to ackWindow/2.
	var rounds []int32
	for r.window() < ackWindow/2 {
		r.onAcked(uint32(r.window()))
		rounds = append(rounds, r.window())
	}
	if len(rounds) != 8 || rounds[0] != 2 || rounds[7] != ackWindow/2 {
		t.Fatalf("windows per round trip after a timeout: %v, want 2, 4, ... %d", rounds, ackWindow/2)
	}
	r.onAcked(ackWindow/2 - 1)
	if r.window() != ackWindow/2 {
		t.Fatalf("past ssthresh the window grew to %d before a whole window was acknowledged", r.window())
	}
	r.onAcked(1)
	if r.window() != ackWindow/2+1 {
		t.Fatalf("past ssthresh: %d, want %d", r.window(), ackWindow/2+1)
	}
	for range 10000 {
		r.onAcked(64)
	}
	if r.window() != ackWindow || r.cwnd != 0 || r.ssthresh != 0 {
		t.Fatalf("did not grow back to ackWindow: %d (ssthresh %d)", r.window(), r.ssthresh)
	}

	// A repeated timeout restarts again; a NAK while doubling caps the
	// doubling at minWindow.
	r.onTimeout()
	r.onTimeout()
	if r.window() != restartWindow || r.ssthresh != minWindow {
		t.Fatalf("after two timeouts: window %d ssthresh %d, want %d and %d", r.window(), r.ssthresh, restartWindow, minWindow)
	}
	r.onAcked(1)
	r.onLoss(2)
	if r.window() != 2 || r.ssthresh != minWindow {
		t.Fatalf("a NAK while doubling from 2: window %d ssthresh %d, want 2 and %d", r.window(), r.ssthresh, minWindow)
	}
	r.onAcked(minWindow - 2)
	if r.window() != minWindow || r.ssthresh != 0 {
		t.Fatalf("doubling from 2 by %d: window %d ssthresh %d, want %d and 0", minWindow-2, r.window(), r.ssthresh, minWindow)
	}
	r.onAcked(minWindow)
	if r.window() != minWindow+1 {
		t.Fatalf("past the doubling, a window acknowledged: %d, want %d", r.window(), minWindow+1)
	}
}

// TestAckJitter: the ACK timeout's jitter is in [0, t/4), the same for the
// same QP and attempt, and spreads QPs over the whole range.
func TestAckJitter(t *testing.T) {
	const tmo = 4096 * time.Nanosecond << 14
	var buckets [8]int
	for qpn := uint32(0x100); qpn < 0x100+4096; qpn++ {
		for attempt := range uint8(8) {
			j := ackJitter(tmo, qpn, attempt)
			if j < 0 || j >= tmo/4 {
				t.Fatalf("QPN %#x attempt %d: jitter %v outside [0, %v)", qpn, attempt, j, tmo/4)
			}
			if j != ackJitter(tmo, qpn, attempt) {
				t.Fatal("jitter is not a function of QPN and attempt")
			}
			buckets[j*8/(tmo/4)]++
		}
	}
	// 32768 draws over 8 buckets: about 4096 each.
	for i, n := range buckets {
		if n < 3500 || n > 4700 {
			t.Fatalf("jitter bucket %d of 8 has %d of 32768 draws: %v", i, n, buckets)
		}
	}
	if ackJitter(tmo, 0x123, 1) == ackJitter(tmo, 0x123, 2) && ackJitter(tmo, 0x123, 2) == ackJitter(tmo, 0x123, 3) {
		t.Fatal("one QP's attempts all have the same jitter")
	}
}
