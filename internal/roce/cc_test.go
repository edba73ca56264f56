package roce

import (
	"math"
	"net/netip"
	"testing"
	"testing/synctest"
	"time"

	"github.com/softrdma/softrdma/internal/netsim"
	"github.com/softrdma/softrdma/transport"
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// cnpTo builds a CNP as the peer of the fuzz target's QP qp sends it.
func cnpTo(qp verbs.QP) []byte {
	return wire.EncodeCNP(make([]byte, wire.CNPLen), 0xFFFF, qp.QPNum())
}

// TestCNPGeneration: a request that arrives marked CE makes the QP send a
// CNP to its peer's QP — opcode 0x81, BECN, 16 zero bytes, from the QP's
// flow — and a second one within CNPInterval does not; after the
// interval, one more goes. UD QPs count the mark and send nothing.
func TestCNPGeneration(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFuzzTarget(t)
		defer f.destroy()
		c := f.dev.tr.(*capture)
		qp := f.rc.(*QP)
		req := buildPacket(wire.RCWriteOnly, wire.BTHFields{DestQP: qp.qpn, AckReq: false}, make([]byte, 64), func(b []byte, info *wire.OpInfo) {
			wire.RETH(b[info.RETHOff:]).Encode(&wire.RETHFields{VA: f.mr.Addr(), RKey: f.mr.RKey(), DMALen: 64})
		})
		send := func() {
			qp.mu.Lock()
			wire.BTH(req).SetPSN(qp.resp.psn)
			qp.mu.Unlock()
			f.handle([]transport.Datagram{{Buf: req, Peer: f.peer, ICRC: transport.ICRCOK, TClass: 0x68 | transport.ECNCE}})
		}
		cnps := func() (n int) {
			c.mu.Lock()
			defer c.mu.Unlock()
			for _, p := range c.sent {
				if qpn, ok := wire.ParseCNP(p); ok {
					n++
					h := wire.BTH(p)
					if qpn != 0x99 || !h.BECN() || h.PKey() != 0xFFFF || h.PSN() != 0 {
						t.Errorf("CNP %x: want dest QP 0x99 (the peer's), BECN, P_Key 0xFFFF, PSN 0", p)
					}
				}
			}
			return n
		}
		send()
		send()
		if n := cnps(); n != 1 {
			t.Fatalf("%d CNPs for two CE packets within %v, want 1", n, DefaultCNPInterval)
		}
		time.Sleep(DefaultCNPInterval)
		send()
		if n := cnps(); n != 2 {
			t.Fatalf("%d CNPs after the interval, want 2", n)
		}
		if got := f.dev.Counters.CEPktsRcvd.Load(); got != 3 {
			t.Errorf("np_ecn_marked_roce_packets = %d, want 3", got)
		}
		if got := f.dev.Counters.CNPsSent.Load(); got != 2 {
			t.Errorf("np_cnp_sent = %d, want 2", got)
		}
	})
}

// TestCNPIgnored: CNPs that must not slow a QP are dropped and counted:
// from another address; to a UD QP; with a wrong length. None of them
// cuts a rate; a good one does.
func TestCNPIgnored(t *testing.T) {
	f := newFuzzTarget(t)
	defer f.destroy()
	rc := f.rc.(*QP)
	c := &f.dev.Counters
	f.handle([]transport.Datagram{{Buf: cnpTo(f.rc), Peer: netip.MustParseAddrPort("10.9.0.3:4791"), ICRC: transport.ICRCOK}})
	if c.DropWrongSource.Load() != 1 {
		t.Errorf("a CNP from another host: drop_wrong_source %d, want 1", c.DropWrongSource.Load())
	}
	f.handle([]transport.Datagram{{Buf: cnpTo(f.ud), Peer: f.peer, ICRC: transport.ICRCOK}})
	if c.DropWrongTransport.Load() != 1 {
		t.Errorf("a CNP to a UD QP: drop_wrong_transport %d, want 1", c.DropWrongTransport.Load())
	}
	short := cnpTo(f.rc)[:wire.CNPLen-1]
	f.handle([]transport.Datagram{{Buf: short, Peer: f.peer, ICRC: transport.ICRCOK}})
	if c.DropMalformed.Load() != 1 {
		t.Errorf("a short CNP: drop_malformed %d, want 1", c.DropMalformed.Load())
	}
	if c.CNPsRcvd.Load() != 0 || rc.CCState().Limited {
		t.Fatalf("a bad CNP cut the rate: %+v", rc.CCState())
	}
	// The good one cuts the rate. The fuzz target's device runs on the
	// real clock, and its rate timer may already have raised the rate
	// again by the time the state is read (on a loaded machine it was
	// back at 99.8 % of the line rate): the cut is counted, and
	// TestDCQCNRate follows the rate itself in virtual time.
	f.handle([]transport.Datagram{{Buf: cnpTo(f.rc), Peer: f.peer, ICRC: transport.ICRCOK}})
	if st := rc.CCState(); c.CNPsRcvd.Load() != 1 || c.CCRateCuts.Load() != 1 || st.Target != DefaultCCLineRate {
		t.Fatalf("a good CNP: rp_cnp_handled %d, cc_rate_cuts %d, state %+v; want 1, 1 and the line rate as the target", c.CNPsRcvd.Load(), c.CCRateCuts.Load(), st)
	}
}

// TestDCQCNRate follows one QP's rate through the algorithm's stages
// with the default parameters, in virtual time: each CNP cuts Rc by α/2
// (α starting at 1), α decays by (1 − g) per AlphaPeriod without CNPs,
// the first F timer events halve the distance to the target (fast
// recovery), then each raises the target by AIRate (additive), and the
// QP is released at the line rate.
func TestDCQCNRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFuzzTarget(t)
		defer f.destroy()
		qp := f.rc.(*QP)
		cnp := []transport.Datagram{{Buf: cnpTo(f.rc), Peer: f.peer, ICRC: transport.ICRCOK}}
		const line = float64(DefaultCCLineRate)
		near := func(got int64, want float64, what string) {
			t.Helper()
			if math.Abs(float64(got)-want) > want*1e-6+8 {
				t.Fatalf("%s: %d bit/s, want %.0f", what, got, want)
			}
		}
		f.handle(cnp)
		st := qp.CCState()
		near(st.Rate, line/2, "after the first CNP")
		near(st.Target, line, "target after the first CNP")
		g := DefaultAlphaG
		alpha := 1 - g + g // (1−g)·1 + g
		if math.Abs(st.Alpha-alpha) > 1e-12 {
			t.Fatalf("α = %v, want %v", st.Alpha, alpha)
		}
		f.handle(cnp) // a second CNP at once: Rt = Rc, Rc = Rc·(1 − α/2)
		st = qp.CCState()
		near(st.Target, line/2, "target after the second CNP")
		near(st.Rate, line/2*(1-alpha/2), "after the second CNP")
		rc, rt := line/2*(1-alpha/2), line/2
		alpha = (1-g)*alpha + g
		// Fast recovery: F timer events, each Rc = (Rt + Rc)/2, α decaying.
		// The device's own timer (newDevice's testTimer) fires at the
		// same virtual instant as the sleep ends: tick lets it finish,
		// else this goroutine's OnTimeout found the deadline already
		// taken and read the state before the timer had applied it
		// (1 run in 100 under -race, in CI).
		tick := func() {
			time.Sleep(DefaultRateTimer)
			synctest.Wait()
			f.dev.OnTimeout(time.Now())
		}
		for i := range DefaultFastRecovery {
			tick()
			rc = (rt + rc) / 2
			alpha *= 1 - g
			st = qp.CCState()
			near(st.Rate, rc, "fast recovery step")
			near(st.Target, rt, "target in fast recovery")
			if math.Abs(st.Alpha-alpha) > 1e-9 {
				t.Fatalf("fast recovery step %d: α = %v, want %v", i, st.Alpha, alpha)
			}
		}
		// Additive increase: the target grows by AIRate per event.
		tick()
		rt += DefaultAIRate
		rc = (rt + rc) / 2
		near(qp.CCState().Target, rt, "additive increase")
		near(qp.CCState().Rate, rc, "rate in additive increase")
		// Given time, the QP recovers and is released.
		for i := 0; i < 100000 && qp.CCState().Limited; i++ {
			tick()
		}
		if st := qp.CCState(); st.Limited || st.Rate != DefaultCCLineRate {
			t.Fatalf("not released at the line rate: %+v", st)
		}
		if f.dev.Counters.CCLimitedQPs.Load() != 0 || f.dev.Counters.CCLimitedNanos.Load() == 0 {
			t.Errorf("cc_limited_qps %d, cc_limited_ns %d: want 0 and the time spent", f.dev.Counters.CCLimitedQPs.Load(), f.dev.Counters.CCLimitedNanos.Load())
		}
	})
}

// TestPacing: a QP whose rate DCQCN cut sends at that rate. Over a
// netsim link of unlimited bandwidth, 4 MiB of WRITEs from a QP cut to
// 1/100 of a 10 Gbit/s line take about 100 × what they take at the line,
// and the QP's packets are spread in time rather than sent at once.
func TestPacing(t *testing.T) {
	const size = 4 << 20
	run := func(t *testing.T, cut bool) time.Duration {
		var el time.Duration
		synctest.Test(t, func(t *testing.T) {
			n, ea, eb := netsimEndpoints(t, netsim.Config{Delay: time.Microsecond, MTU: 4200, Seed: 1})
			_ = n
			o := defaultOpts()
			o.mtu = verbs.MTU4096
			o.bufSize = size
			cc := CCConfig{LineRate: 10_000_000_000, MinRate: 100_000_000, AlphaPeriod: time.Hour, RateTimer: time.Hour}
			a, b := pairWith(t, Config{Transport: ea, CC: cc}, Config{Transport: eb, CC: cc}, o)
			qp := a.qp.(*QP)
			if cut {
				// Seven CNPs at once: 10 Gbit/s → 78 Mbit/s, held at the
				// 100 Mbit/s floor; the hour-long timers keep it there.
				for range 7 {
					qp.mu.Lock()
					qp.onCNPLocked(time.Now())
					qp.mu.Unlock()
				}
				if r := qp.CCState().Rate; r != 100_000_000 {
					t.Fatalf("rate %d after 7 cuts, want the 100 Mbit/s floor", r)
				}
			}
			start := time.Now()
			a.post(&verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, size)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
			expectWC(t, a.waitWC(a.scq), 1, verbs.WCSuccess, verbs.WCRDMAWrite)
			el = time.Since(start)
		})
		return el
	}
	free := run(t, false)
	paced := run(t, true)
	// 4 MiB at 100 Mbit/s is 335 ms; the pacer grants a 16 KiB burst.
	want := time.Duration(float64(size) * 8 / 100e6 * float64(time.Second))
	if paced < want*95/100 || paced > want*110/100 {
		t.Errorf("paced WRITE took %v, want about %v (unpaced: %v)", paced, want, free)
	}
	if free > want/10 {
		t.Errorf("unpaced WRITE took %v: the link is not the limit", free)
	}
}

// TestZeroAllocsCC: the congestion paths allocate nothing: a CE-marked
// request answered by an ACK and a CNP, a CNP received, and a post on a
// paced QP.
func TestZeroAllocsCC(t *testing.T) {
	f := newFuzzTarget(t)
	defer f.destroy()
	f.dev.tr.(*capture).discard = true
	qp := f.rc.(*QP)
	req := buildPacket(wire.RCWriteOnly, wire.BTHFields{DestQP: qp.qpn, AckReq: true}, make([]byte, 200), func(b []byte, info *wire.OpInfo) {
		wire.RETH(b[info.RETHOff:]).Encode(&wire.RETHFields{VA: f.mr.Addr(), RKey: f.mr.RKey(), DMALen: 200})
	})
	batch := []transport.Datagram{{Buf: req, Peer: f.peer, ICRC: transport.ICRCOK, TClass: transport.ECNCE}}
	cnp := []transport.Datagram{{Buf: cnpTo(f.rc), Peer: f.peer, ICRC: transport.ICRCOK}}
	recv := func() {
		qp.mu.Lock()
		wire.BTH(req).SetPSN(qp.resp.psn)
		qp.cc.lastCNP = time.Time{} // a CNP every time
		qp.mu.Unlock()
		f.handle(batch)
		f.handle(cnp)
	}
	recv()
	sent := f.dev.Counters.CNPsSent.Load()
	if a := testing.AllocsPerRun(200, recv); a != 0 {
		t.Errorf("CE-marked WRITE + ACK + CNP sent + CNP received: %.1f allocations, want 0", a)
	}
	if f.dev.Counters.CNPsSent.Load() == sent || !qp.CCState().Limited {
		t.Fatal("no CNP was sent, or the rate was not cut")
	}
	wcs := make([]verbs.WC, 4)
	wr := &verbs.SendWR{Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{f.mr.SGE(0, 200)}, RemoteAddr: 0x1000, RKey: 0x77}
	ack := buildPacket(wire.RCAck, wire.BTHFields{DestQP: qp.qpn}, nil, func(b []byte, info *wire.OpInfo) {
		wire.AETH(b[info.AETHOff:]).Encode(&wire.AETHFields{Syndrome: wire.ACKSyndrome(0x1F)})
	})
	abatch := []transport.Datagram{{Buf: ack, Peer: f.peer, ICRC: transport.ICRCOK}}
	post := func() {
		qp.mu.Lock()
		psn := qp.req.psn
		qp.cc.nextTx = time.Time{} // never wait: measure the pacer's bookkeeping
		qp.mu.Unlock()
		if err := f.rc.PostSend(wr); err != nil {
			t.Fatal(err)
		}
		wire.BTH(ack).SetPSN(psn)
		f.handle(abatch)
		if n, _ := f.cq.Poll(wcs); n != 1 || wcs[0].Status != verbs.WCSuccess {
			t.Fatalf("poll: %d %+v", n, wcs[0])
		}
	}
	post()
	if a := testing.AllocsPerRun(200, post); a != 0 {
		t.Errorf("paced post WRITE + ACK + poll: %.1f allocations, want 0", a)
	}
}

// TestDelayRate: CCDelay samples one round trip at a time (the sampled
// packet asks for an ACK), cuts the rate by β·(rtt − target)/rtt, at most
// by DelayMaxDecrease, and adds DelayAIRate per round trip below the
// target.
func TestDelayRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFuzzTarget(t)
		defer f.destroy()
		f.dev.cc = newCCParams(CCConfig{Algorithm: CCDelay})
		c := f.dev.tr.(*capture)
		qp := f.rc.(*QP)
		wcs := make([]verbs.WC, 4)
		// roundTrip posts a 100-byte WRITE (one packet, MTU 256), waits d
		// and acknowledges it.
		roundTrip := func(d time.Duration) {
			t.Helper()
			qp.mu.Lock()
			psn := qp.req.psn
			qp.mu.Unlock()
			must(t, f.rc.PostSend(&verbs.SendWR{Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{f.mr.SGE(0, 100)}, RemoteAddr: 0x1000, RKey: 0x77}))
			c.mu.Lock()
			last := c.sent[len(c.sent)-1]
			c.mu.Unlock()
			if !wire.BTH(last).AckReq() {
				t.Fatal("the sampled packet does not ask for an ACK")
			}
			time.Sleep(d)
			ack := buildPacket(wire.RCAck, wire.BTHFields{DestQP: qp.qpn, PSN: psn}, nil, func(b []byte, info *wire.OpInfo) {
				wire.AETH(b[info.AETHOff:]).Encode(&wire.AETHFields{Syndrome: wire.ACKSyndrome(0x1F)})
			})
			f.handle([]transport.Datagram{{Buf: ack, Peer: f.peer, ICRC: transport.ICRCOK}})
			if n, _ := f.cq.Poll(wcs); n != 1 || wcs[0].Status != verbs.WCSuccess {
				t.Fatalf("poll: %d %+v", n, wcs[0])
			}
		}
		roundTrip(10 * time.Microsecond) // below the target, not limited: nothing
		if st := qp.CCState(); st.Limited || st.RTT != 10*time.Microsecond {
			t.Fatalf("after a 10 µs round trip: %+v", st)
		}
		roundTrip(40 * time.Microsecond) // 1 − 0.8·15/40 = 0.7
		st := qp.CCState()
		if want := int64(DefaultCCLineRate * 0.7); !st.Limited || st.Rate < want-8 || st.Rate > want+8 {
			t.Fatalf("after a 40 µs round trip: %+v, want rate %d", st, want)
		}
		roundTrip(30 * time.Microsecond) // 1 − 0.8·5/30
		st2 := qp.CCState()
		if want := int64(float64(st.Rate) * (1 - 0.8*5/30.0)); st2.Rate < want-8 || st2.Rate > want+8 {
			t.Fatalf("after a 30 µs round trip: %d, want %d", st2.Rate, want)
		}
		roundTrip(1000 * time.Microsecond) // at most DelayMaxDecrease
		if got, want := qp.CCState().Rate, st2.Rate/2; got < want-8 || got > want+8 {
			t.Fatalf("after a 1 ms round trip: %d, want %d (half)", got, want)
		}
		before := qp.CCState().Rate
		roundTrip(5 * time.Microsecond)
		if got := qp.CCState().Rate; got != before+DefaultDelayAIRate {
			t.Fatalf("after a short round trip: %d, want %d + %d", got, before, DefaultDelayAIRate)
		}
		if f.dev.Counters.CNPsSent.Load() != 0 {
			t.Fatal("CCDelay sent CNPs")
		}
	})
}
