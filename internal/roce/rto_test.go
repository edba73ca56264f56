package roce

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/softrdma/softrdma/internal/netsim"
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// TestQueueDelayAboveTimeout: a slow link whose queue holds more than a
// local ACK timeout's worth of packets (2 Mbit/s, perftest's timeout 14:
// 67 ms, a window of 512 packets: seconds of queue) loses nothing, so a
// stream of WRITEs over it completes without the QP running out of
// retries, and without resending the data over and over. With the ACK
// timer fixed at the QP's timeout it fired while the acknowledgements
// were queued behind the data, every expiry resent the whole flight, and
// the QP failed with a retry-exceeded error.
func TestQueueDelayAboveTimeout(t *testing.T) {
	const msgs, size = 24, 64 << 10
	synctest.Test(t, func(t *testing.T) {
		o := defaultOpts()
		o.timeout = 14
		o.bufSize = 2 << 20
		_, a, _ := netsimPair(t, netsim.Config{Delay: 100 * time.Microsecond, Bandwidth: 256 << 10, Seed: 3, MTU: 9000}, o)
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
		t.Logf("sent %d packets for %d (%.2fx), timeouts %d, retransmits %d, %v (virtual)", sent, need, float64(sent)/float64(need),
			a.dev.Counters.Timeouts.Load(), a.dev.Counters.Retransmits.Load(), time.Since(start))
		if float64(sent) > 1.5*float64(need) {
			t.Errorf("sent %d packets for %d over a lossless link: the ACK timer fired while acknowledgements were queued", sent, need)
		}
	})
}

// TestRTTEstimator: samples follow RFC 6298; the QP's timeout is a floor;
// a rewind forgets the timed PSN (Karn); the measured part is bounded.
func TestRTTEstimator(t *testing.T) {
	var e rttEstimator
	t0 := time.Unix(100, 0)
	base := 67 * time.Millisecond
	if e.timeout(base) != base {
		t.Fatal("no sample yet: want the QP's timeout")
	}
	e.onSent(wire.PSN(10), t0)
	e.onSent(wire.PSN(20), t0.Add(time.Millisecond)) // one PSN timed at a time
	e.onAcked(wire.PSN(10), t0.Add(time.Second))     // PSN 10 not acknowledged yet
	if e.srtt != 0 {
		t.Fatal("sampled before the timed PSN was acknowledged")
	}
	e.onAcked(wire.PSN(11), t0.Add(400*time.Millisecond))
	if e.srtt != 400*time.Millisecond || e.rttvar != 200*time.Millisecond {
		t.Fatalf("first sample: srtt %v rttvar %v, want 400ms 200ms", e.srtt, e.rttvar)
	}
	if got := e.timeout(base); got != 1200*time.Millisecond {
		t.Fatalf("timeout %v, want srtt+4rttvar = 1.2s", got)
	}
	e.onSent(wire.PSN(30), t0.Add(time.Second))
	e.onRewind(false)
	e.onAcked(wire.PSN(31), t0.Add(5*time.Second))
	if e.srtt != 400*time.Millisecond {
		t.Fatal("sampled a PSN that a rewind may have resent")
	}
	var b rttEstimator
	b.onRewind(true)
	if got := b.timeout(base); got != base {
		t.Fatalf("a peer never heard from: %v, want the QP's timeout", got)
	}
	b.onAcked(wire.PSN(0), t0) // the peer answered (no PSN timed)
	for i, want := range []time.Duration{base, 2 * base, 4 * base, 8 * base, 16 * base, maxRTO, maxRTO, maxRTO} {
		if got := b.timeout(base); got != want {
			t.Fatalf("after %d expiries: %v, want %v", i, got, want)
		}
		b.onRewind(true)
	}
	b.onAcked(wire.PSN(1), t0.Add(time.Millisecond))
	if got := b.timeout(base); got != base {
		t.Fatalf("progress did not end the backoff: %v", got)
	}
	for i := 0; i < 50; i++ { // a long round trip: bounded by maxRTO
		at := t0.Add(time.Duration(10+i) * time.Second)
		e.onSent(wire.PSN(100+i), at)
		e.onAcked(wire.PSN(101+i), at.Add(5*time.Second))
	}
	if got := e.timeout(base); got != maxRTO {
		t.Fatalf("timeout %v, want maxRTO", got)
	}
	var small rttEstimator
	small.onSent(wire.PSN(1), t0)
	small.onAcked(wire.PSN(2), t0.Add(100*time.Microsecond))
	if small.timeout(base) != base {
		t.Fatal("a short round trip shortened the QP's timeout")
	}
}
