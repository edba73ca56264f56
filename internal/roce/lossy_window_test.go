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
		n := netsim.New(netsim.Config{Loss: 0.02, Delay: 20 * time.Microsecond, Bandwidth: 1 << 30, Seed: seed, MTU: 9000})
		t.Cleanup(n.Close)
		ea, err := n.Endpoint(addrA)
		must(t, err)
		eb, err := n.Endpoint(addrB)
		must(t, err)
		o := defaultOpts()
		o.bufSize = 2 << 20
		a, _ := pair(t, ea, eb, o)
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
	r.onLoss()
	if r.window() != ackWindow/2 {
		t.Fatalf("after a loss: %d, want %d", r.window(), ackWindow/2)
	}
	for range 10 {
		r.onLoss()
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
